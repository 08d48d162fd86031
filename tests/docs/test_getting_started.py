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


def test_the_install_section_names_every_extra_a_user_installs():
    """Every extra of pyproject.toml but the project's own (``torch``, which the command shows,
    ``docs`` and ``dev``) is named on the page, so an extra added later is not left out."""
    import tomllib

    extras = tomllib.loads((PACKAGE_ROOT.parent / "pyproject.toml").read_text("utf-8"))["project"]
    install = PAGE.read_text("utf-8").split("## One method")[0]
    missing = [
        e for e in extras["optional-dependencies"] if e not in ("torch", "docs", "dev") and f"`{e}`" not in install
    ]
    assert missing == [], f"name these extras in the Install section of {PAGE.name}: {missing}"
