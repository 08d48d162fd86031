"""Progressive Resizing: train on smaller images first and grow them back to full size, a speed-up
for image models from fast.ai (Howard and Gugger, "Deep Learning for Coders with fastai and
PyTorch", 2020, chapter 7; fast.ai's DAWNBench entries, 2018).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from .._mixing import randint
from ..core.algorithm import Algorithm
from ..core.event import Event
from ..core.parameters import Boolean, Choice, Integer, Parameters, Real, Rule
from ..core.state import State

__all__ = ["ProgressiveResizing", "resize_batch"]

PARAMETERS = Parameters(
    Rule(
        lambda delay_fraction, finetune_fraction: delay_fraction + finetune_fraction <= 1,
        "together more than all of training; they must add up to at most 1",
    ),
    mode=Choice(
        choices=("resize", "crop"),
        fold_case=True,
        note="'resize' interpolates (nearest neighbour); 'crop' takes a random window.",
    ),
    initial_scale=Real(low=0, high=1, low_open=True, note="The scale of the images at the start."),
    finetune_fraction=Real(low=0, high=1, note="The fraction of training at the end run at full size."),
    delay_fraction=Real(low=0, high=1, note="The fraction of training at the start run at initial_scale."),
    size_increment=Integer(low=1, note="The width is rounded to a multiple of this many pixels."),
    resize_targets=Boolean(note="Resize a dense target (a segmentation mask) alike."),
)
#: resize_batch's own argument.
_SCALE_FACTOR = Real(low=0, low_open=True, note="The factor both sides are multiplied by; 1 or more leaves the batch.")


def resize_batch(
    input: torch.Tensor,
    target: Any,
    scale_factor: float,
    mode: str = "resize",
    resize_targets: bool = False,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, Any]:
    """Shrink a batch of images by ``scale_factor``, and a dense target alike, as
    ``composer.functional.resize_batch``.

    The output is ``int(scale_factor * H)`` by ``int(scale_factor * W)`` pixels. ``mode="resize"``
    is ``F.interpolate(input, scale_factor=scale_factor, mode="nearest",
    recompute_scale_factor=False)``; ``mode="crop"`` takes one window of that size from every image
    of the batch, its top-left corner uniform over the positions where it fits. A ``scale_factor`` of
    1 or more returns ``input`` and ``target`` themselves: nothing is enlarged.

    Args:
        input: images ``(N, C, H, W)``, of any dtype; not modified.
        target: the batch's target, of any kind; not modified. Returned as it is unless
            ``resize_targets``.
        scale_factor: the factor both sides are multiplied by, ``> 0``.
        mode: ``"resize"`` (nearest-neighbour interpolation) or ``"crop"`` (a random window).
        resize_targets: resize a dense target as well: a mask ``(N, H', W')`` or a tensor
            ``(N, C', H', W')``, by nearest-neighbour interpolation (values kept exactly, integer
            masks included) or by the crop's window, moved to the target's own size.
        generator: torch generator for the crop's corner (default: torch's global one).

    Returns:
        ``(input, target)``: the resized images, in the input's dtype, device and memory format,
        and the target, resized alike when ``resize_targets`` and otherwise the same object.

    Example::

        >>> import torch
        >>> from algorithms.functional import resize_batch
        >>> images, masks = torch.rand(2, 3, 32, 32), torch.zeros(2, 32, 32, dtype=torch.long)
        >>> x, y = resize_batch(images, masks, scale_factor=0.5, resize_targets=True)
        >>> tuple(x.shape), tuple(y.shape), y.dtype
        ((2, 3, 16, 16), (2, 16, 16), torch.int64)
        >>> x, _ = resize_batch(images, None, scale_factor=0.75, mode="crop",
        ...                     generator=torch.Generator().manual_seed(0))
        >>> tuple(x.shape)
        (2, 3, 24, 24)
    """
    PARAMETERS.check(mode=mode, resize_targets=resize_targets)
    mode = mode.lower()
    _SCALE_FACTOR.check("scale_factor", scale_factor)
    check_images(input)
    if resize_targets:
        _check_dense_target(target)
    if scale_factor >= 1:
        return input, target
    height, width = input.shape[-2:]
    new_height, new_width = _scaled_size(height, width, scale_factor, "images")
    if resize_targets:
        target_size = _scaled_size(target.shape[-2], target.shape[-1], scale_factor, "target")
    if mode == "resize":
        out = _nearest(input, scale_factor)
        if resize_targets:
            target = (
                _nearest(target.unsqueeze(1), scale_factor)[:, 0]
                if target.ndim == 3
                else _nearest(target, scale_factor)
            )
        return out, target
    # One window for the whole batch, its corner drawn on the host (no device sync).
    top = randint(0, height - new_height + 1, generator)
    left = randint(0, width - new_width + 1, generator)
    out = _window(input, top, left, new_height, new_width)
    if resize_targets:
        target_height, target_width = target.shape[-2:]
        # The same region of a target of another size: the corner scaled to its size, kept inside it.
        target_top = min(top * target_height // height, target_height - target_size[0])
        target_left = min(left * target_width // width, target_width - target_size[1])
        target = _window(target, target_top, target_left, *target_size)
    return out, target


def check_images(input: Any) -> None:
    if not isinstance(input, torch.Tensor) or input.ndim != 4:
        shape = tuple(input.shape) if isinstance(input, torch.Tensor) else type(input).__name__
        raise ValueError(f"input: Progressive Resizing needs an image batch (N, C, H, W), got {shape}")


def _check_dense_target(target: Any) -> None:
    if not isinstance(target, torch.Tensor) or target.ndim not in (3, 4):
        got = f"shape {tuple(target.shape)}" if isinstance(target, torch.Tensor) else type(target).__name__
        raise ValueError(
            f"target: resize_targets=True needs a dense target, a mask (N, H, W) or a tensor "
            f"(N, C, H, W), got {got}; leave resize_targets=False for class targets"
        )


def _scaled_size(height: int, width: int, scale_factor: float, what: str) -> tuple[int, int]:
    """``(int(scale_factor * height), int(scale_factor * width))``, the size ``F.interpolate`` makes."""
    size = (math.floor(float(height) * scale_factor), math.floor(float(width) * scale_factor))
    if min(size) == 0:
        raise ValueError(
            f"scale_factor={scale_factor!r}: shrinks the {what} of {height} x {width} pixels to "
            f"{size[0]} x {size[1]}; each side needs at least one pixel"
        )
    return size


def _nearest(x: torch.Tensor, scale_factor: float) -> torch.Tensor:
    """Nearest-neighbour resize of ``(N, C, H, W)``; a dtype the kernel lacks goes through float64,
    which holds every integer up to 2**53 exactly."""
    if x.is_floating_point() or x.dtype == torch.uint8:
        return F.interpolate(x, scale_factor=scale_factor, mode="nearest", recompute_scale_factor=False)
    return F.interpolate(x.double(), scale_factor=scale_factor, mode="nearest", recompute_scale_factor=False).to(
        x.dtype
    )


def _window(x: torch.Tensor, top: int, left: int, height: int, width: int) -> torch.Tensor:
    """A copy (in ``x``'s memory format) of ``x[..., top:top + height, left:left + width]``."""
    return x[..., top : top + height, left : left + width].clone(memory_format=torch.preserve_format)


def scheduled_scale(progress: float, initial_scale: float, delay_fraction: float, finetune_fraction: float) -> float:
    """The scale of the images at ``progress`` (the fraction of training done): ``initial_scale``
    until ``delay_fraction``, then linear up to 1 at ``1 - finetune_fraction``, then 1."""
    ramp_end = 1 - finetune_fraction
    if progress < delay_fraction:
        done = 0.0
    elif progress >= ramp_end:  # also where the ramp has no length (delay + fine-tune = 1)
        done = 1.0
    else:
        done = (progress - delay_fraction) / (ramp_end - delay_fraction)
    return initial_scale + (1 - initial_scale) * done


def pinned_width(width: int, scale: float, size_increment: int) -> int:
    """``width * scale`` rounded to the nearest multiple of ``size_increment`` (Python's ``round``,
    ties to even), and at least one increment."""
    return max(round(width * scale / size_increment) * size_increment, size_increment)


def _factor_for_width(width: int, new_width: int) -> float:
    """The scale factor that makes ``new_width`` of ``width``: ``new_width / width``, one floating-point
    step larger where ``int(width * factor)`` would fall one pixel short."""
    factor = new_width / width
    if math.floor(float(width) * factor) < new_width:
        factor = math.nextafter(factor, math.inf)
    return factor


class ProgressiveResizing(Algorithm):
    """Progressive Resizing as a training-loop algorithm: after the data loader,
    :func:`resize_batch` shrinks the batch to the scale the schedule gives at ``state.progress()``.

    The scale is ``initial_scale`` for the first ``delay_fraction`` of training, grows linearly to
    1 by ``1 - finetune_fraction``, and stays 1 for the last ``finetune_fraction``; the new width is
    that scale times the width, rounded to a multiple of ``size_increment``, and the height is
    scaled by the same factor.

    Args:
        mode: ``"resize"`` (nearest-neighbour interpolation) or ``"crop"`` (a random window).
        initial_scale: the scale of the images at the start, in ``(0, 1]``.
        finetune_fraction: the fraction of training at the end run at full size, in ``[0, 1]``.
        delay_fraction: the fraction of training at the start run at ``initial_scale``, in ``[0, 1]``;
            with ``finetune_fraction`` at most 1.
        size_increment: the width is rounded to a multiple of this many pixels, ``>= 1``.
        resize_targets: resize a dense target (a segmentation mask) alike.
        input_key: where the images are in the batch.
        target_key: where the target is in the batch (read only when ``resize_targets``).

    It counts ``batches_resized``, the batches it gave fewer pixels; none means it did not act.

    Example::

        >>> import torch
        >>> from algorithms import ProgressiveResizing
        >>> from algorithms.core import Trainer
        >>> model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.AdaptiveAvgPool2d(1),
        ...                             torch.nn.Flatten(), torch.nn.Linear(4, 10))
        >>> batches = [(torch.randn(8, 3, 32, 32), torch.randint(0, 10, (8,))) for _ in range(4)]
        >>> Trainer(model, batches, "1ep", algorithms=[ProgressiveResizing()], seed=0).fit()
    """

    activity = {"batches_resized": "batches shrunk"}

    def __init__(
        self,
        mode: str = "resize",
        initial_scale: float = 0.5,
        finetune_fraction: float = 0.2,
        delay_fraction: float = 0.5,
        size_increment: int = 4,
        resize_targets: bool = False,
        input_key: int | str = 0,
        target_key: int | str = 1,
    ):
        PARAMETERS.check(
            mode=mode,
            initial_scale=initial_scale,
            finetune_fraction=finetune_fraction,
            delay_fraction=delay_fraction,
            size_increment=size_increment,
            resize_targets=resize_targets,
        )
        self.mode = mode.lower()
        self.initial_scale = initial_scale
        self.finetune_fraction = finetune_fraction
        self.delay_fraction = delay_fraction
        self.size_increment = size_increment
        self.resize_targets = resize_targets
        self.input_key = input_key
        self.target_key = target_key

    def match(self, event: Event, state: State) -> bool:
        return event is Event.AFTER_DATALOADER

    def apply(self, event: Event, state: State, logger: Any | None = None) -> None:
        images = state.batch_get_item(self.input_key)
        check_images(images)
        target = state.batch_get_item(self.target_key) if self.resize_targets else None
        width = images.shape[-1]
        scale = scheduled_scale(state.progress(), self.initial_scale, self.delay_fraction, self.finetune_fraction)
        factor = _factor_for_width(width, pinned_width(width, scale, self.size_increment))
        resized, target = resize_batch(
            images, target, factor, self.mode, self.resize_targets, generator=self.generator(state)
        )
        state.batch_set_item(self.input_key, resized)
        if self.resize_targets:
            state.batch_set_item(self.target_key, target)
        if resized.shape != images.shape:
            self.report(logger, "batches_resized")
