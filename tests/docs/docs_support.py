"""Helpers for the docs tests: synthetic metadata trees and Sphinx builds with the real conf.py.

A plain module (imported as ``docs_support``), not a conftest, so its name cannot clash with
``tests/conftest.py``; the fixtures live in ``conftest.py`` beside it.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCS_SOURCE = REPO_ROOT / "docs" / "source"

# Text that would become markup if a generator forgot to escape it.
HOSTILE = (
    'Uses <script>alert("x")</script> and <img src=x onerror=alert(1)>; '
    "```{eval-rst}\n.. raw:: html\n\n   <b>raw</b>\n```\n"
    ".. raw:: html\n\n   <i>rst</i>\n"
    "{math}`x^2`, $y$, **bold**, [link](javascript:alert(1)), | pipe |, \\ backslash, &amp; entity, :::"
)


# A figure at scale whose every field is hostile markup (the setting's first clause is what compact views show).
HOSTILE_AT_SCALE = {
    "figure": HOSTILE,
    "setting": "<i>x</i> <script>alert(2)</script>; the rest, on the card",
    "hardware": "[z](javascript:alert(1)) <b>raw</b>",
    "source": "**Mallory** ](javascript:alert(1))",
    "url": "https://example.invalid/a b)(c<d>",
}


def method_entry(
    name: str,
    *,
    kind: str = "method",
    tldr: str = "Does a thing.",
    domains=("vision",),
    tags=("regularization",),
    functional: str | None = "do_thing",
    math_equivalent=False,
    attribution: str = "Someone et al., 2020",
    link: str = "https://example.invalid/paper",
) -> dict:
    entry = {
        "name": name,
        "kind": kind,
        "class_name": None if kind == "best_practice" else "Thing",
        "functional": None if kind == "best_practice" else functional,
        "tldr": tldr,
        "attribution": attribution,
        "link": link,
        "domains": list(domains),
        "tags": list(tags),
        "summary": "Summary.",
        "use": "Use.",
        "math_equivalent": math_equivalent,
        "hyperparameters": {},
        "plumbing": [],
    }
    if kind == "best_practice":
        entry["trainer_option"] = {"precision": "amp_bf16"}
    else:
        entry["observable"] = ["changed_inputs"]
    return entry


def write_metadata(root: Path, entries: dict[str, dict]) -> Path:
    """A package tree: methods in ``<key>/metadata.json``, best practices in ``core/<key>.metadata.json``."""
    for key, entry in entries.items():
        path = (
            root / "core" / f"{key}.metadata.json" if entry["kind"] == "best_practice" else root / key / "metadata.json"
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({key: entry}, indent=2), encoding="utf-8")
    return root


SYNTHETIC = {
    "zeta_method": method_entry("Zeta", domains=("nlp",), tags=("speedup",), math_equivalent=True),
    "alpha_trick": method_entry("Alpha Trick", domains=("vision", "general"), tags=("augmentation", "regularization")),
    "bf16": method_entry("Mixed Precision", kind="best_practice", domains=("general",), tags=("precision", "speedup")),
    "hostile": method_entry(
        "Evil *Name* <b>x</b> `code` {eval-rst}",
        tldr=HOSTILE,
        attribution="Mallory ](javascript:alert(1)) <i>et al</i>",
        link="https://example.invalid/a b)(c<d>",
    )
    | {"at_scale": HOSTILE_AT_SCALE},
}


# Markup that shows as text when a directive or a role was not parsed: the line starts as reST or MyST
# source does, or holds a role or directive name with its delimiters.
RAW_MARKUP = re.compile(
    r"^(\.\. |:param\b|:returns?:|:raises?\b|:func:|:class:|```|:::)|:(func|class|meth|mod|doc):`"
    r"|```\{|\{(eval-rst|autoclass|autofunction|card-facts|include|figure)\}"
)


def copy_docs_source(dst: Path) -> Path:
    """The files a clone of the checkout has under ``docs/source`` (tracked, or new and not
    ignored), copied to ``dst``: no generated page, no build output. Without git, the whole tree."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "."],
        cwd=DOCS_SOURCE,
        capture_output=True,
    )
    if listed.returncode != 0:
        return Path(shutil.copytree(DOCS_SOURCE, dst, ignore=shutil.ignore_patterns("__pycache__")))
    for name in filter(None, listed.stdout.decode().split("\0")):
        source = DOCS_SOURCE / name
        if source.is_file():  # a file deleted in the working tree is still listed as tracked
            (dst / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dst / name)
    return dst


def write_source_tree(src: Path, keys) -> Path:
    """A docs source tree holding the real index and templates plus a one-page card per key."""
    (src / "method_cards").mkdir(parents=True, exist_ok=True)
    for key in keys:
        (src / "method_cards" / f"{key}.md").write_text(f"# Card {key}\n\nText with $x^2$ math.\n", encoding="utf-8")
    for name in ("index.rst", "writing_cards.md", "measurements.md"):
        shutil.copy(DOCS_SOURCE / name, src / name)
    # the index links these; their contents name the real methods and the repository's examples,
    # which this tree does not hold
    for name, title in (
        ("choosing_methods", "Choosing methods"),
        ("own_loop", "Use it in your own loop"),
        ("memory", "Memory: what fits, and what it costs"),
        ("development", "Development"),
        ("getting_started", "Getting started"),
        ("recipes", "Recipes"),
    ):
        (src / f"{name}.md").write_text(f"# {title}\n\nNot part of this test's tree.\n", encoding="utf-8")
    shutil.copytree(DOCS_SOURCE / "templates", src / "templates")
    return src


def sphinx_build(src: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    """Build ``src`` with the real conf.py and every warning an error, as ``nox -s docs`` does."""
    pytest.importorskip("sphinx", reason="Sphinx is not installed: install the project's [docs] extra")
    cmd = [
        sys.executable,
        "-m",
        "sphinx",
        "-b",
        "html",
        "-q",
        "-W",
        "--keep-going",
        "-E",
        "-c",
        str(DOCS_SOURCE),
        *extra,
        str(src),
        str(out),
    ]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO_ROOT)
