"""Search finds a card by its name and by its metadata's aka: each card's "aka" fact holds a main
index entry per name, which Sphinx's search scores above any match in a page's text. The browser
test (tests/docs/test_browser.py) runs Sphinx's own scorer on the same queries."""

from __future__ import annotations

import json

import pytest
from methods_tools.docsgen import index_entry
from methods_tools.facts import CardFacts

from algorithms.metadata import Kind, load_all_datasets, load_all_metadata, load_all_model_families

CARDS = [
    *((Kind.METHOD, k, r) for k, r in load_all_metadata().items()),
    *((Kind.DATASET, k, r) for k, r in load_all_datasets().items()),
    *((Kind.MODEL_FAMILY, k, r) for k, r in load_all_model_families().items()),
]


def test_every_card_has_a_main_index_entry_for_its_name_and_each_aka():
    facts = CardFacts()
    for kind, key, record in CARDS:
        body = facts.body(kind, key, "aka")
        assert "```{eval-rst}\n.. index::\n" in body, key  # one directive: one anchor, on the text after it
        entries = [line.removeprefix("   !single: ") for line in body.splitlines() if line.startswith("   !single: ")]
        names = [record.name, *(record.as_dict().get("aka") or ())]
        first_spellings = {n.casefold(): n for n in reversed(names)}  # case-insensitively, the first kept
        assert entries == [index_entry(n) for n in names if first_spellings[n.casefold()] is n], key


def test_an_index_entry_is_one_plain_entry_whatever_the_metadata_says():
    assert index_entry("  !fp16;\n bf16 `x` ") == "fp16, bf16 'x'"


# The rule of Sphinx 9's searchtools.js for an index entry, reproduced: an entry that contains the
# query, at most twice as long, scores round(100 * len(query) / len(entry)); a title that contains
# the query scores at most Scorer.title (15) + 1 and a word of the text Scorer.title (15), so an
# index entry that scores above 16 outranks them.
TEXT_MAX = 16
SEARCHES = {
    "bf16": {"half_precision", "mixed_precision"},
    "DDP": {"ddp"},
    "FSDP": {"fsdp"},
    "label smoothing": {"label_smoothing"},
    "EMA": {"ema"},
}


@pytest.mark.parametrize("query", list(SEARCHES))
def test_the_search_index_scores_the_matching_card_first(real_site, query):
    text = (real_site / "searchindex.js").read_text()
    index = json.loads(text[text.index("(") + 1 : text.rindex(")")])
    q = query.lower().strip()
    scores: dict[str, int] = {}
    for entry, found in index["indexentries"].items():
        if q in entry and len(q) >= len(entry) / 2:
            for file, _anchor, main in found:
                if main:  # entries not marked main are shown after every other result
                    doc = index["docnames"][file]
                    scores[doc] = max(scores.get(doc, 0), round(100 * len(q) / len(entry)))
    expected = {f"method_cards/{key}" for key in SEARCHES[query]}
    ranked = sorted(scores, key=scores.get, reverse=True)
    assert set(ranked[: len(expected)]) == expected, scores
    assert min(scores[d] for d in expected) > TEXT_MAX, scores
