"""Every method declares its hyperparameters once, beside its signature, and validates through it.

Parametrized over the metadata registry: a new method is covered by being registered. The
declaration is ``PARAMETERS`` in the module that defines the method's class (see
:mod:`algorithms.core.parameters`).
"""

from __future__ import annotations

import inspect
import math
import sys

import pytest

import algorithms
from algorithms.core.parameters import FractionOrCount, Integer, Parameters, Real
from algorithms.metadata import Kind, load_all_metadata

RECORDS = [r for r in load_all_metadata().values() if r.kind == Kind.METHOD and r.class_name]


def _declaration(record):
    return getattr(sys.modules[getattr(algorithms, record.class_name).__module__], "PARAMETERS", None)


def _hyperparameters(record):
    """The class's constructor parameters, less the plumbing its metadata lists."""
    signature = inspect.signature(getattr(algorithms, record.class_name))
    return [name for name in signature.parameters if name not in record.plumbing]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.key)
def test_the_declaration_covers_exactly_the_hyperparameters_of_the_signature(record):
    declared = _declaration(record)
    module = getattr(algorithms, record.class_name).__module__
    assert isinstance(declared, Parameters), f"{module} has no PARAMETERS = Parameters(...)"
    wanted = _hyperparameters(record)
    mismatches = [
        f"{record.class_name}({name}=...) is not declared in {module}.PARAMETERS"
        for name in wanted
        if name not in declared
    ]
    mismatches += [
        f"{module}.PARAMETERS declares {name!r}, not in the signature" for name in declared if name not in wanted
    ]
    assert not mismatches, "\n".join(mismatches)


def _interval(low, high, low_open, high_open):
    """The range as the card and the messages write it, from the declaration's own fields."""
    return (
        ("(" if low is None or low_open else "[")
        + ("-inf" if low is None else repr(low))
        + ", "
        + ("inf" if high is None else repr(high))
        + (")" if high is None or high_open else "]")
    )


def _just_outside():
    """``(record, name, bad value, the range the message must state)`` for each end of each
    bounded declaration: the open end itself, or the nearest value beyond a closed end."""
    cases = []
    for record in RECORDS:
        for name, declared in (_declaration(record) or {}).items():
            if isinstance(declared, Real):
                shown = _interval(declared.low, declared.high, declared.low_open, declared.high_open)
                if declared.low is not None:
                    bad = declared.low if declared.low_open else math.nextafter(declared.low, -math.inf)
                    cases.append((record, name, bad, shown))
                if declared.high is not None:
                    bad = declared.high if declared.high_open else math.nextafter(declared.high, math.inf)
                    cases.append((record, name, bad, shown))
            elif isinstance(declared, Integer):
                shown = _interval(declared.low, declared.high, False, False)
                if declared.low is not None and declared.low - 1 not in declared.also:
                    cases.append((record, name, declared.low - 1, shown))
                if declared.high is not None and declared.high + 1 not in declared.also:
                    cases.append((record, name, declared.high + 1, shown))
            elif isinstance(declared, FractionOrCount):
                cases += [(record, name, 0, "(0, 1)"), (record, name, 1.5, "(0, 1)")]
    return cases


CASES = _just_outside()


def test_every_method_with_a_bounded_hyperparameter_is_covered():
    bounded = {record.key for record, *_ in CASES}
    assert {"cutout", "label_smoothing", "selective_backprop", "squeeze_excite"} <= bounded


@pytest.mark.parametrize(
    ("record", "name", "value", "shown"), CASES, ids=[f"{r.key}-{n}={v!r}" for r, n, v, _ in CASES]
)
def test_a_value_just_outside_the_declared_range_is_refused_naming_it(record, name, value, shown):
    arguments = {n: spec.suggested for n, spec in record.hyperparameters.items()}
    arguments[name] = value
    with pytest.raises(ValueError) as raised:
        getattr(algorithms, record.class_name)(**arguments)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"{name}={value!r}: ") and shown in message, message
