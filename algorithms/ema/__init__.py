"""EMA: see :mod:`algorithms.ema.ema`."""

from .ema import EMA, compute_ema

__all__ = ["EMA", "compute_ema"]
