"""CutMix: see :mod:`algorithms.cutmix.cutmix`."""

from .cutmix import CutMix, cutmix_batch

__all__ = ["CutMix", "cutmix_batch"]
