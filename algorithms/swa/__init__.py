"""Swa: see :mod:`algorithms.swa.swa`."""

from .swa import SWA, update_swa_average

__all__ = ["SWA", "update_swa_average"]
