"""ColOut: see :mod:`algorithms.colout.colout`."""

from .colout import ColOut, colout_batch

__all__ = ["ColOut", "colout_batch"]
