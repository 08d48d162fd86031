"""The export tables of ``algorithms``, ``algorithms.functional`` and ``algorithms.core``: explicit,
lazy, and equal to what the methods' ``metadata.json`` files name.

Each table (``EXPORTS``: name -> module) is what runs; the imports under ``TYPE_CHECKING`` beside it
are what IDEs and type checkers read. Both must name the same objects, every metadata file's class
and functional form must be in them, and importing the package must read no metadata.
"""

from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import algorithms
import algorithms.core
import algorithms.functional
from algorithms.metadata import load_all_metadata

PACKAGE = Path(algorithms.__file__).parent
TABLES = {
    "algorithms": (algorithms, PACKAGE / "__init__.py"),
    "algorithms.functional": (algorithms.functional, PACKAGE / "functional.py"),
    "algorithms.core": (algorithms.core, PACKAGE / "core" / "__init__.py"),
}


def _typing_imports(path: Path) -> dict[str, str]:
    """name -> module of the ``from .module import name as name`` lines under ``if TYPE_CHECKING:``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    block = next(
        node
        for node in tree.body
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
    )
    names = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom) and node.level == 1, ast.unparse(node)
        for alias in node.names:
            assert alias.asname == alias.name, f"{ast.unparse(node)}: re-export as `{alias.name} as {alias.name}`"
            names[alias.name] = node.module
    return names


@pytest.mark.parametrize("module_name", sorted(TABLES))
def test_typing_imports_match_the_table(module_name):
    module, path = TABLES[module_name]
    typing = _typing_imports(path)
    problems = [
        f"{path.name}: {name}: EXPORTS says .{module.EXPORTS.get(name)}, TYPE_CHECKING imports from .{typing.get(name)}"
        for name in sorted(set(module.EXPORTS) | set(typing))
        if module.EXPORTS.get(name) != typing.get(name)
    ]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("module_name", sorted(TABLES))
def test_every_export_resolves_to_its_module(module_name):
    module, _ = TABLES[module_name]
    package = "algorithms" if module_name == "algorithms.functional" else module_name
    assert module.__all__ == sorted(module.EXPORTS)
    for name, where in module.EXPORTS.items():
        value = getattr(module, name)
        defined = importlib.import_module(f"{package}.{where}")
        assert getattr(defined, name) is value, f"{module_name}.{name} is not {package}.{where}.{name}"
    assert set(module.EXPORTS) <= set(dir(module))
    with pytest.raises(AttributeError, match="has no attribute 'NotAMethod'"):
        module.NotAMethod  # noqa: B018


def test_tables_match_the_metadata():
    """One line per mismatch: a metadata file's class or functional form missing from the tables,
    exported from another folder, or a class exported that no metadata file names."""
    records = {key: r for key, r in load_all_metadata().items() if r.class_name}
    classes = {r.class_name: key for key, r in records.items()}
    problems = [
        f"algorithms/{key}/metadata.json: class_name {name!r}: algorithms.EXPORTS has "
        f"{algorithms.EXPORTS.get(name)!r}, not {key!r}"
        for name, key in classes.items()
        if algorithms.EXPORTS.get(name) != key
    ]
    problems += [
        f"algorithms/__init__.py: EXPORTS: {name!r} ({where}) is no metadata file's class_name"
        for name, where in algorithms.EXPORTS.items()
        if name not in classes
    ]
    problems += [
        f"algorithms/{key}/metadata.json: functional {r.functional!r}: algorithms.functional.EXPORTS has "
        f"{algorithms.functional.EXPORTS.get(r.functional)!r}, not {key!r}"
        for key, r in records.items()
        if r.functional and algorithms.functional.EXPORTS.get(r.functional) != key
    ]
    # A form the metadata does not name is a second form of a method (defined in its folder) or a
    # shared helper module's.
    problems += [
        f"algorithms/functional.py: EXPORTS: {name!r} ({where}) is in no method folder's __all__"
        for name, where in algorithms.functional.EXPORTS.items()
        if name not in importlib.import_module(f"algorithms.{where}").__all__
    ]
    assert not problems, "\n".join(problems)


def test_a_method_may_export_several_functional_forms():
    """Selective Backprop's two forms, as in ``composer.functional``."""
    assert (
        algorithms.functional.should_selective_backprop.__module__ == "algorithms.selective_backprop.selective_backprop"
    )
    assert algorithms.functional.select_using_loss.__module__ == "algorithms.selective_backprop.selective_backprop"
    # the schedule: every batch from start to end, with interrupt=0
    assert algorithms.functional.should_selective_backprop(0.5, 3, start=0.5, end=0.9, interrupt=0)
    assert not algorithms.functional.should_selective_backprop(0.95, 3, start=0.5, end=0.9, interrupt=0)


def test_import_reads_no_metadata():
    """``import algorithms`` and the first use of a class and a form read no JSON file and import
    neither jsonschema nor the metadata loader; ``import algorithms`` alone does not import torch."""
    probe = textwrap.dedent(
        """
        import sys
        opened = []
        sys.addaudithook(lambda event, args: opened.append(str(args[0])) if event == "open" else None)
        import algorithms
        print("torch" in sys.modules)
        algorithms.CutMix
        import algorithms.functional as cf
        cf.cutmix_batch
        import algorithms.core
        algorithms.core.Trainer
        print([p for p in opened if p.endswith(".json")])
        print(sorted(m for m in sys.modules if m.startswith("jsonschema") or m == "algorithms.metadata"))
        """
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    torch_at_import, json_files, modules = out.stdout.splitlines()
    assert torch_at_import == "False"
    assert json_files == "[]"
    assert modules == "[]"


@pytest.mark.slow
def test_a_type_checker_resolves_the_exports(tmp_path):
    """mypy, running no code, sees the class and the functional forms with their signatures."""
    pytest.importorskip("mypy", reason="mypy is in the dev extra; this environment lacks it")
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import algorithms.functional\nfrom algorithms import CutMix\nfrom algorithms.core import Trainer\n"
        "reveal_type(CutMix)\nreveal_type(algorithms.functional.cutmix_batch)\n"
        "reveal_type(algorithms.functional.should_selective_backprop)\nreveal_type(Trainer)\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--follow-imports=silent", "--cache-dir", str(tmp_path / "cache"), str(probe)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env={**os.environ, "MYPYPATH": str(PACKAGE.parent)},
    )
    revealed = [line.split("Revealed type is ", 1)[1] for line in out.stdout.splitlines() if "Revealed type" in line]
    assert len(revealed) == 4, out.stdout + out.stderr
    assert revealed[0].endswith('-> algorithms.cutmix.cutmix.CutMix"'), revealed[0]
    assert "alpha: float =" in revealed[1] and revealed[1].startswith('"def (input: torch'), revealed[1]
    assert "current_duration: float" in revealed[2] and revealed[2].endswith('-> bool"'), revealed[2]
    assert revealed[3].endswith('algorithms.core.trainer.Trainer"'), revealed[3]
    assert not any(r in ('"Any"', "Any") for r in revealed), revealed  # an unresolved name is Any
