"""Render every generated page of the docs: python tools/generate_pages.py [--check] [--out DIR].

The docs build renders them too (at builder-inited); --check writes nothing and exits 1 with one
line per problem (metadata, results files, templates). See methods_tools.pages.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # algorithms, from a checkout without installing

from methods_tools.pages import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
