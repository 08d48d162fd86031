"""EMA's own semantics, checked against its definition: W_ema = smoothing * W_ema + (1 - smoothing) * W,
smoothing = exp(-ln 2 * update_interval / half_life), evaluation with the average and training with
the training weights. Composer's tests (compute_ema on models for smoothing 0, 0.5, 0.99 and 1; the
smoothing derived from half_life; the average swapped in at EVAL_START and out at EVAL_END) are
re-expressed here.
"""

from __future__ import annotations

import copy
import math
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import algorithms.functional as cf
from algorithms import EMA
from algorithms.core import Algorithm, Event, Trainer
from algorithms.models import resnet20, transformer_tiny

REPO = Path(__file__).resolve().parents[2]


def _tensors(model):
    return [*model.parameters(), *model.buffers()]


def _bn_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3),
        torch.nn.BatchNorm2d(4),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(4, 3),
    )


def _batches(n=4, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(8, 3, 6, 6, generator=g), torch.randint(0, 3, (8,), generator=g)) for _ in range(n)]


class _Weights(Algorithm):
    """Records a copy of the model's parameters and buffers at ``event``."""

    def __init__(self, event=Event.BATCH_END):
        self.event, self.seen = event, []

    def match(self, event, state):
        return event is self.event

    def apply(self, event, state, logger=None):
        self.seen.append([t.detach().clone() for t in _tensors(state.model)])


# -- the functional form ------------------------------------------------------------------------


@pytest.mark.parametrize("smoothing", [0, 0.5, 0.99, 1])
@pytest.mark.parametrize(
    "make",
    [_bn_model, lambda: resnet20(num_classes=10), lambda: transformer_tiny(11)],
    ids=["conv-bn", "resnet20", "transformer_tiny"],
)
def test_compute_ema_is_the_weighted_sum_for_parameters_and_buffers(smoothing, make):
    model, ema_model = make(), make()
    with torch.no_grad():  # other weights and statistics than the average's
        for t in _tensors(model):
            if t.is_floating_point():
                t.add_(torch.randn(t.shape, generator=torch.Generator().manual_seed(t.numel())))
            else:
                t.add_(3)
    original = copy.deepcopy(ema_model)
    before = [t.clone() for t in _tensors(model)]
    cf.compute_ema(model, ema_model, smoothing=smoothing)
    for new, old, w in zip(_tensors(ema_model), _tensors(original), _tensors(model), strict=True):
        if new.is_floating_point():
            torch.testing.assert_close(new, old * smoothing + (1 - smoothing) * w)
        else:  # num_batches_tracked: the model's count, not a weighted sum
            assert torch.equal(new, w)
    assert all(torch.equal(a, b) for a, b in zip(_tensors(model), before, strict=True))  # model untouched


def test_compute_ema_smooths_by_099_by_default_as_composers():
    model, ema_model = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    original = copy.deepcopy(ema_model)
    cf.compute_ema(model, ema_model)
    for new, old, w in zip(ema_model.parameters(), original.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(new, old * 0.99 + 0.01 * w)


NOT_A_COPY = "ema_model: its parameters and buffers do not match model's — make it with copy.deepcopy(model)"


@pytest.mark.parametrize(
    "other",
    [lambda: torch.nn.Linear(2, 2, bias=False), lambda: torch.nn.Linear(3, 2), _bn_model],
    ids=["fewer-tensors", "other-shapes", "more-tensors"],
)  # of Linear(2, 2)'s
def test_compute_ema_keeps_dtype_and_refuses_a_model_that_is_not_a_copy(other):
    model = torch.nn.Linear(2, 2).double()
    ema_model = copy.deepcopy(model)
    cf.compute_ema(model, ema_model, smoothing=0.9)
    assert all(t.dtype == torch.float64 for t in ema_model.parameters())
    with pytest.raises(ValueError, match=f"^{re.escape(NOT_A_COPY)}$"):
        cf.compute_ema(model, other(), smoothing=0.9)
    for bad in (-0.1, 1.5, True, "0.9"):
        expected = f"smoothing={bad!r}: must be a number in [0, 1]"
        with pytest.raises(ValueError, match=f"^{re.escape(expected)}$"):
            cf.compute_ema(model, ema_model, smoothing=bad)


# -- the class: smoothing, updates, swaps ----------------------------------------------------------


@pytest.mark.parametrize(
    ("half_life", "interval", "updates_per_half_life"),
    [("10ba", None, 10), ("20ba", "5ba", 4), ("1ep", "1ep", 1), ("1000ba", "1ba", 1000)],
)
def test_smoothing_from_half_life_is_exp_of_minus_ln2_over_the_half_life(half_life, interval, updates_per_half_life):
    ema = EMA(half_life=half_life, update_interval=interval)
    assert ema.smoothing == pytest.approx(math.exp(-math.log(2) / updates_per_half_life), rel=1e-12)
    assert ema.smoothing**updates_per_half_life == pytest.approx(0.5)  # a term's weight halves in half_life
    assert EMA(half_life=None, smoothing=0.9).smoothing == 0.9
    assert EMA(half_life="0ba").smoothing == 0.0


def _train(ema, n=4, epochs=1, extra=(), data=None, model=None):
    model = model or _bn_model()
    data = data or _batches(n)
    trainer = Trainer(
        model,
        data,
        f"{epochs}ep",
        optimizer=torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9),
        algorithms=[ema, *extra] if ema else list(extra),
        seed=0,
        device="cpu",
    )
    trainer.fit()
    return trainer


