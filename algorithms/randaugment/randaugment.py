"""RandAugment: a chain of random image operations at one shared severity, per image.

Cubuk, Zoph, Shlens and Le, "RandAugment: Practical automated data augmentation with a reduced
search space", 2020.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import torch

from .._augmentations import (
    AUGMENTATION_SET,
    SEVERITY,
    ImageAugmentation,
    random_operations,
    resolve_augmentation_set,
    restored,
    working_copy,
)
from .._pil import from_pil, is_pil_image, to_pil
from ..core.parameters import Integer, Parameters

if TYPE_CHECKING:
    import PIL.Image

__all__ = ["RandAugment", "randaugment_image"]

PARAMETERS = Parameters(
    severity=SEVERITY,
    depth=Integer(low=0, note="How many operations each image gets in a row."),
    augmentation_set=AUGMENTATION_SET,
)


def randaugment_image(
    img: torch.Tensor | PIL.Image.Image,
    severity: float = 9,
    depth: int = 2,
    augmentation_set: str | Sequence[str] = "all",
    generator: torch.Generator | None = None,
) -> torch.Tensor | PIL.Image.Image:
    """Apply ``depth`` random operations in a row to each image, as ``composer.functional.randaugment_image``.

    At each of the ``depth`` steps every image draws one operation, uniformly from
    ``augmentation_set``, and its own magnitude from ``severity`` by Composer's mapping (a level
    uniform in ``[0.1, severity]`` scales the operation's maximum; see the card). The images of
    a batch draw independently; each operation runs once on the images that drew it.

    Args:
        img: one image ``(C, H, W)`` or a batch ``(N, C, H, W)``, uint8 in ``[0, 255]`` or floating
            point in ``[0, 1]``, or a PIL image of 8-bit levels (mode ``L``, ``RGB``, ``RGBA``, ...,
            taken as uint8); not modified.
        severity: the strength of every operation, in ``[0, 10]`` (M in the paper).
        depth: how many operations each image gets in a row, ``>= 0`` (N in the paper).
        augmentation_set: ``"all"``, ``"safe"`` (without color, contrast, brightness and sharpness,
            which resemble the corruptions of ImageNet-C and CIFAR-10-C), ``"original"`` (their
            factors drawn as in AugMix's reference code), or a sequence of operation names.
        generator: torch generator for every random draw (default: torch's global one).

    Returns:
        A new tensor with the input's shape, dtype, device and memory format; for a PIL image, a
        new PIL image of its mode and size.

    Example::

        >>> import torch
        >>> from algorithms.functional import randaugment_image
        >>> images = torch.randint(0, 256, (4, 3, 16, 16), dtype=torch.uint8)
        >>> out = randaugment_image(images, severity=9, depth=2, generator=torch.Generator().manual_seed(0))
        >>> out.shape, out.dtype
        (torch.Size([4, 3, 16, 16]), torch.uint8)
    """
    if is_pil_image(img):
        return to_pil(
            randaugment_image(from_pil(img, "img", eight_bit=True), severity, depth, augmentation_set, generator), img
        )
    PARAMETERS.check(severity=severity, depth=depth)
    severity = float(severity)
    names = resolve_augmentation_set(augmentation_set)
    work = working_copy(img)
    x = work.values
    for _ in range(depth):
        x = random_operations(work, x, names, severity, generator)
    return restored(x if depth else x.clone(), img)


class RandAugment(ImageAugmentation):
    """RandAugment as a training-loop algorithm: after the data loader, :func:`randaugment_image`
    augments each image of the batch with its own chain of operations; the targets are left as
    they are.

    Args:
        severity: the strength of every operation, in ``[0, 10]``.
        depth: how many operations each image gets in a row, ``>= 0``.
        augmentation_set: ``"all"``, ``"safe"``, ``"original"`` or a sequence of operation names.
        value_range: the range floating point images are in, ``(low, high)``, mapped to ``[0, 1]``
            for the operations and back; None maps each image from its own minimum and maximum
            (the Trainer's data is standardized). uint8 images are taken as ``[0, 255]``.
        input_key: where the images are in the batch (an index or a dict key).

    Example::

        >>> import torch
        >>> from algorithms import RandAugment
        >>> from algorithms.core import Trainer
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 10))
        >>> batches = [(torch.randn(4, 3, 8, 8), torch.randint(0, 10, (4,)))]
        >>> Trainer(model, batches, "1ep", algorithms=[RandAugment(severity=9, depth=2)], seed=0).fit()
    """

    def __init__(
        self,
        severity: float = 9,
        depth: int = 2,
        augmentation_set: str | Sequence[str] = "all",
        value_range: tuple[float, float] | None = None,
        input_key: int | str = 0,
    ):
        super().__init__(value_range, input_key)
        PARAMETERS.check(severity=severity, depth=depth, augmentation_set=augmentation_set)
        self.severity = float(severity)
        self.depth = depth
        self.augmentation_set = augmentation_set if isinstance(augmentation_set, str) else tuple(augmentation_set)

    def acted(self, activity: Mapping[str, int]) -> bool:
        """With ``depth=0`` no operation is applied: the batches it replaced are the same images."""
        return self.depth > 0 and super().acted(activity)

    def augment(self, images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        return randaugment_image(images, self.severity, self.depth, self.augmentation_set, generator=generator)
