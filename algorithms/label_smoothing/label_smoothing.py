"""Label smoothing: train towards a mix of the one-hot label and the uniform distribution.

Szegedy et al., "Rethinking the Inception Architecture for Computer Vision", CVPR 2016.
"""

from __future__ import annotations

from typing import Any

import torch

from .._mixing import check_batch_sizes
from ..core.algorithm import Algorithm
from ..core.event import Event
from ..core.outputs import model_logits
from ..core.parameters import Parameters
from ..core.state import State
from ..targets import SMOOTHING, lookup_smoothed, smooth_targets, target_dtype

__all__ = ["LabelSmoothing", "smooth_labels"]

PARAMETERS = Parameters(smoothing=SMOOTHING)


def smooth_labels(logits: Any, target: torch.Tensor, smoothing: float = 0.1) -> torch.Tensor:
    """``(1 - smoothing) * onehot(target) + smoothing / C`` over ``C`` classes.

    Accepts what ``composer.functional.smooth_labels`` accepts: class indices with the class
    dimension of the logits (``dim=1``) missing, or one-hot or probability targets of the logits'
    own shape. It also accepts a language model's token targets: logits ``(N, T, C)`` with the
    classes last and integer indices ``(N, T)``, where those indices do not also fit the classes
    on ``dim=1`` (where both fit, ``dim=1`` is taken, as Composer takes it).

    Args:
        logits: model outputs ``(N, C, ...)``, classes on ``dim=1``, or ``(N, ..., C)`` with the
            classes last for class indices ``(N, ...)``; only their shape and dtype are used. A
            model's whole output is taken too: a dict with ``"logits"`` or an object with
            ``.logits`` (a Hugging Face ``ModelOutput``); anything else is a one-line TypeError.
        target: class indices ``(N, ...)`` (``(N,)`` for classification, ``(N, H, W)`` for
            segmentation, ``(N, T)`` for tokens), or one-hot or probability targets of the logits'
            shape (classes on ``dim=1``) in any dtype; not modified. A negative index (such as
            ``-100``) marks an ignored position, whose smoothed target stays all zeros.
        smoothing: weight of the uniform distribution, in ``[0, 1]``.

    Returns:
        Smoothed class probabilities of the logits' shape, float32 (float64 for float64 logits),
        on the target's device.

    Example::

        >>> import torch
        >>> from algorithms.functional import smooth_labels
        >>> smooth_labels(torch.zeros(1, 4), torch.tensor([2]), smoothing=0.5).tolist()
        [[0.125, 0.125, 0.625, 0.125]]
    """
    PARAMETERS.check(smoothing=smoothing)
    smoothing = float(smoothing)
    logits = model_logits(logits, "smooth_labels: logits")
    if logits.ndim == 2:  # classification: class indices (N,) are looked up where they can be
        looked_up = lookup_smoothed(target, smoothing, logits.shape[1], target_dtype(logits.dtype), logits.shape)
        if looked_up is not None:
            return looked_up
    if _classes_last(logits, target):  # a language model's (N, T, C) and (N, T): smooth with classes on dim 1
        return smooth_labels(logits.movedim(-1, 1), target, smoothing).movedim(1, -1).contiguous()
    check_batch_sizes(logits, target)
    if logits.ndim < 2:
        raise ValueError(f"logits: need classes on dim 1, (N, C, ...), got shape {tuple(logits.shape)}")
    return smooth_targets(target, smoothing, logits.shape[1], target_dtype(logits.dtype), logits.shape)


def _classes_last(logits: torch.Tensor, target: torch.Tensor) -> bool:
    """Whether ``target`` holds class indices for ``logits`` with the classes on their last
    dimension, and not also for the classes on ``dim=1``."""
    return (
        logits.ndim >= 3
        and not target.is_floating_point()
        and target.shape == logits.shape[:-1]
        and target.shape != logits.shape[:1] + logits.shape[2:]
    )


class LabelSmoothing(Algorithm):
    """Label smoothing as a training-loop algorithm.

    Before the loss it replaces the target with :func:`smooth_labels`; after the loss it puts
    the original target back, so metrics see the true labels.

    Args:
        smoothing: weight of the uniform distribution, in ``[0, 1]``.
        target_key: where the targets are in the batch.

    It counts ``batches_smoothed``, the batches whose targets it smoothed (none with
    ``smoothing=0``, which leaves them as they are); none means it did not act.

    Example::

        >>> from algorithms import LabelSmoothing
        >>> from algorithms.core import Trainer
        >>> import torch
        >>> batches = [(torch.randn(8, 5), torch.randint(0, 3, (8,)))]
        >>> Trainer(torch.nn.Linear(5, 3), batches, "1ep", algorithms=[LabelSmoothing(0.1)]).fit()
    """

    needs_loss_fn = True
    activity = {"batches_smoothed": "batches whose targets were smoothed"}

    def __init__(self, smoothing: float = 0.1, target_key: int | str = 1):
        PARAMETERS.check(smoothing=smoothing)
        self.smoothing = float(smoothing)
        self.target_key = target_key
        self.reset()

    def reset(self) -> None:
        """Forget the target saved between ``BEFORE_LOSS`` and ``AFTER_LOSS`` and the generator."""
        super().reset()
        self._original: torch.Tensor | None = None

    def match(self, event: Event, state: State) -> bool:
        return event in (Event.BEFORE_LOSS, Event.AFTER_LOSS)

    def apply(self, event: Event, state: State, logger: Any | None = None) -> None:
        if event is Event.BEFORE_LOSS:
            self._original = state.batch_get_item(self.target_key)
            state.batch_set_item(self.target_key, smooth_labels(state.outputs, self._original, self.smoothing))
            if self.smoothing > 0:
                self.report(logger, "batches_smoothed")
        elif self._original is not None:
            state.batch_set_item(self.target_key, self._original)
            self._original = None
