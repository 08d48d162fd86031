"""The "Getting started" page's code runs as printed: one method as a function, in the Trainer and
in a loop of one's own (the page's python blocks, in order, in one namespace)."""

from __future__ import annotations

from methods_tools import cards

from algorithms.metadata import PACKAGE_ROOT

PAGE = PACKAGE_ROOT.parent / "docs" / "source" / "getting_started.md"


def test_the_getting_started_code_runs_and_trains(capsys):
    blocks = [b for b in cards.code_blocks(PAGE.read_text("utf-8")) if b.language in cards.PYTHON_LANGS]
    assert blocks, "the page has python to run"
    namespace: dict = {"__name__": "__page__"}
    for block in blocks:
        exec(compile(block.code, f"{PAGE.name}:{block.line}", "exec"), namespace)  # noqa: S102
    assert namespace["trainer"].method_log.acted("CutMix") and namespace["loop"].timestamp.batch == 4
    assert "CutMix: batches_mixed=8" in capsys.readouterr().out
