"""Layer freezing's own semantics, checked against its schedule and Composer's tests.

The scheduled fraction is 0 up to freeze_start and freeze_level * (t - freeze_start) /
(1 - freeze_start) after it; the first int(fraction * (L - 1)) of the L leaf layers with
parameters are frozen: requires_grad False, out of the optimizers' groups and state, unchanged by
later steps. Composer's tests check that at 10 of 100 epochs with freeze_start=0.5 the optimizer's
groups are unchanged and that at 80 of 100 with freeze_start=0.05 the earliest parameters leave
them; both are re-expressed here.
"""

from __future__ import annotations

import logging
import re

import pytest
import torch

import algorithms.functional as cf
from algorithms import LayerFreezing
from algorithms.core import Algorithm, Event, Trainer
from algorithms.layer_freezing.layer_freezing import freeze_schedule
from algorithms.models import resnet20


def _conv_model():
    """Composer's SimpleConvModel's shape: two convolutions with batch norm, then two linear layers."""
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3),
        torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(),
        torch.nn.Conv2d(8, 8, 3),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(8, 8),
        torch.nn.ReLU(),
        torch.nn.Linear(8, 4),
    )


def _leaf_layers(model):
    """Counted here: modules without children that hold parameters, in definition order."""
    return [m for m in model.modules() if not list(m.children()) and list(m.parameters())]


def _expected_fraction(t, start, level):
    return 0.0 if t <= start else level * (t - start) / (1 - start)


@pytest.mark.parametrize(("start", "level"), [(0.5, 1.0), (0.2, 0.5), (0.0, 1.0), (0.9, 0.75)])
def test_the_depth_follows_the_linear_schedule(start, level):
    model = resnet20(10)
    layers = _leaf_layers(model)
    assert len(layers) == 43  # 21 convolutions (2 in shortcuts), 21 batch norms, the classifier
    for t in (0.0, 0.1, 0.3, 0.5, 0.6, 0.75, 0.9, 1.0):
        depth, fraction = cf.freeze_layers(model, None, t, freeze_start=start, freeze_level=level)
        want = _expected_fraction(t, start, level)
        assert fraction == pytest.approx(want)
        assert depth == int(want * (len(layers) - 1))
        frozen = [not any(p.requires_grad for p in layer.parameters()) for layer in layers]
        assert frozen == [i < depth for i in range(len(layers))]  # the earliest layers, and only those
    assert any(p.requires_grad for p in layers[-1].parameters())  # the classifier never freezes


def test_the_schedules_defaults_and_ends():
    """freeze_start=0.5 and freeze_level=1.0 by default: nothing up to half-way, then linear to all."""
    assert [freeze_schedule(t) for t in (0.0, 0.5, 0.75, 1.0)] == [0.0, 0.0, 0.5, 1.0]
    assert freeze_schedule(1.0, freeze_start=0.0, freeze_level=0.0) == 0.0  # a level of 0 freezes nothing


@pytest.mark.parametrize("model", [torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Flatten()), torch.nn.ReLU()])
def test_a_model_without_parameters_has_no_layers_to_freeze(model):
    assert cf.freeze_layers(model, None, 1.0) == (0, 1.0)


def test_freeze_layers_logs_what_it_froze(caplog):
    model = torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(5)])
    with caplog.at_level(logging.INFO, logger="algorithms.layer_freezing.layer_freezing"):
        cf.freeze_layers(model, None, 0.75, freeze_start=0.5, freeze_level=1.0)
    assert [r.getMessage() for r in caplog.records] == [
        "layer freezing (freeze_start=0.5, freeze_level=1.0): 2 of 5 layers frozen (50.0 % scheduled)"
    ]


def test_frozen_parameters_leave_the_optimizers_and_lose_their_gradients():
    model = _conv_model()
    opts = [torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), torch.optim.Adam(model.parameters(), lr=0.1)]
    for opt in opts:  # give them state to lose
        model.zero_grad()
        model(torch.randn(2, 3, 8, 8)).sum().backward()
        opt.step()
    layers = _leaf_layers(model)
    depth, _ = cf.freeze_layers(model, opts, 0.75, freeze_start=0.5, freeze_level=1.0)
    assert depth == int(0.5 * (len(layers) - 1)) == 2
    frozen = {id(p) for layer in layers[:depth] for p in layer.parameters()}
    assert frozen and all(p.grad is None and not p.requires_grad for p in model.parameters() if id(p) in frozen)
    for opt in opts:
        held = {id(p) for group in opt.param_groups for p in group["params"]}
        assert held == {id(p) for p in model.parameters()} - frozen
        assert not frozen & {id(p) for p in opt.state}
    # a single optimizer, not in a sequence, is accepted too
    single = torch.optim.SGD(model.parameters(), lr=0.1)
    cf.freeze_layers(model, single, 1.0)
    assert len(single.param_groups[0]["params"]) == len(list(layers[-1].parameters()))


