"""Target utilities: one-hot, smoothing and mixing of classification targets.

Every method that changes targets (label smoothing, CutMix, MixUp, ...) builds on these, so a
target has one meaning across the library:

- **class indices**: an integer tensor ``(N, ...)``, one class per example (or per pixel or
  token: ``(N, H, W)``, ``(N, L)``). A negative index (such as PyTorch's ``ignore_index=-100``)
  marks a position to ignore: its one-hot vector is all zeros, as in Composer's
  ``ensure_targets_one_hot``.
- **class distributions**: a tensor ``(N, C, ...)`` with the classes on ``dim=1``, the layout of
  the logits: one-hot, smoothed or mixed probabilities, in any dtype (an integer one-hot too).

Given the logits' shape the target's shape tells the two apart, as Composer's
``infer_target_type`` does: a target of the logits' shape is a distribution, one with the class
dimension missing holds indices. Without it, integer targets are indices and floating targets
are distributions.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch

from .core.parameters import Real

__all__ = [
    "SMOOTHING",
    "check_class_range",
    "class_indices",
    "interpolate_targets",
    "is_class_indices",
    "mixed_targets",
    "one_hot",
    "smooth_targets",
    "target_dtype",
    "to_distribution",
]


def is_class_indices(target: torch.Tensor, logits_shape: Sequence[int] | None = None) -> bool:
    """Whether ``target`` holds class indices (``True``) or class distributions (``False``).

    Raises ``ValueError`` when ``target`` fits neither against logits of ``logits_shape``, or
    holds indices that are not integers.
    """
    if logits_shape is None:
        indices = not target.is_floating_point()
    else:
        logits_shape = tuple(logits_shape)
        if target.shape == logits_shape:
            return False
        index_shape = logits_shape[:1] + logits_shape[2:]
        if target.shape != index_shape:
            raise ValueError(
                f"target: shape {tuple(target.shape)} fits logits of shape {logits_shape} "
                f"neither as class indices {index_shape} nor as class probabilities "
                f"{logits_shape}"
            )
        indices = True
    if indices and (target.is_floating_point() or target.is_complex() or target.dtype == torch.bool):
        raise ValueError(f"target: class indices must be an integer tensor, got {target.dtype}")
    return indices


def one_hot(target: torch.Tensor, num_classes: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Class indices ``(N, ...)`` to one-hot vectors ``(N, num_classes, ...)`` (classes on ``dim=1``).

    A negative index gets an all-zero vector: the position is ignored.
    """
    if target.ndim == 0:
        raise ValueError(
            f"target: class indices need a batch dimension, (N, ...), got a single index "
            f"{target.item()!r} of shape (); pass target.reshape(1) for a batch of one"
        )
    check_class_range(target, num_classes)
    classes = torch.arange(num_classes, device=target.device).view(1, -1, *([1] * (target.ndim - 1)))
    return (target.unsqueeze(1) == classes).to(dtype)


def to_distribution(
    target: torch.Tensor, num_classes: int, dtype: torch.dtype, logits_shape: Sequence[int] | None = None
) -> torch.Tensor:
    """Class indices to one-hot vectors, or class distributions passed through, in ``dtype``."""
    if is_class_indices(target, logits_shape):
        return one_hot(target, num_classes, dtype)
    if target.ndim < 2 or target.shape[1] != num_classes:
        raise ValueError(
            f"target: probabilities must have {num_classes} classes on dim 1, "
            f"(N, {num_classes}, ...), got shape {tuple(target.shape)}"
        )
    return target.to(dtype)


def check_class_range(target: torch.Tensor, num_classes: int) -> None:
    """Class indices below ``num_classes`` (negative ones are ignored positions).

    On the CPU the check costs nothing extra and raises ``ValueError``; on an accelerator it is
    an asynchronous device assert, so the hot path never waits for the device.
    """
    in_range = target < num_classes
    if target.device.type == "cpu":
        if not bool(in_range.all()):
            bad = target[~in_range].unique()[:5].tolist()
            raise ValueError(f"target: class indices must be in [0, {num_classes}) (negative: ignored), found {bad}")
    else:
        torch._assert_async(in_range.all(), f"target: class indices must be below {num_classes}")


def class_indices(target: torch.Tensor, logits_shape: Sequence[int]) -> torch.Tensor:
    """The class of each position: the indices themselves, or a distribution's most likely class."""
    return target if is_class_indices(target, logits_shape) else target.argmax(dim=1)


