"""``new_card.py NAME --new``, tried as a method author would, in a copy of the repository.

The scaffold writes the method's folder, its test file and its card, and nothing else; every
prompt it leaves fails the checks with one line that says what to write; once the author has
written them, every check passes, the method's own tests pass, and the method is exported.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from algorithms.metadata import PACKAGE_ROOT

REPO_ROOT = PACKAGE_ROOT.parent
KEY = "demo_scale"

CODE = '''"""Demo Scale: multiplies the input batch by a constant factor."""

from __future__ import annotations

from typing import Any

import torch

from ..core.algorithm import Algorithm
from ..core.event import Event
from ..core.parameters import Parameters, Real
from ..core.state import State

__all__ = ["DemoScale", "demo_scale_batch"]

PARAMETERS = Parameters(factor=Real(low=0, note="The scale."))


def demo_scale_batch(input: torch.Tensor, factor: float = 0.5) -> torch.Tensor:
    """Return ``factor * input``.

    Args:
        input: a batch ``(N, ...)``; not modified.
        factor: the scale.
    """
    PARAMETERS.check(factor=factor)
    return input * factor


class DemoScale(Algorithm):
    """Scales every batch after the data loader.

    Args:
        factor: the scale.
        input_key: where the input is in the batch.
    """

    def __init__(self, factor: float = 0.5, input_key: int | str = 0):
        PARAMETERS.check(factor=factor)
        self.factor = factor
        self.input_key = input_key

    def match(self, event: Event, state: State) -> bool:
        return event is Event.AFTER_DATALOADER

    def apply(self, event: Event, state: State, logger: Any | None = None) -> None:
        state.batch_set_item(self.input_key, demo_scale_batch(state.batch_get_item(self.input_key), self.factor))
'''

TEST = """import torch

import algorithms.functional as cf
from algorithms import DemoScale


def test_demo_scale_batch_matches_its_definition():
    x = torch.arange(4.0)
    assert cf.demo_scale_batch(x, factor=2.0).tolist() == [0.0, 2.0, 4.0, 6.0]
    assert DemoScale().factor == 0.5
