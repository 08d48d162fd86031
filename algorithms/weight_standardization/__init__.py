"""WeightStandardization: see :mod:`algorithms.weight_standardization.weight_standardization`."""

from .weight_standardization import WeightStandardization, apply_weight_standardization

__all__ = ["WeightStandardization", "apply_weight_standardization"]