@functools.cache
def target_dtype(input_dtype: torch.dtype) -> torch.dtype:
    """Targets are at least float32, so mixed distributions still sum to 1 for half inputs."""
    return torch.promote_types(input_dtype, torch.float32) if input_dtype.is_floating_point else torch.float32


#: Label smoothing's one hyperparameter, declared once for every form that smooths.
SMOOTHING = Real(low=0, high=1, note="The weight of the uniform distribution in the target.")


def smooth_targets(
    target: torch.Tensor,
    smoothing: float,
    num_classes: int,
    dtype: torch.dtype = torch.float32,
    logits_shape: Sequence[int] | None = None,
) -> torch.Tensor:
    """``(1 - smoothing) * dist(target) + smoothing / num_classes``, classes on ``dim=1``.

    An ignored position (a negative class index) stays all zeros, so it still adds nothing to a
    cross-entropy against the result; Composer's ``smooth_labels`` gives it ``smoothing / C``
    in every class instead.
    """
    SMOOTHING.check("smoothing", smoothing)
    smoothing = float(smoothing)
    looked_up = lookup_smoothed(target, smoothing, num_classes, dtype, logits_shape)
    if looked_up is not None:
        return looked_up
    if not is_class_indices(target, logits_shape):
        dist = to_distribution(target, num_classes, dtype, logits_shape)
        return dist.mul(1.0 - smoothing).add_(smoothing / num_classes)
    dist = one_hot(target, num_classes, dtype)
    return dist * (1.0 - smoothing) + (target >= 0).unsqueeze(1).to(dtype) * (smoothing / num_classes)


_GATHER_INDICES = frozenset({torch.int64, torch.int32})


def lookup_smoothed(
    target: torch.Tensor,
    smoothing: float,
    num_classes: int,
    dtype: torch.dtype,
    logits_shape: Sequence[int] | None = None,
) -> torch.Tensor | None:
    """:func:`smooth_targets` of class indices ``(N,)`` on the CPU as one gather of each class's
    smoothed row (:func:`smoothed_rows`), which writes the result once; ``None`` where that does
    not apply (other targets, devices or shapes, more than 1024 classes, a negative or
    out-of-range index), and the formula is to be used. ``smoothing`` must be checked already.
    """
    if (
        target.ndim != 1
        or not target.is_cpu
        or target.dtype not in _GATHER_INDICES
        or (logits_shape is not None and (len(logits_shape) != 2 or logits_shape[0] != target.shape[0]))
    ):
        return None
    rows = smoothed_rows(num_classes, smoothing, dtype)
    if rows is None:
        return None
    try:
        return rows.index_select(0, target)  # the CPU checks every index
    except (IndexError, RuntimeError):  # a negative (ignored) or out-of-range index: the formula handles it
        return None


@functools.lru_cache(maxsize=8)
def smoothed_rows(num_classes: int, smoothing: float, dtype: torch.dtype) -> torch.Tensor | None:
    """The smoothed target of each class, row ``c`` for class ``c``, as :func:`smooth_targets`
    computes it; ``None`` for more than 1024 classes.

    Smoothing class indices ``(N,)`` on the CPU is then one gather of these rows, which writes
    the result once; kept for the last few settings (at most 8 MiB each), never handed out.
    """
    if num_classes > 1024:
        return None
    classes = torch.arange(num_classes)
    return one_hot(classes, num_classes, dtype) * (1.0 - smoothing) + (smoothing / num_classes)


def interpolate_targets(
    target: torch.Tensor,
    target_perm: torch.Tensor,
    mixing: float,
    num_classes: int | None = None,
    dtype: torch.dtype = torch.float32,
    logits_shape: Sequence[int] | None = None,
) -> torch.Tensor:
    """``(1 - mixing) * dist(target) + mixing * dist(target_perm)``, classes on ``dim=1``.

    ``num_classes`` defaults to ``logits_shape[1]``, else to the classes of a distribution
    target; it is required for class indices without ``logits_shape``.
    """
    if num_classes is None:
        if logits_shape is not None:
            num_classes = logits_shape[1]
        elif target.is_floating_point() and target.ndim >= 2:
            num_classes = target.shape[1]
        else:
            raise ValueError("num_classes is required when targets are class indices")
    a = to_distribution(target, num_classes, dtype, logits_shape)
    b = to_distribution(target_perm, num_classes, dtype, logits_shape)
    return a * (1.0 - mixing) + b * mixing


