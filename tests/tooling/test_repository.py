"""The real repository passes every card check, so CI fails on any drift; every python block
of every card runs (hidden ``<!-- card-setup`` blocks first where they appear); and every card whose
example is a ``train.py`` launched with ``torch.distributed.run`` is launched that way."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from card_support import run_card_code
from methods_tools import cards
from methods_tools.checks import check_builders, check_cards, check_functional, validate_metadata
from methods_tools.scaffold import LAUNCH_COMMAND, render_card

from algorithms.core.options import DISTRIBUTED
from algorithms.metadata import PACKAGE_ROOT, load_all_metadata

REPO_ROOT = PACKAGE_ROOT.parent
DOCS = REPO_ROOT / "docs" / "source"
CARD_DIRS = ("method_cards", "dataset_cards", "model_cards")
CARDS_WITH_CODE = sorted(
    p
    for folder in CARD_DIRS
    for p in (DOCS / folder).glob("*.md")
    if any(b.language in cards.PYTHON_LANGS for b in cards.code_blocks(p.read_text("utf-8")))
)


def test_all_metadata_is_valid():
    assert [str(p) for p in validate_metadata()] == []


def test_metadata_matches_the_code():
    assert [str(p) for p in check_functional() + check_builders()] == []


def test_every_card_agrees_with_code_and_metadata():
    assert [str(p) for p in check_cards()] == []


def test_validate_metadata_imports_neither_torch_nor_method_code():
    code = (
        "import sys; from methods_tools.commands import validate_metadata_main as m; rc = m([]); "
        "print(rc, sorted(n for n in sys.modules if n == 'torch' or n.startswith('algorithms.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, check=True)
    rc, modules = out.stdout.strip().splitlines()[-1].split(" ", 1)
    assert rc == "0"
    assert "torch" not in modules and "algorithms.cutmix" not in modules and "algorithms.core" not in modules
    # pre-commit installs jsonschema alone: nothing of the docs toolchain either
    code = (
        "import sys; from methods_tools.commands import validate_metadata_main as m; rc = m([]); "
        "print(rc, sorted(n for n in sys.modules if n.split('.')[0] in ('jinja2', 'markdown_it', 'sphinx')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, check=True)
    assert out.stdout.strip().splitlines()[-1] == "0 []"


def test_the_validator_script_imports_only_the_metadata_loader_and_jsonschema():
    # As pre-commit runs it (the script, over every file): nothing heavy, nothing of the method code
    # (algorithms/__init__.py's lazy-export helper, a few lines of the standard library, is all).
    code = (
        "import runpy, sys\nsys.argv = ['tools/validate_metadata.py']\ntry:\n"
        "    runpy.run_path('tools/validate_metadata.py', run_name='__main__')\n"
        "except SystemExit as exit:\n    rc = exit.code\n"
        "heavy = ('torch', 'numpy', 'jinja2', 'markdown_it', 'matplotlib', 'sphinx', 'docutils')\n"
        "print(rc, sorted(n for n in sys.modules if n.split('.')[0] in heavy\n"
        "                 or (n.startswith('algorithms.') and n not in ('algorithms.metadata', 'algorithms._lazy'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, check=True)
    assert out.stdout.strip().splitlines()[-1] == "0 []"


def test_there_are_cards_with_code():
    names = {p.name for p in CARDS_WITH_CODE}
    assert {"cutmix.md", "mixup.md", "label_smoothing.md", "resnet.md", "digits.md"} <= names


@pytest.mark.parametrize("card", CARDS_WITH_CODE, ids=[str(p.relative_to(DOCS)) for p in CARDS_WITH_CODE])
def test_card_code_runs(card: Path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # examples that write files write them here
    run_card_code(card.read_text("utf-8"), str(card.relative_to(REPO_ROOT)))


def _launch_examples() -> list[tuple[Path, str]]:
    """Cards whose example is a ``train.py`` launched by a shell block with the scaffold's launch line."""
    found = []
    for folder in CARD_DIRS:
        for card in sorted((DOCS / folder).glob("*.md")):
            for block in cards.code_blocks(card.read_text("utf-8")):
                if block.language in {"bash", "sh", "console"}:
                    found += [
                        (card, line.strip()) for line in block.code.splitlines() if line.strip() == LAUNCH_COMMAND
                    ]
    return found


LAUNCH_EXAMPLES = _launch_examples()


