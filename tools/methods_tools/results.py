"""Load and validate the results files of ``tools/compare_training.py`` (``results/*.json``).

The schema (``algorithms/results.schema.json``, with the package's other schemas) is checked when
a file is written and whenever the docs read one. This module imports no torch. The results
live in a checkout (``results/``), not in the installed package.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from algorithms.metadata import PACKAGE_ROOT, schema_validator

from . import REPO_ROOT

__all__ = ["RESULTS_DIR", "RESULTS_SCHEMA_PATH", "ResultsError", "discover_results", "load_results",
           "results_problems"]

RESULTS_SCHEMA_PATH = PACKAGE_ROOT / "results.schema.json"
RESULTS_DIR = REPO_ROOT / "results"


class ResultsError(ValueError):
    """Every problem in a results file, one ``file: /json/pointer: message`` per line."""


def results_problems(data: Any, where: str = "<results>") -> list[str]:
    """One line per way ``data`` breaks the results schema (empty when it is valid)."""
    errors = sorted(schema_validator(RESULTS_SCHEMA_PATH).iter_errors(data), key=lambda e: list(e.absolute_path))
    lines = []
    for error in errors:
        pointer = "".join(f"/{part}" for part in error.absolute_path) or "/"
        lines.append(f"{where}: {pointer}: {error.message} — see algorithms/results.schema.json")
    return lines


def load_results(path: str | Path) -> dict[str, Any]:
    """The validated content of one results file; :class:`ResultsError` lists every problem."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg} — fix the file or regenerate it "
                           "with tools/compare_training.py") from None
    problems = results_problems(data, str(path))
    if problems:
        raise ResultsError("\n".join(problems))
    return data


def discover_results(root: str | Path | None = None) -> list[Path]:
    """Every ``*.json`` under ``root`` (default: the repository's ``results/``), sorted by name."""
    root = Path(root) if root is not None else RESULTS_DIR
    return sorted(root.glob("*.json")) if root.is_dir() else []
