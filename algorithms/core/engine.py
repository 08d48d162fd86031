"""Runs the matching algorithms at each event, in order, and keeps a trace of the latest events."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from .algorithm import Algorithm
from .event import Event
from .method_log import MethodLog, check_method_log
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

    Each algorithm is registered once with ``logger``, a :class:`~algorithms.core.MethodLog`
    (a new one for ``None``), kept as ``method_log``; its ``apply`` is given its own
    :class:`~algorithms.core.AlgorithmLog`. At ``Event.FIT_END`` the activity is logged.

    ``trace`` lists the latest :data:`TRACE_LIMIT` events run (with ``keep_trace``), oldest first,
    each with the algorithms that ran at it.
    """

    def __init__(
        self,
        state: State,
        algorithms: Sequence[Algorithm] = (),
        logger: MethodLog | None = None,
        keep_trace: bool = True,
    ):
        for algo in algorithms:
            if not isinstance(algo, Algorithm):
                raise TypeError(f"algorithms: {algo!r} is not an Algorithm instance")
        self.method_log = check_method_log(logger, "Engine(logger=...)")
        self.state = state
        self.algorithms = algorithms
        self.keep_trace = keep_trace
        self._trace: deque[Trace] = deque(maxlen=TRACE_LIMIT)

    @property
    def algorithms(self) -> tuple[Algorithm, ...]:
        """The algorithms run, in order; setting them registers each new one with ``method_log``."""
        return tuple(algo for algo, _ in self._scoped)

    @algorithms.setter
    def algorithms(self, algorithms: Sequence[Algorithm]) -> None:
        self._scoped = tuple((algo, self.method_log.scope(algo)) for algo in algorithms)
        self.state.algorithms = tuple(algorithms)
        seen: dict[str, int] = {}
        for algo in algorithms:  # which instance of its class each is: its generator's seed depends on it
            algo._instance = seen.get(algo.name, 0)
            seen[algo.name] = algo._instance + 1

    @property
    def trace(self) -> list[Trace]:
        return list(self._trace)

    def run_event(self, event: Event) -> tuple[str, ...]:
        ran = []
        for algo, log in self._scoped:
            if algo.match(event, self.state):
                algo.apply(event, self.state, log)
                ran.append(algo.name)
        if self.keep_trace:
            self._trace.append(Trace(event, tuple(ran)))
        if event is Event.FIT_END:
            self.method_log.log_activity()
        return tuple(ran)
