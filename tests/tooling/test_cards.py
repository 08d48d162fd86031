"""Reading a card: sections, code blocks (with hidden set-up), the table, inline name=value."""

from __future__ import annotations

import math

import pytest
from methods_tools import cards

CARD = """\
# Title

## Suggested Hyperparameters

| Hyperparameter | Default | Suggested | Range |
|---|---|---|---|
| `alpha` | `1.0` | `0.5` | `(0, inf)` |
| `mode` | `'a'` | `'a'` | `['a', 'b']` |

Try `alpha=0.3`, `CutMix(alpha=2, beta=3)` and `mixed = (1 - m) * x`, not `a == b`.

```python
# ## not a heading
x = 1
```

<!-- card-setup
y = 2
-->

```{code-block} python
:caption: shown
z = x + y
```

## Next
"""


def test_sections_skip_code():
    assert [(s.level, s.title, s.line) for s in cards.sections(CARD)] == [
        (1, "Title", 1), (2, "Suggested Hyperparameters", 3), (2, "Next", 26)]


def test_table_rows_and_lines():
    table = cards.find_table(CARD)
    assert table.line == 5 and table.header == ("Hyperparameter", "Default", "Suggested", "Range")
    assert [(line, cells[0]) for line, cells in table.rows] == [(7, "`alpha`"), (8, "`mode`")]


def test_code_blocks_in_order_with_hidden_setup():
    blocks = cards.code_blocks(CARD)
    assert [(b.language, b.code, b.hidden) for b in blocks] == [
        ("python", "# ## not a heading\nx = 1\n", False),
        ("python", "y = 2\n", True),
        ("python", "z = x + y\n", False),
    ]
    assert blocks[0].line == 13 and blocks[2].line == 23


def test_inline_assignments_keyword_style_only():
    found = [(a.name, a.callee) for a in cards.inline_assignments(CARD)]
    assert found == [("alpha", None), ("alpha", "CutMix"), ("beta", "CutMix")]


@pytest.mark.parametrize(("source", "value"), [("1.0", 1.0), ("'x'", "x"), ("None", None), ("(1, 2)", (1, 2)),
                                               ("[True]", [True]), ("-3", -3)])
def test_parse_literal(source, value):
    assert cards.parse_literal(source) == value


@pytest.mark.parametrize("source", ["foo()", "1 +", "os.sep", "inf", "lambda: 1"])
def test_parse_literal_rejects_non_literals(source):
    with pytest.raises(ValueError, match="not a Python literal"):
        cards.parse_literal(source)


def test_parse_range():
    assert cards.parse_range("(0, inf)") == ("range", (0, math.inf))
    assert cards.parse_range("(-inf, 1)") == ("range", (-math.inf, 1))
    assert cards.parse_range("[False, True]") == ("choices", [False, True])
    with pytest.raises(ValueError):
        cards.parse_range("0..1")


@pytest.mark.parametrize(("a", "b", "same"), [(1, 1.0, True), ((1, 2), [1, 2], True), (True, 1, False),
                                              (False, 0, False), (0.2, 1.0, False), (None, None, True),
                                              ("a", "a", True), ([1], [1, 2], False)])
def test_same_value(a, b, same):
    assert cards.same_value(a, b) is same


def test_rst_sections_levels_follow_underline_order():
    rst = "Title\n=====\n\nA\n-\n\nB\n~\n\nC\n-\n"
    assert [(s.level, s.title) for s in cards.rst_sections(rst)] == [(1, "Title"), (2, "A"), (3, "B"), (2, "C")]
