"""Hyperparameter declarations: each method states its hyperparameters once, beside its signature.

A method's module declares, for each hyperparameter of its ``Algorithm`` class, its kind, its range
or choices and a one-line note::

    >>> from algorithms.core.parameters import Boolean, Integer, Parameters, Real
    >>> PARAMETERS = Parameters(
    ...     num_holes=Integer(low=0, note="How many holes each image gets."),
    ...     length=Real(low=0, high=1, low_open=True, note="A hole's side, as a fraction of the shorter side."),
    ...     uniform_sampling=Boolean(note="Every pixel equally likely to be cut."),
    ... )

Its functional form and its class both validate through it (``PARAMETERS.check(...)``), so every
bad value gets the same one-line ``ValueError`` naming the parameter, the value and the range::

    >>> PARAMETERS.check(num_holes=1, length=1.5)
    Traceback (most recent call last):
    ...
    ValueError: length=1.5: must be a number in (0, 1]

The card's hyperparameter table reads the range (:meth:`Declared.range`) and the note from here,
and ``metadata.json`` keeps only the suggested value and why. A bool is never a number here
(``True`` is not accepted where an integer is expected). Where a number is declared, a NumPy
integer or floating scalar and a 0-d torch tensor of an integer or floating dtype are numbers too,
as Composer, timm and torchvision take them (``np.int64(1)`` from a sweep's ``np.arange``):
:func:`plain_number` turns them into the ``int`` or ``float`` they hold, and :meth:`Parameters.check`
returns the values so converted. Standard library only (NumPy and torch are looked up in
``sys.modules``, never imported).
"""

from __future__ import annotations

import inspect
import math
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Boolean",
    "Choice",
    "Declared",
    "FractionOrCount",
    "Integer",
    "Other",
    "Parameters",
    "Real",
    "Rule",
    "interval",
    "plain_number",
]


def interval(low: float | None, high: float | None, low_open: bool = False, high_open: bool = False) -> str:
    """``[0, 1]``, ``(0, 1]``, ``[0, inf)``: the usual notation, an end that is None unbounded."""
    opening = "(" if low is None or low_open else "["
    closing = ")" if high is None or high_open else "]"
    return f"{opening}{'-inf' if low is None else repr(low)}, {'inf' if high is None else repr(high)}{closing}"


@dataclass(frozen=True, kw_only=True)
class Declared:
    """One hyperparameter's declaration: what it accepts and a one-line note for the card.

    ``optional``: ``None`` is accepted too (a value derived from others, or "off").
    """

    note: str
    optional: bool = False

    def accepts(self, value: Any) -> bool:
        """Whether ``value`` is allowed (``None`` aside: see ``optional``)."""
        raise NotImplementedError

    def requirement(self) -> str:
        """What a value must be, as the error message says it: ``a number in (0, 1]``."""
        raise NotImplementedError

    def range(self) -> str:
        """The card's Range cell: the interval or the choices."""
        return self.requirement()

    def check(self, name: str, value: Any) -> None:
        """Raise ``ValueError("name=value: must be ...")`` unless ``value`` is allowed."""
        if (value is None and self.optional) or (value is not None and self.accepts(value)):
            return
        raise ValueError(f"{name}={value!r}: must be {'None or ' if self.optional else ''}{self.requirement()}")


def plain_number(value: Any) -> Any:
    """The Python ``int`` or ``float`` that a NumPy integer or floating scalar (``np.int64(3)``,
    ``np.float32(0.5)``) or a 0-d torch tensor of an integer or floating dtype
    (``torch.tensor(3)``) holds; any other value is returned as it is (a bool, ``np.bool_``, a
    bool tensor, a tensor or array with a dimension, a string).

    >>> plain_number(3), plain_number("3")
    (3, '3')
    """
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(value, numpy.generic):
        if isinstance(value, numpy.integer):
            return int(value)
        if isinstance(value, numpy.floating):
            return float(value)
        return value
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor) and value.ndim == 0:
        if value.dtype.is_floating_point:
            return float(value.item())
        if not value.dtype.is_complex and value.dtype is not torch.bool:
            return int(value.item())
    return value


