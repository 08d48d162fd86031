"""Data sets for the training comparisons: ``from algorithms.data import get_dataset``.

===============  ========================================================================
``cifar10``      CIFAR-10 from a local directory in the standard Python (pickle) format
``digits``       scikit-learn's bundled 8x8 handwritten digits, upsampled to 32x32 RGB:
                 real data that needs no download, so accuracies are real offline
``stdlib_text``  the Python standard library's own source, byte by byte, in windows of
                 ``seq_len`` tokens: a language-model corpus every interpreter ships
``synthetic``    random images and labels, for speed and memory only (no accuracy)
===============  ========================================================================
"""

from .datasets import DataSplits, cifar10, digits, get_dataset, stdlib_text, synthetic

__all__ = ["DataSplits", "cifar10", "digits", "get_dataset", "stdlib_text", "synthetic"]
