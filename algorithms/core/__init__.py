"""The training loop the methods plug into.

``from algorithms.core import Algorithm, Event, State, Engine, Trainer``; ``MethodLog`` keeps what
each method did in a run.

Names are imported on first use (PEP 562), so ``algorithms.core.options`` (the torch-free names
of precisions and parallel modes) can be imported without torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Algorithm": "algorithm",
    "AlgorithmLog": "method_log",
    "Engine": "engine",
    "Trace": "engine",
    "Event": "event",
    "MethodLog": "method_log",
    "PARALLELS": "options",
    "PRECISIONS": "options",
    "State": "state",
    "batch_get_item": "state",
    "batch_set_item": "state",
    "Duration": "time",
    "Timestamp": "time",
    "TimeUnit": "time",
    "Trainer": "trainer",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
