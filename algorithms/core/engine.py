"""Runs the matching algorithms at each event, in order, and keeps a trace."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .algorithm import Algorithm
from .event import Event
from .state import State

__all__ = ["Engine", "Trace"]


@dataclass(frozen=True)
class Trace:
    """One event the engine ran, and the algorithms that ran at it (by name, in order)."""

    event: Event
    algorithms: tuple[str, ...]


class Engine:
    def __init__(self, state: State, algorithms: Sequence[Algorithm] = (), logger: Any = None,
                 keep_trace: bool = True):
        for algo in algorithms:
            if not isinstance(algo, Algorithm):
                raise TypeError(f"algorithms: {algo!r} is not an Algorithm instance")
        self.state = state
        self.algorithms = tuple(algorithms)
        self.logger = logger
        self.keep_trace = keep_trace
        self.trace: list[Trace] = []

    def run_event(self, event: Event) -> tuple[str, ...]:
        ran = []
        for algo in self.algorithms:
            if algo.match(event, self.state):
                algo.apply(event, self.state, self.logger)
                ran.append(algo.name)
        if self.keep_trace:
            self.trace.append(Trace(event, tuple(ran)))
        return tuple(ran)
