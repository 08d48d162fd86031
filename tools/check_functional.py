"""Check metadata class_name/functional/hyperparameters against the code: python tools/check_functional.py."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # algorithms, from a checkout without installing

from methods_tools.commands import check_functional_main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(check_functional_main())
