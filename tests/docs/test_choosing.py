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
from methods_tools.effects_pages import GPU_SPEED, NOT_MEASURABLE
from methods_tools.markup import one_line
from methods_tools.pages import TEMPLATE_DIR
from methods_tools.summaries import REFERENCE_ROWS, STAGE_TAGS, VERDICTS, load_inputs, reference_figure

from algorithms.metadata import load_all_metadata

sys.path.insert(0, str(DOCS_SOURCE / "_ext"))
from methods_choosing import figure_owners, page_blocks, parse_choices  # noqa: E402

# A figure with its interval: "1.86x (1.41–2.02)", "no detectable difference (0.94–1.24x)",
# "0.86x (range 0.66x–0.86x over 3 runs)", "1.01x in each of 3 runs".
INTERVAL = re.compile(r"\dx? to [-+]?\d|\dx?\u2013\d|in each of \d+ runs")


@pytest.fixture(scope="module")
def inputs():
    return load_inputs()


@pytest.fixture(scope="module")
def summaries(inputs):
    return {key: inputs.summary(key) for key in inputs.records}


def test_every_figure_names_its_hardware_and_carries_its_interval(summaries, inputs):
    measured = 0
    for key, summary in summaries.items():
        for e in summary.evidence:
            assert e.hardware.strip(), key
            if e.measured:
                measured += 1
                for figure in (e.quality, e.throughput, e.memory):
                    if figure is not None and figure is e.throughput and figure.startswith(NOT_MEASURABLE):
                        # a GPU's speed measured on a CPU is not its cost: no figure, the reason instead
                        # (a method of GPU_SPEED, or a best practice's precision or parallel mode)
                        practice = inputs.records[key].is_best_practice
                        assert (key in GPU_SPEED or practice) and "CPU" in e.hardware, (key, e.hardware)
                    elif figure is not None:
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


def test_choices_refuse_an_unknown_key_a_missing_reason_or_a_repeat():
    assert parse_choices(["cutmix: a reason", "", "  sam : another"], {"cutmix", "sam"}) == [
        ("cutmix", "a reason"),
        ("sam", "another"),
    ]
    with pytest.raises(ValueError, match=r"line 2: unknown method 'cutmxi'"):
        parse_choices(["cutmix: ok", "cutmxi: typo"], {"cutmix"})
    with pytest.raises(ValueError, match="write 'key: reason'"):
        parse_choices(["cutmix"], {"cutmix"})
    with pytest.raises(ValueError, match=r"line 3: 'cutmix' is listed twice"):
        parse_choices(["cutmix: one", "sam: two", "cutmix: three"], {"cutmix", "sam"})


PAGE = """# Page

## First

```{method-choices}
cutmix: one
sam: two
```

## Second

:::{method-choices}
:figures: sam
mixup: three
sam: four
:::
"""


def test_a_method_listed_twice_on_a_page_shows_its_figures_in_one_table():
    known = {"cutmix", "sam", "mixup"}
    blocks = page_blocks(PAGE, known)
    assert [(b.heading, b.keys, b.figures) for b in blocks] == [
        ("First", ("cutmix", "sam"), ()),
        ("Second", ("mixup", "sam"), ("sam",)),
    ]
    # the table that claims it (a chooser about it), else the first that lists it
    assert figure_owners(blocks) == {"cutmix": 0, "sam": 1, "mixup": 1}
    assert figure_owners(page_blocks(PAGE.replace(":figures: sam\n", ""), known))["sam"] == 0
    with pytest.raises(ValueError, match=r"':figures: cutmix' names a method its table does not list"):
        figure_owners(page_blocks(PAGE.replace(":figures: sam", ":figures: cutmix"), known))
    twice = PAGE.replace("```{method-choices}\n", "```{method-choices}\n:figures: sam\n", 1)
    with pytest.raises(ValueError, match=r"two tables claim the figures of 'sam'"):
        figure_owners(page_blocks(twice, known))


