"""RandAugment: see :mod:`algorithms.randaugment.randaugment`."""

from .randaugment import RandAugment, randaugment_image

__all__ = ["RandAugment", "randaugment_image"]
