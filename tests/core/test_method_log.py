"""What a run records of each method: its hyperparameters once, the counters of what it did, and
whether it acted; read from ``trainer.method_log`` and from Python logging."""

from __future__ import annotations

import json
import logging
import re

import pytest
import torch

from algorithms import EMA, CutMix, CutOut, GatedLinearUnits, LayerFreezing, MixUp
from algorithms.core import Algorithm, AlgorithmLog, Engine, Event, MethodLog, State, Trainer
from algorithms.core.time import Duration


def _images(n=4, bs=8, size=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(bs, 3, size, size, generator=g), torch.randint(0, 4, (bs,), generator=g)) for _ in range(n)]


def _image_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 16 * 16, 4))


class _Counts(Algorithm):
    """Counts one thing per batch; ``typo`` counts a counter it does not declare."""

    activity = {"batches_seen": "batches seen"}

    def __init__(self, counter="batches_seen"):
        self.counter = counter

    def match(self, event, state):
        return event is Event.BATCH_END

    def apply(self, event, state, logger=None):
        self.report(logger, self.counter)


class _Quiet(Algorithm):
    """Declares no activity, as a test's helper may."""

    def match(self, event, state):
        return False

    def apply(self, event, state, logger=None):
        pass


def test_cutmix_reports_every_batch_it_mixed():
    batches = _images(n=5)
    trainer = Trainer(_image_model(), batches, "1ep", algorithms=[CutMix(alpha=1.0)], seed=0)
    trainer.fit()
    assert trainer.method_log.records["CutMix"]["activity"] == {"batches_mixed": len(batches)}
    assert trainer.method_log.acted("CutMix")


def test_mixing_with_a_weight_of_zero_is_not_acting():
    trainer = Trainer(_image_model(), _images(n=3), "1ep", algorithms=[MixUp(alpha=0.0)], seed=0)
    trainer.fit()
    assert trainer.method_log.records["MixUp"]["activity"] == {"batches_mixed": 0}
    assert not trainer.method_log.acted("MixUp")


def _freezing_run(epochs):
    model = torch.nn.Sequential(
        torch.nn.Flatten(),
        torch.nn.Linear(3 * 16 * 16, 8),
        torch.nn.ReLU(),
        torch.nn.Linear(8, 8),
        torch.nn.ReLU(),
        torch.nn.Linear(8, 4),
    )
    trainer = Trainer(model, _images(n=2), f"{epochs}ep", algorithms=[LayerFreezing(freeze_start=0.3)], seed=0)
    trainer.fit()
    return trainer


def test_layer_freezing_in_one_epoch_freezes_only_at_the_end_and_did_not_act():
    trainer = _freezing_run(1)
    assert not trainer.state.model[1].weight.requires_grad  # frozen at the end, after all training
    assert trainer.method_log.records["LayerFreezing"]["activity"] == {"layers_frozen": 0}
    assert not trainer.method_log.acted("LayerFreezing")


def test_layer_freezing_over_three_epochs_counts_the_layers_frozen_while_training_remained():
    # progress 1/3 -> (1/3 - 0.3) / 0.7 of 2 freezable layers: 0; 2/3 -> 1 layer; the end (not counted): 2
    trainer = _freezing_run(3)
    assert trainer.method_log.records["LayerFreezing"]["activity"] == {"layers_frozen": 1}
    assert trainer.method_log.acted("LayerFreezing")


def test_ema_counts_one_evaluation_with_the_average_per_eval_call():
    batches = _images(n=3)
    trainer = Trainer(_image_model(), batches, "1ep", algorithms=[EMA(half_life="2ba")], seed=0)
    trainer.fit()
    for _ in range(3):
        trainer.eval(batches)
    assert trainer.method_log.records["EMA"]["activity"] == {"averaging_updates": 2, "evaluations_averaged": 3}


def test_hyperparameters_are_the_constructors_recorded_once_and_logged_once(caplog):
    with caplog.at_level(logging.INFO, logger="algorithms.methods"):
        trainer = Trainer(_image_model(), _images(n=2), "2ep", algorithms=[CutOut(num_holes=2, length=0.25)], seed=0)
        trainer.fit()
        trainer.fit()  # already done: nothing more to train
    assert trainer.method_log.records["CutOut"]["hyperparameters"] == {
        "num_holes": 2,
        "length": 0.25,
        "uniform_sampling": False,
        "input_key": 0,
    }
    registered = [r for r in caplog.records if "hyperparameters" in r.getMessage()]
    assert [r.getMessage() for r in registered] == [
        "CutOut: hyperparameters {'num_holes': 2, 'length': 0.25, 'uniform_sampling': False, 'input_key': 0}"
    ]
    assert registered[0].levelno == logging.INFO and registered[0].name == "algorithms.methods"


def test_the_activity_reaches_python_logging_at_the_end_of_fit(caplog):
    with caplog.at_level(logging.INFO, logger="algorithms.methods"):
        Trainer(_image_model(), _images(n=3), "1ep", algorithms=[CutMix(alpha=1.0), MixUp(alpha=0.0)], seed=0).fit()
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert messages[-2:] == ["CutMix: 3 batches mixed", "MixUp: 0 batches mixed (did not act)"]