def mixed_targets(
    target: torch.Tensor,
    target_perm: torch.Tensor,
    *,
    own_weight: float | None = None,
    partner_weight: float | None = None,
    num_classes: int | None = None,
    smoothing: float = 0.0,
    dtype: torch.dtype | None = None,
    logits_shape: Sequence[int] | None = None,
) -> torch.Tensor:
    """The soft targets of a mixed batch, smoothed: ``w * soft(target) + (1 - w) * soft(target_perm)``
    with ``soft(y) = (1 - smoothing) * dist(y) + smoothing / num_classes`` and ``w`` the weight of
    each example's own target, classes on ``dim=1``: what timm's ``Mixup(label_smoothing=...)``
    and torchvision v2's ``CutMix``/``MixUp`` hand the loss.

    Give the weight by what it weighs, as a keyword: ``own_weight`` (CutMix's ``area``, MixUp's
    ``1 - mixing``) or ``partner_weight`` (MixUp's ``mixing``, CutMix's ``1 - area``), not both;
    the results of :func:`~algorithms.functional.cutmix_batch` and
    :func:`~algorithms.functional.mixup_batch` carry both, as ``.own_weight`` and
    ``.partner_weight``.

    Args:
        target: the batch's targets: class indices ``(N, ...)`` (a negative index is an ignored
            position, all zeros, as in :func:`smooth_targets`) or class probabilities
            ``(N, C, ...)`` in any dtype; not modified.
        target_perm: the partners' targets, ``target[indices]``, as the mixing forms return them.
        own_weight: the weight of each example's own target, in ``[0, 1]``: a Python or NumPy
            scalar (anything ``float()`` takes).
        partner_weight: the weight of the partner's target, ``1 - own_weight``.
        num_classes: the number of classes ``C``; by default ``logits_shape[1]``, else the classes
            of probability targets. Required for class indices without ``logits_shape``.
        smoothing: label smoothing's weight of the uniform distribution, in ``[0, 1]``.
        dtype: the result's dtype; by default float32, or the probability targets' dtype where
            that is wider (float64), so that half-precision targets still sum to 1.
        logits_shape: the logits' shape, to tell class indices from probabilities by shape (as
            :func:`is_class_indices`); without it integer targets are indices.

    Returns:
        Class probabilities ``(N, C, ...)`` on the targets' device; each sums to 1 over ``dim=1``
        wherever both targets are (ignored positions weigh nothing).

    Example::

        >>> import torch
        >>> from algorithms.functional import mixed_targets
        >>> mixed_targets(torch.tensor([0]), torch.tensor([1]), own_weight=0.75, num_classes=4, smoothing=0.5).tolist()
        [[0.5, 0.25, 0.125, 0.125]]
    """
    if (own_weight is None) == (partner_weight is None):
        raise ValueError(
            f"own_weight={own_weight!r}, partner_weight={partner_weight!r}: give one of them, by keyword "
            "(CutMix's area is the own weight, MixUp's mixing the partner weight)"
        )
    name, weight = ("own_weight", own_weight) if own_weight is not None else ("partner_weight", partner_weight)
    try:
        weight = float(weight)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(f"{name}={weight!r}: a number in [0, 1] is needed") from None
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"{name}={weight!r}: must be in [0, 1]")
    partner = weight if own_weight is None else 1.0 - weight
    SMOOTHING.check("smoothing", smoothing)
    smoothing = float(smoothing)
    if num_classes is None:
        if logits_shape is not None:
            num_classes = int(logits_shape[1])
        elif target.is_floating_point() and target.ndim >= 2:
            num_classes = target.shape[1]
        else:
            raise ValueError("num_classes is required when targets are class indices (or pass logits_shape)")
    if dtype is None:
        dtype = target_dtype(target.dtype) if target.is_floating_point() else torch.float32
    if target_perm.shape != target.shape:
        raise ValueError(
            f"target_perm: the partners' targets must have the targets' shape {tuple(target.shape)}, "
            f"got {tuple(target_perm.shape)}"
        )
    if smoothing:
        target = smooth_targets(target, smoothing, num_classes, dtype, logits_shape)
        target_perm = smooth_targets(target_perm, smoothing, num_classes, dtype, logits_shape)
        logits_shape = target.shape  # both are distributions now
    return interpolate_targets(target, target_perm, partner, num_classes, dtype, logits_shape)
