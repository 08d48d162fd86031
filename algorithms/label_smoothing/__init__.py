"""Label smoothing: see :mod:`algorithms.label_smoothing.label_smoothing`."""

from .label_smoothing import LabelSmoothing, smooth_labels

__all__ = ["LabelSmoothing", "smooth_labels"]
