"""tools/new_card.py: scaffolds pass every check but their prompts, run as written, hold directives
for their facts (so a metadata change needs no card change), --update turns an old card's regions
into directives and keeps the prose, and nothing is overwritten silently."""

from __future__ import annotations

import copy
import html
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote

import pytest
from card_support import run_card_code
from methods_tools import cards
from methods_tools.checks import check_cards
from methods_tools.commands import new_card_main
from methods_tools.docsgen import method_option
from methods_tools.facts import CardFacts, directives
from methods_tools.scaffold import card_path, render_card

from algorithms.core.parameters import Choice, Integer, Other, Real
from algorithms.metadata import PACKAGE_ROOT, Kind, load_all_datasets, load_all_metadata, load_all_model_families

REPO_ROOT = PACKAGE_ROOT.parent

ALL_CARDS = (
    [("method", k) for k in load_all_metadata()]
    + [("dataset", k) for k in load_all_datasets()]
    + [("model_family", k) for k in load_all_model_families()]
)


def _scaffold_everything(repo: Path, package: Path) -> None:
    for kind, key in ALL_CARDS:
        assert new_card_main([key, "--kind", kind], repo_root=repo, package_root=package) == 0


def _problems(repo: Path, package: Path) -> list[str]:
    return [str(p) for p in check_cards(repo, package)]


def test_every_scaffold_passes_every_card_check_but_its_prompts(scratch):
    repo, package = scratch
    _scaffold_everything(repo, package)
    problems = _problems(repo, package)
    assert problems and all(": TODO: write this: " in p for p in problems), problems
    # once the author has replaced the prompts, nothing is left
    for folder in ("method_cards", "dataset_cards", "model_cards"):
        for card in (repo / "docs" / "source" / folder).glob("*.md"):
            text = card.read_text()
            card.write_text("\n".join(line for line in text.splitlines() if "TODO(new_card)" not in line) + "\n")
    assert _problems(repo, package) == []


def test_a_card_needs_its_templates_sections_in_order(scratch):
    """The section list exists once, in the Jinja template: a card is checked against a fresh render."""
    repo, package = scratch
    _scaffold_everything(repo, package)
    path = card_path("method", "mixup", repo)
    text = path.read_text()
    path.write_text(text.replace("## Composability\n", "## Composition\n"))
    assert any("mixup.md" in p and "missing section '## Composability'" in p for p in _problems(repo, package))


@pytest.mark.parametrize("key", [k for k, r in load_all_metadata().items() if r.functional])
def test_the_generated_functional_example_is_a_training_step(key):
    """On real data, with the form between the data and the step, and a prompt for what to assert."""
    text = render_card("method", key)
    section = text[text.index("### Functional Interface") : text.index("### Trainer")]
    code = next(b.code for b in cards.code_blocks(section) if b.language == "python")
    functional = load_all_metadata()[key].functional
    assert "torch.rand" not in code and ("digits()" in code or "text = b" in code)
    call, backward, step = (code.index(s) for s in (f"cf.{functional}(", "loss.backward()", "optimizer.step()"))
    assert backward < step and code.index("model = ") < call
    assert code.splitlines()[-1].startswith("# TODO(new_card): assert what the method did")


@pytest.mark.parametrize("key", list(load_all_metadata()))
def test_generated_method_examples_run_as_written(scratch, key, tmp_path, monkeypatch):
    repo, package = scratch
    text = render_card("method", key, repo_root=repo, package_root=package)
    assert any(b.language == "python" and not b.hidden for b in cards.code_blocks(text))
    monkeypatch.chdir(tmp_path)
    namespace = run_card_code(text, f"{key}.md")
    assert "trainer" in namespace and namespace["trainer"].state.timestamp.batch == 2  # it trained


def test_scaffold_table_comes_from_code_and_metadata(scratch):
    repo, package = scratch
    body = cards.regions(render_card("method", "cutmix", repo_root=repo, package_root=package))["hyperparameters"].body
    rows = {
        line.split(" | ")[0].strip("| `"): line.split(" | ") for line in body.splitlines() if line.startswith("| `")
    }
    assert set(rows) == {"alpha", "interpolate_loss", "uniform_sampling"}  # input_key/target_key are plumbing
    # name and default from the signature, range and description from the declaration beside it,
    # the suggested value and why from the metadata
    assert rows["alpha"][1:3] == ["`1.0`", "`[0, inf)`"]  # alpha = 0 is allowed
    assert "concentration of the kept area" in rows["alpha"][3]
    assert rows["alpha"][4] == "`1.0`" and "uniformly, as in the paper" in rows["alpha"][5]
    assert rows["interpolate_loss"][2] == "`True or False`" and rows["interpolate_loss"][5].startswith("—")


