"""Generate docs/source/tables/navigation.rst.inc: the toctrees that index.rst includes.

"Methods Library" lists the overview, the algorithms table, then every method card in name order,
taken from the metadata (so a method without a card fails the build with "nonexisting document",
and a card without metadata with "not included in any toctree"). Dataset/task cards, model-family
cards and the training-configurations page get a section only when they exist, so an empty folder
or a missing page never produces a warning. The ``.inc`` suffix keeps Sphinx from reading the file
as a page of its own.

Runs at the start of every docs build (conf.py); by hand: python docs/source/tables/update_navigation.py [--check]
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE.parents[2]) not in sys.path:  # run as a script from a checkout
    sys.path[:0] = [str(HERE.parents[2]), str(HERE.parents[2] / "tools")]

from methods_tools.docsgen import jinja_environment, load_methods  # noqa: E402
from methods_tools.files import generator_cli  # noqa: E402
from methods_tools.markup import safe_token  # noqa: E402

TEMPLATE = "navigation.rst.inc.j2"
OUTPUT = Path("tables") / "navigation.rst.inc"


_CARD_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def _cards(folder: Path) -> list[str]:
    """Docnames of the Markdown cards in ``folder``, by file name."""
    bad = [p.name for p in sorted(folder.glob("*.md")) if not _CARD_NAME.match(p.stem)]
    if bad:
        raise ValueError(f"{folder}: card file name(s) {', '.join(bad)} — use letters, digits, '_', '-', '.'")
    return [f"{folder.name}/{p.stem}" for p in sorted(folder.glob("*.md"))]


def render(metadata_root: Path | None = None, source_dir: Path | None = None) -> dict[Path, str]:
    source_dir = Path(source_dir) if source_dir is not None else HERE.parent
    method_cards = [f"method_cards/{safe_token(r.key, 'method key')}" for r in load_methods(metadata_root)]
    sections = [
        ("Dataset and Task Cards", _cards(source_dir / "dataset_cards")),
        ("Model Family Cards", _cards(source_dir / "model_cards")),
    ]
    pages = ["training_configurations"] if (source_dir / "training_configurations.md").exists() else []
    text = jinja_environment(HERE).get_template(TEMPLATE).render(
        method_cards=method_cards, sections=[s for s in sections if s[1]], training_pages=pages)
    return {source_dir / OUTPUT: text}


if __name__ == "__main__":
    raise SystemExit(generator_cli(render, description=__doc__, prog="docs/source/tables/update_navigation.py"))
