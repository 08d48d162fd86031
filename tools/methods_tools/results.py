"""Load and validate the committed results files: the training comparison's and the effects'.

Three kinds, kept apart by folder so that no validator sees another's files:

- ``results/*.json``: ``tools/compare_training.py`` (``algorithms/results.schema.json``);
- ``results/effects/*.json``: ``tools/measure_methods.py`` (``algorithms/effects.schema.json``);
- ``results/composability/*.json``: ``tools/composability_matrix.py`` (``algorithms/composability.schema.json``);
- ``results/bench/*.json``: ``benchmarks/run.py``, ``nox -s bench`` (``algorithms/bench.schema.json``).

A schema is checked when a file is written and whenever the docs read one. This module imports no torch. The results
live in a checkout (``results/``), not in the installed package.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from algorithms.metadata import PACKAGE_ROOT, schema_validator

from . import REPO_ROOT

__all__ = [
    "BENCH_DIR",
    "BENCH_SCHEMA_PATH",
    "COMPOSABILITY_DIR",
    "COMPOSABILITY_SCHEMA_PATH",
    "EFFECTS_DIR",
    "EFFECTS_SCHEMA_PATH",
    "RESULTS_DIR",
    "RESULTS_SCHEMA_PATH",
    "Committed",
    "ResultsError",
    "bench_problems",
    "composability_problems",
    "load_bench",
    "load_committed",
    "load_each",
    "discover_composability",
    "discover_effects",
    "discover_results",
    "effects_problems",
    "effects_runs_problems",
    "load_composability",
    "load_effects",
    "load_results",
    "results_problems",
]

RESULTS_SCHEMA_PATH = PACKAGE_ROOT / "results.schema.json"
EFFECTS_SCHEMA_PATH = PACKAGE_ROOT / "effects.schema.json"
RESULTS_DIR = REPO_ROOT / "results"
EFFECTS_DIR = RESULTS_DIR / "effects"
COMPOSABILITY_SCHEMA_PATH = PACKAGE_ROOT / "composability.schema.json"
COMPOSABILITY_DIR = RESULTS_DIR / "composability"
BENCH_SCHEMA_PATH = PACKAGE_ROOT / "bench.schema.json"
BENCH_DIR = RESULTS_DIR / "bench"
# The effects schema version whose runs the current one reads as they are: only its summary is recomputed.
RESUMMARIZABLE_VERSION = 3


class ResultsError(ValueError):
    """Every problem in a results file, one ``file: /json/pointer: message`` per line."""


def _problems(data: Any, schema: Path, where: str) -> list[str]:
    errors = sorted(schema_validator(schema).iter_errors(data), key=lambda e: list(e.absolute_path))
    lines = []
    for error in errors:
        pointer = "".join(f"/{part}" for part in error.absolute_path) or "/"
        lines.append(f"{where}: {pointer}: {error.message} — see algorithms/{schema.name}")
    return lines


def results_problems(data: Any, where: str = "<results>") -> list[str]:
    """One line per way ``data`` breaks the results schema (empty when it is valid).

    A file of schema version 1 (one run per configuration, no summary) is one line that says to
    regenerate it: its single runs cannot give the medians and ranges version 2 reports.
    """
    if isinstance(data, dict) and data.get("schema_version") == 1:
        return [
            f"{where}: /schema_version: 1 is no longer read (one run per configuration, no median or range) "
            "— regenerate the file with tools/compare_training.py (--repeats 3, --force)"
        ]
    return _problems(data, RESULTS_SCHEMA_PATH, where)


def effects_problems(data: Any, where: str = "<effects>") -> list[str]:
    """One line per way ``data`` breaks the effects schema (empty when it is valid).

    A file of an older schema version is one line: version 1 or 2 says to measure again (its runs
    were not paired with intervals, checked for activity, or scored through ``Trainer.eval``);
    version 3, whose runs are those of version 4, says to recompute its summary from them.
    """
    if isinstance(data, dict) and data.get("schema_version") in (1, 2):
        return [
            f"{where}: /schema_version: {data['schema_version']} is no longer read (no intervals, verdicts or "
            "record of what the methods did) — measure again with tools/measure_methods.py"
        ]
    if isinstance(data, dict) and data.get("schema_version") == RESUMMARIZABLE_VERSION:
        return [
            f"{where}: /schema_version: {RESUMMARIZABLE_VERSION} is no longer read (verdicts without a margin of "
            "practical equivalence or Holm's correction) — recompute its summary from its runs, nothing re-run: "
            f"python tools/measure_methods.py --resummarize {where}"
        ]
    return _problems(data, EFFECTS_SCHEMA_PATH, where)


def effects_runs_problems(data: Any, where: str = "<effects>") -> list[str]:
    """One line per way ``data`` breaks the effects schema outside its summary, which is not read:
    a file of the current version or of version 3 (the same runs) whose summary is to be
    recomputed."""
    if isinstance(data, dict) and data.get("schema_version") == RESUMMARIZABLE_VERSION:
        data = {**data, "schema_version": _current_version()}
    if isinstance(data, dict) and isinstance(data.get("summary"), list):
        data = {**data, "summary": []}
    return effects_problems(data, where)


def _current_version() -> int:
    return json.loads(EFFECTS_SCHEMA_PATH.read_text(encoding="utf-8"))["properties"]["schema_version"]["const"]


def _load(path: str | Path, problems: Any, tool: str) -> dict[str, Any]:
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ResultsError(
            f"{path}:{exc.lineno}: not valid JSON: {exc.msg} — fix the file or regenerate it with {tool}"
        ) from None
    found = problems(data, str(path))
    if found:
        raise ResultsError("\n".join(found))
    return data


def load_results(path: str | Path) -> dict[str, Any]:
    """The validated content of one results file; :class:`ResultsError` lists every problem."""
    return _load(path, results_problems, "tools/compare_training.py")


def load_effects(path: str | Path) -> dict[str, Any]:
    """The validated content of one effects file; :class:`ResultsError` lists every problem."""
    return _load(path, effects_problems, "tools/measure_methods.py")


def discover_results(root: str | Path | None = None) -> list[Path]:
    """Every ``*.json`` directly in ``root`` (default: the repository's ``results/``), sorted by name.

    Not the files of its subfolders: ``results/effects/`` holds the other kind (:func:`discover_effects`).
    """
    root = Path(root) if root is not None else RESULTS_DIR
    return sorted(p for p in root.glob("*.json") if p.is_file()) if root.is_dir() else []


def discover_effects(root: str | Path | None = None) -> list[Path]:
    """Every ``*.json`` in ``root`` (default: the repository's ``results/effects/``), sorted by name."""
    root = Path(root) if root is not None else EFFECTS_DIR
    return sorted(p for p in root.glob("*.json") if p.is_file()) if root.is_dir() else []


def composability_problems(data: Any, where: str = "<composability>") -> list[str]:
    """One line per way ``data`` breaks the composability schema (empty when it is valid)."""
    return _problems(data, COMPOSABILITY_SCHEMA_PATH, where)


def load_composability(path: str | Path) -> dict[str, Any]:
    """The validated content of one composability matrix file; :class:`ResultsError` lists every problem."""
    return _load(path, composability_problems, "tools/composability_matrix.py (nox -s matrix)")


def discover_composability(root: str | Path | None = None) -> list[Path]:
    """Every ``*.json`` in ``root`` (default: the repository's ``results/composability/``), sorted by name."""
    root = Path(root) if root is not None else COMPOSABILITY_DIR
    return sorted(p for p in root.glob("*.json") if p.is_file()) if root.is_dir() else []


def bench_problems(data: Any, where: str = "<bench>") -> list[str]:
    """One line per way ``data`` breaks the benchmark results schema (empty when it is valid)."""
    return _problems(data, BENCH_SCHEMA_PATH, where)


def load_bench(path: str | Path) -> dict[str, Any]:
    """The validated content of one benchmark results file; :class:`ResultsError` lists every problem."""
    return _load(path, bench_problems, "benchmarks/run.py (nox -s bench)")


Loaded = list[tuple[Path, dict[str, Any]]]


def load_each(paths: Iterable[Path], load: Callable[[Path], dict[str, Any]]) -> tuple[Loaded, list[str]]:
    """``([(path, content)] of the valid files, one line per problem of the others)``, in order."""
    found: Loaded = []
    problems: list[str] = []
    for path in paths:
        try:
            found.append((path, load(path)))
        except ResultsError as exc:
            problems += str(exc).splitlines()
    return found, problems


@dataclass(frozen=True)
class Committed:
    """The committed training comparisons and effects, validated."""

    results: Loaded
    effects: Loaded


def load_committed(root: str | Path | None = None) -> tuple[Committed, list[str]]:
    """Every results file directly in ``root`` (default ``results/``) and every effects file in its
    ``effects/``, validated: ``(the files, one line per problem)``."""
    effects_root = Path(root) / "effects" if root is not None else None
    results, problems = load_each(discover_results(root), load_results)
    effects, effects_problems_found = load_each(discover_effects(effects_root), load_effects)
    return Committed(results, effects), problems + effects_problems_found
