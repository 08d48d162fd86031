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
#: The parallel table's columns: each mode in fp32, then in amp_bf16.
PARALLEL_HEADERS = [
    "ddp, fp32",
    "ddp, amp_bf16",
    "fsdp, fp32",
    "fsdp, amp_bf16",
    "deepspeed, fp32",
    "deepspeed, amp_bf16",
]
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
    assert row[vision.index("CutMix") + 1] == "✗ refused, note 1"
    assert row[vision.index("Selective Backprop") + 1] == "✓ runs"
    (cutmix_row,) = cell_texts([(columns, rows)], "CutMix")
    assert cutmix_row[vision.index("Selective Backprop") + 1] == "✓ runs, note 1"  # same note and detail: one number
    # each cell shows its symbol (the word is for screen readers) and is coloured by its outcome
    refused = dict(rows)["Selective Backprop"][vision.index("CutMix")]
    assert refused["class"] == ["ml-cell", "ml-outcome-fails"]  # red: the combination does not train
    assert refused.find("span", attrs={"aria-hidden": "true"}).get_text() == "✗"
    assert refused["title"] == "refused"
    # (b) by precision, (c) by parallel mode, symbol and word shown; a cell the file lacks is "not run"
    assert ["MixUp", "✓ runs", "✗ fails, note 2", "✓ runs", "✓ runs", "✓ runs"] in cell_texts(tables, "MixUp")
    # each parallel mode in fp32 and in amp_bf16, side by side
    assert PARALLEL_HEADERS in [columns for columns, _ in tables]
    assert ["CutOut", "✓ runs", "✓ runs", "⚠ interaction, note 3", "✓ runs", "✓ runs", "✓ runs"] in cell_texts(
        tables, "CutOut"
    )
    augmix = next(cells for _, rows in tables for name, cells in rows if name == "AugMix" and len(cells) == 6)
    assert [td.get_text() for td in augmix] == ["— not run", *["✓ runs"] * 5]
    assert augmix[0]["class"] == ["ml-cell", "ml-outcome-not-run"]
    # the notes, each naming its cells, escaped
    assert (
        "1. CutMix, then Selective Backprop; Selective Backprop, then CutMix: List it first. Detail: "
        "`ValueError: CutMix: the batch changed size`."
    ) in page
    assert "2. MixUp in fp16: Detail: `RuntimeError: boom`. Not seen: `mixed_targets`." in page
    assert f"3. CutOut under fsdp in fp32: {md_text(HOSTILE_NOTE)}. Not seen: `changed_inputs`." in page
    assert "<b>" not in page and "javascript:alert(1))" not in page.replace(md_text(HOSTILE_NOTE), "")
    # where it came from
    assert md_text("Test CPU <i>x</i>, 2 cores") in page and "2026-12-05" in page
    assert md_code("results/composability/cpu-test-machine.json") in page and "`nox -s matrix`" in page
    for outcome, label in cp.OUTCOMES.items():  # the legend: each outcome's symbol and word in its colour
        assert f'- <span class="ml-cell ml-outcome-{cp.COLOURS[outcome]}">{label}</span>:' in page, outcome
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
    assert [md_text("Selective Backprop"), "✓ runs, note 1", "✗ refused, note 1"] in rows
    assert "Alone (fp32, one process): ✓ runs." in snippet
    assert ["CutMix", "✓ runs", "✓ runs", "✓ runs", "✓ runs", "✓ runs"] in rows  # each precision
    assert ["CutMix", *["✓ runs"] * 6] in rows  # each parallel mode, in fp32 and in amp_bf16
    assert ["Parallel (2 processes)", *(md_code(h) for h in PARALLEL_HEADERS)] in rows
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
    # every method has a snippet, and every best practice of a precision or parallel mode
    assert {p for p in rendered if p != cp.PAGE} == {
        cp.SNIPPETS / f"{k}.md.inc"
        for k, r in RECORDS.items()
        if r.kind == "method" or (r.is_best_practice and cp.practice_modes(r) is not None)
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
    assert ["AugMix", *["— not run"] * 6] in cell_texts(html_tables(out[cp.PAGE]), "AugMix")


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


def test_cards_include_their_snippet_in_a_generated_region_as_do_best_practices_of_a_mode():
    for key in ("cutmix", "fsdp", "deepspeed_zero", "mixed_precision", "data_parallel"):
        card = render_card("method", key)
        section = card.split("## Composability\n", 1)[1].split("\n## ", 1)[0]
        assert (
            f"<!-- generated: composability -->\n\n```{{include}} ../tables/composability/{key}.md.inc\n```\n\n"
            "<!-- end generated: composability -->"
        ) in section, key
    # a best practice of another option (an optimizer) has no column of the matrix
    assert cp.practice_modes(RECORDS["decoupled_weight_decay"]) is None
    assert "generated: composability" not in render_card("method", "decoupled_weight_decay")


# --- what does not train is a red cross, and counted ----------------------------------------------

CRASH = ("parallel", ("cutout",), "deepspeed")
USE_ONE = (("pair", ("cutmix", "mixup"), None), ("pair", ("mixup", "cutmix"), None))
BROKEN_OVERRIDES = {
    **OVERRIDES,
    CRASH: {
        "outcome": "interaction",
        "note": "Flattened buffers need contiguous weights.",
        "detail": "RuntimeError: x",
    },
    **{k: {"note": "Both mix the batch: use one of them per run, not both."} for k in USE_ONE},
}


def test_a_refusal_and_a_crash_are_red_crosses_that_the_summary_counts(tmp_path):
    document = matrix_document(RECORDS, BROKEN_OVERRIDES)
    out = cp.render_composability(site(tmp_path), [(tmp_path / "cpu-test-machine.json", document)])
    page = out[cp.PAGE]
    tables = html_tables(page)
    cutout = next(cells for _, rows in tables for name, cells in rows if name == "CutOut" and len(cells) == 6)
    fsdp, deepspeed = (cutout[PARALLEL_HEADERS.index(h)].get_text() for h in ("fsdp, fp32", "deepspeed, fp32"))
    assert fsdp.startswith("⚠ interaction, note ") and deepspeed.startswith("✗ crashes, note ")
    assert cutout[PARALLEL_HEADERS.index("deepspeed, fp32")]["class"] == ["ml-cell", "ml-outcome-fails"]
    # CutMix with MixUp trains, but its note says to use one of them: amber, never green
    columns, rows = next(t for t in tables if "MixUp" in t[0] and "CutMix" in t[0])
    mix = dict(rows)["CutMix"][columns.index("MixUp")]
    assert mix.get_text().startswith("⚠ use one") and mix["class"] == ["ml-cell", "ml-outcome-interaction"]
    # the summary: every outcome counted, and the crosses in all (1 refused, 1 crash, 1 fails)
    assert "⚠ use one 2, ⚠ interaction 1, ✗ refused 1, ✗ crashes 1, ✗ fails 1." in page
    assert "Combinations that do not train (✗ in all): 3." in page
    snippet = out[cp.SNIPPETS / "cutout.md.inc"]
    assert "| CutOut | ✓ runs | ✓ runs | ⚠ interaction, note 1 | ✓ runs | ✗ crashes, note 2 | ✓ runs |" in snippet


def test_a_best_practice_card_lists_what_fails_in_its_mode_and_what_was_tested(tmp_path):
    document = matrix_document(RECORDS, BROKEN_OVERRIDES)
    out = cp.render_composability(site(tmp_path), [(tmp_path / "cpu-test-machine.json", document)])
    deepspeed = out[cp.SNIPPETS / "deepspeed_zero.md.inc"]
    assert 'every method alone under `parallel="deepspeed"`, in 2 processes, in `fp32` and `amp_bf16` only' in deepspeed
    assert "no committed result covers it with another precision" in deepspeed
    methods = sum(1 for r in RECORDS.values() if r.kind == "method")
    assert f"Its cells ({methods} methods in 2 configurations): ✓ runs {2 * methods - 1}, ✗ crashes 1." in deepspeed
    assert "Combinations that do not train (✗ in all): 1." in deepspeed
    assert "| Method | `deepspeed, fp32` | `deepspeed, amp_bf16` |" in deepspeed
    assert "| CutOut | ✗ crashes, note 1 | ✓ runs |" in deepspeed
    assert (
        "1. CutOut under deepspeed in fp32: Flattened buffers need contiguous weights. Detail: `RuntimeError: x`."
        in deepspeed
    )
    # a precision's card: its mode and the 16-bit sibling, in one process; what does not train first
    half = out[cp.SNIPPETS / "half_precision.md.inc"]
    assert (
        'in `precision="fp16"` and `precision="bf16"` in one process. No committed result covers `fp16` or '
        "`bf16` under a parallel mode."
    ) in half
    rows = [line for line in half.splitlines() if line.startswith("| ")]
    assert rows[0] == "| Method | `fp16` | `bf16` |" and rows[1:] == ["| MixUp | ✗ fails, note 1 | ✓ runs |"]
    # a mode the matrix does not run says so
    assert 'The matrix does not run `parallel="dp"`: no committed result' in out[cp.SNIPPETS / "data_parallel.md.inc"]


def test_every_pair_the_engine_refuses_together_in_some_setting_is_kept_off_green():
    """``REFUSED_TOGETHER`` refuses CutMix with MixUp only when both interpolate the loss: the pair
    that runs with the defaults must still not be green, so its note must say to use one of them."""
    import importlib
    import inspect
    from itertools import permutations
    from types import SimpleNamespace

    from algorithms.core.engine import REFUSED_TOGETHER

    def switched_on(record):  # the algorithm with every boolean option set
        cls = getattr(importlib.import_module(f"algorithms.{record.key}"), record.class_name)
        flags = {n: True for n, p in inspect.signature(cls).parameters.items() if isinstance(p.default, bool)}
        return SimpleNamespace(name=cls.__name__, **flags)

    algorithms = {k: switched_on(r) for k, r in RECORDS.items() if r.kind == "method" and r.class_name}
    (path, document), *_ = cp.composability_files()
    cells = {cp.cell_key(c): c for c in document["cells"]}
    refused = [
        (a, b)
        for a, b in permutations(algorithms, 2)
        if any(test([algorithms[a], algorithms[b]]) for test, _ in REFUSED_TOGETHER)
    ]
    assert {("cutmix", "mixup"), ("ema", "swa")} <= set(refused)
    for pair in refused:
        cell = cells.get(("pair", pair, None))
        if cell is not None:  # pairs of different domains are not run
            assert cp.shown_outcome(cell) not in ("runs", "interaction"), (pair, path.name)


def test_the_committed_matrix_shows_its_crashes_as_crosses_on_the_page_and_the_cards(tmp_path):
    out = cp.render_composability(site(tmp_path), cp.composability_files())
    (path, document), *_ = cp.composability_files()
    cells = [c for c in document["cells"] if set(c["methods"]) <= set(RECORDS)]
    crosses = sum(
        c["outcome"] in ("refused", "fails") or (c["outcome"] == "interaction" and bool(c["detail"])) for c in cells
    )
    # Channels Last under fsdp and deepspeed, EMA and SWA under fsdp, each in fp32 and amp_bf16; EMA and SWA together
    assert crosses >= 10
    assert f"Combinations that do not train (✗ in all): {crosses}." in out[cp.PAGE]
    fsdp = out[cp.SNIPPETS / "fsdp.md.inc"]
    for line in (
        "| Channels Last | ✗ crashes, note 1 | ✗ crashes, note 1 |",
        "| EMA | ✗ refused, note 2 | ✗ refused, note 2 |",
        f"| {md_text('Stochastic Weight Averaging')} | ✗ refused, note 3 | ✗ refused, note 3 |",
    ):
        assert line in fsdp, line
    assert "| Channels Last | ✗ crashes, note 1 | ✗ crashes, note 1 |" in out[cp.SNIPPETS / "deepspeed_zero.md.inc"]
    channels_last = out[cp.SNIPPETS / "channels_last.md.inc"]
    assert (
        "| Channels Last | ✓ runs | ✓ runs | ✗ crashes, note 2 | ✗ crashes, note 2 | ✗ crashes, note 3 | "
        "✗ crashes, note 3 |"
    ) in channels_last
    # Mixed Precision's card lists what does not train in amp_bf16 under a parallel mode
    amp = out[cp.SNIPPETS / "mixed_precision.md.inc"]
    assert "| Channels Last | ✓ runs | ✓ runs | ✓ runs | ✗ crashes, note 1 | ✗ crashes, note 2 |" in amp
    assert f"1. {md_text('Channels Last under fsdp in amp_bf16')}: " in amp
    assert "✗ refused" in out[cp.SNIPPETS / "ema.md.inc"] and "✗ refused" in out[cp.SNIPPETS / "swa.md.inc"]
    assert "| MixUp | ⚠ use one, note" in out[cp.SNIPPETS / "cutmix.md.inc"]


# --- the parallel cells in amp_bf16 ---------------------------------------------------------------

BF16_CRASH = ("parallel", ("cutout",), "fsdp+amp_bf16")
BF16_REFUSED = ("parallel", ("mixup",), "ddp+amp_bf16")
BF16_OVERRIDES = {
    BF16_CRASH: {"outcome": "interaction", "note": "Sharded bf16 weights.", "detail": "RuntimeError: y"},
    BF16_REFUSED: {"outcome": "refused", "detail": "ValueError: no bf16 here"},
}


def test_a_parallel_cell_in_amp_bf16_is_shown_named_by_its_precision_and_counted(tmp_path):
    """The cards and the page list what fails in amp_bf16 under a parallel mode beside fp32, and
    the ✗ totals count it: the page's, the method's, the parallel mode's and Mixed Precision's."""
    document = matrix_document(RECORDS, BF16_OVERRIDES)
    assert {(c["precision"], c["parallel"]) for c in document["cells"] if c["kind"] == "parallel"} == {
        (p, m) for p in ("fp32", "amp_bf16") for m in ("ddp", "fsdp", "deepspeed")
    }
    out = cp.render_composability(site(tmp_path), [(tmp_path / "cpu-test-machine.json", document)])
    page = out[cp.PAGE]
    assert "Combinations that do not train (✗ in all): 2." in page and "✗ refused 1, ✗ crashes 1" in page
    assert 'in `precision="fp32"` and `precision="amp_bf16"`: a column is a parallel mode and a precision' in page
    row = cell_texts(html_tables(page), "CutOut")[-1]
    assert row[1 + PARALLEL_HEADERS.index("fsdp, amp_bf16")].startswith("✗ crashes, note ")
    assert row[1 + PARALLEL_HEADERS.index("fsdp, fp32")] == "✓ runs"  # fp32 under fsdp is another cell
    assert f"{md_text('CutOut under fsdp in amp_bf16')}: Sharded bf16 weights. Detail: `RuntimeError: y`." in page
    # the method's card
    cutout = out[cp.SNIPPETS / "cutout.md.inc"]
    assert "| CutOut | ✓ runs | ✓ runs | ✓ runs | ✗ crashes, note 1 | ✓ runs | ✓ runs |" in cutout
    assert f"1. {md_text('CutOut under fsdp in amp_bf16')}: Sharded bf16 weights." in cutout
    # the parallel mode's card: its fp32 and amp_bf16 columns
    fsdp = out[cp.SNIPPETS / "fsdp.md.inc"]
    assert "| Method | `fsdp, fp32` | `fsdp, amp_bf16` |" in fsdp
    assert "| CutOut | ✓ runs | ✗ crashes, note 1 |" in fsdp and "(✗ in all): 1." in fsdp
    ddp = out[cp.SNIPPETS / "ddp.md.inc"]
    assert (
        "| MixUp | ✓ runs | ✗ refused, note 1 |" in ddp
        and f"1. {md_text('MixUp under ddp in amp_bf16')}: Detail:" in ddp
    )
    # Mixed Precision's card: amp_fp16 and amp_bf16 in one process, and amp_bf16 under each mode
    amp = out[cp.SNIPPETS / "mixed_precision.md.inc"]
    assert (
        'every method alone in `precision="amp_fp16"` and `precision="amp_bf16"` in one process, and in '
        '`amp_bf16` under `parallel="ddp"`, `parallel="fsdp"` and `parallel="deepspeed"` in 2 processes. '
        "No committed result covers `amp_fp16` under a parallel mode."
    ) in amp
    assert "| Method | `amp_fp16` | `amp_bf16` | `ddp, amp_bf16` | `fsdp, amp_bf16` | `deepspeed, amp_bf16` |" in amp
    rows = [line for line in amp.splitlines() if line.startswith("| ") and "Method" not in line]
    # what does not train, the worst first (a crash before a refusal), each naming its cell
    assert rows == [
        "| CutOut | ✓ runs | ✓ runs | ✓ runs | ✗ crashes, note 1 | ✓ runs |",
        "| MixUp | ✓ runs | ✓ runs | ✗ refused, note 2 | ✓ runs | ✓ runs |",
    ]
    methods = sum(1 for r in RECORDS.values() if r.kind == "method")
    assert f"Its cells ({methods} methods in 5 configurations): ✓ runs {5 * methods - 2}," in amp
    assert "(✗ in all): 2." in amp


def test_a_recipe_cell_is_keyed_and_named_by_its_recipe():
    """Two recipes may share members; a recipe cell is its recipe's, and a note names the recipe's
    stack, not its first member alone."""
    mild = {
        "kind": "recipe",
        "methods": ["blurpool", "ema"],
        "recipe": "mild",
        "precision": "fp32",
        "parallel": "single",
    }
    hot = {**mild, "recipe": "hot"}
    assert cp.cell_key(mild) != cp.cell_key(hot)
    names = {"blurpool": "BlurPool", "ema": "EMA"}
    assert cp.cell_label(cp.cell_key(mild), names) == "the mild recipe's stack (BlurPool + EMA)"
