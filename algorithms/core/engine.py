"""Runs the matching algorithms at each event, in an order stated once, and keeps a trace of the
latest events.

The order is the user's list after the passes of :data:`ORDER_RULES` (a method that must act before
another is moved before it), and at a closing event (:attr:`Event.opens`: ``AFTER_FORWARD``,
``AFTER_LOSS``, ``AFTER_BACKWARD``, ``EVAL_BATCH_END``, ``EVAL_END``) the reverse, last-in first-out,
as Composer's ``set_filo_order`` pass runs them: what each method changed at the opening event it
restores at the closing one, so changes unwind in order (two EMAs leave the training weights in
the model after evaluation; two LabelSmoothings leave the loader's target in the batch). A list
that cannot train correctly in any order (:data:`REFUSED_TOGETHER`) is refused when the Engine is
made, with one line.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .algorithm import Algorithm
from .event import Event
from .method_log import MethodLog, check_method_log
from .state import State

__all__ = ["ORDER_RULES", "REFUSED_TOGETHER", "Engine", "Trace", "run_order"]

#: ``(first, later, why)``: an algorithm of class ``first`` runs before every algorithm of the
#: classes ``later``, wherever the user listed it. Each rule comes from a pair the composability
#: matrix found wrong in the other order; classes are named, so the core imports no method.
ORDER_RULES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    (
        "SelectiveBackprop",
        ("CutMix", "MixUp"),
        "it selects rows of the loader's batch by their loss; the mixing methods then mix the rows it kept",
    ),
    (
        "SeqLengthWarmup",
        ("Alibi",),
        "its warm-up cuts the loader's sequences first; ALiBi's shorter training length then applies to them",
    ),
    (
        "SqueezeExcite",
        ("Factorize",),
        "it needs the full convolutions' channels, which Factorize splits into narrower ones",
    ),
    (
        "StochasticDepth",
        ("ActivationCheckpointing",),
        "it replaces whole residual blocks, which would drop the checkpointing of the blocks it replaces; "
        "Activation Checkpointing then checkpoints its stochastic blocks",
    ),
)

#: What cannot be correct together, in any order: ``(test over the list, the one-line refusal)``.
REFUSED_TOGETHER: tuple[tuple[Callable[[Sequence[Algorithm]], bool], str], ...] = (
    (
        lambda algos: sum(bool(getattr(a, "interpolate_loss", False)) for a in algos) > 1,
        "two methods interpolate the loss (interpolate_loss=True): each recomputes the loss from the "
        "target, so one would discard the other's; use one of them, or interpolate_loss=False",
    ),
    (
        lambda algos: {"EMA", "SWA"} <= {a.name for a in algos},
        "EMA and SWA both replace the weights that are evaluated (EMA swaps its average in over SWA's): use one "
        "of the two averages",
    ),
)


def run_order(algorithms: Sequence[Algorithm]) -> tuple[Algorithm, ...]:
    """``algorithms`` in the order the Engine runs them: the user's order, with each rule of
    :data:`ORDER_RULES` moving the algorithms of its ``first`` class just before the earliest one of
    its ``later`` classes where they were listed after it. Everything else keeps its place."""
    order = list(algorithms)
    for first, later, _ in ORDER_RULES:
        movers = [a for a in order if a.name == first]
        targets = [i for i, a in enumerate(order) if a.name in later]
        if not movers or not targets or order.index(movers[0]) < targets[0]:
            continue
        rest = [a for a in order if a.name != first]
        at = rest.index(order[targets[0]])
        order = rest[:at] + movers + rest[at:]
    return tuple(order)


def check_together(algorithms: Sequence[Algorithm]) -> None:
    """Refuse anything in ``algorithms`` that is not an :class:`Algorithm` (TypeError), and a list
    that :data:`REFUSED_TOGETHER` names (ValueError), each with one line."""
    for algo in algorithms:
        if not isinstance(algo, Algorithm):
            raise TypeError(f"algorithms: {algo!r} is not an Algorithm instance")
    for refused, why in REFUSED_TOGETHER:
        if refused(algorithms):
            raise ValueError(f"algorithms [{', '.join(a.name for a in algorithms)}]: {why}")


#: How many of the latest events the trace keeps: a run of a million batches would otherwise keep
#: eleven million entries, and a trace is read in tests and debugging, over the last few batches.
TRACE_LIMIT = 10_000


@dataclass(frozen=True)
class Trace:
    """One event the engine ran, and the algorithms that ran at it (by name, in order)."""

    event: Event
    algorithms: tuple[str, ...]


class Engine:
    """Runs each algorithm whose ``match(event, state)`` is true at ``event``, in :func:`run_order`
    (last-in first-out at a closing event). A list that :data:`REFUSED_TOGETHER` names is a ValueError.

    At ``Event.INIT`` every algorithm's :meth:`~algorithms.core.Algorithm.reset` runs first, so an
    instance used in an earlier run starts afresh (its per-run state and generator).

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
        self.method_log = check_method_log(logger, "Engine(logger=...)")
        self.state = state
        self.algorithms = algorithms
        self.keep_trace = keep_trace
        self._trace: deque[Trace] = deque(maxlen=TRACE_LIMIT)

    @property
    def algorithms(self) -> tuple[Algorithm, ...]:
        """The algorithms in the order they run (:func:`run_order`); setting them checks the list
        (:func:`check_together`) and registers each new one with ``method_log``. ``state.algorithms``
        keeps the order given (checkpoints list them so)."""
        return tuple(algo for algo, _ in self._scoped)

    @algorithms.setter
    def algorithms(self, algorithms: Sequence[Algorithm]) -> None:
        check_together(algorithms)
        self._scoped = tuple((algo, self.method_log.scope(algo)) for algo in run_order(algorithms))
        self.state.algorithms = tuple(algorithms)
        seen: dict[str, int] = {}
        for algo in algorithms:  # which instance of its class each is: its generator's seed depends on it
            algo._instance = seen.get(algo.name, 0)
            seen[algo.name] = algo._instance + 1

    @property
    def trace(self) -> list[Trace]:
        return list(self._trace)

    def run_event(self, event: Event, log: bool = True) -> tuple[str, ...]:
        """Run ``event``; the names of the algorithms that ran, in the order they ran. With
        ``log=False`` they run without their logs (``apply``'s logger is None), so a pass repeated
        within one batch (SAM's second forward and loss) counts nothing twice."""
        if event is Event.INIT:
            for algo, _ in self._scoped:
                algo.reset()
        ran = []
        for algo, algo_log in reversed(self._scoped) if event.opens is not None else self._scoped:
            if algo.match(event, self.state):
                algo.apply(event, self.state, algo_log if log else None)
                ran.append(algo.name)
        if self.keep_trace:
            self._trace.append(Trace(event, tuple(ran)))
        if event is Event.FIT_END:
            self.method_log.log_activity()
        return tuple(ran)
