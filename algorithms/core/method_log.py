"""What each method did in a run: its hyperparameters, recorded once, and counters of its actions.

The :class:`~algorithms.core.Engine` registers every algorithm with a :class:`MethodLog`
(:meth:`MethodLog.scope`) and passes each one its own :class:`AlgorithmLog` as the ``logger`` of
``apply``; a method counts what it did with ``self.report(logger, "batches_mixed")``. After a run,
``trainer.method_log.records`` holds, per algorithm, ``{"hyperparameters": {...}, "activity":
{counter: int}}``, and :meth:`MethodLog.acted` says whether the method did anything at all: a
measurement of a method that did not act is no measurement of the method.

Python logging (logger ``algorithms.methods``) gets each algorithm's hyperparameters at INFO when
it is registered, each algorithm's activity at INFO at ``Event.FIT_END``, and every count at DEBUG.

Example::

    >>> import torch
    >>> from algorithms import CutMix
    >>> from algorithms.core import Trainer
    >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 16 * 16, 4))
    >>> batches = [(torch.randn(8, 3, 16, 16), torch.randint(0, 4, (8,))) for _ in range(3)]
    >>> trainer = Trainer(model, batches, "1ep", algorithms=[CutMix(alpha=1.0)], seed=0)
    >>> trainer.fit()
    >>> trainer.method_log.records["CutMix"]["activity"]
    {'batches_mixed': 3}
    >>> trainer.method_log.acted("CutMix")
    True
"""

from __future__ import annotations

import copy
import logging
import reprlib
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .algorithm import Algorithm

__all__ = ["AlgorithmLog", "MethodLog", "check_method_log"]

log = logging.getLogger("algorithms.methods")

_repr = reprlib.Repr()
_repr.maxstring = _repr.maxother = 200


class AlgorithmLog:
    """One algorithm's part of a :class:`MethodLog`: the ``logger`` its ``apply`` is given."""

    __slots__ = ("label", "algorithm", "hyperparameters", "activity")

    def __init__(self, label: str, algorithm: Algorithm, hyperparameters: dict[str, Any]):
        self.label = label
        self.algorithm = algorithm
        self.hyperparameters = hyperparameters
        self.activity: dict[str, int] = dict.fromkeys(algorithm.activity, 0)

    def count(self, activity: str, n: int = 1) -> None:
        """Add ``n`` to the counter ``activity``, one the algorithm declares in its ``activity``."""
        # Runs every batch: a dict increment, and a message only where DEBUG logging is on.
        if activity not in self.activity:
            declared = ", ".join(map(repr, self.activity)) or "none"
            raise ValueError(
                f"{self.label}: counter {activity!r} is not declared in {type(self.algorithm).__name__}"
                f".activity (declared: {declared})"
            )
        if type(n) is not int or n < 0:
            raise ValueError(f"{self.label}: count({activity!r}, n={n!r}): n must be an int >= 0")
        self.activity[activity] += n
        log.debug("%s: %s += %d", self.label, activity, n)

    def _acted(self) -> bool:
        """Whether the counters so far show that the algorithm did something (its ``acted``)."""
        return bool(self.algorithm.acted(MappingProxyType(self.activity)))

    def _describe(self) -> str:
        """``"12 batches mixed, 0 ..."``: each counter with the algorithm's phrase for it."""
        phrases = self.algorithm.activity
        return ", ".join(f"{n} {phrases[name]}" for name, n in self.activity.items()) or "no activity declared"


class MethodLog:
    """One record per algorithm of a run: its hyperparameters and its activity counters.

    An algorithm's label is its class name; a second instance of the same class is ``"Name#2"``,
    a third ``"Name#3"``, in the order they are registered (the Trainer's ``algorithms`` order).
    """

    def __init__(self) -> None:
        self._logs: dict[str, AlgorithmLog] = {}
        self._by_algorithm: dict[int, AlgorithmLog] = {}

    def scope(self, algorithm: Algorithm) -> AlgorithmLog:
        """Register ``algorithm`` (once; registering it again returns the same log): record its
        hyperparameters (:meth:`Algorithm.hyperparameters`, made JSON-able), log them at INFO, and
        start each of its declared counters at 0."""
        known = self._by_algorithm.get(id(algorithm))
        if known is not None and known.algorithm is algorithm:
            return known
        label, copies = algorithm.name, 1
        while label in self._logs:
            copies += 1
            label = f"{algorithm.name}#{copies}"
        hyperparameters = {str(k): _jsonable(v) for k, v in algorithm.hyperparameters().items()}
        scoped = AlgorithmLog(label, algorithm, hyperparameters)
        self._logs[label] = self._by_algorithm[id(algorithm)] = scoped
        log.info("%s: hyperparameters %s", label, hyperparameters)
        return scoped

    @property
    def records(self) -> dict[str, dict[str, Any]]:
        """``{label: {"hyperparameters": {...}, "activity": {counter: int}}}``, a copy."""
        return {
            label: {"hyperparameters": copy.deepcopy(s.hyperparameters), "activity": dict(s.activity)}
            for label, s in self._logs.items()
        }

    def acted(self, label: str) -> bool:
        """Whether the algorithm ``label`` did anything: its ``acted(activity)``, by default any
        counter above 0."""
        return self._get(label)._acted()

    def summary(self) -> str:
        """One line per algorithm: ``CutMix: batches_mixed=12``, and ``(did not act)`` where it did not."""
        lines = []
        for label, scoped in self._logs.items():
            counts = ", ".join(f"{name}={n}" for name, n in scoped.activity.items()) or "no activity declared"
            lines.append(f"{label}: {counts}" + ("" if scoped._acted() else " (did not act)"))
        return "\n".join(lines)

    def log_activity(self) -> None:
        """Log each algorithm's activity at INFO (the Engine does it at ``Event.FIT_END``)."""
        if not log.isEnabledFor(logging.INFO):
            return
        for label, scoped in self._logs.items():
            log.info("%s: %s%s", label, scoped._describe(), "" if scoped._acted() else " (did not act)")

    def _get(self, label: str) -> AlgorithmLog:
        try:
            return self._logs[label]
        except KeyError:
            raise KeyError(
                f"no algorithm labelled {label!r} in this run (labels: {', '.join(map(repr, self._logs)) or 'none'})"
            ) from None

    def __repr__(self) -> str:
        return f"MethodLog({', '.join(self._logs)})"


def check_method_log(logger: Any, where: str) -> MethodLog:
    """``logger`` itself when it is a :class:`MethodLog`, a new one for ``None``; a TypeError
    otherwise, naming ``where`` (``"Trainer(logger=...)"``)."""
    if logger is None:
        return MethodLog()
    if not isinstance(logger, MethodLog):
        raise TypeError(
            f"{where}: got {type(logger).__name__}; give an algorithms.core.MethodLog, or None for a "
            "new one (read it after fit() as trainer.method_log)"
        )
    return logger


def _jsonable(value: Any) -> Any:
    """``value`` as plain JSON: numbers, strings, booleans and None as they are, lists for tuples
    and lists, dicts with string keys for mappings, and a short repr for anything else."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    qualname = getattr(value, "__qualname__", None)
    if callable(value) and isinstance(qualname, str):  # a function or class: its name, not its address
        return f"{getattr(value, '__module__', None) or ''}.{qualname}".lstrip(".")
    try:
        return _repr.repr(value)
    except Exception:  # a repr that fails says nothing about the run
        return f"<{type(value).__name__}>"
