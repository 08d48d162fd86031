"""The functional form of every method: pure functions of tensors.

``import algorithms.functional as cf``; signatures of the forms Composer also has match
``composer.functional``, so switching is a change of import.
"""

from ._mixing import interpolate_targets
from .cutmix.cutmix import cutmix_batch
from .label_smoothing.label_smoothing import smooth_labels
from .mixup.mixup import mixup_batch

__all__ = ["cutmix_batch", "interpolate_targets", "mixup_batch", "smooth_labels"]
