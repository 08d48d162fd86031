"""AugMix: each image mixed with a few chains of random operations, by random convex weights.

Hendrycks, Mu, Cubuk, Zoph, Gilmer and Lakshminarayanan, "AugMix: A Simple Data Processing Method
to Improve Robustness and Uncertainty", 2020.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
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
from ..core.parameters import Integer, Parameters, Real

if TYPE_CHECKING:
    import PIL.Image

__all__ = ["AugMix", "augmix_image"]

PARAMETERS = Parameters(
    severity=SEVERITY,
    depth=Integer(low=1, also=(-1,), note="The operations per chain; -1 draws 1 to 3 per chain."),
    width=Integer(low=1, note="The number of chains mixed."),
    alpha=Real(low=0, low_open=True, note="The concentration of the Dirichlet chain weights and the Beta skip weight."),
    augmentation_set=AUGMENTATION_SET,
)

#: The most operations a chain gets when ``depth=-1`` (then 1 to 3, uniformly), as in Composer.
MAX_RANDOM_DEPTH = 3


def augmix_image(
    img: torch.Tensor | PIL.Image.Image,
    severity: float = 3,
    depth: int = -1,
    width: int = 3,
    alpha: float = 1.0,
    augmentation_set: str | Sequence[str] = "all",
    generator: torch.Generator | None = None,
) -> torch.Tensor | PIL.Image.Image:
    """Mix each image with ``width`` chains of random operations, as ``composer.functional.augmix_image``.

    For each image: chain weights ``w ~ Dirichlet(alpha, ..., alpha)`` (``width`` of them) and a
    skip weight ``m ~ Beta(alpha, alpha)``; each chain applies ``depth`` operations in a row (with
    ``depth=-1``, 1 to 3, drawn per chain), each drawn uniformly from ``augmentation_set`` with its
    magnitude from ``severity`` as in :func:`~algorithms.functional.randaugment_image`; the output
    is ``(1 - m) * img + m * sum_c w_c * chain_c(img)``. The images of a batch draw independently.

    Args:
        img: one image ``(C, H, W)`` or a batch ``(N, C, H, W)``, uint8 in ``[0, 255]`` or floating
            point in ``[0, 1]``, or a PIL image of 8-bit levels (mode ``L``, ``RGB``, ``RGBA``, ...,
            taken as uint8); not modified.
        severity: the strength of every operation, in ``[0, 10]``.
        depth: the operations per chain, ``>= 1``, or ``-1`` for 1 to 3 drawn uniformly per chain.
        width: the number of chains mixed, ``>= 1``.
        alpha: the concentration of the Dirichlet and Beta weights, ``> 0``: large values mix
            evenly, small ones keep mostly one chain and mostly the original or the mix.
        augmentation_set: ``"all"``, ``"safe"``, ``"original"`` or a sequence of operation names.
        generator: torch generator for every random draw (default: torch's global one).

    Returns:
        A new tensor with the input's shape, dtype, device and memory format; for a PIL image, a
        new PIL image of its mode and size.

    Example::

        >>> import torch
        >>> from algorithms.functional import augmix_image
        >>> images = torch.rand(4, 3, 16, 16)
        >>> out = augmix_image(images, severity=3, width=3, generator=torch.Generator().manual_seed(0))
        >>> out.shape, out.dtype, bool(out.min() >= 0 and out.max() <= 1)
        (torch.Size([4, 3, 16, 16]), torch.float32, True)
    """
    if is_pil_image(img):
        return to_pil(
            augmix_image(
                from_pil(img, "img", eight_bit=True), severity, depth, width, alpha, augmentation_set, generator
            ),
            img,
        )
    PARAMETERS.check(severity=severity, depth=depth, width=width, alpha=alpha)
    severity, alpha = float(severity), float(alpha)
    names = resolve_augmentation_set(augmentation_set)
    work = working_copy(img)
    x = work.values
    n = x.shape[0]
    chain_weights, skip_weight = mixing_weights(n, width, alpha, generator)
    chain_weights = chain_weights.to(x.device, x.dtype, non_blocking=True).view(n, width, 1, 1, 1)
    skip_weight = skip_weight.to(x.device, x.dtype, non_blocking=True).view(n, 1, 1, 1)
    mixed = torch.zeros_like(x)
    for chain in range(width):
        if depth > 0:
            steps, depths = depth, None
        else:
            steps, depths = MAX_RANDOM_DEPTH, torch.randint(1, MAX_RANDOM_DEPTH + 1, (n,), generator=generator)
        y = x
        for step in range(steps):
            y = random_operations(work, y, names, severity, generator, None if depths is None else depths > step)
        mixed = mixed + chain_weights[:, chain] * y
    return restored((1 - skip_weight) * x + skip_weight * mixed, img)


def mixing_weights(
    n: int, width: int, alpha: float, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each image's chain weights ``(n, width) ~ Dirichlet(alpha, ..., alpha)`` and skip weight
    ``(n,) ~ Beta(alpha, alpha)``, as float64 host tensors.

    torch's Dirichlet and Beta take no generator, so one seed drawn from ``generator`` drives the
    standard library's sampler: per image, ``width`` draws of ``Gamma(alpha, 1)`` normalized to
    sum to 1, then one ``betavariate(alpha, alpha)`` (host scalars: no device work, no sync).
    """
    rng = random.Random(int(torch.randint(0, 2**62, (1,), generator=generator)))
    chains, skips = [], []
    for _ in range(n):
        gammas = [rng.gammavariate(alpha, 1.0) for _ in range(width)]
        total = sum(gammas)
        chains.append([g / total for g in gammas] if total > 0 else [1 / width] * width)  # all underflowed
        skips.append(rng.betavariate(alpha, alpha))
    return torch.tensor(chains, dtype=torch.float64).view(n, width), torch.tensor(skips, dtype=torch.float64)


class AugMix(ImageAugmentation):
    """AugMix as a training-loop algorithm: after the data loader, :func:`augmix_image` mixes
    each image of the batch with its own chains of operations; the targets are left as they are.
    The paper's Jensen-Shannon consistency loss is not part of it.

    Args:
        severity: the strength of every operation, in ``[0, 10]``.
        depth: the operations per chain, ``>= 1``, or ``-1`` for 1 to 3 drawn per chain.
        width: the number of chains mixed, ``>= 1``.
        alpha: the concentration of the Dirichlet and Beta weights, ``> 0``.
        augmentation_set: ``"all"``, ``"safe"``, ``"original"`` or a sequence of operation names.
        value_range: the range floating point images are in, ``(low, high)``, mapped to ``[0, 1]``
            for the operations and back; None maps each image from its own minimum and maximum
            (the Trainer's data is standardized). uint8 images are taken as ``[0, 255]``.
        input_key: where the images are in the batch (an index or a dict key).

    Example::

        >>> import torch
        >>> from algorithms import AugMix
        >>> from algorithms.core import Trainer
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 10))
        >>> batches = [(torch.randn(4, 3, 8, 8), torch.randint(0, 10, (4,)))]
        >>> Trainer(model, batches, "1ep", algorithms=[AugMix(severity=3, width=3)], seed=0).fit()
    """

    def __init__(
        self,
        severity: float = 3,
        depth: int = -1,
        width: int = 3,
        alpha: float = 1.0,
        augmentation_set: str | Sequence[str] = "all",
        value_range: tuple[float, float] | None = None,
        input_key: int | str = 0,
    ):
        super().__init__(value_range, input_key)
        PARAMETERS.check(severity=severity, depth=depth, width=width, alpha=alpha, augmentation_set=augmentation_set)
        self.severity, self.alpha = float(severity), float(alpha)
        self.depth, self.width = depth, width
        self.augmentation_set = augmentation_set if isinstance(augmentation_set, str) else tuple(augmentation_set)

    def augment(self, images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        return augmix_image(
            images, self.severity, self.depth, self.width, self.alpha, self.augmentation_set, generator=generator
        )
