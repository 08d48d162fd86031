"""Runs the matching algorithms at each event, in order, and keeps a trace of the latest events."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .algorithm import Algorithm
from .event import Event
from .state import State

__all__ = ["Engine", "Trace"]

#: How many of the latest events the trace keeps: a run of a million batches would otherwise keep
#: eleven million entries, and a trace is read in tests and debugging, over the last few batches.
TRACE_LIMIT = 10_000


@dataclass(frozen=True)
class Trace:
    """One event the engine ran, and the algorithms that ran at it (by name, in order)."""

    event: Event
    algorithms: tuple[str, ...]


class Engine:
    """Runs each algorithm whose ``match(event, state)`` is true at ``event``, in order.

    ``trace`` lists the latest :data:`TRACE_LIMIT` events run (with ``keep_trace``), oldest first,
    each with the algorithms that ran at it.
    """

    def __init__(self, state: State, algorithms: Sequence[Algorithm] = (), logger: Any = None,
                 keep_trace: bool = True):
        for algo in algorithms:
            if not isinstance(algo, Algorithm):
                raise TypeError(f"algorithms: {algo!r} is not an Algorithm instance")
        self.state = state
        self.algorithms = tuple(algorithms)
        self.logger = logger
        self.keep_trace = keep_trace
        self._trace: deque[Trace] = deque(maxlen=TRACE_LIMIT)

    @property
    def trace(self) -> list[Trace]:
        return list(self._trace)

    def run_event(self, event: Event) -> tuple[str, ...]:
        ran = []
        for algo in self.algorithms:
            if algo.match(event, self.state):
                algo.apply(event, self.state, self.logger)
                ran.append(algo.name)
        if self.keep_trace:
            self._trace.append(Trace(event, tuple(ran)))
        return tuple(ran)
