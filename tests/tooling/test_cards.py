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
        (1, "Title", 1),
        (2, "Suggested Hyperparameters", 11),
        (2, "Next", 33),
    ]


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


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("<!-- generated: a -->\n", "region 'a' is never closed"),
        ("<!-- end generated: a -->\n", "'end generated: a' closes no open region"),
        ("<!-- generated: a -->\n\n<!-- generated: b -->\n", "region 'b' opens inside region 'a'"),
        (
            "<!-- generated: a -->\n\n<!-- end generated: a -->\n\n"
            "<!-- generated: a -->\n\n<!-- end generated: a -->\n",
            "a second region 'a'",
        ),
    ],
)
def test_unpaired_markers_say_where(text, message):
    with pytest.raises(cards.RegionError, match=message) as info:
        cards.regions(text)
    assert info.value.line >= 1


# -- a best practice that is an optimizer: trainer_option {"optimizer": "<dotted class>"} ------


def _optimizer_practice():
    from pathlib import Path

    from algorithms.metadata import load_metadata

    return load_metadata(Path(__file__).parents[2] / "algorithms" / "core" / "decoupled_weight_decay.metadata.json")


@pytest.mark.parametrize("dotted", ["algorithms.optim.NoSuchOptimizer", "torch.nn.Linear", "DecoupledSGDW"])
def test_an_optimizer_option_must_name_an_optimizer_class(dotted):
    from dataclasses import replace

    from methods_tools.checks import check_functional

    record = _optimizer_practice()
    assert check_functional({record.key: record}) == []
    bad = replace(record, trainer_option={"optimizer": dotted})
    problems = [str(p) for p in check_functional({bad.key: bad})]
    assert len(problems) == 1 and "trainer_option" in problems[0] and dotted in problems[0], problems


def test_an_optimizer_practices_card_is_checked_against_its_optimizers_signatures(tmp_path):
    """Bare ``name=value`` may name the option's optimizer's parameters (and the Trainer's), and
    ``Optimizer(name=value)`` any optimizer of its module, defaults checked."""
    import shutil
    from pathlib import Path

    from methods_tools.checks import check_cards

    root = Path(__file__).parents[2]
    repo, package = tmp_path / "repo", tmp_path / "repo" / "algorithms"
    (package / "core").mkdir(parents=True)
    shutil.copy(root / "algorithms" / "core" / "decoupled_weight_decay.metadata.json", package / "core")
    shutil.copytree(root / "docs" / "source" / "templates", repo / "docs" / "source" / "templates")
    cards_dir = repo / "docs" / "source" / "method_cards"
    cards_dir.mkdir(parents=True)
    card = cards_dir / "decoupled_weight_decay.md"
    text = (root / "docs" / "source" / "method_cards" / "decoupled_weight_decay.md").read_text()

    def problems(extra: str) -> list[str]:
        card.write_text(text.replace("## Considerations\n", f"## Considerations\n\n{extra}\n", 1))
        return [
            str(p)
            for p in check_cards(repo, package, results_root=tmp_path / "results")
            if "decoupled_weight_decay.md" in str(p)
        ]

    assert problems("") == []
    assert problems("Keep `momentum=0.9` and `DecoupledAdamW(eps=1e-8)`, the default.") == []
    found = problems("The default `weight_decay=0.5` here.")
    assert len(found) == 1 and "code's default is 0" in found[0], found
    found = problems("Its default is `DecoupledAdamW(weight_decay=0.5)`.")
    assert len(found) == 1 and "1e-05" in found[0], found
    found = problems("Try `DecoupledAdamW(nesterov=True)` or `betas=(0.9, 0.9)`.")
    assert len(found) == 2 and all("names no parameter" in p for p in found), found
