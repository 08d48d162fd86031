"""Lazy, static exports (the scientific-Python convention, SPEC 1): a package names its public
objects in an explicit table, ``name -> module``, and imports a module the first time one of its
names is used (PEP 562). The same names are imported under ``TYPE_CHECKING`` beside the table, so
IDEs and type checkers see them without running anything.

One helper serves :mod:`algorithms`, :mod:`algorithms.functional` and :mod:`algorithms.core`.
Torch is an optional dependency (the metadata loader and the pre-commit hook run without it), so
a name whose module needs torch, used where torch is not installed, is one ImportError that says
how to install it.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["TORCH_MISSING", "attach"]

TORCH_MISSING = (
    "{what} needs torch, which is not installed: pip install 'methods-library[torch]' "
    "(or first the torch build for your platform: https://pytorch.org/get-started/locally/)"
)


def attach(
    name: str, exports: Mapping[str, str], package: str | None = None
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """``(__getattr__, __dir__, __all__)`` for module ``name``, whose public names are the keys of
    ``exports``; each maps to the module that defines it, relative to ``package`` (default: ``name``
    itself), imported on first use and then cached in the module's namespace, so ``__getattr__``
    runs once per name."""
    package = package or name
    public = sorted(exports)

    def __getattr__(attr: str) -> Any:
        module = exports.get(attr)
        if module is None:
            raise AttributeError(f"module {name!r} has no attribute {attr!r}")
        try:
            imported = importlib.import_module(f".{module}", package)
        except ModuleNotFoundError as exc:
            if exc.name != "torch":
                raise
            raise ModuleNotFoundError(TORCH_MISSING.format(what=f"{name}.{attr}"), name="torch") from None
        value = getattr(imported, attr)
        setattr(sys.modules[name], attr, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[name])) | set(public))

    return __getattr__, __dir__, public
