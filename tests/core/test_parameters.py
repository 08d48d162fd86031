"""The hyperparameter declarations (``algorithms.core.parameters``): what each kind accepts, and
the one-line message for what it does not."""

from __future__ import annotations

import math
import re

import pytest

from algorithms.core.parameters import Boolean, Choice, FractionOrCount, Integer, Other, Parameters, Real, Rule


def _refused(declared, value):
    with pytest.raises(ValueError) as raised:
        declared.check("x", value)
    return str(raised.value)


@pytest.mark.parametrize("value", [True, False, "0.5", None, math.nan, math.inf, -math.inf, [0.5]])
def test_a_real_takes_only_finite_numbers_and_never_a_bool(value):
    assert _refused(Real(low=0, high=1, note="n"), value) == f"x={value!r}: must be a number in [0, 1]"


@pytest.mark.parametrize(
    ("declared", "inside", "outside"),
    [
        (Real(low=0, high=1, low_open=True, note="n"), [1e-9, 1, 1.0], [0, -1e-9, 1.0000001]),
        (Real(low=0, high=1, high_open=True, note="n"), [0, 0.0, 0.999], [1, -1e-9]),
        (Real(low=0, note="n"), [0, 1e300], [-1e-300]),
        (Integer(low=1, note="n"), [1, 2**70], [0, 1.0, True, "1"]),
        (Integer(low=1, also=(-1,), note="n"), [-1, 1, 3], [0, -2, 2.0]),
        (Integer(low=0, high=3, note="n"), [0, 3], [-1, 4]),
        (FractionOrCount(of="the width", note="n"), [0.25, 1, 16, 16.0], [0, 1.5, -1, True, math.inf]),
        (Boolean(note="n"), [True, False], [0, 1, "True", None]),
        (Choice(choices=("auto", True, False), note="n"), ["auto", True, False], [1, 0, "AUTO", None]),
    ],
)
def test_each_kind_accepts_its_range_and_refuses_the_rest(declared, inside, outside):
    for value in inside:
        declared.check("x", value)
        assert declared.accepts(value)
    for value in outside:
        assert _refused(declared, value).startswith(f"x={value!r}: must be ")
        assert not declared.accepts(value)


@pytest.mark.parametrize(
    ("declared", "message"),
    [
        (Real(low=0, high=1, low_open=True, note="n"), "must be a number in (0, 1]"),
        (Real(low=0, note="n"), "must be a number in [0, inf)"),
        (Real(high=0, high_open=True, note="n"), "must be a number in (-inf, 0)"),
        (Integer(low=1, also=(-1,), note="n"), "must be -1 or an integer in [1, inf)"),
        (Boolean(note="n"), "must be True or False"),
        (Choice(choices=("block", "sample"), note="n"), "must be one of 'block', 'sample'"),
        (Choice(choices=(True,), note="n"), "must be True"),
        (Real(low=0, optional=True, note="n"), "must be None or a number in [0, inf)"),
    ],
)
def test_the_message_is_one_line_naming_the_parameter_the_value_and_the_range(declared, message):
    assert _refused(declared, "bad") == f"x='bad': {message}"


def test_none_is_taken_only_where_declared_optional():
    Real(low=0, optional=True, note="n").check("x", None)
    assert _refused(Real(low=0, note="n"), None) == "x=None: must be a number in [0, inf)"


def test_another_kind_speaks_through_its_own_parser():
    def parse(name, value):
        if value != "1ep":
            raise ValueError(f"{name}={value!r}: duration not understood")
        return value

    declared = Other(requires="a duration such as '1ep'", parse=parse, note="n")
    declared.check("x", "1ep")
    assert _refused(declared, "soon") == "x='soon': duration not understood"
    assert declared.range() == "a duration such as '1ep'" and not declared.accepts("soon")


def test_rules_are_checked_once_each_value_is_in_range_and_name_every_value():
    declared = Parameters(
        Rule(lambda tau, sigma: tau <= sigma, "tau must be <= sigma"),
        sigma=Integer(low=1, note="n"),
        tau=Integer(low=1, note="n"),
    )
    declared.check(sigma=4, tau=4)
    declared.check(tau=8)  # a rule needs all its parameters
    with pytest.raises(ValueError, match=re.escape("tau=0: must be an integer in [1, inf)")):
        declared.check(sigma=4, tau=0)
    with pytest.raises(ValueError, match=re.escape("tau=8, sigma=4: tau must be <= sigma")):
        declared.check(sigma=4, tau=8)


def test_an_undeclared_name_is_a_programming_error():
    with pytest.raises(TypeError, match="'y' is not a declared hyperparameter"):
        Parameters(x=Boolean(note="n")).check(y=1)
    with pytest.raises(TypeError, match="undeclared"):
        Parameters(Rule(lambda y: y, "y"), x=Boolean(note="n"))


def test_a_declaration_is_a_mapping_in_signature_order():
    declared = Parameters(b=Boolean(note="first"), a=Real(note="second"))
    assert list(declared) == ["b", "a"] and declared["a"].note == "second" and len(declared) == 2


# -- NumPy and 0-d tensor scalars are numbers where a number is declared ----------------------------

np = pytest.importorskip("numpy")
torch = pytest.importorskip("torch")


@pytest.mark.parametrize(
    ("given", "plain"),
    [
        (np.int64(3), 3),
        (np.int32(-1), -1),
        (np.uint8(7), 7),
        (np.float64(0.25), 0.25),
        (np.float32(0.5), 0.5),
        (np.float16(2.0), 2.0),
        (torch.tensor(3), 3),
        (torch.tensor(3, dtype=torch.int16), 3),
        (torch.tensor(0.25, dtype=torch.float64), 0.25),
        (torch.tensor(0.5, dtype=torch.bfloat16), 0.5),
    ],
    ids=repr,
)
def test_a_numpy_or_0d_tensor_scalar_is_the_python_number_it_holds(given, plain):
    from algorithms.core.parameters import plain_number

    got = plain_number(given)
    assert type(got) is type(plain) and got == plain
    integer = isinstance(plain, int)
    assert Real(low=-1, high=7, note="n").accepts(given)
    assert Integer(low=-1, note="n").accepts(given) is integer
    assert Parameters(x=Real(note="n")).check(x=given) == {"x": plain}  # what the method stores


@pytest.mark.parametrize(
    "value",
    [np.bool_(True), np.bool_(False), torch.tensor(True), torch.tensor([1]), np.array([1]), torch.tensor(1 + 0j)],
    ids=repr,
)
def test_a_bool_scalar_or_a_tensor_with_a_dimension_is_still_refused(value):
    from algorithms.core.parameters import plain_number

    assert plain_number(value) is value
    for declared in (Integer(low=0, note="n"), Real(note="n"), FractionOrCount(of="w", note="n")):
        assert not declared.accepts(value)
        assert _refused(declared, value).startswith(f"x={value!r}: must be ")


def test_a_numpy_scalar_out_of_range_is_refused_and_rules_see_plain_numbers():
    assert _refused(Integer(low=1, note="n"), np.int64(0)) == "x=np.int64(0): must be an integer in [1, inf)"
    assert _refused(Real(high=1, note="n"), np.float64(math.inf)).startswith("x=np.float64(inf): ")
    seen = []
    rule = Rule(lambda a, b: seen.append((type(a), type(b))) or a <= b, "a must be <= b")
    Parameters(rule, a=Integer(note="n"), b=Real(note="n")).check(a=np.int64(1), b=torch.tensor(2.0))
    assert seen == [(int, float)]
