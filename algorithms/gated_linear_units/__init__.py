"""Gated Linear Units: see :mod:`algorithms.gated_linear_units.gated_linear_units`."""

from .gated_linear_units import (
    GatedIntermediate,
    GatedLinearUnits,
    GLUFeedForward,
    NarrowedOutput,
    apply_gated_linear_units,
    glu_hidden_width,
    registry,
    same_count_width,
)

__all__ = [
    "GLUFeedForward",
    "GatedIntermediate",
    "GatedLinearUnits",
    "NarrowedOutput",
    "apply_gated_linear_units",
    "glu_hidden_width",
    "registry",
    "same_count_width",
]