def test_each_count_is_logged_at_debug(caplog):
    with caplog.at_level(logging.DEBUG, logger="algorithms.methods"):
        Trainer(_image_model(), _images(n=2), "1ep", algorithms=[_Counts()]).fit()
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG] == ["_Counts: batches_seen += 1"] * 2


def test_hyperparameters_are_plain_json():
    glu = GatedLinearUnits(act_fn=torch.nn.functional.silu)
    log = MethodLog()
    log.scope(glu)
    weird = _Counts(counter=(torch.tensor([1.0, 2.0]), object(), {3: (4, 5)}))
    log.scope(weird)
    records = json.loads(json.dumps(log.records))
    assert records["GatedLinearUnits"]["hyperparameters"]["act_fn"] == "torch.nn.functional.silu"
    counter = records["_Counts"]["hyperparameters"]["counter"]
    assert counter[0] == "tensor([1., 2.])" and counter[1].startswith("<object object") and counter[2] == {"3": [4, 5]}


def test_instances_of_one_class_get_distinct_labels_in_order():
    algos = [CutOut(length=0.25), CutMix(), CutOut(length=0.5), CutOut(length=0.75)]
    trainer = Trainer(_image_model(), _images(n=2), "1ep", algorithms=algos, seed=0)
    trainer.fit()
    records = trainer.method_log.records
    assert list(records) == ["CutOut", "CutMix", "CutOut#2", "CutOut#3"]
    assert [records[label]["hyperparameters"]["length"] for label in ("CutOut", "CutOut#2", "CutOut#3")] == [
        0.25,
        0.5,
        0.75,
    ]
    assert all(records[label]["activity"] == {"batches_cut": 2} for label in ("CutOut", "CutOut#2", "CutOut#3"))


def test_registering_an_algorithm_again_gives_its_log_back():
    log, algo = MethodLog(), _Counts()
    assert log.scope(algo) is log.scope(algo)
    assert list(log.records) == ["_Counts"]


def test_an_undeclared_counter_is_refused_naming_the_algorithm_the_counter_and_the_declared_ones():
    trainer = Trainer(_image_model(), _images(n=1), "1ep", algorithms=[_Counts("batches_sen")])
    message = "_Counts: counter 'batches_sen' is not declared in _Counts.activity (declared: 'batches_seen')"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        trainer.fit()


@pytest.mark.parametrize("n", [-1, 1.0, True, torch.tensor(1)])
def test_a_count_is_a_non_negative_int(n):
    scoped = MethodLog().scope(_Counts())
    with pytest.raises(ValueError, match="n must be an int >= 0"):
        scoped.count("batches_seen", n)
    assert scoped.activity == {"batches_seen": 0}


def test_report_without_a_logger_does_nothing():
    """``apply`` called by hand, outside an Engine, gets no log."""
    algo = _Counts("not declared either")
    algo.apply(Event.BATCH_END, None, None)


def test_acted_is_the_classs_rule_and_an_unknown_label_is_a_key_error():
    class AllOrNothing(_Counts):
        activity = {"a": "a things", "b": "b things"}

        def acted(self, activity):
            return activity["a"] > 0 and activity["b"] > 0

    log = MethodLog()
    scoped = log.scope(AllOrNothing("a"))
    scoped.count("a", 3)
    assert not log.acted("AllOrNothing")
    scoped.count("b")
    assert log.acted("AllOrNothing")
    with pytest.raises(KeyError, match="no algorithm labelled 'CutMix' in this run \\(labels: 'AllOrNothing'\\)"):
        log.acted("CutMix")


def test_summary_has_one_line_per_algorithm():
    log = MethodLog()
    log.scope(CutMix()).count("batches_mixed", 12)
    log.scope(MixUp())
    log.scope(_Quiet())
    assert log.summary() == (
        "CutMix: batches_mixed=12\nMixUp: batches_mixed=0 (did not act)\n_Quiet: no activity declared (did not act)"
    )


def test_the_trainer_makes_a_method_log_or_takes_one_and_refuses_anything_else():
    assert isinstance(Trainer(_image_model(), _images(n=1), "1ep").method_log, MethodLog)
    given = MethodLog()
    assert Trainer(_image_model(), _images(n=1), "1ep", logger=given).method_log is given
    message = (
        "Trainer(logger=...): got dict; give an algorithms.core.MethodLog, or None for a new one (read it "
        "after fit() as trainer.method_log)"
    )
    with pytest.raises(TypeError, match=f"^{re.escape(message)}$"):
        Trainer(_image_model(), _images(n=1), "1ep", logger={})


def test_an_engine_alone_makes_its_own_method_log_and_passes_each_algorithm_its_part():
    state = State(model=torch.nn.Identity(), max_duration=Duration.parse("1ep"))
    first, second = _Counts(), _Counts()
    engine = Engine(state, [first, second])
    engine.run_event(Event.BATCH_END)
    engine.run_event(Event.BATCH_END)
    assert engine.method_log.records["_Counts"]["activity"] == {"batches_seen": 2}
    assert engine.method_log.records["_Counts#2"]["activity"] == {"batches_seen": 2}
    with pytest.raises(TypeError, match="^Engine\\(logger=...\\): got str"):
        Engine(state, [first], logger="log")


def test_the_scoped_log_is_an_algorithm_log():
    scoped = MethodLog().scope(_Counts())
    assert isinstance(scoped, AlgorithmLog) and scoped.label == "_Counts"