def _expected_average(weights, smoothing, updates):
    """The average by its definition: a copy of the weights at the first recorded step, then updated at
    each index of ``updates``."""
    average = [t.clone() for t in weights[0]]
    for i in updates:
        average = [
            a * smoothing + (1 - smoothing) * w if a.is_floating_point() else w.clone()
            for a, w in zip(average, weights[i], strict=True)
        ]
    return average


def test_the_average_follows_the_formula_over_several_steps_and_training_is_untouched():
    recorder = _Weights()
    ema = EMA(half_life="3ba")
    trainer = _train(ema, n=6, extra=[recorder])
    expected = _expected_average(recorder.seen, ema.smoothing, updates=range(1, 6))
    for got, want in zip(_tensors(ema.ema_model), expected, strict=True):
        torch.testing.assert_close(got, want)
    assert not any(p.requires_grad for p in ema.ema_model.parameters())  # a copy without gradients
    # the training weights are exactly those of the run without EMA
    plain = _train(None, n=6)
    for a, b in zip(_tensors(trainer.state.model), _tensors(plain.state.model), strict=True):
        assert torch.equal(a, b)
    assert not torch.allclose(ema.ema_model[0].weight, trainer.state.model[0].weight)  # and they differ


def test_buffers_are_averaged_and_the_batch_count_is_copied():
    recorder = _Weights()
    ema = EMA(half_life=None, smoothing=0.6)
    trainer = _train(ema, n=3, extra=[recorder])
    bn, bn_ema = trainer.state.model[1], ema.ema_model[1]
    assert [n for n, _ in trainer.state.model.named_buffers()][0] == "1.running_mean"
    means = [seen[6] for seen in recorder.seen]  # after the six parameters, the first buffer
    torch.testing.assert_close(bn_ema.running_mean, (means[0] * 0.6 + 0.4 * means[1]) * 0.6 + 0.4 * means[2])
    assert int(bn_ema.num_batches_tracked) == int(bn.num_batches_tracked) == 3


@pytest.mark.parametrize(
    ("interval", "start", "first", "updates"),
    [
        ("2ba", "0.0dur", 0, [1, 3, 5]),
        ("3ba", "0.0dur", 0, [2, 5]),
        ("1ba", "3ba", 2, [3, 4, 5]),
        ("1ba", "0.5dur", 2, [3, 4, 5]),
    ],
)
def test_update_interval_and_ema_start_choose_the_updates(interval, start, first, updates):
    recorder = _Weights()
    ema = EMA(half_life="4ba", update_interval=interval, ema_start=start)
    _train(ema, n=6, extra=[recorder])
    expected = _expected_average(recorder.seen[first:], ema.smoothing, [i - first for i in updates])
    for got, want in zip(_tensors(ema.ema_model), expected, strict=True):
        torch.testing.assert_close(got, want)


def test_an_epoch_interval_updates_at_epoch_ends():
    recorder = _Weights(Event.EPOCH_END)
    ema = EMA(half_life="1ep")
    _train(ema, n=2, epochs=3, extra=[recorder])
    expected = _expected_average(recorder.seen, 0.5, [1, 2])
    for got, want in zip(_tensors(ema.ema_model), expected, strict=True):
        torch.testing.assert_close(got, want)


