"""Every difference from Composer's tests is documented on its method's card, in the sentence given."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from differences import DIFFERENCES

CARDS = Path(__file__).resolve().parents[2] / "docs" / "source" / "method_cards"


def _words(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


@pytest.mark.parametrize("node", sorted(DIFFERENCES))
def test_difference_is_on_the_card(node: str) -> None:
    key, sentence = DIFFERENCES[node]
    card = CARDS / f"{key}.md"
    assert card.is_file(), f"{node}: no card {card.name}"
    assert _words(sentence) in _words(card.read_text(encoding="utf-8")), (
        f"{node}: the {key} card does not say: {sentence!r}"
    )


def test_differences_name_cases_in_this_folder() -> None:
    here = Path(__file__).parent
    for node in DIFFERENCES:
        module, _, name = node.partition("::")
        assert (here / module).is_file(), f"{node}: no module {module} here"
        assert re.search(rf"def {re.escape(name.split('[')[0])}\b", (here / module).read_text()), (
            f"{node}: no test {name.split('[')[0]} in {module}"
        )
