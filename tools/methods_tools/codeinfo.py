"""What the code says about a method: constructor parameters and their defaults, and
its hyperparameters' declaration (kind, range or choices, note).

The card tools compare cards and metadata with this, so it is read from the code by ``inspect``
rather than copied. Importing the method code imports torch; only these functions do that.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

__all__ = [
    "REQUIRED",
    "CodeLookupError",
    "Parameter",
    "declaration",
    "lookup",
    "parameters",
    "resolve",
    "trainer_parameters",
]


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()  # the default of a parameter that has none


@dataclass(frozen=True)
class Parameter:
    name: str
    default: Any  # REQUIRED when the parameter has no default


def parameters(obj: Callable[..., Any]) -> dict[str, Parameter]:
    """Named parameters of a function or of a class's constructor, with their defaults (``self``,
    ``*args`` and ``**kwargs`` left out); what each means is its declaration's note."""
    signature = inspect.signature(obj)
    return {
        name: Parameter(name, REQUIRED if p.default is inspect.Parameter.empty else p.default)
        for name, p in signature.parameters.items()
        if p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD) and name != "self"
    }


def declaration(cls: type) -> Any:
    """The hyperparameters' declaration beside a method's class: ``PARAMETERS`` of the module that
    defines it (an :class:`algorithms.core.parameters.Parameters`), or None where there is none."""
    import sys

    from algorithms.core.parameters import Parameters

    found = getattr(sys.modules.get(cls.__module__), "PARAMETERS", None)
    return found if isinstance(found, Parameters) else None


def resolve(dotted: str) -> Any:
    """``"algorithms.CutMix"`` -> the object; raises ImportError or AttributeError."""
    module_name, _, attr = dotted.rpartition(".")
    return getattr(importlib.import_module(module_name), attr)


class CodeLookupError(LookupError):
    """Metadata names code that cannot be imported; ``problem`` is the one-line report."""

    def __init__(self, problem: Any):
        self.problem = problem
        super().__init__(str(problem))


def lookup(dotted: str, path: Any, key: str, field: str) -> Any:
    """:func:`resolve` for a name taken from metadata ``path`` at ``/key/field``; a failure
    raises :class:`CodeLookupError` naming the file, the field and what to do."""
    from algorithms.metadata import Problem, _locate

    try:
        return resolve(dotted)
    except (ImportError, AttributeError) as exc:
        raise CodeLookupError(
            Problem(
                path,
                f"/{key}/{field}",
                f"{dotted} cannot be imported ({exc}) — fix the name; python tools/check_functional.py checks them all",
                _locate(path, [key, field]),
            )
        ) from None


@cache
def trainer_parameters() -> dict[str, Parameter]:
    from algorithms.core import Trainer

    return parameters(Trainer)
