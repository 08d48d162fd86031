"""GhostBatchnorm: see :mod:`algorithms.ghost_batchnorm.ghost_batchnorm`."""

from .ghost_batchnorm import GhostBatchNorm, apply_ghost_batchnorm

__all__ = ["GhostBatchNorm", "apply_ghost_batchnorm"]
