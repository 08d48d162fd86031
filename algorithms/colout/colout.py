"""ColOut: drop random rows and columns of every image of a batch, so the network trains on
smaller images; a speed-up for image models from MosaicML's Composer (no paper of its own).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from .._pil import from_pil, is_pil_image, to_pil
from ..core.algorithm import Algorithm
from ..core.event import Event
from ..core.parameters import Choice, Parameters, Real
from ..core.state import State

if TYPE_CHECKING:
    import PIL.Image

__all__ = ["ColOut", "colout_batch"]

PARAMETERS = Parameters(
    p_row=Real(low=0, high=1, high_open=True, note="The fraction of rows to drop."),
    p_col=Real(low=0, high=1, high_open=True, note="The fraction of columns to drop."),
    batch=Choice(
        choices=(True,),
        note="ColOut runs on the batch after the data loader; per-sample, call colout_batch in a dataset transform.",
    ),
    resize_target=Choice(
        choices=("auto", True, False),
        note="Drop the same rows and columns from the target: 'auto' for a target with the images' height and width.",
    ),
)


def colout_batch(
    sample: torch.Tensor | PIL.Image.Image | tuple[torch.Tensor | PIL.Image.Image, Any],
    p_row: float = 0.15,
    p_col: float = 0.15,
    resize_target: bool | str = "auto",
    generator: torch.Generator | None = None,
) -> torch.Tensor | PIL.Image.Image | tuple[torch.Tensor | PIL.Image.Image, Any]:
    """Drop the same random rows and columns from every image of a batch (and from a dense target),
    as ``composer.functional.colout_batch``.

    ``int((1 - p_row) * H)`` of the ``H`` rows and ``int((1 - p_col) * W)`` of the ``W`` columns are
    kept, drawn uniformly without replacement and kept in their order; every image and channel of
    the batch keeps the same ones.

    Args:
        sample: an image ``(C, H, W)`` or a batch ``(N, C, H, W)``, of any dtype, or a PIL image
            (of any mode), or a pair ``(input, target)`` of such an input and its target (a PIL
            target is a mask ``(C, H, W)``); not modified.
        p_row: the fraction of rows to drop, in ``[0, 1)``.
        p_col: the fraction of columns to drop, in ``[0, 1)``.
        resize_target: whether the target of a pair loses the same rows and columns: ``True``
            always (its last two dims must be the input's ``H, W``), ``False`` never, ``'auto'``
            when it is a tensor of three or more dims whose last two are the input's ``H, W`` (a
            segmentation mask ``(N, H, W)``, not class indices ``(N,)``).
        generator: torch generator for every random draw (default: torch's global one).

    Returns:
        For an input alone, the smaller input; for a pair, the pair ``(input, target)`` with the
        target dropped alike or, when it is not resized, the same target object. Each output keeps
        its input's dtype, device and (for channels-last batches) memory format; a PIL image comes
        back as a PIL image of its mode.

    Example::

        >>> import torch
        >>> from algorithms.functional import colout_batch
        >>> images, masks = torch.rand(2, 3, 32, 32), torch.zeros(2, 32, 32, dtype=torch.long)
        >>> x, y = colout_batch((images, masks), p_row=0.25, p_col=0.5,
        ...                     generator=torch.Generator().manual_seed(0))
        >>> tuple(x.shape), tuple(y.shape)
        ((2, 3, 24, 16), (2, 24, 16))
    """
    PARAMETERS.check(p_row=p_row, p_col=p_col, resize_target=resize_target)
    items = sample if isinstance(sample, (tuple, list)) else (sample,)
    if any(is_pil_image(item) for item in items):
        return _colout_pil(sample, items, p_row, p_col, resize_target, generator)
    input, target, is_pair = _unpack(sample)
    if resize_target is True and not is_pair:
        raise ValueError("resize_target=True: the sample has no target to resize; pass (input, target)")
    height, width = input.shape[-2:]
    kept_rows, kept_cols = kept_count(height, p_row, "p_row", "rows"), kept_count(width, p_col, "p_col", "columns")
    rows = kept_indices(height, kept_rows, generator)
    cols = kept_indices(width, kept_cols, generator)
    # One gather of the kept pixels, by their flat index in the H x W plane, drawn on the host and
    # moved with the batch (no device sync).
    flat = (rows[:, None] * width + cols).flatten().to(input.device, non_blocking=True)
    out = _select_pixels(input, flat, len(rows), len(cols))
    if not is_pair:
        return out
    if _should_resize_target(input, target, resize_target):
        target = _select_pixels(target, flat, len(rows), len(cols))
    return out, target


def kept_count(size: int, p: float, name: str, what: str) -> int:
    """How many of ``size`` rows (or columns) ColOut keeps: ``int((1 - p) * size)``, at least one."""
    kept = int((1 - p) * size)
    if kept == 0:
        raise ValueError(
            f"{name}={p!r}: keeps int((1 - {name}) * {size}) = 0 of the {size} {what}; "
            f"use a smaller {name} or larger images"
        )
    return kept


def kept_indices(size: int, kept: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """``kept`` indices of ``range(size)``, uniform without replacement, in increasing order, on the host."""
    return torch.randperm(size, generator=generator)[:kept].sort().values


def _select_pixels(tensor: torch.Tensor, flat: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """``tensor[..., rows, :][..., cols]`` as one ``index_select`` of the flattened last two dims;
    a channels-last batch is gathered as ``(N, H * W, C)`` so that it stays channels-last."""
    if tensor.ndim == 4 and not tensor.is_contiguous() and tensor.is_contiguous(memory_format=torch.channels_last):
        n, c, h, w = tensor.shape
        pixels = tensor.permute(0, 2, 3, 1).reshape(n, h * w, c)
        return pixels.index_select(1, flat).view(n, height, width, c).permute(0, 3, 1, 2)
    lead = tensor.shape[:-2]
    if tensor.dtype == torch.float32 and tensor.device.type == "cpu":
        # torch's CPU index_select along the columns of a 2-D float32 tensor copies whole strided
        # columns: measured on one thread at 1.0x and 1.3x a plain copy of the kept pixels (256x3x32x32,
        # 32x3x224x224), where the gather below takes 2.1x; for the other dtypes it is the slower one.
        return tensor.reshape(-1, tensor.shape[-2] * tensor.shape[-1]).index_select(1, flat).view(*lead, height, width)
    # A gather along the flattened plane with the same indices for every leading position (an
    # expanded view, not a copy): index_select on the last dim would copy one element at a time.
    return tensor.reshape(*lead, -1).gather(-1, flat.expand(*lead, -1)).view(*lead, height, width)


def _colout_pil(
    sample: Any,
    items: tuple[Any, ...] | list[Any],
    p_row: float,
    p_col: float,
    resize_target: bool | str,
    generator: torch.Generator | None,
) -> Any:
    """:func:`colout_batch` of a sample holding PIL images: on their pixel values, each output
    that was a PIL image given back as one of its mode, a target not resized as it was given."""
    tensors = [from_pil(item, "sample") if is_pil_image(item) else item for item in items]
    out = colout_batch(type(items)(tensors) if sample is items else tensors[0], p_row, p_col, resize_target, generator)
    outs = out if sample is items and len(items) == 2 else (out,)
    back = [
        original if result is tensor else to_pil(result, original) if is_pil_image(original) else result
        for original, tensor, result in zip(items, tensors, outs, strict=False)
    ]
    return tuple(back) if len(back) == 2 else back[0]


def _unpack(sample: Any) -> tuple[torch.Tensor, Any, bool]:
    """``(input, target, is_pair)`` from a tensor, or a tuple or list of one or two items."""
    if isinstance(sample, (tuple, list)):
        if len(sample) not in (1, 2):
            raise ValueError(
                f"sample: a tensor or an (input, target) pair, got a {type(sample).__name__} of {len(sample)} items"
            )
        input, target, is_pair = sample[0], sample[-1], len(sample) == 2
    else:
        input, target, is_pair = sample, None, False
    if not isinstance(input, torch.Tensor):
        raise TypeError(
            f"sample: ColOut needs a torch.Tensor or a PIL.Image.Image, or an (input, target) pair, "
            f"got {type(input).__name__}"
        )
    if input.ndim not in (3, 4):
        raise ValueError(
            f"sample: ColOut needs an image tensor (C, H, W) or a batch (N, C, H, W), got shape {tuple(input.shape)}"
        )
    return input, target, is_pair


def _should_resize_target(input: torch.Tensor, target: Any, resize_target: bool | str) -> bool:
    """Composer's rule: a bool decides; ``'auto'`` resizes a tensor target of three or more dims
    whose last two equal the input's."""
    same_plane = isinstance(target, torch.Tensor) and target.ndim >= 2 and target.shape[-2:] == input.shape[-2:]
    if resize_target is True and not same_plane:
        got = f"shape {tuple(target.shape)}" if isinstance(target, torch.Tensor) else f"a {type(target).__name__}"
        raise ValueError(
            f"resize_target=True: the target's last two dims must be the input's {tuple(input.shape[-2:])}, got {got}"
        )
    if resize_target == "auto":
        return same_plane and target.ndim > 2
    return resize_target


class ColOut(Algorithm):
    """ColOut as a training-loop algorithm: after the data loader, :func:`colout_batch` drops the
    same random rows and columns from every image of the batch, and from a dense target as
    ``resize_target`` says; class targets are left as they are.

    Args:
        p_row: the fraction of rows to drop, in ``[0, 1)``.
        p_col: the fraction of columns to drop, in ``[0, 1)``.
        batch: must be ``True``: ColOut runs on the batch after the data loader; Composer's
            per-sample mode (``False``, a dataset transform) is not offered here.
        resize_target: whether the target loses the same rows and columns: ``True``, ``False``, or
            ``'auto'`` for a target of three or more dims with the images' ``H, W``.
        input_key: where the images are in the batch.
        target_key: where the targets are in the batch.

    It counts ``batches_cut``, the batches that lost rows or columns; none means it did not act.

    Example::

        >>> import torch
        >>> from algorithms import ColOut
        >>> from algorithms.core import Trainer
        >>> model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.AdaptiveAvgPool2d(1),
        ...                             torch.nn.Flatten(), torch.nn.Linear(4, 10))
        >>> batches = [(torch.randn(8, 3, 16, 16), torch.randint(0, 10, (8,)))]
        >>> Trainer(model, batches, "1ep", algorithms=[ColOut(p_row=0.15, p_col=0.15)], seed=0).fit()
    """

    activity = {"batches_cut": "batches with rows or columns dropped"}

    def __init__(
        self,
        p_row: float = 0.15,
        p_col: float = 0.15,
        batch: bool = True,
        resize_target: bool | str = "auto",
        input_key: int | str = 0,
        target_key: int | str = 1,
    ):
        PARAMETERS.check(p_row=p_row, p_col=p_col, batch=batch, resize_target=resize_target)
        self.p_row = p_row
        self.p_col = p_col
        self.batch = batch
        self.resize_target = resize_target
        self.input_key = input_key
        self.target_key = target_key

    def match(self, event: Event, state: State) -> bool:
        return event is Event.AFTER_DATALOADER

    def apply(self, event: Event, state: State, logger: Any | None = None) -> None:
        images = state.batch_get_item(self.input_key)
        generator = self.generator(state)
        size = images.shape[-2:]
        if self.resize_target is False:
            images = colout_batch(images, self.p_row, self.p_col, False, generator=generator)
            state.batch_set_item(self.input_key, images)
        else:
            target = state.batch_get_item(self.target_key)
            images, new_target = colout_batch(
                (images, target), self.p_row, self.p_col, self.resize_target, generator=generator
            )
            state.batch_set_item(self.input_key, images)
            if new_target is not target:
                state.batch_set_item(self.target_key, new_target)
        if images.shape[-2:] != size:
            self.report(logger, "batches_cut")