def test_a_card_holds_directives_so_a_metadata_change_needs_no_card_change(scratch):
    """The facts render when the site builds: the scaffold writes directives, not text, and after an
    edit of the metadata the card is still correct and renders the new text."""
    repo, package = scratch
    _scaffold_everything(repo, package)
    path = card_path("method", "mixup", repo)
    card = path.read_text()
    assert "<!-- generated:" not in card and "Trains on convex" not in card  # no fact is committed
    assert [name for _, name in directives(card)] == list(
        cards.regions(render_card("method", "mixup", repo_root=repo, package_root=package))
    )
    metadata = package / "mixup" / "metadata.json"
    metadata.write_text(metadata.read_text().replace('"tldr": "Trains', '"tldr": "Now trains'))
    assert not any("mixup.md" in p and "TODO" not in p for p in _problems(repo, package))
    assert path.read_text() == card
    tldr = CardFacts(repo_root=repo, package_root=package).body(Kind.METHOD, "mixup", "tldr")
    assert tldr.strip().startswith("Now trains on convex")


def test_update_turns_an_old_cards_regions_into_directives_and_keeps_the_prose(scratch, capsys):
    repo, package = scratch
    _scaffold_everything(repo, package)
    path = card_path("method", "mixup", repo)
    old = render_card("method", "mixup", repo_root=repo, package_root=package)  # facts committed as text
    old = old.replace("## Considerations\n", "## Considerations\n\nThe author's words `alpha=0.2`.\n")
    path.write_text(old)
    problems = [p for p in _problems(repo, package) if "mixup.md" in p and "TODO" not in p]
    assert len(problems) == 1 and "generated text committed in the card" in problems[0]
    assert "new_card.py mixup --update" in problems[0]
    capsys.readouterr()
    assert new_card_main(["mixup", "--update"], repo_root=repo, package_root=package) == 0
    assert capsys.readouterr().out.startswith("updated:")
    updated = path.read_text()
    assert "<!-- generated:" not in updated and "The author's words `alpha=0.2`." in updated
    # every line outside the regions is kept, in order
    kept = [line for line in updated.splitlines() if not line.startswith(("```{card-facts}", "```"))]
    region_lines = {n for r in cards.regions(old).values() for n in range(r.line, r.end + 1)}
    assert kept == [
        line for n, line in enumerate(old.splitlines(), 1) if n not in region_lines and not line.startswith("```")
    ]
    assert not any("mixup.md" in p and "TODO" not in p for p in _problems(repo, package))
    assert new_card_main(["mixup", "--update"], repo_root=repo, package_root=package) == 0
    assert capsys.readouterr().out.startswith("up to date:")
    assert path.read_text() == updated


def test_a_facts_directive_the_template_lacks_or_misses_is_named(scratch):
    repo, package = scratch
    _scaffold_everything(repo, package)
    path = card_path("method", "mixup", repo)
    text = path.read_text()
    path.write_text(text.replace("```{card-facts} hyperparameters\n```", "```{card-facts} hyperparams\n```"))
    problems = [p for p in _problems(repo, package) if "mixup.md" in p and "TODO" not in p]
    assert any("card-facts 'hyperparams': this card kind has no such fact" in p for p in problems), problems
    assert any("no card-facts directive for 'hyperparameters'" in p for p in problems), problems


def test_existing_card_is_left_byte_for_byte(scratch, capsys):
    repo, package = scratch
    path = card_path("method", "cutmix", repo)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"hand-written \xe2\x9c\x93\n")
    assert new_card_main(["cutmix"], repo_root=repo, package_root=package) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert "cutmix.md: exists" in line and "--force" in line
    assert path.read_bytes() == b"hand-written \xe2\x9c\x93\n"
    assert sorted(p.name for p in path.parent.iterdir()) == ["cutmix.md"]  # no temporary file left
    assert new_card_main(["cutmix", "--force"], repo_root=repo, package_root=package) == 0
    assert path.read_text().startswith("# CutMix\n")


def test_dry_run_prints_and_writes_nothing(scratch, capsys):
    repo, package = scratch
    assert new_card_main(["mixup", "--dry-run"], repo_root=repo, package_root=package) == 0
    assert capsys.readouterr().out.startswith("# MixUp\n")
    assert not (repo / "docs" / "source" / "method_cards").exists()


