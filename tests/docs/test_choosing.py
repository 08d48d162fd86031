"""The "Choosing methods" page and the cards' "Should I use it?" boxes: what each method buys, from the
metadata and the committed results (methods_tools.summaries), never a bare number."""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

import pytest
from docs_support import DOCS_SOURCE, REPO_ROOT
from methods_tools.docsgen import jinja_environment
from methods_tools.markup import one_line
from methods_tools.pages import TEMPLATE_DIR
from methods_tools.summaries import REFERENCE_ROWS, STAGE_TAGS, VERDICTS, load_inputs, reference_figure

from algorithms.metadata import load_all_metadata

sys.path.insert(0, str(DOCS_SOURCE / "_ext"))
from methods_choosing import parse_choices  # noqa: E402

# A figure with its interval: "1.86x (1.41–2.02)", "no detectable difference (0.94–1.24x)",
# "0.86x (range 0.66x–0.86x over 3 runs)", "1.01x in each of 3 runs".
INTERVAL = re.compile(r"\dx? to [-+]?\d|\dx?\u2013\d|in each of \d+ runs")


@pytest.fixture(scope="module")
def inputs():
    return load_inputs()


@pytest.fixture(scope="module")
def summaries(inputs):
    return {key: inputs.summary(key) for key in inputs.records}


def test_every_figure_names_its_hardware_and_carries_its_interval(summaries):
    measured = 0
    for key, summary in summaries.items():
        for e in summary.evidence:
            assert e.hardware.strip(), key
            if e.measured:
                measured += 1
                for figure in (e.quality, e.throughput, e.memory):
                    if figure is not None:
                        assert INTERVAL.search(figure.replace("\u2212", "-")), (key, figure)
    assert measured > 20  # the committed effects and training results are read


def test_a_method_that_did_not_act_is_never_given_a_number(summaries):
    env = jinja_environment(TEMPLATE_DIR)
    unmeasured = [(key, e) for key, s in summaries.items() for e in s.evidence if not e.measured]
    assert "did_not_act" in {e.status for _, e in unmeasured}  # layer_freezing (text); failed: test_effects_pages
    for key, e in unmeasured:
        assert e.quality is e.throughput is e.memory is None, key
        assert e.reason, key
        assert e.cost == "not measured"
        box = one_line(env.get_template("verdict_snippet.md.inc.j2").render(summary=summaries[key]))
        assert f"{e.status_label}, no figure" in box, key
    # DataParallel on the CPU runs one replica: it did not act, though its run succeeded
    (dp,) = summaries["data_parallel"].evidence
    assert dp.status == "did_not_act" and "no replicas" in dp.reason


def test_sourced_figures_name_their_hardware_and_link_their_source(summaries):
    for key, summary in summaries.items():
        for a in summary.sourced:
            assert a.hardware and a.url.startswith("https://") and a.source, key
    for option, value in REFERENCE_ROWS:  # every reference row is still in the quoted experiment
        assert reference_figure(option, value) is not None, (option, value)
    assert summaries["half_precision"].best.hardware == "one NVIDIA Tesla P40 GPU"


def test_stage_tags_are_held_to_the_metadata():
    records = load_all_metadata()
    for key, tags in STAGE_TAGS.items():
        for tag, words in tags:
            assert words in one_line(records[key].use), f"{key}: its 'use' no longer says {words!r} ({tag})"


def test_every_method_and_best_practice_has_a_verdict_box():
    from methods_tools.pages import generate

    generated = generate()
    assert not generated.problems
    records = load_all_metadata()
    boxes = {p for p in generated.outputs if p.parent == VERDICTS}
    assert boxes == {VERDICTS / f"{key}.md.inc" for key in records}
    for path in boxes:
        text = generated.outputs[path]
        assert ":::{admonition} Should I use it?" in text
        assert "](../choosing_methods.md)" in text
    assert "tables/verdict/" in (REPO_ROOT / ".gitignore").read_text(encoding="utf-8")


