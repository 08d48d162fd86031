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


# -- NumPy and 0-d tensor scalars where a number is declared ----------------------------------------


def _numeric_cases():
    """``(record, name, Python value)`` for each declared number of each class: its suggested value,
    or the constructor's default where the suggestion is not a number."""
    cases = []
    for record in RECORDS:
        defaults = inspect.signature(getattr(algorithms, record.class_name)).parameters
        for name, declared in (_declaration(record) or {}).items():
            if not isinstance(declared, (Integer, Real, FractionOrCount)):
                continue
            for value in (
                record.hyperparameters[name].suggested if name in record.hyperparameters else None,
                defaults[name].default if name in defaults else None,
            ):
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    cases.append((record, name, value))
                    break
    return cases


NUMERIC = _numeric_cases()


def _scalars(value, integer):
    import numpy as np
    import torch

    if integer:
        return [np.int64(value), np.int32(value), torch.tensor(value)]
    return [np.float64(value), torch.tensor(float(value), dtype=torch.float64)] + (
        [np.int64(value)] if value == int(value) else []
    )


def test_every_declared_number_of_the_catalog_is_covered():
    assert {r.key for r, _, _ in NUMERIC} >= {"cutout", "swa", "mixup", "cutmix", "sam", "gyro_dropout"}


def test_emas_smoothing_takes_a_numpy_or_0d_tensor_scalar():
    """Not in the sweep above: EMA's suggested half_life excludes a smoothing."""
    import numpy as np
    import torch

    for scalar in (np.float64(0.999), np.float32(0.5), torch.tensor(0.25)):
        ema = algorithms.EMA(half_life=None, smoothing=scalar)
        assert type(ema.smoothing) is float and ema.smoothing == float(scalar)
        assert (
            repr(ema) == f"EMA(half_life=None, smoothing={float(scalar)!r}, ema_start='0.0dur', update_interval='1ba')"
        )


@pytest.mark.parametrize(("record", "name", "value"), NUMERIC, ids=[f"{r.key}-{n}" for r, n, _ in NUMERIC])
def test_a_numpy_or_0d_tensor_scalar_is_taken_and_stored_as_a_plain_number(record, name, value):
    """As Composer, timm and torchvision take them: ``CutOut(num_holes=np.int64(1))``; the class
    keeps the Python number, so its repr and log show it."""
    integer = isinstance(_declaration(record)[name], Integer)
    arguments = {n: spec.suggested for n, spec in record.hyperparameters.items()}
    for scalar in _scalars(value, integer):
        arguments[name] = scalar
        algo = getattr(algorithms, record.class_name)(**arguments)
        if name in vars(algo):
            stored = getattr(algo, name)
            assert type(stored) in ((int,) if integer else (int, float)) and stored == value, (scalar, stored)
        text = repr(algo)
        assert "np." not in text and "tensor(" not in text and "array(" not in text, text
        assert all(
            type(v).__module__ == "builtins" or isinstance(v, (str, tuple)) for v in algo.hyperparameters().values()
        ), algo.hyperparameters()


@pytest.mark.parametrize(("record", "name", "value"), NUMERIC, ids=[f"{r.key}-{n}" for r, n, _ in NUMERIC])
def test_a_bool_scalar_is_still_refused_where_a_number_is_declared(record, name, value):
    import numpy as np
    import torch

    arguments = {n: spec.suggested for n, spec in record.hyperparameters.items()}
    for bad in (np.bool_(True), torch.tensor(True), torch.tensor([value])):
        arguments[name] = bad
        with pytest.raises(ValueError) as raised:
            getattr(algorithms, record.class_name)(**arguments)
        assert str(raised.value).startswith(f"{name}={bad!r}: "), str(raised.value)