def _is_number(value: Any) -> bool:
    value = plain_number(value)
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True, kw_only=True)
class Real(Declared):
    """A finite number (int or float) in ``[low, high]``; ``low_open``/``high_open`` leave an end out."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    def accepts(self, value: Any) -> bool:
        value = plain_number(value)
        return _is_number(value) and _within(value, self.low, self.high, self.low_open, self.high_open)

    def range(self) -> str:
        return interval(self.low, self.high, self.low_open, self.high_open)

    def requirement(self) -> str:
        return f"a number in {self.range()}"


@dataclass(frozen=True, kw_only=True)
class Integer(Declared):
    """An int in ``[low, high]`` (either end None: unbounded), or one of ``also`` (``-1`` for "drawn")."""

    low: int | None = None
    high: int | None = None
    also: tuple[int, ...] = ()

    def accepts(self, value: Any) -> bool:
        value = plain_number(value)
        if isinstance(value, bool) or not isinstance(value, int):
            return False
        return value in self.also or _within(value, self.low, self.high)

    def range(self) -> str:
        return " or ".join([*map(repr, self.also), interval(self.low, self.high)])

    def requirement(self) -> str:
        return " or ".join([*map(repr, self.also), f"an integer in {interval(self.low, self.high)}"])


@dataclass(frozen=True, kw_only=True)
class FractionOrCount(Declared):
    """A size given as a fraction in ``(0, 1)`` of ``of`` (``0.25``) or as a whole count ``>= 1``
    (``16``, or ``16.0``)."""

    of: str

    def accepts(self, value: Any) -> bool:
        value = plain_number(value)
        return _is_number(value) and value > 0 and (value < 1 or value == int(value))

    def range(self) -> str:
        return f"{interval(0, 1, True, True)} or a whole number >= 1"

    def requirement(self) -> str:
        return f"a fraction in {interval(0, 1, True, True)} of {self.of} or a whole count >= 1"


@dataclass(frozen=True, kw_only=True)
class Boolean(Declared):
    """``True`` or ``False`` (not 0 or 1)."""

    def accepts(self, value: Any) -> bool:
        return isinstance(value, bool)

    def requirement(self) -> str:
        return "True or False"


@dataclass(frozen=True, kw_only=True)
class Choice(Declared):
    """One of ``choices``, of the same type (``1`` is not ``True``); with ``fold_case``, a string
    in any case (the method lower-cases it)."""

    choices: tuple[Any, ...]
    fold_case: bool = False

    def accepts(self, value: Any) -> bool:
        if self.fold_case and isinstance(value, str):
            value = value.lower()
        return any(type(value) is type(choice) and value == choice for choice in self.choices)

    def range(self) -> str:
        return ", ".join(map(repr, self.choices))

    def requirement(self) -> str:
        return f"one of {self.range()}" if len(self.choices) > 1 else self.range()


@dataclass(frozen=True, kw_only=True)
class Other(Declared):
    """A kind the others do not cover (a duration, a set of operations, a function): ``requires``
    says what it takes (``a duration such as '10ba'``), and ``parse(name, value)`` raises a
    ``ValueError`` that names the parameter and the value, and says what is wrong, for a value it
    does not accept (the method's own parser, so the message can say more than the range)."""

    requires: str
    parse: Callable[[str, Any], object]

    def accepts(self, value: Any) -> bool:
        try:
            self.parse("value", value)
        except (ValueError, TypeError):
            return False
        return True

    def requirement(self) -> str:
        return self.requires

    def check(self, name: str, value: Any) -> None:
        if value is not None or not self.optional:
            self.parse(name, value)


def _within(
    value: float, low: float | None, high: float | None, low_open: bool = False, high_open: bool = False
) -> bool:
    above = low is None or value > low or (value == low and not low_open)
    below = high is None or value < high or (value == high and not high_open)
    return above and below


@dataclass(frozen=True)
class Rule:
    """A constraint between hyperparameters: ``test`` takes them by name and is true when they
    agree; ``says`` is what is wrong otherwise and what to do. The error names the values first:
    ``Rule(lambda tau, sigma: tau <= sigma, "tau must be <= sigma")`` gives
    ``tau=8, sigma=4: tau must be <= sigma``."""

    test: Callable[..., bool]
    says: str

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(inspect.signature(self.test).parameters)


class Parameters(Mapping[str, Declared]):
    """A method's hyperparameters by name, in signature order, with the rules between them."""

    def __init__(self, *rules: Rule, **declared: Declared):
        self._declared = dict(declared)
        self.rules = rules
        for rule in rules:
            unknown = [name for name in rule.names if name not in declared]
            if unknown:
                raise TypeError(f"Rule({rule.says!r}) names undeclared parameters {unknown}")

    def __getitem__(self, name: str) -> Declared:
        return self._declared[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._declared)

    def __len__(self) -> int:
        return len(self._declared)

    def __repr__(self) -> str:
        return f"Parameters({', '.join(self._declared)})"

    def check(self, **values: Any) -> dict[str, Any]:
        """Validate the given hyperparameters (a functional form passes the ones it takes), then
        every rule whose parameters were all given; the first problem raises ``ValueError``.

        Returns the values by name, a NumPy or 0-d tensor scalar given for a declared number as the
        Python ``int`` or ``float`` it holds (:func:`plain_number`), the others as given."""
        for name, value in values.items():
            if name not in self._declared:
                raise TypeError(f"{name!r} is not a declared hyperparameter — declare it or drop it")
            self._declared[name].check(name, value)
        values = {
            name: plain_number(value) if isinstance(self._declared[name], (Real, Integer, FractionOrCount)) else value
            for name, value in values.items()
        }
        for rule in self.rules:
            if all(name in values for name in rule.names):
                arguments = {name: values[name] for name in rule.names}
                if not rule.test(**arguments):
                    given = ", ".join(f"{name}={value!r}" for name, value in arguments.items())
                    raise ValueError(f"{given}: {rule.says}")
        return values
