"""Target utilities: class indices to distributions, and mixtures of targets.

Every method that changes targets (label smoothing, CutMix, MixUp, ...) builds on these, so a
target has one meaning across the library.
"""

from __future__ import annotations

import torch

__all__ = ["check_class_range", "interpolate_targets", "target_dtype", "to_distribution"]


def to_distribution(target: torch.Tensor, num_classes: int, dtype: torch.dtype) -> torch.Tensor:
    """Class indices ``(N,)`` to one-hot rows, or probability rows ``(N, C)`` passed through."""
    if target.is_floating_point():
        if target.ndim != 2 or target.shape[1] != num_classes:
            raise ValueError(f"target: probabilities must have shape (N, {num_classes}), got "
                             f"{tuple(target.shape)}")
        return target.to(dtype)
    if target.ndim != 1:
        raise ValueError(f"target: class indices must have shape (N,), got {tuple(target.shape)}")
    check_class_range(target, num_classes)
    return torch.nn.functional.one_hot(target.long(), num_classes).to(dtype)


def check_class_range(target: torch.Tensor, num_classes: int) -> None:
    """Class indices in ``[0, num_classes)``.

    On the CPU the check costs nothing extra and raises ``ValueError``; on an accelerator it is
    an asynchronous device assert, so the hot path never waits for the device.
    """
    in_range = (target >= 0) & (target < num_classes)
    if target.device.type == "cpu":
        if not bool(in_range.all()):
            bad = target[~in_range].unique()[:5].tolist()
            raise ValueError(f"target: class indices must be in [0, {num_classes}), found {bad}")
    else:
        torch._assert_async(in_range.all(), f"target: class indices must be in [0, {num_classes})")


def target_dtype(input_dtype: torch.dtype) -> torch.dtype:
    """Targets are at least float32, so mixed distributions still sum to 1 for half inputs."""
    return torch.promote_types(input_dtype, torch.float32) if input_dtype.is_floating_point \
        else torch.float32


def interpolate_targets(target: torch.Tensor, target_perm: torch.Tensor, mixing: float,
                        num_classes: int | None = None,
                        dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``(1 - mixing) * dist(target) + mixing * dist(target_perm)``, rows summing to 1."""
    if num_classes is None:
        if not target.is_floating_point():
            raise ValueError("num_classes is required when targets are class indices")
        num_classes = target.shape[1]
    a = to_distribution(target, num_classes, dtype)
    b = to_distribution(target_perm, num_classes, dtype)
    return a * (1.0 - mixing) + b * mixing
