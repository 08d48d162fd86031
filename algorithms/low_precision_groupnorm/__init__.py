"""Low Precision GroupNorm: see :mod:`algorithms.low_precision_groupnorm.low_precision_groupnorm`."""

from .low_precision_groupnorm import LowPrecisionGroupNorm, LPGroupNorm, apply_low_precision_groupnorm

__all__ = ["LPGroupNorm", "LowPrecisionGroupNorm", "apply_low_precision_groupnorm"]
