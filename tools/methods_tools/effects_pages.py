"""The "Example Effects" of every method card, from the committed measurements of its effects.

Renders ``tables/effects/<key>.md.inc`` for every method (not best practices, whose measured rows
come from the training comparison), which its card pulls in with ``{include}``.
"""

from __future__ import annotations

from pathlib import Path

from .docsgen import Content, Site

__all__ = ["EFFECTS", "render_effects"]

EFFECTS = Path("tables") / "effects"


def render_effects(site: Site) -> dict[Path, Content]:
    outputs: dict[Path, Content] = {}
    for record in site.methods:
        if record.kind == "method":
            outputs[EFFECTS / f"{record.key}.md.inc"] = site.render("effects_snippet.md.inc.j2", record=record)
    return outputs