def test_unknown_name_lists_known_names_closest_first(scratch, capsys):
    repo, package = scratch
    assert new_card_main(["mixupp"], repo_root=repo, package_root=package) == 1
    (line,) = capsys.readouterr().err.splitlines()
    known = line.split("known: ")[1].split("; ")[0].split(", ")
    assert known[0] == "mixup" and set(known) == set(load_all_metadata())
    assert line.endswith("to create it: python tools/new_card.py mixupp --new")
    assert new_card_main(["resnett", "--kind", "model_family"], repo_root=repo, package_root=package) == 1
    assert "known: resnet" in capsys.readouterr().err


# Every free-text field of every card kind, and each kind's links; the schema says which fields are
# text (its "text" definition) and which are links (the "^https://" pattern).
ESCAPED_CARDS = [
    ("method", "mixup", "mixup/metadata.json", "metadata.schema.json"),
    ("dataset", "digits", "data/digits.metadata.json", "dataset.schema.json"),
    ("model_family", "resnet", "models/resnet.metadata.json", "model_family.schema.json"),
]
PAPER = {"title": "t", "authors": ["a", "b"], "venue": "v", "year": 2020, "url": "https://example.org"}
# Fields the templates are known not to escape: none (the paper's venue, which starts a line, once
# went through md_text instead of md_paragraph; the test insists the set stays empty).
KNOWN_UNESCAPED: set[str] = set()


def _hostile(tag: str) -> str:
    """Text that is markup in every way MyST reads it: a comment, list or heading where it starts
    a line, HTML, emphasis, code, a link, a role, math, a table cell's end, a backslash."""
    return (
        f"% {tag} <script>alert({tag})</script> *{tag}* _{tag}_ `{tag}` [{tag}](https://x.org) "
        f"{{eval-rst}}`{tag}` ${tag}$ |{tag}| \\{tag}\n- {tag} 1. {tag} # {tag}"
    )


def _hostile_url(tag: str) -> str:
    return f'https://example.org/{tag}?q=<script>&r=a b)(c>"d'


def _fields(schema: dict, node: dict, value, path=()):
    """``(path, "text" | "url")`` for every string in ``value`` that ``node`` types as text or as a link."""
    while "$ref" in node:
        node = schema["$defs"][node["$ref"].rsplit("/", 1)[1]]
    if isinstance(value, str):
        if node is schema["$defs"]["text"]:
            yield path, "text"
        elif node.get("pattern") == "^https://":
            yield path, "url"
    elif isinstance(value, dict):
        for key, item in value.items():
            if path[-1:] and key == "at_scale":  # shown beside the measured effects, whose snippet renders it
                continue  # (tests/docs/test_effects_pages.py checks that it is escaped there)
            child = (
                node.get("properties", {}).get(key)
                or next((s for p, s in node.get("patternProperties", {}).items() if re.match(p, key)), None)
                or node.get("additionalProperties")
            )
            if isinstance(child, dict):
                yield from _fields(schema, child, item, (*path, key))
    elif isinstance(value, list) and isinstance(node.get("items"), dict):
        for i, item in enumerate(value):
            yield from _fields(schema, node["items"], item, (*path, i))


def _set(data, path, value):
    for key in path[:-1]:
        data = data[key]
    data[path[-1]] = value


@pytest.mark.parametrize(("kind", "key", "file", "schema_file"), ESCAPED_CARDS, ids=[c[0] for c in ESCAPED_CARDS])
def test_metadata_text_is_escaped_in_the_scaffold(scratch, kind, key, file, schema_file):
    """Every text field and link of the metadata, made hostile, reads back in the card (parsed as
    the site parses it, MyST with its extensions) as exactly the text it was: no HTML, block,
    emphasis, code, role or math comes out of it, and every link keeps its one destination. The
    card is rendered with a paper and without one, since the attribution shows one or the other."""
    from markdown_it.renderer import RendererHTML
    from myst_parser.config.main import MdParserConfig
    from myst_parser.parsers.mdit import create_md_parser

    repo, package = scratch
    md = create_md_parser(MdParserConfig(enable_extensions={"dollarmath", "amsmath", "colon_fence"}), RendererHTML)
    schema = json.loads((PACKAGE_ROOT / schema_file).read_text())
    original = json.loads((package / file).read_text())
    shown, every = set(), set()
    for with_paper in (True, False):
        data = copy.deepcopy(original)
        data[key].pop("paper", None)
        if with_paper:
            data[key]["paper"] = PAPER
        values = {}
        for i, (field, what) in enumerate(_fields(schema, schema, data)):
            values[field] = (what, _hostile(f"F{i:02d}") if what == "text" else _hostile_url(f"F{i:02d}"))
            _set(data, field, values[field][1])
        (package / file).write_text(json.dumps(data))
        text = render_card(kind, key, repo_root=repo, package_root=package)
        page = md.render(text)
        assert "<script" not in page
        hrefs = [unquote(t.attrGet("href")) for t in _walk(md.parse(text)) if t.type == "link_open"]
        for field, (what, value) in values.items():
            every.add(field)  # a paper's fields exist only in the first rendering
            # text reads back as itself on one line (line breaks are spaces), HTML-escaped by the renderer
            if (what == "text" and html.escape(" ".join(value.split()), quote=False) in page) or (
                what == "url" and value in hrefs
            ):
                shown.add(field)
    missing = {".".join(map(str, field[1:])) for field in every - shown}
    assert missing == KNOWN_UNESCAPED, f"not shown as the plain text or the one link they are: {sorted(missing)}"
    assert len(every) >= 12


