"""Label smoothing with the mixing methods, in both of their modes and in either order.

The claim the cards make: LabelSmoothing composes with CutMix and MixUp. By definition the loss
is then the cross entropy against the smoothed mixed distribution,
``(1 - s) * (w * onehot(y) + (1 - w) * onehot(y[partners])) + s / C``; with
``interpolate_loss=True`` it is ``w * CE(smooth(y)) + (1 - w) * CE(smooth(y[partners]))``, which is
the same number, because the cross entropy is linear in its target. Neither may depend on the
order the algorithms are listed in. The draws are replayed from the generator each class is
defined to use.
"""

from __future__ import annotations

import pytest
import torch
from test_cutmix import _cutmix_definition
from test_cutmix import _replay_draws as _cutmix_draws
from test_mixup import _replay_draws as _mixup_draws
from trainer_support import Observed, image_batches, image_classifier, one_hot, replayed_generator, soft_cross_entropy

from algorithms import CutMix, LabelSmoothing, MixUp
from algorithms.core import Trainer

SMOOTHING, CLASSES = 0.3, 4


def _kept_weight_and_partners(cls, generator, x, y):
    if cls is CutMix:
        partners, bbox = _cutmix_draws(generator, len(y), x.shape[-2], x.shape[-1], 1.0, False)
        return _cutmix_definition(x, partners, bbox)[1], partners
    partners, m = _mixup_draws(generator, len(y), 1.0)
    return 1.0 - m, partners


@pytest.mark.parametrize("smoothing_first", [False, True], ids=["smoothing-after", "smoothing-first"])
@pytest.mark.parametrize("interpolate_loss", [False, True], ids=["mix-targets", "interpolate-loss"])
@pytest.mark.parametrize("cls", [CutMix, MixUp], ids=lambda c: c.__name__)
def test_the_loss_is_against_the_smoothed_mixed_target(cls, interpolate_loss, smoothing_first):
    batches, seen = image_batches(n=3, k=CLASSES), Observed()
    mixing = cls(alpha=1.0, interpolate_loss=interpolate_loss)
    algorithms = [LabelSmoothing(SMOOTHING), mixing] if smoothing_first else [mixing, LabelSmoothing(SMOOTHING)]
    Trainer(image_classifier(CLASSES), batches, "3ba", algorithms=[*algorithms, seen], seed=1, device="cpu").fit()
    generator, differs = replayed_generator(cls, seed=1), []
    for (x, y), out, loss in zip(batches, seen.outputs, seen.losses, strict=True):
        kept, partners = _kept_weight_and_partners(cls, generator, x, y)
        mixed = kept * one_hot(y, CLASSES) + (1 - kept) * one_hot(y[partners], CLASSES)
        expected = soft_cross_entropy(out, (1 - SMOOTHING) * mixed + SMOOTHING / CLASSES)
        torch.testing.assert_close(loss, expected.float())
        differs.append(not torch.allclose(expected, soft_cross_entropy(out, mixed)))
    assert all(differs), "the smoothed and the unsmoothed loss must differ, or the test could not see the smoothing"


@pytest.mark.parametrize("interpolate_loss", [False, True])
@pytest.mark.parametrize("cls", [CutMix, MixUp], ids=lambda c: c.__name__)
def test_a_method_after_the_mixing_that_changes_the_batch_size_is_refused(cls, interpolate_loss):
    from algorithms.core import Algorithm, Event

    class DropHalf(Algorithm):  # what a row-selecting method listed after the mixing does
        def match(self, event, state):
            return event is Event.AFTER_DATALOADER

        def apply(self, event, state, logger=None):
            state.batch = tuple(item[: item.shape[0] // 2] for item in state.batch)

    with pytest.raises(
        ValueError,
        match=rf"^{cls.__name__}: the batch has 3 targets (before|at) the loss but 6 "
        rf"examples were mixed after the data loader: a method listed after "
        rf"{cls.__name__} changed the batch size \(list it before {cls.__name__}\)$",
    ):
        Trainer(
            image_classifier(),
            image_batches(n=1),
            "1ba",
            algorithms=[cls(interpolate_loss=interpolate_loss), DropHalf()],
            seed=0,
            device="cpu",
        ).fit()