class _EvalAtEpochEnd(Algorithm):
    """Calls the Trainer's eval at the first epoch's end (at an epoch end the next epoch puts the model
    back in training mode), recording the weights the model evaluates with."""

    def __init__(self, data):
        self.data, self.trainer, self.seen = data, None, None

    def match(self, event, state):
        return event is Event.EPOCH_END and state.timestamp.epoch == 1

    def apply(self, event, state, logger=None):
        probe = _Weights(Event.EVAL_BATCH_START)
        self.trainer.engine.algorithms += (probe,)
        self.trainer.eval(self.data)
        self.trainer.engine.algorithms = self.trainer.engine.algorithms[:-1]
        self.seen = probe.seen[0]


def test_evaluation_uses_the_average_and_training_resumes_with_the_training_weights():
    data = _batches(2)
    midway = _EvalAtEpochEnd(data)
    ema = EMA(half_life="2ba")
    recorder = _Weights(Event.EPOCH_END)
    model = _bn_model()
    trainer = Trainer(
        model,
        data,
        "2ep",
        optimizer=torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9),
        algorithms=[ema, recorder, midway],
        seed=0,
        device="cpu",
    )
    midway.trainer = trainer
    trainer.fit()
    # what the model evaluated with at the first epoch's end is the average then (not the training weights)
    no_eval = EMA(half_life="2ba")
    plain = _train(no_eval, n=2, epochs=2, data=data, extra=[_Weights()])
    assert midway.seen is not None
    assert not all(torch.equal(a, b) for a, b in zip(midway.seen, recorder.seen[0], strict=True))
    # and training went on from the training weights: the run ends where the run without the eval does
    for a, b in zip(_tensors(trainer.state.model), _tensors(plain.state.model), strict=True):
        assert torch.equal(a, b)
    for a, b in zip(_tensors(ema.ema_model), _tensors(no_eval.ema_model), strict=True):
        assert torch.equal(a, b)
    # after fit: eval swaps the average in and the training weights back
    probe = _Weights(Event.EVAL_BATCH_START)
    trainer.engine.algorithms += (probe,)
    before = [t.clone() for t in _tensors(trainer.state.model)]
    trainer.eval(data)
    for a, b in zip(probe.seen[0], _tensors(ema.ema_model), strict=True):
        assert torch.equal(a, b)
    for a, b in zip(_tensors(trainer.state.model), before, strict=True):
        assert torch.equal(a, b)


def test_the_swap_on_events_as_composer_tests_it():
    model = _bn_model()
    state = Trainer(model, _batches(1), "1ba", device="cpu").state
    ema = EMA(half_life=None, smoothing=0.999, update_interval="1ba")
    state.timestamp.batch = 1
    ema.apply(Event.BATCH_END, state)  # starts: a copy of the weights
    original = copy.deepcopy(state.model)
    with torch.no_grad():
        for p in state.model.parameters():
            p.add_(1.0)  # a training step
    training = copy.deepcopy(state.model)
    state.timestamp.batch = 2
    ema.apply(Event.BATCH_END, state)
    for e, o, w in zip(ema.ema_model.parameters(), original.parameters(), state.model.parameters(), strict=True):
        torch.testing.assert_close(e, o * 0.999 + 0.001 * w)
    averaged = copy.deepcopy(ema.ema_model)
    ema.apply(Event.EVAL_START, state)
    assert all(torch.equal(a, b) for a, b in zip(_tensors(state.model), _tensors(averaged), strict=True))
    ema.apply(Event.EVAL_END, state)
    assert all(torch.equal(a, b) for a, b in zip(_tensors(state.model), _tensors(training), strict=True))
    assert all(torch.equal(a, b) for a, b in zip(_tensors(ema.ema_model), _tensors(averaged), strict=True))


def test_eval_before_the_average_starts_uses_the_training_weights():
    ema = EMA(ema_start="1ep")
    trainer = Trainer(_bn_model(), _batches(1), "1ba", algorithms=[ema], device="cpu")
    before = [t.clone() for t in _tensors(trainer.state.model)]
    trainer.eval(_batches(1))
    assert ema.ema_model is None
    assert all(torch.equal(a, b) for a, b in zip(_tensors(trainer.state.model), before, strict=True))


def test_state_dict_keeps_the_average_and_a_fresh_ema_resumes_it():
    ema = EMA(half_life="2ba")
    trainer = _train(ema, n=3)
    saved = ema.state_dict()
    assert set(saved) == {"ema_weights"}
    assert all(torch.equal(saved["ema_weights"][k], v) for k, v in ema.ema_model.state_dict().items())
    fresh = EMA(half_life="2ba")
    fresh.load_state_dict(saved)
    assert fresh.state_dict()["ema_weights"].keys() == saved["ema_weights"].keys()
    trainer.state.timestamp.batch = 4
    for algo in (ema, fresh):
        algo.apply(Event.BATCH_END, trainer.state)
    assert all(torch.equal(a, b) for a, b in zip(_tensors(fresh.ema_model), _tensors(ema.ema_model), strict=True))
    assert EMA().state_dict() == {"ema_weights": None}
    with pytest.raises(ValueError, match=r"unknown key\(s\) 'step'"):
        fresh.load_state_dict({"step": 3})


