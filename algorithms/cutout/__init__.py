"""CutOut: see :mod:`algorithms.cutout.cutout`."""

from .cutout import CutOut, cutout_batch

__all__ = ["CutOut", "cutout_batch"]
