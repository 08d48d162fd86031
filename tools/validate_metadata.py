"""Validate metadata files against their JSON schemas (no torch): python tools/validate_metadata.py [FILES]."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # algorithms, from a checkout without installing

from methods_tools.commands import validate_metadata_main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(validate_metadata_main())
