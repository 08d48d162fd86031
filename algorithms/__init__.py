"""Methods Library: runnable PyTorch training methods.

``from algorithms import CutMix`` gives a method's :class:`~algorithms.core.Algorithm` class;
``import algorithms.functional as cf`` gives the functional forms.

The exports are not a hand-kept table: each method's ``metadata.json`` names its class
(``class_name``), and ``algorithms.<Class>`` is resolved from the method's own folder on first
use (PEP 562 ``__getattr__``). So adding a method folder adds its export, and
``import algorithms.metadata`` (the pre-commit hook, the docs build) never imports torch.
"""

from __future__ import annotations

import importlib
from functools import cache
from typing import Any

__version__ = "0.1.0"


@cache
def _exports() -> dict[str, str]:
    """Class name -> the method folder (subpackage) that defines it, from the metadata that is
    valid (``nox -s check`` reports the rest; one method's broken file must not hide the others)."""
    from .metadata import discover_metadata_files, validate_files

    records, _ = validate_files(discover_metadata_files())
    return {r.class_name: r.key for r in records.values() if r.class_name}


def export_from_method(package: str, exports: dict[str, str], name: str) -> Any:
    """``name`` from the method folder ``exports`` maps it to, or AttributeError."""
    if name not in exports:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"algorithms.{exports[name]}"), name)


def __getattr__(name: str) -> Any:
    if name == "__all__":
        return sorted(_exports())
    value = export_from_method(__name__, _exports(), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_exports()))
