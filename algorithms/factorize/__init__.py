"""Factorize: see :mod:`algorithms.factorize.factorize`."""

from .factorize import Factorize, apply_factorization

__all__ = ["Factorize", "apply_factorization"]
