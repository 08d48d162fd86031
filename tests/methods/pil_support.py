"""PIL images for the tests of the per-image forms that take them (CutOut, ColOut, RandAugment,
AugMix and the shared operations): an image of random pixels in a given mode, and its pixel values
as a ``(C, H, W)`` tensor, read through NumPy independently of the library's own conversion."""

from __future__ import annotations

import numpy as np
import torch
from PIL import Image


def random_image(mode: str = "RGB", height: int = 6, width: int = 5, seed: int = 0) -> Image.Image:
    """An image of uniformly random 8-bit RGB pixels, converted to ``mode``."""
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(256, size=(height, width, 3), dtype=np.uint8)).convert(mode)


def pixels(img: Image.Image) -> torch.Tensor:
    """The values ``img`` holds, one channel per band, ``(C, H, W)``, in the dtype NumPy reads."""
    array = torch.from_numpy(np.array(img))
    return array.unsqueeze(0) if array.ndim == 2 else array.permute(2, 0, 1)
