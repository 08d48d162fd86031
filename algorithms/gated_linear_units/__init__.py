"""Gated Linear Units: see :mod:`algorithms.gated_linear_units.gated_linear_units`."""

from .gated_linear_units import GatedLinearUnits, GLUFeedForward, apply_gated_linear_units, glu_hidden_width

__all__ = ["GLUFeedForward", "GatedLinearUnits", "apply_gated_linear_units", "glu_hidden_width"]