def test_choices_refuse_an_unknown_key_or_a_missing_reason():
    assert parse_choices(["cutmix: a reason", "", "  sam : another"], {"cutmix", "sam"}) == [
        ("cutmix", "a reason"),
        ("sam", "another"),
    ]
    with pytest.raises(ValueError, match=r"line 2: unknown method 'cutmxi'"):
        parse_choices(["cutmix: ok", "cutmxi: typo"], {"cutmix"})
    with pytest.raises(ValueError, match="write 'key: reason'"):
        parse_choices(["cutmix"], {"cutmix"})


def _mini_site(root: Path, body: str):
    """A one-page site with the directive's extension, built as the docs build is (-W)."""
    import subprocess

    pytest.importorskip("sphinx")
    src = root / "src"
    src.mkdir()
    paths = [str(REPO_ROOT), str(REPO_ROOT / "tools"), str(DOCS_SOURCE / "_ext")]
    (src / "conf.py").write_text(
        textwrap.dedent(f"""
        import sys
        sys.path[:0] = {paths!r}
        extensions = ["myst_parser", "sphinx_design", "methods_choosing"]
        myst_enable_extensions = ["colon_fence"]
        suppress_warnings = ["myst.xref_missing"]
    """),
        encoding="utf-8",
    )
    (src / "index.md").write_text(f"# Page\n\n```{{method-choices}}\n{body}\n```\n", encoding="utf-8")
    return subprocess.run(
        [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-W", "--keep-going", str(src), str(root / "html")],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
    )


def test_the_directive_refuses_an_unknown_key_in_one_line(tmp_path):
    result = _mini_site(tmp_path, "channels_last: fast\nno_such_method: a typo")
    assert result.returncode != 0
    errors = [line for line in result.stderr.splitlines() if "ERROR" in line]
    assert len(errors) == 1 and "unknown method 'no_such_method'" in errors[0], result.stderr


def test_the_directive_renders_the_rows_in_order(tmp_path):
    bs4 = pytest.importorskip("bs4")
    result = _mini_site(tmp_path, "layer_freezing: second\nchannels_last: first")
    # the card links point at pages this one-page site lacks: that is the only complaint allowed
    assert all("method_cards" in line for line in result.stderr.splitlines() if "WARNING" in line), result.stderr
    page = bs4.BeautifulSoup((tmp_path / "html" / "index.html").read_text(encoding="utf-8"), "html.parser")
    rows = page.select("table.ml-choices tbody tr")
    assert [r.td.get_text(" ", strip=True).split(" ")[1] for r in rows] == ["Layer", "Channels"]
    first = rows[0].get_text(" ", strip=True)
    assert "fine-tuning" in first and "did not act, no figure" in first  # its text workload
    assert "about 5 % higher throughput" in first  # the sourced figure


SCENARIOS = (
    "A CNN on ImageNet-scale data, on several GPUs",
    "Transformer pre-training",
    "Transformer fine-tuning",
    "Memory-bound training",
    "Choosing a numeric precision",
    "Choosing a parallel mode",
)


def test_the_built_page_holds_every_scenario_and_links_to_cards(real_site):
    bs4 = pytest.importorskip("bs4")
    page = bs4.BeautifulSoup((real_site / "choosing_methods.html").read_text(encoding="utf-8"), "html.parser")
    headings = [h.get_text(" ", strip=True).rstrip("¶#").strip() for h in page.select("article h2")]
    for scenario in SCENARIOS:
        assert scenario in headings
    tables = page.select("table.ml-choices")
    assert len(tables) >= len(SCENARIOS)
    for table in tables:
        for row in table.select("tbody tr"):
            link = row.td.find("a")
            assert link["href"].startswith("method_cards/"), link
            assert (real_site / link["href"]).exists()
    text = page.select_one("article").get_text(" ")
    for raw in ("```", "{method-choices}", ":::", "{bdg", "{ref}"):
        assert raw not in text
    index = bs4.BeautifulSoup((real_site / "index.html").read_text(encoding="utf-8"), "html.parser")
    assert index.select_one("article a[href='choosing_methods.html']")
