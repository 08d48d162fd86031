"""tools/new_card.py: scaffolds pass every check, run as written, and never overwrite silently."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from card_support import run_card_code
from methods_tools import cards
from methods_tools.checks import check_cards, template_sections
from methods_tools.commands import new_card_main
from methods_tools.scaffold import TEMPLATES, card_path, render_card

from algorithms.metadata import PACKAGE_ROOT, load_all_datasets, load_all_metadata, load_all_model_families

REPO_ROOT = PACKAGE_ROOT.parent

ALL_CARDS = ([("method", k) for k in load_all_metadata()] + [("dataset", k) for k in load_all_datasets()]
             + [("model", k) for k in load_all_model_families()])


def _scaffold_everything(repo: Path, package: Path) -> None:
    for kind, key in ALL_CARDS:
        assert new_card_main([key, "--kind", kind], repo_root=repo, package_root=package) == 0


def test_every_scaffold_passes_every_card_check(scratch):
    repo, package = scratch
    _scaffold_everything(repo, package)
    assert [str(p) for p in check_cards(repo, package)] == []


@pytest.mark.parametrize("kind", list(TEMPLATES))
def test_jinja_template_has_the_rst_templates_sections(scratch, kind):
    """The section list exists once, in the RST template; each scaffold must reproduce it."""
    repo, package = scratch
    key = next(k for kd, k in ALL_CARDS if kd == kind)
    rendered = cards.sections(render_card(kind, key, repo_root=repo, package_root=package))
    expected = template_sections(kind, repo)
    assert rendered[0].level == 1
    assert [(s.level, s.title) for s in rendered[1:]] == [(s.level, s.title) for s in expected]


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
    table = cards.find_table(render_card("method", "cutmix", repo_root=repo, package_root=package))
    rows = {cards.unquote_code(c[0]): c for _, c in table.rows}
    assert set(rows) == {"alpha", "interpolate_loss", "uniform_sampling"}  # input_key/target_key are plumbing
    assert rows["alpha"][1:4] == ("`1.0`", "`1.0`", "`(0, inf)`")
    assert "Beta concentration" in rows["alpha"][4]  # the docstring's Args description


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
    known = line.split("known: ")[1].split(", ")
    assert known[0] == "mixup" and set(known) == set(load_all_metadata())
    assert new_card_main(["resnett", "--kind", "model"], repo_root=repo, package_root=package) == 1
    assert "known: resnet" in capsys.readouterr().err


def test_metadata_text_is_escaped_in_the_scaffold(scratch):
    repo, package = scratch
    path = package / "mixup" / "metadata.json"
    path.write_text(path.read_text().replace(
        '"tldr": "Trains', '"tldr": "<script>alert(1)</script> {eval-rst}`x` *Trains'))
    text = render_card("method", "mixup", repo_root=repo, package_root=package)
    tldr = text.split("## TL;DR\n\n")[1].splitlines()[0]
    assert tldr.startswith(r"\<script\>alert(1)\</script\> \{eval-rst\}\`x\` \*Trains")


def test_cli_script_runs_from_the_checkout():
    out = subprocess.run([sys.executable, str(REPO_ROOT / "tools" / "new_card.py"), "label_smoothing", "--dry-run"],
                         capture_output=True, text=True, cwd=REPO_ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("# Label Smoothing\n") and "| `smoothing` | `0.1` | `0.1` |" in out.stdout


@pytest.mark.parametrize("option", [{"precision": "amp_bf16"}, {"precision": "bf16"}, {"parallel": "ddp"},
                                    {"parallel": "fsdp"}])
def test_best_practice_scaffold_has_no_table_passes_checks_and_runs(scratch, option, tmp_path, monkeypatch):
    repo, package = scratch
    (package / "core" / "bp.metadata.json").write_text(json.dumps({"bp": {
        "name": "Some precision", "kind": "best_practice", "class_name": None, "functional": None,
        "trainer_option": option, "tldr": "Trains in lower precision.", "attribution": "Someone, 2018",
        "link": "https://example.org", "domains": ["general"], "tags": ["precision"], "summary": "Casts.",
        "use": "Anywhere.", "math_equivalent": False, "hyperparameters": {}, "plumbing": []}}))
    _scaffold_everything(repo, package)
    assert new_card_main(["bp"], repo_root=repo, package_root=package) == 0
    text = card_path("method", "bp", repo).read_text()
    assert cards.find_table(text) is None
    (name, value), = option.items()
    assert f"`{name}={value!r}`" in text
    assert [str(p) for p in check_cards(repo, package)] == []
    monkeypatch.chdir(tmp_path)
    environ = dict(os.environ)
    namespace = run_card_code(text, "bp.md")
    assert namespace["trainer"].state.timestamp.batch == 2  # it trained on both batches
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        assert os.environ.get(name) == environ.get(name)  # a distributed example's set-up is undone