def _mini_site(root: Path, page: str):
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
    (src / "index.md").write_text(page, encoding="utf-8")
    return subprocess.run(
        [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-W", "--keep-going", str(src), str(root / "html")],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
    )


def _one_table(body: str) -> str:
    return f"# Page\n\n```{{method-choices}}\n{body}\n```\n"


def _card_warnings_only(result) -> bool:
    """The card links point at pages a one-page site lacks: the only complaint allowed."""
    return all("method_cards" in line for line in result.stderr.splitlines() if "WARNING" in line)


def test_the_directive_refuses_an_unknown_key_in_one_line(tmp_path):
    result = _mini_site(tmp_path, _one_table("channels_last: fast\nno_such_method: a typo"))
    assert result.returncode != 0
    errors = [line for line in result.stderr.splitlines() if "ERROR" in line]
    assert len(errors) == 1 and "unknown method 'no_such_method'" in errors[0], result.stderr


def test_the_directive_renders_the_methods_in_order_with_their_evidence_once(tmp_path):
    bs4 = pytest.importorskip("bs4")
    source = PAGE.replace("cutmix: one", "layer_freezing: one\nchannels_last: two").replace("mixup", "label_smoothing")
    result = _mini_site(tmp_path, source)
    assert _card_warnings_only(result), result.stderr
    page = bs4.BeautifulSoup((tmp_path / "html" / "index.html").read_text(encoding="utf-8"), "html.parser")
    first, second = (table.select(":scope > ol > li") for table in page.select(".ml-choices"))
    assert [item.a.get_text(strip=True) for item in first] == ["Layer Freezing", "Channels Last", "SAM"]
    freezing = first[0].get_text(" ", strip=True)
    assert "fine-tuning" in freezing and "about 5 % higher throughput" in freezing  # its tag; the sourced figure
    # what this project measured is under the list, collapsed, each machine named once
    measured = page.select("details.ml-measured")
    assert len(measured) == 2
    text = measured[0].get_text(" ", strip=True)
    assert "did not act, no figure" in text  # Layer Freezing on its text workload
    machines = [p.get_text(strip=True) for p in measured[0].select("p > strong") if p.get_text().startswith("On ")]
    assert machines and len(machines) == len(set(machines))
    for machine in machines:
        assert text.count(machine.removeprefix("On ").rstrip(":")) == 1
    # SAM is listed twice; the second table claims its figures, and the first links there
    sam_first, sam_second = first[2], second[1]
    assert "At scale" not in sam_first.get_text() and sam_first.select_one("a[href='#choosing-sam']")
    assert "Figures below, in Second" in sam_first.get_text(" ", strip=True)
    assert sam_second.select_one("#choosing-sam") and "At scale" in sam_second.get_text()
    figure = load_inputs().summary("sam").best.figure
    assert page.body.get_text(" ").count(figure) == 1
    assert [("SAM" in d.get_text()) for d in measured] == [False, True]


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
    tables = page.select(".ml-choices")
    assert len(tables) >= len(SCENARIOS)
    anchors = set()
    for table in tables:
        for item in table.select(":scope > ol > li"):
            link = item.find("a")
            assert link["href"].startswith("method_cards/"), link
            assert (real_site / link["href"]).exists()
            anchors |= {a["href"] for a in item.select("a[href^='#choosing-']")}
    # a method listed in several scenarios shows its figures once; its other items link there
    shown = [p["id"] for p in page.select(".ml-choices li > p[id^='choosing-']")]
    assert len(shown) == len(set(shown)) and anchors and anchors <= {f"#{i}" for i in shown}
    text = page.select_one("article").get_text(" ")
    for raw in ("```", "{method-choices}", ":::", "{bdg", "{ref}"):
        assert raw not in text
    index = bs4.BeautifulSoup((real_site / "index.html").read_text(encoding="utf-8"), "html.parser")
    assert index.select_one("article a[href='choosing_methods.html']")


def test_a_best_practices_speed_on_a_cpu_is_not_its_cost(summaries):
    """FSDP's processes share the CPU's cores and Mixed Precision's 16-bit speed is a GPU's: on the
    committed CPU comparison their boxes give the reason, not the ratio; the same rows from a GPU
    give the speed-up with its range."""
    import json
    from pathlib import Path

    from methods_tools import summaries as summaries_module

    fsdp = [e for e in summaries["fsdp"].evidence if e.measured and "CPU" in e.hardware]
    amp = [e for e in summaries["mixed_precision"].evidence if e.measured and "CPU" in e.hardware]
    assert fsdp and amp
    assert all(e.throughput.startswith(f"{NOT_MEASURABLE} (its 2 processes share") for e in fsdp)
    assert all(
        e.throughput == f"{NOT_MEASURABLE} (its speed is that of a GPU's 16-bit matrix units, which this CPU lacks)"
        for e in amp
    )
    path = next(Path(REPO_ROOT / "results").glob("cpu-*.json"))
    document = json.loads(path.read_text())
    document["environment"]["device_type"] = "cuda"
    (gpu,) = [
        e
        for e in summaries_module._training_evidence(path, document, "parallel", "fsdp")
        if e.what.startswith("fp32:fsdp ")
    ]
    assert INTERVAL.search(gpu.throughput) and not gpu.throughput.startswith(NOT_MEASURABLE)
