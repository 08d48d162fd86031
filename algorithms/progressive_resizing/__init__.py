"""ProgressiveResizing: see :mod:`algorithms.progressive_resizing.progressive_resizing`."""

from .progressive_resizing import ProgressiveResizing, resize_batch

__all__ = ["ProgressiveResizing", "resize_batch"]
