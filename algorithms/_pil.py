"""PIL images in and out of the per-image forms, which take them as Composer's do (a torchvision
pipeline holds its images as PIL before ``ToTensor``).

A PIL image goes to the tensor path as the pixel values its mode holds, ``(C, H, W)`` (uint8 for
the 8-bit modes), and the result comes back as a PIL image of the same mode. Pillow and NumPy are
imported only when a PIL image is given: importing ``algorithms`` needs neither.

Private: used by :func:`~algorithms.functional.cutout_batch`,
:func:`~algorithms.functional.colout_batch`, :func:`~algorithms.functional.randaugment_image` and
:func:`~algorithms.functional.augmix_image`.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["check_image_type", "from_pil", "is_pil_image", "to_pil"]


def is_pil_image(x: Any) -> bool:
    """Whether ``x`` is a ``PIL.Image.Image``, without importing Pillow for anything else."""
    if not type(x).__module__.startswith("PIL."):
        return False
    from PIL import Image

    return isinstance(x, Image.Image)


def check_image_type(x: Any, name: str) -> None:
    """A ``TypeError`` naming what is accepted, for anything but a tensor or a PIL image."""
    if not isinstance(x, torch.Tensor) and not is_pil_image(x):
        raise TypeError(f"{name}: needs a torch.Tensor or a PIL.Image.Image, got {type(x).__name__}")


def from_pil(img: Any, name: str, eight_bit: bool = False) -> torch.Tensor:
    """The pixel values of ``img`` as a new ``(C, H, W)`` tensor (one channel per band), of the
    dtype its mode holds (uint8 for the 8-bit modes, int32 for ``I``, float32 for ``F``, bool for
    ``1``). With ``eight_bit``, only modes of 8-bit levels are accepted (not palette indices)."""
    import numpy as np

    array = np.asarray(img)
    if eight_bit and (img.mode in ("1", "P", "PA") or array.dtype != np.uint8):
        raise ValueError(
            f"{name}: needs a PIL image of 8-bit levels (mode L, RGB, RGBA, ...), got mode {img.mode!r}; "
            "convert it first, e.g. img.convert('RGB')"
        )
    array = array.astype(array.dtype.newbyteorder("="), copy=True)  # native byte order, writable
    values = torch.from_numpy(array)
    return values.unsqueeze(0) if values.ndim == 2 else values.permute(2, 0, 1).contiguous()


def to_pil(values: torch.Tensor, like: Any) -> Any:
    """``values`` ``(C, H, W)`` (of any height and width) as a PIL image of ``like``'s mode and
    palette; a value outside the mode's range is clipped to it first."""
    import numpy as np
    from PIL import Image

    dtype = np.asarray(like).dtype
    array = values.detach().cpu()
    if dtype.kind in "ui":
        info = np.iinfo(dtype)
        array = array.round().clamp(info.min, info.max) if array.is_floating_point() else array
    array = np.ascontiguousarray(array.permute(1, 2, 0).numpy().astype(dtype))
    if array.shape[2] == 1:
        array = array[:, :, 0]
    height, width = array.shape[:2]
    if like.mode == "1":  # one bit per pixel, packed: from the bools, not the bytes
        return Image.fromarray(array)
    out = Image.frombytes(like.mode, (width, height), array.tobytes())
    if like.mode in ("P", "PA"):
        out.putpalette(like.getpalette())
    return out
