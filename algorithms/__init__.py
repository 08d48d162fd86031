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
import sys
from collections.abc import Callable
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


def lazy_module(
    name: str, exports: Callable[[], dict[str, str]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for module ``name``, whose public names are ``exports()``: name ->
    the module under ``algorithms`` that defines it, imported on first use."""
    module = sys.modules[name]

    def getattr_(attr: str) -> Any:
        if attr == "__all__":
            return sorted(exports())
        table = exports()
        if attr not in table:
            raise AttributeError(f"module {name!r} has no attribute {attr!r}")
        value = getattr(importlib.import_module(f"algorithms.{table[attr]}"), attr)
        setattr(module, attr, value)
        return value

    def dir_() -> list[str]:
        return sorted(set(vars(module)) | set(exports()))

    return getattr_, dir_


__getattr__, __dir__ = lazy_module(__name__, _exports)
