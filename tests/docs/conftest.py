from __future__ import annotations

from pathlib import Path

import pytest
from docs_support import SYNTHETIC, write_metadata


@pytest.fixture
def synthetic_metadata(tmp_path: Path) -> Path:
    """Four methods (one best practice, one whose every text field is hostile markup)."""
    return write_metadata(tmp_path / "metadata", SYNTHETIC)


@pytest.fixture(scope="session")
def real_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real site (docs/source, real metadata), built once per session as ``nox -s docs`` does."""
    from docs_support import DOCS_SOURCE, sphinx_build

    out = tmp_path_factory.mktemp("site") / "html"
    result = sphinx_build(DOCS_SOURCE, out)
    assert result.returncode == 0, f"docs build failed:\n{result.stderr[-6000:]}"
    return out
