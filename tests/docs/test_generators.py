"""The generated pages: one list of generators, what each lists, how it escapes, and the one
``--check`` entry point (``tools/generate_pages.py``)."""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from docs_support import DOCS_SOURCE, REPO_ROOT, SYNTHETIC, write_metadata
from methods_tools import pages
from methods_tools.composability_pages import render_composability
from methods_tools.effects_pages import render_effects
from methods_tools.figures import render_figures
from methods_tools.markup import md_text
from methods_tools.measurements_page import render_measurements
from methods_tools.memory_page import render_memory
from methods_tools.recipes_page import render_recipes
from methods_tools.training_pages import render_training_results

from algorithms.metadata import load_all_metadata


def css(value: str) -> str:
    """How docutils spells a value in a class name."""
    return value.replace("_", "-")


def by_name(entries: dict[str, dict]) -> list[str]:
    return sorted(entries, key=lambda k: (entries[k]["name"].casefold(), k))


def render(metadata: Path, src: Path, *generators, results: Path | None = None) -> dict[Path, str]:
    """What ``generators`` render for ``metadata`` (no results files unless ``results``)."""
    generated = pages.generate(
        src, metadata_root=metadata, results_root=results or src / "no-results", generators=generators
    )
    assert generated.problems == []
    return dict(generated.outputs)


def test_the_generators_are_listed_once_in_order():
    """The navigation lists pages other generators write, so it comes after them; no generator is
    found by file name (no script per page is left to find)."""
    assert pages.GENERATORS == (
        pages.algorithms_table,
        pages.methods_overview,
        render_figures,
        render_training_results,
        render_effects,
        render_composability,
        pages.render_loops,  # appends to the cards' composability snippets, so after render_composability
        render_measurements,
        render_memory,
        render_recipes,
        pages.verdict_boxes,
        pages.landing,
        pages.navigation,
    )
    assert list((DOCS_SOURCE / "tables").glob("*.py")) == []


def test_table_has_one_row_per_method_in_name_order(synthetic_metadata, tmp_path):
    text = render(synthetic_metadata, tmp_path, pages.algorithms_table)[Path("tables/algorithms_table.md")]
    rows = [line for line in text.splitlines() if line.startswith("| [")]
    assert [re.search(r"\(\.\./method_cards/(\w+)\.md\)", row).group(1) for row in rows] == by_name(SYNTHETIC)
    for key, row in zip(by_name(SYNTHETIC), rows, strict=True):
        entry = SYNTHETIC[key]
        cells = re.split(r"(?<!\\)\|", row)[1:-1]
        # name, kind, domains, TL;DR: four columns that fit a desktop; the card has the rest
        assert len(cells) == 4, row
        assert cells[0].strip() == f"[{md_text(entry['name'])}](../method_cards/{key}.md)"
        kind = entry["kind"].replace("_", " ")
        assert cells[1].strip() == (f"{kind}, math-equivalent" if entry["math_equivalent"] else kind)
        assert cells[2].strip() == ", ".join(entry["domains"])
        assert cells[3].strip() == md_text(entry["tldr"])


def test_the_landing_counts_each_entry_once_so_its_rows_add_up(synthetic_metadata, tmp_path):
    """Each method and best practice is on the one row of the set of domains it serves."""
    text = render(synthetic_metadata, tmp_path, pages.landing)[Path("tables/landing.rst.inc")]
    cells = re.findall(r"^   \* - (.+)\n     - (\d+)\n     - (\d+)$", text, flags=re.M)
    rows = {label: (int(methods), int(best)) for label, methods, best in cells}
    totals = rows.pop("All domains")
    served = {}
    for entry in SYNTHETIC.values():
        domains = sorted(entry["domains"])
        label = f"{domains[0]} only" if len(domains) == 1 else f"{', '.join(domains[:-1])} and {domains[-1]}"
        served.setdefault(label, [0, 0])[entry["kind"] != "method"] += 1
    assert rows == {label: tuple(counts) for label, counts in served.items()}
    assert totals == (
        sum(e["kind"] == "method" for e in SYNTHETIC.values()),
        sum(e["kind"] == "best_practice" for e in SYNTHETIC.values()),
    )
    assert tuple(map(sum, zip(*rows.values(), strict=True))) == totals


