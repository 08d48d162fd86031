"""MixUp: see :mod:`algorithms.mixup.mixup`."""

from .mixup import MixUp, mixup_batch

__all__ = ["MixUp", "mixup_batch"]
