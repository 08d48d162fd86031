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