def test_composers_no_freeze_and_with_freeze_cases():
    model = _conv_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.99)
    before = [list(group["params"]) for group in opt.param_groups]
    cf.freeze_layers(model, opt, current_duration=10 / 100, freeze_start=0.5, freeze_level=1.0)
    assert [list(group["params"]) for group in opt.param_groups] == before
    cf.freeze_layers(model, opt, current_duration=80 / 100, freeze_start=0.05, freeze_level=1.0)
    first = list(_leaf_layers(model)[0].parameters())
    assert not any(p is q for p in first for q in opt.param_groups[0]["params"])
    assert len(opt.param_groups[0]["params"]) < len(before[0])


class _Frozen(Algorithm):
    """Per epoch end (after LayerFreezing), which parameters are frozen and their values."""

    def __init__(self):
        self.epochs = []

    def match(self, event, state):
        return event in (Event.EPOCH_END, Event.FIT_END)

    def apply(self, event, state, logger=None):
        self.epochs.append([(not p.requires_grad, p.detach().clone()) for p in state.model.parameters()])


@pytest.mark.parametrize("level", [1.0, 0.5])
def test_in_the_trainer_layers_freeze_epoch_by_epoch_and_then_stay_unchanged(level):
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(8, 3, 8, 8, generator=g), torch.randint(0, 4, (8,), generator=g)) for _ in range(3)]
    model = _conv_model()
    probe = _Frozen()
    trainer = Trainer(
        model,
        data,
        "4ep",
        algorithms=[LayerFreezing(freeze_start=0.25, freeze_level=level), probe],
        optimizer=lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=0.1),
        device="cpu",
        seed=0,
    )
    trainer.fit()
    layers = _leaf_layers(model)
    counts = [len(list(layer.parameters())) for layer in layers]
    depths = [int(_expected_fraction(epoch / 4, 0.25, level) * (len(layers) - 1)) for epoch in range(1, 5)]
    assert depths == ([0, 1, 2, 4] if level == 1.0 else [0, 0, 1, 2])
    for depth, seen in zip(depths, probe.epochs[:4], strict=True):
        assert sum(frozen for frozen, _ in seen) == sum(counts[:depth])
    # The Trainer's optimizer holds exactly the parameters still training.
    held = {id(p) for group in trainer.state.optimizer.param_groups for p in group["params"]}
    assert held == {id(p) for p in model.parameters() if p.requires_grad}
    # What epoch 2 froze (momentum and weight decay would move it) is the same at the end.
    for (frozen, value), (_, final) in zip(probe.epochs[1], probe.epochs[-1], strict=True):
        if frozen:
            assert torch.equal(value, final)
    assert any(not frozen for frozen, _ in probe.epochs[1])
    unfrozen_moved = [
        not torch.equal(v, f)
        for (frozen, v), (_, f) in zip(probe.epochs[1], probe.epochs[-1], strict=True)
        if not frozen
    ]
    assert any(unfrozen_moved)


def test_the_class_runs_at_the_end_of_each_epoch_only():
    algo = LayerFreezing()
    assert [event for event in Event if algo.match(event, None)] == [Event.EPOCH_END]


def test_it_changes_the_weights_the_run_ends_with():
    g = torch.Generator().manual_seed(2)
    data = [(torch.randn(8, 3, 8, 8, generator=g), torch.randint(0, 4, (8,), generator=g)) for _ in range(2)]
    runs = []
    for algos in ([], [LayerFreezing(freeze_start=0.25)]):
        t = Trainer(_conv_model(), data, "4ep", algorithms=algos, device="cpu", seed=0)
        t.fit()
        runs.append([p.detach() for p in t.state.model.parameters()])
    assert any(not torch.allclose(a, b) for a, b in zip(*runs, strict=True))


START = "must be a number in [0, 1)"
LEVEL = "must be a number in [0, 1]"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"freeze_start": 1.0}, f"freeze_start=1.0: {START}"),
        ({"freeze_start": -0.1}, f"freeze_start=-0.1: {START}"),
        ({"freeze_start": "0.5"}, f"freeze_start='0.5': {START}"),
        ({"freeze_start": True}, f"freeze_start=True: {START}"),
        ({"freeze_level": 1.5}, f"freeze_level=1.5: {LEVEL}"),
        ({"freeze_level": float("nan")}, f"freeze_level=nan: {LEVEL}"),
        ({"freeze_level": "1.0"}, f"freeze_level='1.0': {LEVEL}"),
        ({"freeze_level": True}, f"freeze_level=True: {LEVEL}"),
    ],
)
def test_bad_hyperparameters_fail_naming_the_argument(kwargs, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        LayerFreezing(**kwargs)
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        cf.freeze_layers(torch.nn.Linear(2, 2), None, 0.5, **kwargs)


@pytest.mark.parametrize("duration", [1.5, -0.25, True, "0.5"])
def test_a_duration_outside_the_run_is_refused(duration):
    message = f"current_duration={duration!r}: must be a number in [0, 1]"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        cf.freeze_layers(torch.nn.Linear(2, 2), None, duration)
