"""AugMix: see :mod:`algorithms.augmix.augmix`."""

from .augmix import AugMix, augmix_image

__all__ = ["AugMix", "augmix_image"]