def _same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_state_taken_during_evaluation_keeps_the_average_and_a_loaded_average_is_evaluated_at_once():
    ema = EMA(half_life="2ba")
    trainer = _train(ema, n=3)
    state = trainer.state
    average = copy.deepcopy(ema.ema_model.state_dict())
    training = copy.deepcopy(state.model.state_dict())
    assert not _same(average, training)
    ema.apply(Event.EVAL_START, state)  # the model holds the average, the copy the training weights
    saved = ema.state_dict()
    assert saved.keys() == {"ema_weights"} and _same(saved["ema_weights"], average)
    ema.apply(Event.EVAL_END, state)
    # a fresh EMA given that state evaluates with its average before any update of its own
    fresh = EMA(half_life="2ba")
    fresh.load_state_dict(saved)
    assert fresh.match(Event.EVAL_START, state)
    fresh.apply(Event.EVAL_START, state)
    assert _same(state.model.state_dict(), average)
    fresh.apply(Event.EVAL_END, state)
    assert _same(state.model.state_dict(), training) and _same(fresh.ema_model.state_dict(), average)


def test_loading_a_state_replaces_a_running_average_and_a_state_without_one_resets_it():
    ema = EMA(half_life="2ba")
    _train(ema, n=3)
    saved = ema.state_dict()
    other = EMA(half_life="2ba")
    trainer = _train(other, n=2)  # an average of its own, of other weights
    assert not _same(other.ema_model.state_dict(), saved["ema_weights"])
    other.load_state_dict(saved)
    assert _same(other.ema_model.state_dict(), saved["ema_weights"])
    other.load_state_dict(EMA().state_dict())  # the state of an EMA that has not started
    assert other.ema_model is None and other.state_dict() == {"ema_weights": None}
    assert not other.match(Event.EVAL_START, trainer.state)


NOT_UNDERSTOOD = "duration {!r} is not understood — write e.g. '2ep', '100ba', '512sp', '65536tok' or '0.5dur'"


EITHER = "give either half_life (e.g. '1000ba') or smoothing (e.g. 0.999), not both; pass half_life=None with smoothing"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(half_life=None), f"half_life=None, smoothing=None: {EITHER}"),
        (dict(smoothing=0.9), f"half_life='1000ba', smoothing=0.9: {EITHER}"),
        (dict(half_life="0.5dur"), "half_life='0.5dur': give it in 'ba' or 'ep', e.g. '10ba'"),
        (dict(half_life="ten"), "half_life='ten': " + NOT_UNDERSTOOD.format("ten")),
        (
            dict(half_life=None, smoothing=1.5),
            "smoothing=1.5: must be None or a number in [0, 1]",
        ),
        (dict(ema_start="soon"), "ema_start='soon': " + NOT_UNDERSTOOD.format("soon")),
        (dict(update_interval="0ba"), "update_interval='0ba': must be at least one batch or epoch"),
        (
            dict(update_interval="1ep"),
            "half_life='1000ba', update_interval='1ep': update_interval must be in half_life's unit, since the "
            "smoothing is their ratio",
        ),
        (dict(update_interval="0.1dur"), "update_interval='0.1dur': give it in 'ba' or 'ep', e.g. '10ba'"),
        (dict(half_life="2ep", update_interval="5sp"), "update_interval='5sp': give it in 'ba' or 'ep', e.g. '10ba'"),
    ],
)
def test_bad_arguments_are_refused_naming_the_argument(kwargs, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        EMA(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "attributes", "updates_per_half_life"),
    [
        ({}, dict(half_life="1000ba", ema_start="0.0dur", update_interval="1ba"), 1000),
        (
            dict(half_life="20ba", update_interval="5ba", ema_start="3ep"),
            dict(half_life="20ba", ema_start="3ep", update_interval="5ba"),
            4,
        ),
        (dict(half_life="2ep"), dict(half_life="2ep", ema_start="0.0dur", update_interval="1ep"), 2),
        (dict(half_life=None, smoothing=0.9), dict(half_life=None, ema_start="0.0dur", update_interval="1ba"), None),
    ],
)
def test_the_hyperparameters_are_kept_with_composers_defaults(kwargs, attributes, updates_per_half_life):
    """Composer's EMA defaults to half_life='1000ba', ema_start='0.0dur' and an update every batch; the
    interval defaults to one of half_life's unit, or a batch with smoothing."""
    ema = EMA(**kwargs)
    assert {name: getattr(ema, name) for name in attributes} == attributes
    smoothing = 0.9 if updates_per_half_life is None else math.exp(-math.log(2) / updates_per_half_life)
    assert ema.smoothing == pytest.approx(smoothing, rel=1e-12)
    given = ema.smoothing if attributes["half_life"] is None else None  # derived from half_life: not an argument
    assert repr(ema) == (
        f"EMA(half_life={attributes['half_life']!r}, smoothing={given!r}, "
        f"ema_start={attributes['ema_start']!r}, update_interval={attributes['update_interval']!r})"
    )
    assert repr(eval(repr(ema), {"EMA": EMA})) == repr(ema)


