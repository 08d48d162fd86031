"""The docs-scale and check-speed benchmarks, the synthetic checkout they build, and what keeps the
docs build and the checks linear in the number of methods. No timing is asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from methods_tools import checks, composability_pages
from methods_tools.composability_pages import CARD_PAIRS_LIMIT, OUTCOMES, Matrix, method_row

from algorithms.metadata import PACKAGE_ROOT, load_all_metadata

BENCHMARKS = PACKAGE_ROOT.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import check_speed  # noqa: E402
import docs_scale  # noqa: E402
import synthetic_catalog  # noqa: E402

# Nine methods: both figure kinds, every domain, and one noted interaction (method 8 with method 3).
CATALOG_SIZE = 9


@pytest.fixture(scope="module")
def catalog(tmp_path_factory) -> synthetic_catalog.Catalog:
    return synthetic_catalog.make_catalog(tmp_path_factory.mktemp("synthetic") / "checkout", CATALOG_SIZE)


def _tool(root: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], cwd=root, capture_output=True, text=True, timeout=600)


# --------------------------------------------------------------------------------------------- the checkout


def test_the_synthetic_checkout_has_code_metadata_a_figure_and_a_card_per_method(catalog):
    assert catalog.keys == tuple(f"synthetic_{i:04d}" for i in range(CATALOG_SIZE))
    kinds = set()
    for key in catalog.keys:
        folder = catalog.package / key
        assert {p.name for p in folder.glob("*") if p.is_file()} == {"__init__.py", f"{key}.py", "metadata.json"}
        entry = json.loads((folder / "metadata.json").read_text())[key]
        kinds.add(entry["figure"]["kind"])
        card = catalog.card(key).read_text()
        assert "```{card-facts} figure\n```" in card and "<!-- generated:" not in card  # rendered at build
        assert "TODO(new_card)" not in card and "$$" in card  # the prompts are prose, with display math
    assert kinds == {"batch", "plot"}
    assert (
        "interactions"
        in json.loads((catalog.package / "synthetic_0008" / "metadata.json").read_text())["synthetic_0008"]
    )
    # none of this checkout's real methods came along; its best practices and their cards did
    assert not (catalog.package / "cutmix").exists() and not catalog.card("cutmix").exists()
    assert catalog.card("mixed_precision").exists() and (catalog.package / "core" / "trainer.py").exists()


@pytest.mark.slow  # every check over a synthetic catalog of the docs benchmark's size: about 9 s
def test_every_check_passes_on_the_synthetic_checkout(catalog):
    for argv in (
        ["tools/validate_metadata.py"],
        ["tools/check_functional.py"],
        ["tools/check_cards.py"],
        ["tools/generate_pages.py", "--check"],
    ):
        out = _tool(catalog.root, *argv)
        assert out.returncode == 0, (argv, out.stderr)
    # the tools read the checkout's own methods, not this one's
    out = _tool(catalog.root, "tools/new_card.py", "synthetic_0001", "--dry-run")
    assert out.returncode == 0 and "# Synthetic Method 0001" in out.stdout


def test_make_catalog_refuses_an_existing_folder_and_an_empty_catalog(tmp_path):
    with pytest.raises(FileExistsError):
        synthetic_catalog.make_catalog(tmp_path, 1)
    with pytest.raises(ValueError):
        synthetic_catalog.make_catalog(tmp_path / "new", 0)
    assert not (tmp_path / "new").exists()


# --------------------------------------------------------------------------------------------- docs_scale

SPHINX_OUTPUT = """\
building [html]: targets for 1 source files that are out of date
updating environment: 0 added, 1 changed, 0 removed
reading sources... [100%] method_cards/synthetic_0002

looking for now-outdated files... none found
copying assets: done
writing output... [ 50%] index
writing output... [100%] method_cards/synthetic_0002

