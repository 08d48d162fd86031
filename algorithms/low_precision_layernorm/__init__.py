"""Low Precision LayerNorm: see :mod:`algorithms.low_precision_layernorm.low_precision_layernorm`."""

from .low_precision_layernorm import LowPrecisionLayerNorm, LPLayerNorm, apply_low_precision_layernorm

__all__ = ["LPLayerNorm", "LowPrecisionLayerNorm", "apply_low_precision_layernorm"]
