"""SWA's own semantics, checked against its definition (Izmailov et al., 2018): the mean of the
snapshots taken every update_interval from swa_start, batch-norm statistics recomputed with one pass
over the training data for the mean's weights, the mean loaded at swa_end, the SWALR schedule. The
running mean is checked against torch.optim.swa_utils.AveragedModel as well. Composer's own SWA
tests are not among the stored sources read for this; its class's behaviour (snapshots counted
from swa_start, the mean loaded at swa_end, the schedule stepped per snapshot) is checked here.
"""

from __future__ import annotations

import copy
import math
import re
import warnings

import pytest
import torch
from torch.optim.swa_utils import AveragedModel
from trainer_support import line_that_called_into

import algorithms.functional as cf
from algorithms import SWA
from algorithms.core import Algorithm, Event, Trainer
from algorithms.core import trainer as trainer_module
from algorithms.models import resnet20


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3),
        torch.nn.BatchNorm2d(4),
        torch.nn.ReLU(),
        torch.nn.Conv2d(4, 4, 3),
        torch.nn.BatchNorm2d(4),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(4, 3),
    )


def _batches(n=10, seed=1, size=8):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(size, 3, 7, 7, generator=g), torch.randint(0, 3, (size,), generator=g)) for _ in range(n)]


class _Params(Algorithm):
    """Records the model's parameters (and the learning rate) after every batch."""

    def __init__(self):
        self.seen, self.lrs = [], []

    def match(self, event, state):
        return event is Event.BATCH_END

    def apply(self, event, state, logger=None):
        self.seen.append([p.detach().clone() for p in state.model.parameters()])
        self.lrs.append(state.optimizer.param_groups[0]["lr"])


def _train(swa, duration="10ba", data=None, model=None, before=(), after=()):
    model = model or _model()
    data = data or _batches()
    trainer = Trainer(
        model,
        data,
        duration,
        optimizer=torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
        algorithms=[*before, swa, *after],
        seed=0,
        device="cpu",
    )
    trainer.fit()
    return trainer


# -- the functional form ----------------------------------------------------------------------------


def test_update_swa_average_is_the_mean_of_the_snapshots_and_copies_the_buffers():
    snapshots = [resnet20(num_classes=10) for _ in range(4)]  # each its own random weights
    for i, s in enumerate(snapshots):
        for b in s.buffers():
            b.fill_(i) if b.is_floating_point() else b.fill_(10 * i)
    swa_model, n = copy.deepcopy(snapshots[0]), 0
    before = [[t.clone() for t in s.state_dict().values()] for s in snapshots]
    for s in snapshots:
        n = cf.update_swa_average(swa_model, s, n)
    assert n == 4
    for i, p in enumerate(swa_model.parameters()):
        torch.testing.assert_close(p, torch.stack([list(s.parameters())[i] for s in snapshots]).mean(0))
    for b, last in zip(swa_model.buffers(), snapshots[-1].buffers(), strict=True):
        assert torch.equal(b, last)  # the buffers of the latest snapshot
    for s, b in zip(snapshots, before, strict=True):  # the snapshots are untouched
        assert all(torch.equal(x, y) for x, y in zip(s.state_dict().values(), b, strict=True))