copying images... [100%] tables/figures/synthetic_0002.svg
build succeeded.
"""


def test_the_pages_read_and_written_are_taken_from_sphinx_output():
    assert docs_scale.pages_in_output(SPHINX_OUTPUT) == (
        ("method_cards/synthetic_0002",),
        ("index", "method_cards/synthetic_0002"),
    )
    assert docs_scale.pages_in_output("reading sources... \nno targets are out of date.\n") == ((), ())


@pytest.mark.parametrize("colour", ["CI", "FORCE_COLOR"])
def test_the_pages_are_read_from_a_build_where_ci_asks_for_colour(tmp_path, monkeypatch, colour):
    # CI=true or FORCE_COLOR makes Sphinx print its progress as a colour terminal's single line
    source = tmp_path / "docs" / "source"
    source.mkdir(parents=True)
    (source / "conf.py").write_text("")
    (source / "index.rst").write_text("Index\n=====\n\n.. toctree::\n\n   page\n")
    (source / "page.rst").write_text("Page\n====\n")
    monkeypatch.setenv(colour, "true")
    build = docs_scale.sphinx_build(tmp_path, tmp_path / "out")
    assert sorted(build.read) == ["index", "page"] and sorted(build.written) == ["index", "page"]
    (source / "page.rst").write_text("Page\n====\n\nEdited.\n")
    assert docs_scale.sphinx_build(tmp_path, tmp_path / "out", fresh=False).read == ("page",)


def test_the_prose_edit_leaves_every_facts_directive_as_it_was(catalog, tmp_path):
    from methods_tools.facts import directives

    card = tmp_path / "card.md"
    text = catalog.card("synthetic_0002").read_text()
    card.write_text(text)
    docs_scale.edit_card_prose(card)
    edited = card.read_text()
    assert docs_scale.ADDED_PROSE in edited and edited != text
    assert [name for _, name in directives(edited)] == [name for _, name in directives(text)]
    assert len(edited.splitlines()) == len(text.splitlines()) + 2  # the sentence and a blank line, nothing else


def _well_formed(rows: list[dict]) -> None:
    assert rows
    for row in rows:
        assert set(row) == {"what", "value", "unit", "spread", "target", "compare", "met"}, row
        assert isinstance(row["what"], str) and len(row["what"]) <= 70
        assert row["unit"] in ("x", "s", "pages") and row["compare"] in ("<", "<=")
        assert isinstance(row["value"], (int, float)) and isinstance(row["target"], (int, float))
        low, high = row["spread"]
        assert low <= high and isinstance(row["met"], bool)


@pytest.mark.slow
def test_a_quick_docs_scale_run_reports_every_figure_and_the_edited_card_alone():
    lines: list[str] = []
    result = docs_scale.run(quick=True, log=lines.append)
    _well_formed(result["rows"])
    rows = {row["what"]: row for row in result["rows"]}
    assert {
        "full docs build, 2 synthetic methods / 1",
        "docs build / bare Sphinx build of the same pages",
        "pages read after a prose edit of one card",
    } <= set(rows)
    incremental = result["details"]["incremental"]
    assert incremental["after_a_prose_edit"]["read"] == ["method_cards/synthetic_0000"]
    assert "method_cards/synthetic_0000" in incremental["after_a_prose_edit"]["written"]
    assert rows["pages read after a prose edit of one card"]["value"] == 1
    assert result["details"]["growth"]["pages_built"]["2"] == result["details"]["growth"]["pages_built"]["1"] + 1
    assert lines and all(line.startswith("docs_scale: ") for line in lines)
    json.dumps(result)  # the runner writes it as it is


def test_docs_scale_refuses_to_overwrite_its_output_without_force(tmp_path, capsys):
    existing = tmp_path / "out.json"
    existing.write_text("{}")
    with pytest.raises(SystemExit) as exit_info:
        docs_scale.main(["--quick", "--output", str(existing)])
    assert exit_info.value.code == 2 and "--force" in capsys.readouterr().err
    assert existing.read_text() == "{}"


# --------------------------------------------------------------------------------------------- check_speed


@pytest.mark.slow
def test_a_quick_check_speed_run_reports_every_figure():
    result = check_speed.run(quick=True, log=lambda line: None)
    _well_formed(result["rows"])
    assert [row["unit"] for row in result["rows"]] == ["s", "s", "x"]
    by_command = result["details"]["median_seconds_by_command"]
    assert set(by_command) == {"1", "2"}
    assert set(by_command["1"]) == {name for name, *_ in check_speed.COMMANDS}


def test_check_speed_refuses_to_overwrite_its_output_without_force(tmp_path):
    existing = tmp_path / "out.json"
    existing.write_text("{}")
    with pytest.raises(SystemExit):
        check_speed.main(["--quick", "--output", str(existing)])
    assert existing.read_text() == "{}"


# --------------------------------------------------------------------------------------------- linear checks


def _records(tmp_path: Path, n: int):
    package = tmp_path / "algorithms"
    for i in range(n):
        folder = package / synthetic_catalog.method_key(i)
        folder.mkdir(parents=True)
        (folder / "metadata.json").write_text(synthetic_catalog.method_files(i)["metadata.json"])
    return load_all_metadata(package)


def test_a_card_lists_only_the_pairs_that_do_not_simply_run_and_names_the_rest_within_the_limit(tmp_path):
    n = (CARD_PAIRS_LIMIT + 3) * len(synthetic_catalog.DOMAINS)  # past the limit: 31 others simply run
    records = _records(tmp_path, n)
    methods = composability_pages.matrix_methods(records.values())
    first, other = "synthetic_0000", "synthetic_0005"  # same domain
    cells = {("solo", (k,), None): {"outcome": "runs", "note": None, "detail": None, "missing": []} for k in records}
    for a in records:
        for b in records:
            if a != b and set(records[a].domains) & set(records[b].domains):
                cells[("pair", (a, b), None)] = {"outcome": "runs", "note": None, "detail": None, "missing": []}
    cells[("pair", (other, first), None)] = {
        "outcome": "refused",
        "note": None,
        "detail": "ValueError: no",
        "missing": [],
    }
    matrix = Matrix(
        file="m.json",
        hardware="h",
        date="2026-01-01",
        device_type="cpu",
        torch="t",
        deepspeed=None,
        settings={},
        command="",
        wall_s=1.0,
        counts={},
        precisions=(),
        parallels=(),
        cells=cells,
    )
    row = method_row(matrix, records[first], methods)
    assert [name for name, *_ in row.others] == [records[other].name]
    assert row.others[0][2].label == OUTCOMES["refused"]
    assert row.others_running == n // len(synthetic_catalog.DOMAINS) - 2  # all but itself and the one listed
    assert row.running == ()  # past the limit they are counted, not named
    # within the limit the ones that simply run are named in a sentence, not listed
    small = _records(tmp_path / "small", 2 * len(synthetic_catalog.DOMAINS))
    small_methods = composability_pages.matrix_methods(small.values())
    row = method_row(matrix, small[first], small_methods)
    assert [name for name, *_ in row.others] == [small[other].name]
    assert row.others_running == len(row.running) == 0  # its domain has no third method


def _naive_prose_lines(text: str, own: str, records) -> set[tuple[int, str]]:
    """``(line, method key)`` of every other method's term in the Composability section, term by term."""
    section = text.split("## Composability\n", 1)[1].split("\n## ", 1)[0]
    offset = text[: text.index("## Composability\n")].count("\n") + 2
    found = set()
    for other in records.values():
        if other.key == own:
            continue
        for term in checks._method_terms(other):
            for match in checks._term_pattern(term).finditer(section):
                found.add((offset + section.count("\n", 0, match.start()), other.key))
    return found


def test_the_prose_check_finds_the_names_a_search_of_every_term_finds(tmp_path):
    records = _records(tmp_path, 12)
    card = tmp_path / "card.md"
    text = (
        "# Synthetic Method 0000\n\n## Composability\n\nIt works with Synthetic\nMethod 0005, with "
        "`Synthetic0010` and with synthetic_0011, unlike SYNTHETIC METHOD 00055 or Synthetic Method 0000.\n\n"
        "## Side Effects\n\nSynthetic Method 0001 is named outside the section.\n"
    )
    card.write_text(text)
    found = checks.check_composability_prose(card, text, records["synthetic_0000"], records)
    assert found == checks.check_composability_prose(
        card, text, records["synthetic_0000"], records, checks.MethodTerms(records)
    )
    keys = {r.name: k for k, r in records.items()}
    assert (
        {(p.line, keys[p.message.split("names ")[1].split(" in the card")[0]]) for p in found}
        == _naive_prose_lines(text, "synthetic_0000", records)
        == {(5, "synthetic_0005"), (6, "synthetic_0010"), (6, "synthetic_0011")}
    )
