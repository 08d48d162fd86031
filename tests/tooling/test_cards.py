"""Reading a card: sections, code blocks (with hidden set-up), generated regions, inline name=value."""

from __future__ import annotations

import pytest
from methods_tools import cards

CARD = """\
# Title

<!-- generated: tldr -->

Generated text.

<!-- end generated: tldr -->

Prose after the region.

## Suggested Hyperparameters

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

```markdown
<!-- generated: not_a_region -->
```

## Next
"""


def test_sections_skip_code():
    assert [(s.level, s.title, s.line) for s in cards.sections(CARD)] == [
        (1, "Title", 1), (2, "Suggested Hyperparameters", 11), (2, "Next", 33)]


def test_code_blocks_in_order_with_hidden_setup():
    blocks = cards.code_blocks(CARD)
    assert [(b.language, b.code, b.hidden) for b in blocks] == [
        ("python", "# ## not a heading\nx = 1\n", False),
        ("python", "y = 2\n", True),
        ("python", "z = x + y\n", False),
        ("markdown", "<!-- generated: not_a_region -->\n", False),
    ]
    assert blocks[0].line == 16 and blocks[1].line == 21 and blocks[2].line == 26


def test_inline_assignments_keyword_style_only():
    found = [(a.name, a.callee, a.value, a.line) for a in cards.inline_assignments(CARD)]
    assert found == [("alpha", None, "0.3", 13), ("alpha", "CutMix", "2", 13), ("beta", "CutMix", "3", 13)]


def test_regions_are_found_outside_code_only():
    (region,) = cards.regions(CARD).values()
    assert (region.name, region.line, region.end, region.body) == ("tldr", 3, 7, "\nGenerated text.\n")


def test_replace_regions_keeps_everything_outside_them_byte_for_byte():
    fresh = cards.regions("<!-- generated: tldr -->\n\nNew text,\ntwo lines.\n\n<!-- end generated: tldr -->\n")
    out = cards.replace_regions(CARD, fresh)
    assert out == CARD.replace("Generated text.", "New text,\ntwo lines.")
    assert cards.replace_regions(out, cards.regions(CARD)) == CARD  # and back


@pytest.mark.parametrize(("text", "message"), [
    ("<!-- generated: a -->\n", "region 'a' is never closed"),
    ("<!-- end generated: a -->\n", "'end generated: a' closes no open region"),
    ("<!-- generated: a -->\n\n<!-- generated: b -->\n", "region 'b' opens inside region 'a'"),
    ("<!-- generated: a -->\n\n<!-- end generated: a -->\n\n<!-- generated: a -->\n\n<!-- end generated: a -->\n",
     "a second region 'a'"),
])
def test_unpaired_markers_say_where(text, message):
    with pytest.raises(cards.RegionError, match=message) as info:
        cards.regions(text)
    assert info.value.line >= 1