def test_update_swa_average_agrees_with_torchs_averaged_model():
    snapshots = [_model() for _ in range(3)]
    for i, s in enumerate(snapshots):
        with torch.no_grad():
            for p in s.parameters():
                p.add_(i * 0.37)
    ours, n = copy.deepcopy(snapshots[0]), 0
    theirs = AveragedModel(snapshots[0])
    for s in snapshots:
        n = cf.update_swa_average(ours, s, n)
        theirs.update_parameters(s)
    assert n == int(theirs.n_averaged)
    for a, b in zip(ours.state_dict().values(), theirs.module.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


def test_update_swa_average_of_no_snapshots_is_a_copy_of_the_model_whatever_the_copy_held():
    model = _model()
    swa_model = copy.deepcopy(model)
    with torch.no_grad():
        for t in swa_model.parameters():
            t.fill_(math.nan)  # a mean of nothing yet: its values are not read
    assert cf.update_swa_average(swa_model, model, 0) == 1
    assert all(
        torch.equal(a, b) for a, b in zip(swa_model.state_dict().values(), model.state_dict().values(), strict=True)
    )


def test_update_swa_average_keeps_dtype_and_refuses_bad_arguments():
    model = _model().double()
    swa_model = copy.deepcopy(model)
    assert cf.update_swa_average(swa_model, model, 2) == 3
    assert all(p.dtype == torch.float64 for p in swa_model.parameters())
    with pytest.raises(ValueError, match=r"^swa_model: its parameters and buffers do not match model's"):
        cf.update_swa_average(torch.nn.Linear(2, 2), model, 0)
    for bad in (-1, 1.0, True):
        with pytest.raises(ValueError, match=rf"^num_averaged={bad!r}: "):
            cf.update_swa_average(swa_model, model, bad)


# -- the class ---------------------------------------------------------------------------------------


def _bn_statistics_of_a_pass(model, data):
    """Each batch norm's running mean and (unbiased) variance as update_bn defines them: the mean over
    the batches of each batch's statistics of the layer's input, the model in training mode."""
    norms = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    seen = {m: [] for m in norms}
    hooks = [m.register_forward_hook(lambda m, inp, out: seen[m].append(inp[0].detach())) for m in norms]
    model.train()
    with torch.no_grad():
        for x, _ in data:
            model(x)
    for h in hooks:
        h.remove()
    return [
        (
            torch.stack([x.mean((0, 2, 3)) for x in seen[m]]).mean(0),
            torch.stack([x.var((0, 2, 3), unbiased=True) for x in seen[m]]).mean(0),
        )
        for m in norms
    ]


def test_swa_loads_the_mean_of_its_snapshots_with_batch_norm_statistics_of_a_pass_over_the_data():
    data = _batches()
    before, after = _Params(), _Params()
    swa = SWA(swa_start="3ba", swa_end="9ba", update_interval="2ba", bn_dataloader=data)
    trainer = _train(swa, "9ba", data=data, before=[before], after=[after])
    assert swa.num_averaged == 4  # batches 3, 5, 7 and 9
    snapshots = [before.seen[i - 1] for i in (3, 5, 7, 9)]
    mean = [torch.stack(ps).mean(0) for ps in zip(*snapshots, strict=True)]
    for got, want in zip(after.seen[8], mean, strict=True):  # at batch 9, after SWA loaded the mean
        torch.testing.assert_close(got, want)
    assert swa.swa_model is None  # nothing kept once loaded
    # the batch-norm statistics are those of a pass over the data with the mean's weights
    probe = copy.deepcopy(trainer.state.model)
    with torch.no_grad():
        for p, m in zip(probe.parameters(), mean, strict=True):
            p.copy_(m)
    norms = [m for m in trainer.state.model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    for m, (mean_, var) in zip(norms, _bn_statistics_of_a_pass(probe, data), strict=True):
        torch.testing.assert_close(m.running_mean, mean_)
        torch.testing.assert_close(m.running_var, var)


def test_the_batch_norm_pass_uses_the_states_train_dataloader_and_warns_without_one():
    data = _batches(6)
    model = _model()
    swa = SWA(swa_start="2ba", swa_end="6ba", update_interval="1ba")
    trainer = Trainer(
        model,
        data,
        "6ba",
        optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
        algorithms=[swa],
        seed=0,
        device="cpu",
    )
    assert trainer.state.train_dataloader is data  # the Trainer puts its loader on the State
    trainer.fit()
    with_loader = [m.running_mean.clone() for m in trainer.state.model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    expected = _bn_statistics_of_a_pass(copy.deepcopy(trainer.state.model), data)
    for got, (want, _) in zip(with_loader, expected, strict=True):
        torch.testing.assert_close(got, want)
    model = _model()
    trainer = Trainer(
        model,
        data,
        "6ba",
        optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
        seed=0,
        device="cpu",
        algorithms=[SWA(swa_start="2ba", swa_end="6ba", update_interval="1ba")],
    )
    trainer.state.train_dataloader = None  # a State without the loader (one built by hand)
    message = (
        "SWA: no batches for the batch-norm pass (give bn_dataloader=, or a Trainer that puts train_dataloader "
        "on its State); the mean keeps the last snapshot's batch-norm statistics"
    )
    with pytest.warns(UserWarning, match=f"^{re.escape(message)}$") as record:
        caller = line_that_called_into(trainer_module.__file__, trainer.fit)
    assert (record[0].filename, record[0].lineno) == caller  # the call into the Trainer, not a line of SWA's


def test_the_batch_norm_pass_reads_bn_dataloader_when_given():
    data = _batches(6)
    other = [(3 * x + 1, y) for x, y in _batches(3, seed=7)]  # other batches, of other statistics
    trainer = _train(SWA(swa_start="2ba", swa_end="6ba", update_interval="1ba", bn_dataloader=other), "6ba", data)
    norms = [m for m in trainer.state.model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    for m, (mean, var) in zip(norms, _bn_statistics_of_a_pass(copy.deepcopy(trainer.state.model), other), strict=True):
        torch.testing.assert_close(m.running_mean, mean)
        torch.testing.assert_close(m.running_var, var)


def test_an_epoch_interval_takes_a_snapshot_at_each_epoch_end_from_swa_start():
    data = _batches(3)
    before = _Params()
    swa = SWA(swa_start="1ep", swa_end="4ep", update_interval="1ep", bn_dataloader=data)
    trainer = _train(swa, "4ep", data, before=[before])
    assert swa.num_averaged == 4  # epoch ends 1 to 4
    mean = [torch.stack(ps).mean(0) for ps in zip(*(before.seen[i] for i in (2, 5, 8, 11)), strict=True)]
    for got, want in zip(trainer.state.model.parameters(), mean, strict=True):
        torch.testing.assert_close(got, want)


def test_the_end_of_training_loads_the_mean_when_swa_end_is_not_reached():
    data = _batches(4)
    before = _Params()
    swa = SWA(swa_start="0.5dur", swa_end="1.0dur", update_interval="1ba", bn_dataloader=data)
    trainer = _train(swa, "4ba", data, before=[before])
    assert swa.num_averaged == 3  # batches 2, 3, 4
    swa = SWA(swa_start="2ba", swa_end="50ba", update_interval="1ba", bn_dataloader=data)
    trainer = _train(swa, "4ba", data, before=[before := _Params()])
    assert swa.num_averaged == 3
    mean = [torch.stack(ps).mean(0) for ps in zip(*before.seen[1:], strict=True)]
    for got, want in zip(trainer.state.model.parameters(), mean, strict=True):
        torch.testing.assert_close(got, want)


def test_a_run_that_ends_before_swa_start_is_left_alone_with_a_warning():
    reference = Trainer(_model(), _batches(3), "3ba", seed=0, device="cpu")
    reference.fit()
    message = "SWA: training ended before swa_start='20ba'; nothing was averaged"
    with pytest.warns(UserWarning, match=f"^{re.escape(message)}$") as record:
        trainer = Trainer(
            _model(), _batches(3), "3ba", seed=0, device="cpu", algorithms=[SWA(swa_start="20ba", swa_end="30ba")]
        )
        caller = line_that_called_into(trainer_module.__file__, trainer.fit)
    # the line that called into the Trainer, however deep its engine calls SWA
    assert (record[0].filename, record[0].lineno) == caller
    expected = reference.state.model.state_dict()
    assert all(torch.equal(v, expected[k]) for k, v in trainer.state.model.state_dict().items())


@pytest.mark.parametrize("strategy", ["linear", "cos"])
def test_schedule_swa_lr_anneals_to_swa_lr_over_anneal_steps_snapshots(strategy):
    after = _Params()
    swa = SWA(
        swa_start="2ba",
        swa_end="9ba",
        update_interval="2ba",
        schedule_swa_lr=True,
        anneal_strategy=strategy,
        anneal_steps=3,
        swa_lr=0.01,
        bn_dataloader=_batches(),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # SWALR, made after this batch's optimizer step, is not warned about
        _train(swa, "10ba", after=[after])
    shape = (lambda t: t) if strategy == "linear" else (lambda t: (1 - math.cos(math.pi * t)) / 2)
    expected, k = [], 0
    for batch in range(1, 11):
        if batch in (2, 4, 6, 8):  # snapshots while averaging (the last, at 9, ends it)
            k += 1
        if batch == 9:
            k += 1
        t = min(1.0, k / 3)
        expected.append(0.01 * shape(t) + 0.1 * (1 - shape(t)))
    assert after.lrs == pytest.approx(expected)


def test_only_swalrs_warning_about_its_first_step_is_silenced(monkeypatch):
    """SWALR is made mid-run, after that batch's optimizer step, and warns that it was stepped
    first: SWA silences that warning and no other the schedule gives."""
    from algorithms.swa import swa as swa_module

    class Noisy(swa_module.SWALR):
        def step(self, *args, **kwargs):
            warnings.warn("another warning from the schedule", UserWarning, stacklevel=2)
            return super().step(*args, **kwargs)

    monkeypatch.setattr(swa_module, "SWALR", Noisy)
    swa = SWA(swa_start="2ba", swa_end="5ba", update_interval="1ba", schedule_swa_lr=True, bn_dataloader=_batches())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _train(swa, "6ba")
    messages = [str(w.message) for w in caught]
    assert "another warning from the schedule" in messages
    assert not [m for m in messages if "lr_scheduler.step()" in m]


def test_without_swa_lr_the_schedule_keeps_the_rate_at_swa_start():
    after = _Params()
    _train(
        SWA(swa_start="2ba", swa_end="9ba", update_interval="1ba", schedule_swa_lr=True, bn_dataloader=_batches()),
        after=[after],
    )
    assert after.lrs == pytest.approx([0.1] * 10)


def test_the_suggested_values_take_six_snapshots_in_the_reference_runs_four_epochs():
    data = _batches(23, size=2)
    swa = SWA(swa_start="0.7dur", swa_end="0.97dur", update_interval="5ba", bn_dataloader=data)
    _train(swa, "4ep", data)
    assert swa.num_averaged == 6  # batches 65, 70, ..., 90
    defaults = SWA(bn_dataloader=data)  # Composer's '1ep': one snapshot in the same run
    _train(defaults, "4ep", data)
    assert defaults.num_averaged == 1


class _Capture(Algorithm):
    """Keeps ``algo.state_dict()`` and a copy of the weights at one batch's end."""

    def __init__(self, algo, batch):
        self.algo, self.batch, self.saved, self.params = algo, batch, None, None

    def match(self, event, state):
        return event is Event.BATCH_END and state.timestamp.batch == self.batch

    def apply(self, event, state, logger=None):
        self.saved = self.algo.state_dict()
        self.params = [p.detach().clone() for p in state.model.parameters()]


def test_state_dict_keeps_the_mean_count_and_schedule_and_a_fresh_swa_resumes_them():
    data = _batches()

    def make():
        return SWA(
            swa_start="2ba", swa_end="9ba", update_interval="1ba", schedule_swa_lr=True, swa_lr=0.05, bn_dataloader=data
        )

    swa = make()
    capture = _Capture(swa, 5)
    trainer = _train(swa, "6ba", data, after=[capture])
    saved = capture.saved
    assert {k: saved[k] for k in ("num_averaged", "step_counter", "swa_started", "swa_completed")} == {
        "num_averaged": 4,
        "step_counter": 4,
        "swa_started": True,
        "swa_completed": False,
    }
    assert saved["swa_scheduler"]["_step_count"] == 5  # SWALR's own first step, then one per snapshot
    fresh = make()
    fresh.load_state_dict(saved)
    again = fresh.state_dict()
    assert again.keys() == saved.keys() and again["swa_scheduler"] == saved["swa_scheduler"]
    assert all(torch.equal(again["swa_model"][k], v) for k, v in saved["swa_model"].items())
    # its next snapshot is the mean of five: the four saved and the model's weights now
    state = trainer.state
    state.timestamp.batch = 6
    fresh.apply(Event.BATCH_END, state)
    assert fresh.num_averaged == 5
    names = [n for n, _ in state.model.named_parameters()]
    for name, p, w in zip(names, fresh.swa_model.parameters(), state.model.parameters(), strict=True):
        torch.testing.assert_close(p, saved["swa_model"][name] + (w - saved["swa_model"][name]) / 5)
    assert not any(p.requires_grad for p in fresh.swa_model.parameters())  # a copy without gradients
    assert SWA().state_dict()["swa_model"] is None
    # a state without SWA's keys (a checkpoint whose algorithm state was left out) starts it afresh
    fresh.load_state_dict({})
    assert (
        fresh.state_dict()
        == SWA().state_dict()
        == {
            "swa_model": None,
            "swa_scheduler": None,
            "num_averaged": 0,
            "step_counter": 0,
            "swa_started": False,
            "swa_completed": False,
        }
    )
    with pytest.raises(ValueError, match=r"unknown key\(s\) 'snapshots'"):
        fresh.load_state_dict({"snapshots": 3})


def test_a_resumed_swa_that_ends_before_its_next_snapshot_loads_the_checkpoints_mean():
    data = _batches()
    swa = SWA(swa_start="2ba", swa_end="9ba", update_interval="1ba", bn_dataloader=data)
    capture = _Capture(swa, 5)
    trainer = _train(swa, "6ba", data, after=[capture])
    fresh = SWA(swa_start="2ba", swa_end="9ba", update_interval="1ba", bn_dataloader=data)
    fresh.load_state_dict(capture.saved)
    fresh.apply(Event.FIT_END, trainer.state)  # the run ends before fresh has taken a snapshot of its own
    mean = capture.saved["swa_model"]
    for name, p in trainer.state.model.named_parameters():
        assert torch.equal(p, mean[name]), name
    assert fresh.swa_model is None and fresh.state_dict()["swa_completed"]


def test_the_batch_norm_pass_reads_the_input_at_input_key():
    g = torch.Generator().manual_seed(3)
    data = [
        {"label": torch.randint(0, 3, (8,), generator=g), "image": torch.randn(8, 3, 7, 7, generator=g)}
        for _ in range(4)
    ]
    model = _model()
    swa = SWA(swa_start="2ba", swa_end="4ba", update_interval="1ba", input_key="image")
    trainer = Trainer(
        model,
        data,
        "4ba",
        optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
        algorithms=[swa],
        input_key="image",
        target_key="label",
        seed=0,
        device="cpu",
    )
    trainer.fit()
    norms = [m for m in trainer.state.model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    pairs = [(b["image"], b["label"]) for b in data]
    for m, (mean, var) in zip(norms, _bn_statistics_of_a_pass(copy.deepcopy(trainer.state.model), pairs), strict=True):
        torch.testing.assert_close(m.running_mean, mean)
        torch.testing.assert_close(m.running_var, var)


@pytest.mark.parametrize("count", [0, 2])
def test_schedule_swa_lr_refuses_a_trainer_without_exactly_one_optimizer(count):
    model = _model()
    state = Trainer(model, _batches(1), "1ba", device="cpu").state
    state.optimizers = tuple(torch.optim.SGD(model.parameters(), lr=0.1) for _ in range(count))
    state.timestamp.batch = 1
    swa = SWA(swa_start="1ba", swa_end="5ba", update_interval="1ba", schedule_swa_lr=True)
    message = f"schedule_swa_lr=True: SWA anneals one optimizer's rate, the Trainer has {count}"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        swa.apply(Event.BATCH_END, state)


NOT_UNDERSTOOD = "duration 'later' is not understood — write e.g. '2ep', '100ba', '512sp', '65536tok' or '0.5dur'"
NOT_A_RATE = "must be None or a number in (0, inf)"
NOT_A_STEP_COUNT = "must be an integer in [1, inf)"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(swa_start="later"), f"swa_start='later': {NOT_UNDERSTOOD}"),
        (dict(swa_end="later"), f"swa_end='later': {NOT_UNDERSTOOD}"),
        (dict(swa_start="100sp"), "swa_start='100sp': give it in 'dur' or 'ep' or 'ba', e.g. '0.5dur'"),
        (dict(swa_end="9ep"), "swa_start='0.7dur', swa_end='9ep': swa_end must be in swa_start's unit"),
        (dict(swa_end="0.5dur"), "swa_start='0.7dur', swa_end='0.5dur': swa_end must come after swa_start"),
        (dict(swa_end="0.7dur"), "swa_start='0.7dur', swa_end='0.7dur': swa_end must come after swa_start"),
        (dict(update_interval="0.1dur"), "update_interval='0.1dur': give it in 'ba' or 'ep', e.g. '10ba'"),
        (dict(update_interval="0ba"), "update_interval='0ba': must be at least one batch or epoch"),
        (dict(schedule_swa_lr="yes"), "schedule_swa_lr='yes': must be True or False"),
        (dict(anneal_strategy="step"), "anneal_strategy='step': must be 'linear' or 'cos'"),
        (dict(anneal_strategy=3), "anneal_strategy=3: must be 'linear' or 'cos'"),
        (dict(anneal_steps=0), f"anneal_steps=0: {NOT_A_STEP_COUNT}"),
        (dict(anneal_steps=True), f"anneal_steps=True: {NOT_A_STEP_COUNT}"),
        (dict(anneal_steps=2.0), f"anneal_steps=2.0: {NOT_A_STEP_COUNT}"),
        (dict(swa_lr=-0.1), f"swa_lr=-0.1: {NOT_A_RATE}"),
        (dict(swa_lr=0), f"swa_lr=0: {NOT_A_RATE}"),
        (dict(swa_lr=math.inf), f"swa_lr=inf: {NOT_A_RATE}"),
        (dict(swa_lr=True), f"swa_lr=True: {NOT_A_RATE}"),
        (dict(swa_lr="0.1"), f"swa_lr='0.1': {NOT_A_RATE}"),
    ],
)
def test_bad_arguments_are_refused_naming_the_argument(kwargs, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        SWA(**kwargs)


def test_the_defaults_are_composers_constructor():
    """The card: Composer's SWA(swa_start='0.7dur', swa_end='0.97dur', update_interval='1ep',
    schedule_swa_lr=False, anneal_strategy='linear', anneal_steps=10, swa_lr=None), with input_key and
    bn_dataloader for the batch-norm pass."""
    assert repr(SWA()) == (
        "SWA(swa_start='0.7dur', swa_end='0.97dur', update_interval='1ep', schedule_swa_lr=False, "
        "anneal_strategy='linear', anneal_steps=10, swa_lr=None, input_key=0)"
    )
    assert SWA(swa_lr=1).swa_lr == 1 and SWA(swa_lr=0.5, anneal_steps=1).anneal_steps == 1


def test_anneal_strategy_takes_composers_spellings():
    assert SWA(anneal_strategy="cosine").anneal_strategy == "cos"
    assert SWA(anneal_strategy="LIN").anneal_strategy == "linear"


def test_it_reports_its_snapshots_and_the_mean_loaded_once():
    swa = SWA(swa_start="5ba", swa_end="8ba", update_interval="1ba")
    trainer = _train(swa)
    assert trainer.method_log.records["SWA"]["activity"] == {
        "snapshots_averaged": swa.num_averaged,
        "averages_loaded": 1,
    }
    assert swa.num_averaged == 4 and "num_averaged" not in trainer.method_log.records["SWA"]["hyperparameters"]


def test_a_run_that_ends_before_swa_start_did_not_act():
    with pytest.warns(UserWarning, match="nothing was averaged"):
        trainer = _train(SWA(swa_start="20ba", swa_end="30ba", update_interval="1ba"))
    assert not trainer.method_log.acted("SWA")


# -- the mean is kept in fp32 whatever the model's dtype ------------------------------------------


class _Snapshots(Algorithm):
    """At each BATCH_END: the model's weights (put before SWA in the list) and SWA's mean while it has
    one (after SWA)."""

    def __init__(self, swa):
        self.swa, self.weights, self.means = swa, [], []

    def match(self, event, state):
        return event is Event.BATCH_END

    def apply(self, event, state, logger=None):
        self.weights.append([p.detach().clone() for p in state.model.parameters()])
        mean = self.swa.swa_model
        self.means.append(None if mean is None else [p.detach().clone() for p in mean.parameters()])


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_a_low_precision_models_mean_is_kept_in_fp32_and_matches_the_exact_mean(precision):
    """The reference is the mean of the recorded (exactly representable) snapshots in float64. The fp32
    running mean rounds each update (a lerp: a difference, a product and a sum, about 3 units of
    2**-24 of the largest weight) and earlier errors shrink by n / (n + 1), so after N snapshots it is
    within 3 * N * 2**-24 * max|W|; the test allows twice that. A mean kept in bf16 or fp16 rounds
    each 1 / (n + 1) share of a snapshot to 8 or 11 bits and misses by far more. Loaded at the end,
    the mean is the fp32 mean cast to the model's dtype (within one rounding of the exact mean)."""
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 4)
    g = torch.Generator().manual_seed(3)
    n = 40
    data = torch.utils.data.TensorDataset(
        torch.randn(n * 8, 16, generator=g), torch.randint(0, 4, (n * 8,), generator=g)
    )
    swa = SWA(swa_start="1ba", swa_end=f"{n}ba", update_interval="1ba")
    before, after = _Snapshots(swa), _Snapshots(swa)
    trainer = Trainer(
        model,
        torch.utils.data.DataLoader(data, batch_size=8),
        "1ep",
        optimizer=torch.optim.SGD(model.parameters(), lr=0.5),
        algorithms=[before, swa, after],
        precision=precision,
        seed=0,
        device="cpu",
    )
    trainer.fit()
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    assert model.weight.dtype is dtype and swa.num_averaged == n
    snapshots = before.weights
    # the running mean after n - 1 snapshots (batches 1 to n - 1), before the last batch loads it
    taken = n - 1
    for i, mean in enumerate(after.means[taken - 1]):
        want = torch.stack([w[i].double() for w in snapshots[:taken]]).mean(0)
        tolerance = 6 * taken * 2**-24 * want.abs().max().item()
        error = (mean.double() - want).abs().max().item()
        assert error <= tolerance, (error, tolerance)
        assert mean.dtype is torch.float32
    # the mean of all n snapshots, loaded into the model in its dtype
    for i, p in enumerate(model.parameters()):
        want = torch.stack([w[i].double() for w in snapshots]).mean(0)
        ulp = torch.finfo(dtype).eps * want.abs().max().item()
        torch.testing.assert_close(p.double(), want, rtol=0, atol=ulp)
