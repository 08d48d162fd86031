"""The docs generators: what they list, how they escape, and that --check catches stale output."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
from docs_support import SYNTHETIC, TABLES, method_entry, write_metadata
from methods_tools.files import generator_cli
from methods_tools.markup import md_code, md_text, md_url, one_line

GENERATORS = sorted(TABLES.glob("update_*.py"))
OURS = ["update_alg_tables.py", "update_methods_overview.py", "update_navigation.py"]


def load(name: str):
    path = TABLES / name
    spec = importlib.util.spec_from_file_location(f"gen_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def render_one(name: str, metadata: Path, src: Path) -> tuple[Path, str]:
    (out, text), = load(name).render(metadata_root=metadata, source_dir=src).items()
    return out, text


def css(value: str) -> str:
    """How docutils spells a value in a class name."""
    return value.replace("_", "-")


def by_name(entries: dict[str, dict]) -> list[str]:
    return sorted(entries, key=lambda k: (entries[k]["name"].casefold(), k))


def test_table_has_one_row_per_method_in_name_order(synthetic_metadata, tmp_path):
    out, text = render_one("update_alg_tables.py", synthetic_metadata, tmp_path)
    assert out == tmp_path / "tables" / "algorithms_table.md"
    rows = [line for line in text.splitlines() if line.startswith("| [")]
    assert [re.search(r"\(\.\./method_cards/(\w+)\.md\)", row).group(1) for row in rows] == by_name(SYNTHETIC)
    for key, row in zip(by_name(SYNTHETIC), rows, strict=True):
        entry = SYNTHETIC[key]
        cells = re.split(r"(?<!\\)\|", row)[1:-1]
        assert len(cells) == 7, row
        option = f"cf.{entry['functional']}" if entry["functional"] else 'precision="amp_bf16"'
        assert cells[1].strip() == md_code(option)
        assert cells[2].strip() == f"[{md_text(entry['attribution'])}]({md_url(entry['link'])})"
        assert cells[3].strip() == md_text(entry["tldr"])
        assert cells[4].strip() == entry["kind"].replace("_", " ")
        assert cells[5].strip() == ", ".join(entry["domains"])
        assert cells[6].strip() == ("yes" if entry["math_equivalent"] else "no")


def test_overview_has_one_filterable_card_per_method(synthetic_metadata, tmp_path):
    out, text = render_one("update_methods_overview.py", synthetic_metadata, tmp_path)
    assert out == tmp_path / "method_cards" / "methods_overview.md"
    cards = re.findall(r":::\{grid-item-card\} (.*)\n:link: (\w+)\n:link-type: doc\n:class-item: (.*)\n", text)
    assert [link for _, link, _ in cards] == by_name(SYNTHETIC)
    for title, key, classes in cards:
        entry = SYNTHETIC[key]
        assert title == md_text(entry["name"])
        expected = {"ml-overview-item", f"ml-kind-{css(entry['kind'])}"}
        expected |= {f"ml-domain-{css(d)}" for d in entry["domains"]} | {f"ml-tag-{css(t)}" for t in entry["tags"]}
        assert set(classes.split()) == expected
        assert md_text(entry["tldr"]) in text


def test_navigation_lists_cards_by_name_and_only_existing_sections(synthetic_metadata, tmp_path):
    _, text = render_one("update_navigation.py", synthetic_metadata, tmp_path)
    entries = re.findall(r"^   (\S+)$", text, flags=re.M)
    assert entries == ["method_cards/methods_overview", "tables/algorithms_table",
                       *[f"method_cards/{k}" for k in by_name(SYNTHETIC)]]
    assert ":caption: Dataset" not in text and "training_configurations" not in text

    (tmp_path / "dataset_cards").mkdir()
    (tmp_path / "dataset_cards" / "imagenet.md").write_text("# ImageNet\n")
    (tmp_path / "training_configurations.md").write_text("# Training\n")
    _, text = render_one("update_navigation.py", synthetic_metadata, tmp_path)
    assert ":caption: Dataset and Task Cards" in text and "   dataset_cards/imagenet" in text
    assert ":caption: Training Configurations" in text and "   training_configurations" in text
    assert ":caption: Model Family Cards" not in text


@pytest.mark.parametrize("name", OURS)
def test_check_names_stale_file_and_writes_nothing(name, synthetic_metadata, tmp_path, capsys):
    src = tmp_path / "src"
    render = load(name).render

    def bound():
        return render(metadata_root=synthetic_metadata, source_dir=src)

    (out, _), = bound().items()
    assert generator_cli(bound, ["--check"]) == 1  # missing output is stale
    assert not out.exists()
    assert generator_cli(bound, []) == 0 and out.exists()
    assert generator_cli(bound, ["--check"]) == 0
    capsys.readouterr()

    # metadata changes, the committed output does not: stale
    write_metadata(synthetic_metadata, {"new_one": method_entry("New One")})
    before = out.read_bytes()
    assert generator_cli(bound, ["--check"]) == 1
    assert str(out.name) in capsys.readouterr().err
    assert out.read_bytes() == before


@pytest.mark.parametrize("name", OURS)
def test_bad_metadata_is_one_line_per_problem_and_exit_1(name, tmp_path, capsys):
    bad = write_metadata(tmp_path / "metadata", {"broken": {**method_entry("Broken"), "domains": ["space"]}})
    src = tmp_path / "src"
    render = load(name).render
    assert generator_cli(lambda: render(metadata_root=bad, source_dir=src), []) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "broken/metadata.json" in err[0] and "/broken/domains/0" in err[0]
    assert "Traceback" not in "\n".join(err)
    assert not src.exists()


@pytest.mark.parametrize("path", GENERATORS, ids=lambda p: p.name)
def test_every_generator_runs_as_a_script(path):
    result = subprocess.run([sys.executable, str(path), "--help"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "--check" in result.stdout


@pytest.mark.parametrize("text", [
    '<script>alert("x")</script>', "```{eval-rst}\n.. raw:: html\n```", "{math}`x`", "$x$", "| a | b |",
    "**b** _i_ [l](u) ![i](x)", "# heading", "1. list", "- item", ".. raw:: html", "&amp; &#60;", "a\\b",
])
def test_md_text_renders_as_the_same_plain_text(text):
    """The definition of escaping: CommonMark renders md_text(x) as exactly the text x."""
    markdown_it = pytest.importorskip("markdown_it", reason="markdown-it-py comes with the [docs] extra")
    html = markdown_it.MarkdownIt("commonmark").enable("table").render(md_text(text))
    assert html == f"<p>{_html_escape(one_line(text))}</p>\n"


def test_md_code_and_md_url():
    assert md_code("a`b") == "`` a`b ``"
    assert md_url("https://x.invalid/a b)(<c>") == "https://x.invalid/a%20b%29%28%3Cc%3E"
    with pytest.raises(ValueError, match="only https://"):
        md_url("javascript:alert(1)")


def _html_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def test_conf_runs_every_generator_and_navigation_last():
    """conf.py finds generators by glob; the navigation, which lists their pages, runs last."""
    pytest.importorskip("sphinxcontrib.katex", reason="conf.py needs the [docs] extra")
    spec = importlib.util.spec_from_file_location("docs_conf", TABLES.parent / "conf.py")
    conf = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conf)
    names = [Path(p).name for p in conf.methods_generators]
    assert sorted(names) == [p.name for p in GENERATORS]
    assert names[-1] == "update_navigation.py"