def _walk(tokens):
    for token in tokens:
        yield token
        yield from _walk(token.children or [])


def test_cli_script_runs_from_the_checkout():
    out = subprocess.run(
        [sys.executable, str(REPO_ROOT / "tools" / "new_card.py"), "label_smoothing", "--dry-run"],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("# Label Smoothing\n") and "```{card-facts} hyperparameters\n```" in out.stdout


@pytest.mark.parametrize(
    "option", [{"precision": "amp_bf16"}, {"precision": "bf16"}, {"parallel": "ddp"}, {"parallel": "fsdp"}]
)
def test_best_practice_scaffold_has_no_table_passes_checks_and_runs(scratch, option, tmp_path, monkeypatch):
    repo, package = scratch
    (package / "core" / "bp.metadata.json").write_text(
        json.dumps(
            {
                "bp": {
                    "name": "Some precision",
                    "kind": "best_practice",
                    "class_name": None,
                    "functional": None,
                    "trainer_option": option,
                    "tldr": "Trains in lower precision.",
                    "attribution": "Someone, 2018",
                    "link": "https://example.org",
                    "domains": ["general"],
                    "tags": ["precision"],
                    "summary": "Casts.",
                    "use": "Anywhere.",
                    "math_equivalent": False,
                    "hyperparameters": {},
                    "plumbing": [],
                }
            }
        )
    )
    _scaffold_everything(repo, package)
    assert new_card_main(["bp"], repo_root=repo, package_root=package) == 0
    text = card_path("method", "bp", repo).read_text()
    assert "| Hyperparameter |" not in text
    ((name, value),) = option.items()
    assert f"`{name}={json.dumps(value)}`" in text
    assert not [p for p in _problems(repo, package) if ": TODO: " not in p]
    monkeypatch.chdir(tmp_path)
    environ = dict(os.environ)
    namespace = run_card_code(text, "bp.md")
    assert namespace["trainer"].state.timestamp.batch == 2  # it trained on both batches
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        assert os.environ.get(name) == environ.get(name)  # a distributed example's set-up is undone


@pytest.mark.parametrize(
    ("declared", "shown"),
    [
        (Real(low=0, high=1, note="n"), "`[0, 1]`"),
        (Real(low=0, high=1, low_open=True, note="n"), "`(0, 1]`"),
        (Real(low=0, high=1, low_open=True, high_open=True, note="n"), "`(0, 1)`"),
        (Integer(low=0, note="n"), "`[0, inf)`"),
        (Real(high=5, high_open=True, note="n"), "`(-inf, 5)`"),
        (Real(low=0, low_open=True, optional=True, note="n"), "`None or (0, inf)`"),
        (Choice(choices=("block", "sample"), note="n"), "`'block', 'sample'`"),
        (
            Other(requires="a duration such as '2ep'", parse=lambda name, value: value, note="n"),
            "a duration such as '2ep'",
        ),
        (None, "—"),
    ],
)
def test_ranges_are_shown_as_intervals_with_their_allowed_ends(declared, shown):
    from methods_tools.scaffold import range_literal

    assert range_literal(declared) == shown


def test_a_model_option_is_the_expression_that_wraps_the_model():
    """LoRA's Trainer option is the model itself, wrapped by peft: shown as written (an expression, not
    a string), and the scaffold's example imports its package and wraps the model before the Trainer."""
    record = load_all_metadata()["lora"]
    expression = record.trainer_option["model"]
    assert expression.startswith("peft.get_peft_model(model, ")
    assert method_option(record) == f"model={expression}"
    code = next(b.code for b in cards.code_blocks(render_card("method", "lora")) if b.language == "python")
    lines = code.splitlines()
    assert "import peft" in lines and f"model = {expression}" in lines
    call = next(line for line in lines if line.startswith("trainer = Trainer(model, "))
    assert "model=" not in call and lines.index(f"model = {expression}") < lines.index(call)
