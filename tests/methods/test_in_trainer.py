"""Each method class through the Trainer: events in order, and the model sees mixed batches."""

from __future__ import annotations

import pytest
import torch

from algorithms import CutMix, MixUp
from algorithms.core import Algorithm, Event, Trainer


class Recorder(Algorithm):
    """Records what the model saw and what the loss was given."""

    def __init__(self):
        self.inputs, self.targets, self.events = [], [], []

    def match(self, event, state):
        return True

    def apply(self, event, state, logger=None):
        self.events.append(event)
        if event is Event.BEFORE_FORWARD:
            self.inputs.append(state.batch_get_item(0).clone())
        if event is Event.AFTER_LOSS:
            self.targets.append(state.batch_get_item(1).clone())


def _batches(n=2, bs=6, k=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(bs, 3, 8, 8, generator=g), torch.randint(0, k, (bs,), generator=g))
            for _ in range(n)]


def _model(k=4):
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.AdaptiveAvgPool2d(1),
                               torch.nn.Flatten(), torch.nn.Linear(4, k))


def _fit(algo, batches, **kw):
    rec = Recorder()
    trainer = Trainer(_model(), batches, "2ba", algorithms=[algo, rec], seed=1, device="cpu", **kw)
    trainer.fit()
    return trainer, rec


EXPECTED_EVENTS = [Event.INIT, Event.FIT_START, Event.EPOCH_START,
                   *Event.batch_events(), *Event.batch_events(), Event.EPOCH_END, Event.FIT_END]


@pytest.mark.parametrize("algo", [CutMix(alpha=1.0), MixUp(alpha=1.0)], ids=["cutmix", "mixup"])
def test_mixing_methods_mix_the_batch_the_model_sees(algo):
    batches = _batches()
    trainer, rec = _fit(algo, batches)
    assert rec.events == EXPECTED_EVENTS
    assert len(rec.inputs) == 2
    for seen, (x, _) in zip(rec.inputs, batches, strict=True):
        assert seen.shape == x.shape and not torch.equal(seen, x)
    for target, (_, y) in zip(rec.targets, batches, strict=True):
        assert target.shape == (len(y), 4)  # mixed soft targets reached the loss
        torch.testing.assert_close(target.sum(1), torch.ones(len(y)))
        assert not torch.equal(target.argmax(1), y) or (target.max(1).values < 1).any()
    # the engine's trace shows the method ran at the events it claims
    ran = {t.event for t in trainer.engine.trace if algo.name in t.algorithms}
    assert ran == {Event.AFTER_DATALOADER, Event.BEFORE_LOSS}


@pytest.mark.parametrize("algo_cls", [CutMix, MixUp])
def test_interpolate_loss_mixes_losses_not_targets(algo_cls):
    batches = _batches()
    trainer, rec = _fit(algo_cls(alpha=1.0, interpolate_loss=True), batches)
    for target, (_, y) in zip(rec.targets, batches, strict=True):
        assert torch.equal(target, y)  # targets untouched
    ran = {t.event for t in trainer.engine.trace if algo_cls.__name__ in t.algorithms}
    assert ran == {Event.AFTER_DATALOADER, Event.AFTER_LOSS}


def test_mixup_interpolated_loss_matches_definition():
    """With interpolate_loss, the loss equals (1-m) CE(out, y) + m CE(out, y_perm)."""
    batches = _batches(n=1)
    seen = {}

    class Spy(Algorithm):
        def match(self, event, state):
            return event in (Event.AFTER_FORWARD, Event.AFTER_LOSS)

        def apply(self, event, state, logger=None):
            if event is Event.AFTER_FORWARD:
                seen["out"] = state.outputs.detach().clone()
            else:
                seen["loss"] = state.loss.detach().clone()

    algo = MixUp(alpha=1.0, interpolate_loss=True)
    Trainer(_model(), batches, "1ba", algorithms=[algo, Spy()], seed=3).fit()
    m, y, y_perm = algo._weight_perm, algo._target, algo._target_perm
    ce = torch.nn.functional.cross_entropy
    expected = (1 - m) * ce(seen["out"], y) + m * ce(seen["out"], y_perm)
    torch.testing.assert_close(seen["loss"], expected)


def test_seeded_runs_repeat():
    batches = _batches()
    torch.manual_seed(0)
    a = Trainer(_model(), batches, "2ba", algorithms=[CutMix()], seed=5)
    a.fit()
    torch.manual_seed(0)
    b = Trainer(_model(), batches, "2ba", algorithms=[CutMix()], seed=5)
    b.fit()
    for p, q in zip(a.state.model.parameters(), b.state.model.parameters(), strict=True):
        assert torch.equal(p, q)
