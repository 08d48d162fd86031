"""Generate docs/source/method_cards/methods_overview.md: a filterable grid of method cards.

One sphinx-design card per method (title linking to its card, domain / tag / kind badges, TL;DR).
Each grid item carries ``ml-domain-*``, ``ml-tag-*`` and ``ml-kind-*`` classes; the page's
filter controls (``_static/methods_overview.js``) show and hide items by them.

Runs at the start of every docs build (conf.py); by hand:
python docs/source/tables/update_methods_overview.py [--check]
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE.parents[2]) not in sys.path:  # run as a script from a checkout
    sys.path[:0] = [str(HERE.parents[2]), str(HERE.parents[2] / "tools")]

from methods_tools.docsgen import render_methods_page  # noqa: E402
from methods_tools.files import generator_cli  # noqa: E402

TEMPLATE = "methods_overview.md.j2"


def render(metadata_root: Path | None = None, source_dir: Path | None = None) -> dict[Path, str]:
    source_dir = Path(source_dir) if source_dir is not None else HERE.parent
    return render_methods_page(HERE, TEMPLATE, source_dir / "method_cards" / "methods_overview.md", metadata_root)


if __name__ == "__main__":
    raise SystemExit(generator_cli(render, description=__doc__, prog="docs/source/tables/update_methods_overview.py"))