# -- two ranks ----------------------------------------------------------------------------------------

DDP_SCRIPT = textwrap.dedent("""
    import sys
    import torch
    import torch.distributed as dist
    from algorithms import EMA
    from algorithms.core import Trainer
    from algorithms.core.distributed import destroy_process_group, rank_and_world_size


    def main(out_path):
        rank, world = rank_and_world_size()
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                                    torch.nn.Linear(64, 5))
        g = torch.Generator().manual_seed(1 + rank)  # each rank its own batches
        data = [(torch.randn(4, 3, 6, 6, generator=g), torch.randint(0, 5, (4,), generator=g)) for _ in range(3)]
        ema = EMA(half_life="2ba")
        trainer = Trainer(model, data, "3ba", algorithms=[ema], parallel="ddp", device="cpu", seed=0,
                          optimizer=lambda params: torch.optim.SGD(params, lr=0.1))
        trainer.fit()
        mine = {"ema": ema.ema_model.state_dict(), "model": trainer.state.model.module.state_dict()}
        seen = [None] * world
        dist.all_gather_object(seen, mine)
        if rank == 0:
            torch.save(seen, out_path)
        destroy_process_group()


    # In a function, not at module level: the DDP model and its gloo process group are freed when
    # main returns. Held by module globals, they are destroyed during interpreter finalization,
    # where a rank can abort ("terminate called without an active exception"): 2 of 60 runs on a
    # loaded 2-core machine at module level, 0 of 60 in a function.
    main(sys.argv[1])
""")


@pytest.mark.slow
def test_two_ddp_ranks_keep_the_same_average(tmp_path):
    script, out = tmp_path / "ema_ddp.py", tmp_path / "out.pt"
    script.write_text(DDP_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script), str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rank0, rank1 = torch.load(out)
    assert rank0["ema"].keys() == rank1["ema"].keys()
    for name in rank0["ema"]:
        assert torch.equal(rank0["ema"][name], rank1["ema"][name]), name
        assert torch.equal(rank0["model"][name], rank1["model"][name]), name
    assert not all(torch.equal(rank0["ema"][n], rank0["model"][n]) for n in rank0["ema"])


# -- the average is kept in fp32 whatever the model's dtype ----------------------------------------