def test_overview_has_one_filterable_card_per_method(synthetic_metadata, tmp_path):
    text = render(synthetic_metadata, tmp_path, pages.methods_overview)[Path("method_cards/methods_overview.md")]
    cards = re.findall(r":::\{grid-item-card\} (.*)\n:link: (\w+)\n:link-type: doc\n:class-item: (.*)\n", text)
    assert [link for _, link, _ in cards] == by_name(SYNTHETIC)
    for title, key, classes in cards:
        entry = SYNTHETIC[key]
        assert title == md_text(entry["name"])
        expected = {"ml-overview-item", f"ml-kind-{css(entry['kind'])}"}
        expected |= {f"ml-domain-{css(d)}" for d in entry["domains"]} | {f"ml-tag-{css(t)}" for t in entry["tags"]}
        assert set(classes.split()) == expected
        assert md_text(entry["tldr"]) in text


def test_navigation_lists_cards_by_name_and_only_pages_that_exist(synthetic_metadata, tmp_path):
    nav = Path("tables/navigation.rst.inc")
    text = render(synthetic_metadata, tmp_path, pages.navigation)[nav]
    entries = re.findall(r"^   ([^:\s]\S*)$", text, flags=re.M)  # the entries, not the options
    # the sidebar lists them; the home page shows the landing page instead
    assert text.count(":hidden:") == text.count(".. toctree::")
    # grouped by kind: the methods' cards, then the best practices' under a caption of their own
    kinds = [SYNTHETIC[k]["kind"] for k in by_name(SYNTHETIC)]
    assert entries == [
        "method_cards/methods_overview",
        "tables/algorithms_table",
        "measurements",
        *[f"method_cards/{k}" for k, kind in zip(by_name(SYNTHETIC), kinds, strict=True) if kind == "method"],
        *[f"method_cards/{k}" for k, kind in zip(by_name(SYNTHETIC), kinds, strict=True) if kind == "best_practice"],
    ]
    assert text.index(":caption: Best Practices") > text.index("method_cards/zeta_method")
    assert ":caption: Dataset" not in text and "training_configurations" not in text

    (tmp_path / "dataset_cards").mkdir()
    (tmp_path / "dataset_cards" / "imagenet.md").write_text("# ImageNet\n")
    # the training page is listed because the generator before the navigation rendered it
    text = render(synthetic_metadata, tmp_path, render_training_results, pages.navigation)[nav]
    assert ":caption: Dataset and Task Cards" in text and "   dataset_cards/imagenet" in text
    assert ":caption: Training Configurations" in text and "   training_configurations" in text
    assert ":caption: Model Family Cards" not in text


@pytest.mark.slow
def test_outputs_are_the_stable_paths_the_cards_and_index_include():
    generated = pages.generate()
    assert generated.problems == []
    best = {k for k, r in load_all_metadata().items() if r.is_best_practice and r.trainer_option}
    outputs = set(generated.outputs)
    assert {
        Path("tables/algorithms_table.md"),
        Path("method_cards/methods_overview.md"),
        Path("tables/navigation.rst.inc"),
        Path("training_configurations.md"),
        Path("tables/landing.rst.inc"),
    } <= outputs
    assert {Path(f"tables/results/{k}.md.inc") for k in best} <= outputs
    assert all(not p.is_absolute() for p in outputs)


@pytest.mark.slow
def test_the_measurements_page_includes_its_generated_parts_and_has_every_label_the_cards_link_to():
    """The cards' snippets link to "How the cards' evidence is measured", which holds what they no
    longer repeat: a part it does not include, or a section a snippet links to that it lacks, is lost."""
    page = (DOCS_SOURCE / "measurements.md").read_text(encoding="utf-8")
    parts = {p.as_posix() for p in pages.generate().outputs if p.parent == Path("tables/measurements")}
    assert parts == set(re.findall(r"^```\{include\} (tables/measurements/\S+)$", page, flags=re.M))
    assert len(parts) == 4  # effects, verdicts, composability, training
    linked = {
        label
        for template in (DOCS_SOURCE / "tables").glob("*_snippet.md.inc.j2")
        for label in re.findall(r"<(measurements-[a-z-]+)>`", template.read_text(encoding="utf-8"))
    }
    assert linked == {"measurements-effects", "measurements-composability", "measurements-training"}
    for label in linked:
        assert f"\n({label})=\n## " in page, label


