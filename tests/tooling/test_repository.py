"""The real repository passes every card check, so CI fails on any drift; and every python block
of every card runs (hidden ``<!-- card-setup`` blocks first where they appear)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from card_support import run_card_code

from algorithms.metadata import PACKAGE_ROOT
from algorithms.tooling import cards
from algorithms.tooling.checks import check_builders, check_cards, check_functional, validate_metadata

REPO_ROOT = PACKAGE_ROOT.parent
DOCS = REPO_ROOT / "docs" / "source"
CARD_DIRS = ("method_cards", "dataset_cards", "model_cards")
CARDS_WITH_CODE = sorted(
    p for folder in CARD_DIRS for p in (DOCS / folder).glob("*.md")
    if any(b.language in cards.PYTHON_LANGS for b in cards.code_blocks(p.read_text("utf-8"))))


def test_all_metadata_is_valid():
    assert [str(p) for p in validate_metadata()] == []


def test_metadata_matches_the_code():
    assert [str(p) for p in check_functional() + check_builders()] == []


def test_every_card_agrees_with_code_and_metadata():
    assert [str(p) for p in check_cards()] == []


def test_validate_metadata_imports_neither_torch_nor_method_code():
    code = ("import sys; from algorithms.tooling.commands import validate_metadata_main as m; rc = m([]); "
            "print(rc, sorted(n for n in sys.modules if n == 'torch' or n.startswith('algorithms.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, check=True)
    rc, modules = out.stdout.strip().splitlines()[-1].split(" ", 1)
    assert rc == "0"
    assert "torch" not in modules and "algorithms.cutmix" not in modules and "algorithms.core" not in modules


def test_there_are_cards_with_code():
    names = {p.name for p in CARDS_WITH_CODE}
    assert {"cutmix.md", "mixup.md", "label_smoothing.md", "resnet.md", "digits.md"} <= names


@pytest.mark.parametrize("card", CARDS_WITH_CODE, ids=[str(p.relative_to(DOCS)) for p in CARDS_WITH_CODE])
def test_card_code_runs(card: Path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # examples that write files write them here
    run_card_code(card.read_text("utf-8"), str(card.relative_to(REPO_ROOT)))
