"""A scratch copy of the repository's metadata and card templates, for tools run on other roots."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from algorithms.metadata import PACKAGE_ROOT

REPO_ROOT = PACKAGE_ROOT.parent


@pytest.fixture
def scratch(tmp_path: Path) -> tuple[Path, Path]:
    """``(repo_root, package_root)``: every metadata file and the card templates, no cards."""
    repo = tmp_path / "repo"
    package = repo / "algorithms"
    for path in [*PACKAGE_ROOT.glob("*/metadata.json"), *PACKAGE_ROOT.glob("*/*.metadata.json")]:
        target = package / path.relative_to(PACKAGE_ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target)
    shutil.copytree(REPO_ROOT / "docs" / "source" / "templates", repo / "docs" / "source" / "templates")
    return repo, package
