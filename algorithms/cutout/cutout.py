"""CutOut: zero random square holes in every image of a batch, a regularizer for image classifiers.

DeVries and Taylor, "Improved Regularization of Convolutional Neural Networks with Cutout", 2017.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import torch

from .._pil import check_image_type, from_pil, is_pil_image, to_pil
from ..core.algorithm import Algorithm
from ..core.event import Event
from ..core.parameters import Boolean, Integer, Parameters, Real
from ..core.state import State

if TYPE_CHECKING:
    import PIL.Image

__all__ = ["CutOut", "cutout_batch"]

PARAMETERS = Parameters(
    num_holes=Integer(low=0, note="How many holes each image gets."),
    length=Real(
        low=0, high=1, low_open=True, note="A hole's side as a fraction of the image's shorter side (not in pixels)."
    ),
    uniform_sampling=Boolean(note="Widen the centres' range by half a hole, so every pixel is equally likely cut."),
)


def cutout_batch(
    input: torch.Tensor | PIL.Image.Image,
    num_holes: int = 1,
    length: float = 0.5,
    uniform_sampling: bool = False,
    generator: torch.Generator | None = None,
    inplace: bool = False,
) -> torch.Tensor | PIL.Image.Image:
    """Zero ``num_holes`` square holes in each image, as ``composer.functional.cutout_batch``.

    Each image draws its own holes. A hole's side is ``int(length * min(H, W))`` pixels and its
    centre is uniform over the image; the part of a hole outside the image is clipped away.

    Args:
        input: one image ``(C, H, W)`` or a batch ``(N, C, H, W)``, of any dtype, or a PIL image
            (of any mode, cut as its pixel values); not modified unless ``inplace``.
        num_holes: how many holes each image gets, ``>= 0``.
        length: the side of a hole as a fraction of the image's shorter side, in ``(0, 1]``.
        uniform_sampling: draw centres from a range widened by half a hole on every side, so every
            pixel is equally likely to be cut; otherwise centres are uniform inside the image, as in
            the paper, and the border is cut less often.
        generator: torch generator for every random draw (default: torch's global one).
        inplace: zero the holes of ``input`` itself and return it (Composer's ``cutout_batch`` has
            no such option; not for a PIL image); otherwise ``input`` is not modified.

    Returns:
        A new tensor (``input`` itself with ``inplace=True``) with the input's shape, dtype, device
        and memory format, zero inside the holes and equal to the input elsewhere; for a PIL image,
        a new PIL image of its mode and size.

    Example::

        >>> import torch
        >>> from algorithms.functional import cutout_batch
        >>> out = cutout_batch(torch.ones(2, 3, 8, 8), num_holes=1, length=0.5,
        ...                    generator=torch.Generator().manual_seed(0))
        >>> out.shape, bool((out == 0).any()), bool((out == 1).any())
        (torch.Size([2, 3, 8, 8]), True, True)
    """
    PARAMETERS.check(num_holes=num_holes, length=length, uniform_sampling=uniform_sampling)
    if is_pil_image(input):
        if inplace:
            raise ValueError("inplace=True: a PIL image is not written in place; pass a tensor, or inplace=False")
        return to_pil(cutout_batch(from_pil(input, "input"), num_holes, length, uniform_sampling, generator), input)
    check_image_type(input, "input")
    if input.ndim not in (3, 4):
        raise ValueError(
            f"input: CutOut needs an image (C, H, W) or a batch (N, C, H, W), got shape {tuple(input.shape)}"
        )
    batch = input if input.ndim == 4 else input.unsqueeze(0)
    n, height, width = batch.shape[0], batch.shape[-2], batch.shape[-1]
    side = int(length * min(height, width))
    centres = hole_centres(n, height, width, num_holes, side, uniform_sampling, generator)
    bits = _SAME_SIZE_INTEGER.get(batch.element_size())
    # torch refuses an in-place write to an inference tensor outside inference mode, but not through
    # a view of another dtype: such a batch takes the fill, which raises torch's error.
    refused = inplace and batch.is_inference() and not torch.is_inference_mode_enabled()
    if bits is not None and not batch.requires_grad and not refused:
        # One pass over the batch: its bits ANDed with a keep mask, (N, 1, H, W), of an integer dtype
        # of the same size, every bit set outside the holes and none inside. A pixel in a hole is
        # then an exact zero whatever it held, where a multiply by 0 would turn an inf or NaN into NaN.
        keep = _mask(centres, n, height, width, side, batch.device, bits).unsqueeze(1)
        words = batch.view(bits)
        out = words.bitwise_and_(keep) if inplace else (words & keep).view(batch.dtype)
    else:  # a batch that requires grad (the fill is differentiable), or a 16-byte element
        hole = _mask(centres, n, height, width, side, batch.device, torch.bool).logical_not_().unsqueeze(1)
        # out of place, filled in a copy that keeps the batch's memory format (masked_fill does not)
        out = (batch if inplace else batch.clone()).masked_fill_(hole, 0)
    return input if inplace else out if input.ndim == 4 else out.squeeze(0)


# The signed integer dtype of each element size, to view a batch's bits as.
_SAME_SIZE_INTEGER = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def keep_mask(
    n: int,
    height: int,
    width: int,
    num_holes: int,
    length: float,
    uniform_sampling: bool,
    device: torch.device,
    dtype: torch.dtype = torch.bool,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """An ``(n, height, width)`` mask of ``dtype``, zero (false) inside each image's ``num_holes``
    square holes and, outside them, one for a floating dtype, true for bool, and every bit set for
    an integer dtype (-1 when signed), to AND with a batch's bits."""
    side = int(length * min(height, width))
    centres = hole_centres(n, height, width, num_holes, side, uniform_sampling, generator)
    return _mask(centres, n, height, width, side, device, dtype)


def hole_centres(
    n: int,
    height: int,
    width: int,
    num_holes: int,
    side: int,
    uniform_sampling: bool,
    generator: torch.Generator | None = None,
) -> torch.Tensor | None:
    """The centres of each image's holes of ``side`` pixels, drawn on the host generator (no device
    sync): float32 ``(2, n, num_holes, 1)``, the rows' centres of every hole, then the columns' (one
    draw when both ranges are the same), whole numbers; ``None`` where there is no hole to cut."""
    if num_holes == 0 or side == 0:
        return None
    half = side // 2
    low_y, high_y = (-half, height + half) if uniform_sampling else (0, height)
    low_x, high_x = (-half, width + half) if uniform_sampling else (0, width)
    if (low_y, high_y) == (low_x, high_x):
        return torch.randint(low_y, high_y, (2, n, num_holes, 1), generator=generator, dtype=torch.float32)
    return torch.stack(
        [
            torch.randint(low, high, (n, num_holes, 1), generator=generator, dtype=torch.float32)
            for low, high in ((low_y, high_y), (low_x, high_x))
        ]
    )


def _mask(
    centres: torch.Tensor | None, n: int, height: int, width: int, side: int, device: torch.device, dtype: torch.dtype
) -> torch.Tensor:
    """keep_mask's mask for holes of ``side`` pixels at ``centres`` (see hole_centres)."""
    if centres is None:
        return torch.full((n, height, width), _outside_value(dtype), dtype=dtype, device=device)
    centres = centres.to(device, non_blocking=True)
    # A hole centred on c covers pixels c - half .. c - half + side - 1, so pixel p is in it iff
    # |p + shift - c| <= (side - 1) / 2 with shift = half - (side - 1) / 2 (0, or 0.5 for an even side):
    # clamp(|p + shift - c| - (side - 1) / 2, 0, 1) is 0 in the hole and 1 outside it.
    shift, radius = side // 2 - (side - 1) / 2, (side - 1) / 2
    if height == width:
        rows_out, cols_out = _outside(_positions(height, shift, device) - centres, radius, dtype)
    else:
        rows_out = _outside(_positions(height, shift, device) - centres[0], radius, dtype)
        cols_out = _outside(_positions(width, shift, device) - centres[1], radius, dtype)
    # A pixel is kept where its row or its column is outside the hole, and kept by every hole.
    rows_out, cols_out = rows_out.unsqueeze(-1), cols_out.unsqueeze(-2)
    keep = torch.maximum(rows_out, cols_out) if dtype.is_floating_point else rows_out | cols_out
    if centres.shape[2] == 1:
        return keep.squeeze(1)
    if dtype.is_floating_point:
        return keep.amin(dim=1)
    return functools.reduce(torch.bitwise_and, keep.unbind(1))


def _outside_value(dtype: torch.dtype) -> float | bool | int:
    return 1.0 if dtype.is_floating_point else True if dtype == torch.bool else -1


def _positions(size: int, shift: float, device: torch.device) -> torch.Tensor:
    return torch.arange(shift, size + shift, dtype=torch.float32, device=device)


def _outside(offsets: torch.Tensor, radius: float, dtype: torch.dtype) -> torch.Tensor:
    """The outside value of ``dtype`` (see keep_mask) where ``|offset| > radius``, 0 elsewhere
    (offsets and radius are whole or half numbers)."""
    keep = offsets.abs_().sub_(radius).clamp_(0, 1)
    if dtype == torch.float32:
        return keep
    return keep.to(dtype) if dtype.is_floating_point or dtype == torch.bool else keep.to(dtype).neg_()


class CutOut(Algorithm):
    """CutOut as a training-loop algorithm: after the data loader, :func:`cutout_batch` zeroes
    random square holes in each image of the batch; the targets are left as they are.

    Args:
        num_holes: how many holes each image gets, ``>= 0``.
        length: the side of a hole as a fraction of the image's shorter side, in ``(0, 1]``.
        uniform_sampling: sample hole centres so every pixel is equally likely to be cut.
        input_key: where the images are in the batch.

    It counts ``batches_cut``, the batches of images given holes of at least one pixel; none means
    it did not act (``num_holes=0``, or a ``length`` under one pixel of these images).

    Example::

        >>> import torch
        >>> from algorithms import CutOut
        >>> from algorithms.core import Trainer
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(48, 10))
        >>> batches = [(torch.randn(8, 3, 4, 4), torch.randint(0, 10, (8,)))]
        >>> Trainer(model, batches, "1ep", algorithms=[CutOut(length=0.5)], seed=0).fit()
    """

    activity = {"batches_cut": "batches with holes cut"}

    def __init__(
        self, num_holes: int = 1, length: float = 0.5, uniform_sampling: bool = False, input_key: int | str = 0
    ):
        PARAMETERS.check(num_holes=num_holes, length=length, uniform_sampling=uniform_sampling)
        self.num_holes = num_holes
        self.length = length
        self.uniform_sampling = bool(uniform_sampling)
        self.input_key = input_key

    def match(self, event: Event, state: State) -> bool:
        return event is Event.AFTER_DATALOADER

    def apply(self, event: Event, state: State, logger: Any | None = None) -> None:
        images = state.batch_get_item(self.input_key)
        state.batch_set_item(
            self.input_key,
            cutout_batch(images, self.num_holes, self.length, self.uniform_sampling, generator=self.generator(state)),
        )
        if self.num_holes and images.numel() and int(self.length * min(images.shape[-2:])) > 0:
            self.report(logger, "batches_cut")
