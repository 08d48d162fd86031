"""SAM: see :mod:`algorithms.sam.sam`."""

from .sam import SAM, SAMOptimizer, sam_perturbation

__all__ = ["SAM", "SAMOptimizer", "sam_perturbation"]
