"""What the mixing methods (CutMix, MixUp) share through ``algorithms._mixing``: each runs only
at its own events, so calling ``apply`` at any other event changes nothing."""

from __future__ import annotations

import pytest
from trainer_support import image_batches, image_classifier

from algorithms import CutMix, MixUp
from algorithms.core import Algorithm, Trainer


class _ApplyEverywhere(Algorithm):
    """At every event ``algo`` does not match, applies it anyway and records the events at which
    that changed the batch, the outputs or the loss."""

    def __init__(self, algo):
        self.algo, self.changed, self.tried = algo, [], 0

    def match(self, event, state):
        return not self.algo.match(event, state)

    def apply(self, event, state, logger=None):
        before = (state.batch, state.outputs, state.loss)
        self.algo.apply(event, state, logger)
        self.tried += 1
        if any(a is not b for a, b in zip(before, (state.batch, state.outputs, state.loss), strict=True)):
            self.changed.append(event)


@pytest.mark.parametrize("interpolate_loss", [False, True])
@pytest.mark.parametrize("cls", [CutMix, MixUp])
def test_apply_changes_nothing_at_events_the_method_does_not_match(cls, interpolate_loss):
    algo = cls(interpolate_loss=interpolate_loss)
    probe = _ApplyEverywhere(algo)
    Trainer(image_classifier(), image_batches(n=1), "1ba", algorithms=[algo, probe], seed=0, device="cpu").fit()
    assert probe.tried > 10 and probe.changed == []
