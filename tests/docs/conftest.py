from __future__ import annotations

from pathlib import Path

import pytest
from docs_support import SYNTHETIC, write_metadata


@pytest.fixture
def synthetic_metadata(tmp_path: Path) -> Path:
    """Four methods (one best practice, one whose every text field is hostile markup)."""
    return write_metadata(tmp_path / "metadata", SYNTHETIC)