def test_distributed_cards_have_launch_examples():
    names = {card.name for card, _ in LAUNCH_EXAMPLES}
    assert {"ddp.md", "fsdp.md", "deepspeed_zero.md"} <= names


@pytest.mark.parametrize(
    "key", [k for k, r in load_all_metadata().items() if (r.trainer_option or {}).get("parallel") in DISTRIBUTED]
)
def test_the_scaffold_writes_the_launch_line_the_launch_test_runs(key):
    blocks = cards.code_blocks(render_card("method", key))
    assert any(b.language == "bash" and b.code.strip() == LAUNCH_COMMAND for b in blocks)


def test_importing_the_runtime_package_loads_no_tooling():
    """The runtime package (and every method, model and data set in it) imports nothing from tools/."""
    code = (
        "import sys, importlib, algorithms, algorithms.functional as cf\n"
        "from algorithms.metadata import load_all_metadata\n"
        "for record in load_all_metadata().values():\n"
        "    if record.class_name:\n"
        "        importlib.import_module('algorithms.' + record.key)\n"
        "        getattr(algorithms, record.class_name), getattr(cf, record.functional)\n"
        "import algorithms.core, algorithms.models, algorithms.data\n"
        "algorithms.core.Trainer\n"
        "tools = [n for n, m in sys.modules.items() if n.startswith('methods_tools')\n"
        "         or str(getattr(m, '__file__', '') or '').startswith(sys.argv[1])]\n"
        "print(tools)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(REPO_ROOT / "tools")],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        check=True,
    )
    assert out.stdout.strip() == "[]", out.stdout


@pytest.mark.slow  # torchrun and two processes a card: 5 to 8 s each
@pytest.mark.parametrize("card,command", LAUNCH_EXAMPLES, ids=[str(c.relative_to(DOCS)) for c, _ in LAUNCH_EXAMPLES])
def test_launched_card_example_trains(card: Path, command: str, tmp_path):
    """The card's python blocks, saved as ``train.py``, run under the card's own launch command
    (``python`` is this interpreter); the ``if __name__ == "__main__"`` part runs, in every rank.
    On the CPU the processes use gloo, as the cards say."""
    from algorithms.core.distributed import deepspeed_unavailable_reason

    text = card.read_text("utf-8")
    script = "\n\n".join(b.code for b in cards.code_blocks(text) if b.language in cards.PYTHON_LANGS)
    if 'parallel="deepspeed"' in script and (reason := deepspeed_unavailable_reason()):
        pytest.skip(f"{card.name}: {reason}")
    (tmp_path / "train.py").write_text(script, "utf-8")
    argv = shlex.split(command)
    assert argv[0] == "python", command
    argv[0] = sys.executable
    # Every rank logs the Trainer's INFO lines (through a sitecustomize beside the script), so the
    # test sees that each process trained to the end, not only that the launcher exited 0.
    (tmp_path / "sitecustomize.py").write_text(
        "import logging\nlogging.basicConfig(level=logging.INFO, format='%(message)s')\n", "utf-8"
    )
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    out = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, f"{card.name}: `{command}` exited {out.returncode}\n{out.stderr[-3000:]}"
    nproc = int(argv[argv.index("--nproc_per_node") + 1])
    epochs = int(re.search(r'max_duration="(\d+)ep"', script).group(1))
    finished = re.findall(rf"^epoch {epochs} done", out.stdout + out.stderr, flags=re.M)
    assert len(finished) == nproc, f"{card.name}: {len(finished)} of {nproc} ranks finished epoch {epochs}"


@pytest.mark.parametrize("schema", sorted(p.name for p in PACKAGE_ROOT.glob("*.schema.json")))
def test_every_schema_is_valid_against_its_metaschema(schema):
    # The loader does not check its schemas at every load (it would slow every command): this does.
    document = json.loads((PACKAGE_ROOT / schema).read_text(encoding="utf-8"))
    jsonschema.validators.validator_for(document).check_schema(document)


def test_the_readme_is_for_users_and_short():
    """The README says what the library is, how to install it and run the two commands, in under
    1,000 words; measurement notes belong on the site's pages."""
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    words = len(re.findall(r"[A-Za-z0-9][\w'.-]*", text))
    assert words < 1000, f"README.md has {words} words: move the details to the site's pages"
    for command in ("pip install nox && nox -s docs", "nox -s tests"):
        assert command in text, command