@pytest.mark.slow
def test_no_generated_page_is_committed_and_git_ignores_every_one():
    if shutil.which("git") is None or not (REPO_ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    outputs = [(Path("docs/source") / p).as_posix() for p in pages.generate().outputs]
    tracked = subprocess.run(["git", "ls-files", "--", *outputs], cwd=REPO_ROOT, capture_output=True, text=True)
    assert tracked.stdout.split() == []
    ignored = subprocess.run(
        ["git", "check-ignore", "--no-index", "--", *outputs], cwd=REPO_ROOT, capture_output=True, text=True
    )
    assert sorted(ignored.stdout.split()) == sorted(outputs)


@pytest.mark.slow
def test_check_renders_everything_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "out"
    assert pages.main(["--check", "--out", str(out)]) == 0
    assert not out.exists()
    assert "generated pages render" in capsys.readouterr().out
    assert pages.main(["--out", str(out)]) == 0
    assert (out / "tables" / "algorithms_table.md").is_file() and (out / "training_configurations.md").is_file()
    first = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    assert pages.main(["--out", str(out)]) == 0  # nothing changed: nothing rewritten
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()} == first
    assert capsys.readouterr().out.splitlines()[-1].endswith(", 0 changed")


def test_bad_metadata_is_one_line_per_problem_exit_1_and_nothing_written(tmp_path, capsys, monkeypatch):
    from docs_support import method_entry

    bad = write_metadata(
        tmp_path / "metadata", {"broken": {**method_entry("Broken"), "domains": ["space"], "link": "http://x.invalid"}}
    )
    monkeypatch.setattr(pages, "generate", functools.partial(pages.generate, metadata_root=bad))
    out = tmp_path / "out"
    for argv in (["--check"], ["--out", str(out)]):
        assert pages.main(argv) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 2 and all("broken/metadata.json" in line for line in err)
        assert any("/broken/domains/0" in line for line in err) and any("/broken/link" in line for line in err)
        assert "Traceback" not in "\n".join(err)
    assert not out.exists()


@pytest.mark.parametrize(
    ("template", "typo", "expected"),
    [
        ("algorithms_table.md.j2", "{{ recrod.name }}", ": template: 'recrod' is undefined — fix the template"),
        (
            "navigation.rst.inc.j2",
            "{% for %}",
            ": template: Expected an expression, got 'end of statement block' — fix",
        ),
        ("navigation.rst.inc.j2", '{{ "a" + 1 }}', ': template: can only concatenate str (not "int") to str — fix'),
        # a value a filter refuses: named at the template line that used it
        ("methods_overview.md.j2", '{{ "http://x.invalid" | md_url }}', ": 'http://x.invalid': only https:// links"),
    ],
)
def test_a_template_error_is_one_line_naming_the_template(
    template, typo, expected, synthetic_metadata, tmp_path, monkeypatch
):
    templates = Path(shutil.copytree(pages.TEMPLATE_DIR, tmp_path / "templates"))
    lines = (templates / template).read_text().splitlines()
    lines.insert(3, typo)
    (templates / template).write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(pages, "TEMPLATE_DIR", templates)
    generated = pages.generate(tmp_path / "src", metadata_root=synthetic_metadata, results_root=tmp_path / "none")
    assert generated.outputs == {}
    (problem,) = generated.problems
    assert problem.startswith(f"{templates / template}:4: ") or problem.startswith(f"templates/{template}:4: ")
    assert expected in problem


def test_the_command_line_runs_from_a_checkout():
    result = subprocess.run(
        [sys.executable, "tools/generate_pages.py", "--help"], cwd=REPO_ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert "--check" in result.stdout and "--out" in result.stdout
