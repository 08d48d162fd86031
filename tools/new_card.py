"""Scaffold a method, dataset or model-family card from metadata and code.

python tools/new_card.py cutmix [--kind method|dataset|model] [--force] [--dry-run]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # algorithms, from a checkout without installing

from methods_tools.commands import new_card_main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(new_card_main())
