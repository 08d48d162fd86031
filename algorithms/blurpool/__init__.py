"""Blurpool: see :mod:`algorithms.blurpool.blurpool`."""

from .blurpool import BlurPool, apply_blurpool

__all__ = ["BlurPool", "apply_blurpool"]
