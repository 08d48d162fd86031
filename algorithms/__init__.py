"""Methods Library: runnable PyTorch training methods.

``from algorithms import CutMix`` gives a method's :class:`~algorithms.core.Algorithm` class;
``import algorithms.functional as cf`` gives the functional forms.

Classes are exported lazily (PEP 562 ``__getattr__``) so that ``import algorithms.metadata``,
which the fast pre-commit hook and the docs build use, never imports torch.
"""

from __future__ import annotations

import importlib
from typing import Any

# class name -> the method folder (subpackage) that defines it
_EXPORTS = {
    "CutMix": "cutmix",
    "LabelSmoothing": "label_smoothing",
    "MixUp": "mixup",
}

__all__ = sorted(_EXPORTS)
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