"""


def _copy_repository(root: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in ("algorithms", "tools", "results"):
        shutil.copytree(REPO_ROOT / folder, root / folder, ignore=ignore)
    for folder in ("templates", "method_cards", "dataset_cards", "model_cards"):
        shutil.copytree(REPO_ROOT / "docs" / "source" / folder, root / "docs" / "source" / folder, ignore=ignore)
    (root / "tests" / "methods").mkdir(parents=True)


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


@pytest.mark.slow
def test_new_method_from_scaffold_to_passing_checks(tmp_path):
    root = tmp_path / "repo"
    _copy_repository(root)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(root / "tools")])}

    def run(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, *argv], cwd=root, capture_output=True, text=True, env=env, timeout=300)

    before = _files(root)
    out = run("tools/new_card.py", KEY, "--new", "--class-name", "DemoScale")
    assert out.returncode == 0, out.stderr
    assert _files(root) - before == {
        f"algorithms/{KEY}/__init__.py",
        f"algorithms/{KEY}/{KEY}.py",
        f"algorithms/{KEY}/metadata.json",
        f"tests/methods/test_{KEY}.py",
        f"docs/source/method_cards/{KEY}.md",
    }
    assert run("tools/new_card.py", KEY, "--new").returncode == 1  # never overwritten without --force
    # ...and the export tables gained the method's two lines each, in the modules' order
    for table, name in (("__init__.py", "DemoScale"), ("functional.py", f"{KEY}_batch")):
        text = (root / "algorithms" / table).read_text()
        assert f'    "{name}": "{KEY}",\n' in text and f"    from .{KEY} import {name} as {name}\n" in text, table
        before_text = (REPO_ROOT / "algorithms" / table).read_text()
        assert sorted(set(text.splitlines()) - set(before_text.splitlines())) == sorted(
            [f'    "{name}": "{KEY}",', f"    from .{KEY} import {name} as {name}"]
        )

    # Every prompt fails the checks, one line each, saying what to write.
    for tool, where in (
        ("validate_metadata.py", "metadata.json"),
        ("check_functional.py", ".py"),
        ("check_cards.py", ".md"),
    ):
        out = run(f"tools/{tool}")
        assert out.returncode == 1, (tool, out.stdout)
        lines = [line for line in out.stderr.splitlines() if not line.endswith("problem(s)")]
        prompts = [line for line in lines if "write this: " in line]
        assert prompts and any(where in line for line in prompts), (tool, out.stderr)
        assert "Traceback" not in out.stderr

    # The author writes the method, its metadata and its test; the card's facts need no update.
    folder = root / "algorithms" / KEY
    (folder / f"{KEY}.py").write_text(CODE)
    (folder / "__init__.py").write_text(
        f'from .{KEY} import DemoScale, demo_scale_batch\n\n__all__ = ["DemoScale", "demo_scale_batch"]\n'
    )
    metadata = json.loads((folder / "metadata.json").read_text())
    entry = metadata[KEY]
    entry.update(
        tldr="Multiplies every input by a factor.",
        attribution="Nobody, 2026",
        domains=["vision"],
        tags=["augmentation"],
        summary="It scales the batch.",
        use="Nowhere: it is a demonstration.",
        observable=["changed_inputs"],
        hyperparameters={"factor": {"suggested": 0.5, "note": "Halves the input."}},
    )
    entry.pop("paper")
    (folder / "metadata.json").write_text(json.dumps(metadata, indent=2))
    (root / "tests" / "methods" / f"test_{KEY}.py").write_text(TEST)
    out = run("tools/new_card.py", KEY, "--update")
    assert out.returncode == 0 and out.stdout.startswith("up to date:"), out.stderr
    card = root / "docs" / "source" / "method_cards" / f"{KEY}.md"
    card.write_text(
        "\n".join(
            line
            for line in card.read_text().splitlines()
            if "TODO(new_card)" not in line and "TODO(new\\_card)" not in line
        )
    )

    for tool in ("validate_metadata.py", "check_functional.py"):
        out = run(f"tools/{tool}")
        assert out.returncode == 0, (tool, out.stderr)
    # The cards agree; what is left is the composability matrix, which has no cells of the new
    # method until the author reruns it (nox -s matrix, about a minute): one line, saying so.
    out = run("tools/check_cards.py")
    problems = [line for line in out.stderr.splitlines() if not line.endswith("problem(s)")]
    assert out.returncode == 1 and len(problems) == 1, out.stderr
    assert (
        problems[0].startswith("results/composability/")
        and "DemoScale alone" in problems[0]
        and "nox -s matrix" in problems[0]
    )
    assert "```{card-facts} hyperparameters\n```" in card.read_text()
    # ...which the docs build renders from the code and metadata just written
    out = run(
        "-c",
        "import sys; sys.path[:0] = ['.', 'tools']\nfrom methods_tools.facts import CardFacts\n"
        "from algorithms.metadata import Kind\n"
        f"print(CardFacts().body(Kind.METHOD, {KEY!r}, 'hyperparameters'))",
    )
    assert "| `factor` | `0.5` | `[0, inf)` | The scale. | `0.5` | Halves the input. |" in out.stdout, out.stderr
    out = run("-m", "pytest", "-q", "-p", "no:cacheprovider", f"tests/methods/test_{KEY}.py")
    assert out.returncode == 0, out.stdout[-3000:]
    out = run(
        "-c",
        "from algorithms import DemoScale; import algorithms.functional as cf; "
        "print(DemoScale.__module__, cf.demo_scale_batch.__module__)",
    )
    assert out.stdout.split() == [f"algorithms.{KEY}.{KEY}"] * 2, out.stderr