def _low_precision_run(precision, ema, steps=40):
    """A linear model trained ``steps`` batches in ``precision`` (its weights in that dtype) from a real
    DataLoader, with ``ema`` and a recorder of the weights at each BATCH_END after it."""
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 4)
    g = torch.Generator().manual_seed(3)
    data = torch.utils.data.TensorDataset(
        torch.randn(steps * 8, 16, generator=g), torch.randint(0, 4, (steps * 8,), generator=g)
    )
    loader = torch.utils.data.DataLoader(data, batch_size=8, shuffle=False)
    recorder = _Weights()
    trainer = Trainer(
        model,
        loader,
        "1ep",
        optimizer=torch.optim.SGD(model.parameters(), lr=0.5),
        algorithms=[ema, recorder],
        precision=precision,
        seed=0,
        device="cpu",
    )
    trainer.fit()
    return trainer, recorder.seen


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
@pytest.mark.parametrize(
    "kwargs", [{"half_life": None, "smoothing": 0.999}, {"half_life": "20ba"}], ids=["s0.999", "hl20"]
)
def test_a_low_precision_models_average_is_kept_in_fp32_and_matches_the_exact_average(precision, kwargs):
    """The reference is the average of the recorded (exactly representable) weights in float64, by the
    definition: a copy at the first BATCH_END, then W_ema = s * W_ema + (1 - s) * W at each later one.
    The fp32 average rounds each update's two products and one sum (at most about 2 units of
    2**-24 of the largest weight each), and earlier errors shrink by s at every update, so after N
    updates it is within 2 * N * 2**-24 * max|W| of the reference; the test allows twice that. An
    average kept in bf16 or fp16 (8 or 11 bits) stays near the first weights with s = 0.999, where
    s * W_ema rounds back to W_ema, and misses by far more than the distance it should have moved."""
    ema = EMA(**kwargs)
    trainer, seen = _low_precision_run(precision, ema)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    assert trainer.state.model.weight.dtype is dtype
    s = ema.smoothing
    reference = [t.double() for t in seen[0]]
    for weights in seen[1:]:
        reference = [s * r + (1 - s) * w.double() for r, w in zip(reference, weights, strict=True)]
    updates = len(seen) - 1
    for got, want, first in zip(_tensors(ema.ema_model), reference, seen[0], strict=True):
        scale = max(want.abs().max().item(), 1e-30)
        tolerance = 4 * updates * 2**-24 * scale
        error = (got.double() - want).abs().max().item()
        assert error <= tolerance, (error, tolerance)
        assert (want - first.double()).abs().max().item() > 100 * tolerance  # the average did move
    assert all(t.dtype is torch.float32 for t in _tensors(ema.ema_model))
    # evaluation runs with the average cast to the model's dtype, and training weights come back exactly
    probe = _Weights(Event.EVAL_BATCH_START)
    trainer.engine.algorithms += (probe,)
    before = [t.clone() for t in _tensors(trainer.state.model)]
    trainer.eval([(torch.randn(4, 16), torch.randint(0, 4, (4,)))])
    for evaluated, average in zip(probe.seen[0], _tensors(ema.ema_model), strict=True):
        assert evaluated.dtype is dtype and torch.equal(evaluated, average.to(dtype))
    for after, held in zip(_tensors(trainer.state.model), before, strict=True):
        assert after.dtype is dtype and torch.equal(after, held)
    # a checkpoint keeps the fp32 average, and a fresh EMA resumes it exactly
    saved = ema.state_dict()["ema_weights"]
    assert all(v.dtype is torch.float32 for v in saved.values())
    fresh = EMA(**kwargs)
    fresh.load_state_dict(ema.state_dict())
    trainer.engine.algorithms = (fresh,)
    trainer.eval([(torch.randn(4, 16), torch.randint(0, 4, (4,)))])
    for a, b in zip(_tensors(fresh.ema_model), _tensors(ema.ema_model), strict=True):
        assert a.dtype is torch.float32 and torch.equal(a, b)


def test_compute_ema_averages_a_low_precision_model_into_an_fp32_copy():
    model = torch.nn.Linear(3, 2).to(torch.bfloat16)
    ema_model = copy.deepcopy(model).float()
    reference = [p.detach().double() for p in ema_model.parameters()]
    for step in range(30):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.01 * (step % 7 - 3))
        cf.compute_ema(model, ema_model, smoothing=0.999)
        reference = [
            0.999 * r + 0.001 * p.detach().double() for r, p in zip(reference, model.parameters(), strict=True)
        ]
    for got, want in zip(ema_model.parameters(), reference, strict=True):
        assert got.dtype is torch.float32
        torch.testing.assert_close(got.double(), want, rtol=0, atol=4 * 30 * 2**-24 * want.abs().max().item())


def test_the_checkpoint_of_an_average_keeps_a_layers_extra_state():
    """A model whose ``state_dict`` holds more than tensors (Gyro Dropout's step count) is averaged and
    checkpointed: the extra state is copied as it is (``state_dict()`` raised on it)."""
    from algorithms import GyroDropout

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Dropout(0.5), torch.nn.Linear(16, 4))
    batches = [(torch.randn(8, 8), torch.randint(0, 4, (8,))) for _ in range(3)]
    ema = EMA(half_life="2ba")
    Trainer(model, batches, "3ba", algorithms=[GyroDropout(p=0.5, sigma=4, tau=2), ema], seed=0, device="cpu").fit()
    weights = ema.state_dict()["ema_weights"]
    assert set(weights["1._extra_state"]) == {"training_step"}  # as the copy holding the average has it
    assert all(isinstance(v, torch.Tensor) for k, v in weights.items() if not k.endswith("_extra_state"))
