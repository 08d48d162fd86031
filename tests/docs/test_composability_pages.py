"""The Composability page and the cards' composability snippets, rendered from a hand-made matrix
(every outcome, notes, a detail, a note with markup characters), and without one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from composability_support import HOSTILE_NOTE, matrix_document
from docs_support import REPO_ROOT
from methods_tools import composability_pages as cp
from methods_tools import pages
from methods_tools.docsgen import Site, jinja_environment, sorted_methods
from methods_tools.markup import md_code, md_text
from methods_tools.matrix import NLP_LENGTH, NLP_VOCAB
from methods_tools.measurements_page import render_measurements
from methods_tools.results import ResultsError
from methods_tools.scaffold import render_card

from algorithms.metadata import load_all_metadata

RECORDS = load_all_metadata()
REFUSED = ("pair", ("selective_backprop", "cutmix"), None)
SAME_NOTE = ("pair", ("cutmix", "selective_backprop"), None)
FAILS = ("precision", ("mixup",), "fp16")
INTERACTION = ("parallel", ("cutout",), "fsdp")
DROPPED = ("parallel", ("augmix",), "ddp")
OVERRIDES = {
    REFUSED: {"outcome": "refused", "note": "List it first.", "detail": "ValueError: CutMix: the batch changed size"},
    SAME_NOTE: {"note": "List it first.", "detail": "ValueError: CutMix: the batch changed size"},
    FAILS: {"outcome": "fails", "detail": "RuntimeError: boom", "missing": ["mixed_targets"]},
    INTERACTION: {"outcome": "interaction", "note": HOSTILE_NOTE, "missing": ["changed_inputs"]},
}


def site(tmp_path: Path) -> Site:
    return Site(
        source_dir=tmp_path,
        out_dir=tmp_path,
        env=jinja_environment(pages.TEMPLATE_DIR),
        methods=sorted_methods(RECORDS),
        results=[],
    )


def html_tables(page: str) -> list[tuple[list[str], list[tuple[str, list[Any]]]]]:
    """Every table of the page's matrices (HTML, in frames that scroll): its column headers after the
    first, and per row its header and its cells (as bs4 elements)."""
    bs4 = pytest.importorskip("bs4", reason="BeautifulSoup comes with the [docs] extra (furo needs it)")
    html = bs4.BeautifulSoup(page, "html.parser")
    tables = []
    for frame in html.select("div.ml-matrix"):
        assert frame["role"] == "region" and frame["tabindex"] == "0" and frame["aria-label"]
        columns = [th.get_text() for th in frame.select("thead th")][1:]
        rows = [(tr.th.get_text(), tr.select("td")) for tr in frame.select("tbody tr")]
        tables.append((columns, rows))
    return tables


def cell_texts(tables, first_cell: str) -> list[list[str]]:
    """What each row whose header is ``first_cell`` reads as (a screen reader's text: symbol, word,
    note), after its header."""
    return [
        [first_cell, *(td.get_text() for td in cells)]
        for _, rows in tables
        for name, cells in rows
        if name == first_cell
    ]


@pytest.fixture
def rendered(tmp_path):
    document = matrix_document(RECORDS, OVERRIDES, drop=[DROPPED])
    return cp.render_composability(site(tmp_path), [(tmp_path / "cpu-test-machine.json", document)])


def test_the_page_shows_every_outcome_with_a_word_and_a_symbol_and_numbers_its_notes(rendered):
    page = rendered[cp.PAGE]
    assert page.startswith("# Composability\n")
    methods = [r for r in sorted_methods(RECORDS) if r.kind == "method"]
    vision = [r.name for r in methods if "vision" in r.domains]
    tables = html_tables(page)
    # (a) one row per first method, one column per second; the diagonal is the method alone, framed
    columns, rows = next(t for t in tables if t[0] == vision)
    assert [name for name, _ in rows] == vision
    for i, (name, cells) in enumerate(rows):
        assert len(cells) == len(vision)
        assert [j for j, td in enumerate(cells) if "ml-diagonal" in td["class"]] == [i], name
    (row,) = cell_texts([(columns, rows)], "Selective Backprop")
    assert row[vision.index("CutMix") + 1] == "⊘ refused, note 1"
    assert row[vision.index("Selective Backprop") + 1] == "✓ runs"
    (cutmix_row,) = cell_texts([(columns, rows)], "CutMix")
    assert cutmix_row[vision.index("Selective Backprop") + 1] == "✓ runs, note 1"  # same note and detail: one number
    # each cell shows its symbol (the word is for screen readers) and is coloured by its outcome
    refused = dict(rows)["Selective Backprop"][vision.index("CutMix")]
    assert refused["class"] == ["ml-cell", "ml-outcome-refused"]
    assert refused.find("span", attrs={"aria-hidden": "true"}).get_text() == "⊘"
    # (b) by precision, (c) by parallel mode, symbol and word shown; a cell the file lacks is "not run"
    assert ["MixUp", "✓ runs", "✗ fails, note 2", "✓ runs", "✓ runs", "✓ runs"] in cell_texts(tables, "MixUp")
    assert ["CutOut", "✓ runs", "⚠ interaction, note 3", "✓ runs"] in cell_texts(tables, "CutOut")
    augmix = next(cells for _, rows in tables for name, cells in rows if name == "AugMix" and len(cells) == 3)
    assert [td.get_text() for td in augmix] == ["— not run", "✓ runs", "✓ runs"]
    assert augmix[0]["class"] == ["ml-cell", "ml-outcome-not-run"]
    assert ["ddp", "fsdp", "deepspeed"] in [columns for columns, _ in tables]
    # the notes, each naming its cells, escaped
    assert (
        "1. CutMix, then Selective Backprop; Selective Backprop, then CutMix: List it first. Detail: "
        "`ValueError: CutMix: the batch changed size`."
    ) in page
    assert "2. MixUp in fp16: Detail: `RuntimeError: boom`. Not seen: `mixed_targets`." in page
    assert f"3. CutOut under fsdp: {md_text(HOSTILE_NOTE)}. Not seen: `changed_inputs`." in page
    assert "<b>" not in page and "javascript:alert(1))" not in page.replace(md_text(HOSTILE_NOTE), "")
    # where it came from
    assert md_text("Test CPU <i>x</i>, 2 cores") in page and "2026-12-05" in page
    assert md_code("results/composability/cpu-test-machine.json") in page and "`nox -s matrix`" in page
    for outcome, label in cp.OUTCOMES.items():  # the legend: each outcome's symbol and word in its colour
        assert f'- <span class="ml-cell ml-outcome-{outcome}">{label}</span>:' in page, outcome
    # a text cell's batches are token sequences, not images
    assert (
        "batches of 8 examples (images of 16 px where the methods share the vision domain, else the "
        f"language model's sequences of {NLP_LENGTH} tokens from a vocabulary of {NLP_VOCAB})"
    ) in page
    assert "images of 16 px," not in page


def test_each_methods_snippet_is_its_row_in_either_order_with_its_notes(rendered):
    snippet = rendered[cp.SNIPPETS / "cutmix.md.inc"]
    others = [
        r.name
        for r in sorted_methods(RECORDS)
        if r.kind == "method" and r.key != "cutmix" and set(r.domains) & {"vision"}
    ]
    rows = [line.strip("| ").split(" | ") for line in snippet.splitlines() if line.startswith("| ")]
    assert rows[0] == ["With", "CutMix first", "CutMix second"]
    # the table lists the others whose cells do not simply run; one sentence names the rest
    listed = [r[0] for r in rows[1:] if r[0] in {md_text(n) for n in others}]
    sentence = next(line for line in snippet.splitlines() if line.startswith("In either order, with no note: "))
    named = sentence.removeprefix("In either order, with no note: ✓ runs with ").removesuffix(".").split(", ")
    assert sorted(listed + named) == sorted(md_text(n) for n in others) and not set(listed) & set(named)
    assert listed == [md_text(n) for n in others if md_text(n) in listed]  # in name order
    assert all(r[1:] != ["✓ runs", "✓ runs"] for r in rows[1 : 1 + len(listed)])
    assert [md_text("Selective Backprop"), "✓ runs, note 1", "⊘ refused, note 1"] in rows
    assert "Alone (fp32, one process): ✓ runs." in snippet
    assert ["CutMix", "✓ runs", "✓ runs", "✓ runs", "✓ runs", "✓ runs"] in rows  # each precision
    assert ["CutMix", "✓ runs", "✓ runs", "✓ runs"] in rows  # each parallel mode
    assert "1. CutMix, then Selective Backprop; Selective Backprop, then CutMix: List it first." in snippet
    assert "{doc}`Composability page </tables/composability>`" in snippet
    # one line names the matrix's hardware, date and file, and links to what the outcomes mean
    assert (
        "**Composability matrix, small scale:** Test CPU \\<i\\>x\\</i\\>, 2 cores, 2026-12-05, each "
        "cell 6 training batches of a small model of the method's domain; results file "
        "`results/composability/cpu-test-machine.json`. {ref}`What the outcomes mean "
        "<measurements-composability>`"
    ) in snippet
    # a method's own numbering: MixUp's fails cell is its note 1
    assert "1. MixUp in fp16: Detail: `RuntimeError: boom`." in rendered[cp.SNIPPETS / "mixup.md.inc"]
    assert md_text(HOSTILE_NOTE) in rendered[cp.SNIPPETS / "cutout.md.inc"]
    # every method has a snippet; best practices have none
    assert {p for p in rendered if p != cp.PAGE} == {
        cp.SNIPPETS / f"{k}.md.inc" for k, r in RECORDS.items() if r.kind == "method"
    }


def test_the_shared_page_says_what_each_outcome_means_and_where_each_matrix_ran(tmp_path):
    """The explanation every card would repeat is on "How the cards' evidence is measured"."""
    document = matrix_document(RECORDS, OVERRIDES, drop=[DROPPED])
    out = render_measurements(site(tmp_path), matrices=[(tmp_path / "cpu-test-machine.json", document)])
    shared = out[Path("tables/measurements/composability.md.inc")]
    legend = [line for line in shared.splitlines() if line.startswith("- ")]
    assert len(legend) == len(cp.OUTCOMES) + 1
    for line, label in zip(legend, [*cp.OUTCOMES.values(), cp.NOT_RUN], strict=True):
        assert label in line, line
    assert "the matrix file has no such cell" in legend[-1]
    assert "### Composability matrix: " + md_text("Test CPU <i>x</i>, 2 cores, 2026-12-05") in shared
    assert md_code("results/composability/cpu-test-machine.json") in shared and "seed 0" in shared
    assert "{doc}`Composability page </tables/composability>` shows every cell" in shared


def test_a_method_the_matrix_predates_says_it_is_not_in_it_yet(tmp_path):
    document = matrix_document(RECORDS)
    document["cells"] = [c for c in document["cells"] if "augmix" not in c["methods"]]
    out = cp.render_composability(site(tmp_path), [(tmp_path / "cpu-x.json", document)])
    assert (
        "AugMix is not in the composability matrix yet (the committed matrix predates it)"
        in out[cp.SNIPPETS / "augmix.md.inc"]
    )
    assert ["AugMix", *["— not run"] * 5] in cell_texts(html_tables(out[cp.PAGE]), "AugMix")


def test_without_a_matrix_file_the_page_and_the_cards_say_so(tmp_path):
    out = cp.render_composability(site(tmp_path), [])
    assert "No composability matrix is committed yet: `nox -s matrix` runs it" in out[cp.PAGE]
    assert "| First" not in out[cp.PAGE]
    assert (
        out[cp.SNIPPETS / "cutmix.md.inc"]
        .rstrip()
        .endswith(
            "CutMix is not in the composability matrix yet: `nox -s matrix` adds it. {ref}`What the matrix checks "
            "<measurements-composability>`; the {doc}`Composability page </tables/composability>` "
            "shows the whole matrix."
        )
    )
    shared = render_measurements(site(tmp_path), matrices=[])[Path("tables/measurements/composability.md.inc")]
    assert "No composability matrix is committed yet: `nox -s matrix` runs it" in shared


def test_matrix_files_are_validated_and_a_missing_folder_is_no_file(tmp_path):
    assert cp.composability_files(tmp_path / "none") == []
    good = matrix_document(RECORDS)
    (tmp_path / "cpu-a.json").write_text(json.dumps(good))
    bad = dict(good, cells=[dict(good["cells"][0], outcome="maybe")])
    (tmp_path / "cpu-b.json").write_text(json.dumps(bad))
    with pytest.raises(ResultsError) as caught:
        cp.composability_files(tmp_path)
    (line,) = str(caught.value).splitlines()
    assert line.startswith(f"{tmp_path / 'cpu-b.json'}: /cells/0/outcome: 'maybe' is not one of")
    (tmp_path / "cpu-b.json").unlink()
    assert [p.name for p, _ in cp.composability_files(tmp_path)] == ["cpu-a.json"]


@pytest.mark.slow
def test_the_page_is_generated_before_the_navigation_which_lists_it():
    assert pages.GENERATORS.index(cp.render_composability) < pages.GENERATORS.index(pages.navigation)
    generated = pages.generate()
    assert generated.problems == []
    assert "   tables/composability\n" in generated.outputs[pages.NAVIGATION]
    assert cp.PAGE in generated.outputs
    assert ":doc:`tables/composability`" in (REPO_ROOT / "docs" / "source" / "index.rst").read_text()


def test_method_cards_include_their_snippet_in_a_generated_region_and_best_practices_do_not():
    card = render_card("method", "cutmix")
    section = card.split("## Composability\n", 1)[1].split("\n## ", 1)[0]
    assert (
        "<!-- generated: composability -->\n\n```{include} ../tables/composability/cutmix.md.inc\n```\n\n"
        "<!-- end generated: composability -->"
    ) in section
    best = next(k for k, r in RECORDS.items() if r.is_best_practice)
    assert "generated: composability" not in render_card("method", best)
