"""Gradient clipping: see :mod:`algorithms.gradient_clipping.gradient_clipping`."""

from .gradient_clipping import GradientClipping, apply_gradient_clipping

__all__ = ["GradientClipping", "apply_gradient_clipping"]
