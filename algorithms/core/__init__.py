"""The training loop the methods plug into.

``from algorithms.core import Algorithm, Event, State, Engine, Trainer``; ``Loop`` runs the
methods in a training loop of your own; ``MethodLog`` keeps what
each method did in a run.

The names are an explicit table, imported on first use and under ``TYPE_CHECKING`` for type
checkers (the helper :mod:`algorithms._lazy`), so ``algorithms.core.options`` (the torch-free
names of precisions and parallel modes) can be imported without torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import attach

EXPORTS = {
    "Algorithm": "algorithm",
    "AlgorithmLog": "method_log",
    "Engine": "engine",
    "Trace": "engine",
    "Event": "event",
    "Loop": "loop",
    "MODEL_LOSS": "loop",
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

if TYPE_CHECKING:
    from .algorithm import Algorithm as Algorithm
    from .engine import Engine as Engine
    from .engine import Trace as Trace
    from .event import Event as Event
    from .loop import MODEL_LOSS as MODEL_LOSS
    from .loop import Loop as Loop
    from .method_log import AlgorithmLog as AlgorithmLog
    from .method_log import MethodLog as MethodLog
    from .options import PARALLELS as PARALLELS
    from .options import PRECISIONS as PRECISIONS
    from .state import State as State
    from .state import batch_get_item as batch_get_item
    from .state import batch_set_item as batch_set_item
    from .time import Duration as Duration
    from .time import Timestamp as Timestamp
    from .time import TimeUnit as TimeUnit
    from .trainer import Trainer as Trainer

__getattr__, __dir__, __all__ = attach(__name__, EXPORTS)
