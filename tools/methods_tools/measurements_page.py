"""The specifics of "How the cards' evidence is measured" (``docs/source/measurements.md``), from
the committed results, so that the cards need not repeat them.

The page's prose is written by hand; it pulls in, with ``{include}``, one generated part per kind
of evidence, each rendered from the files the cards' figures come from:

- ``tables/measurements/effects.md.inc`` (``measurements_effects.md.inc.j2``): per effects file
  (``results/effects/*.json``), its hardware, date, versions, workload, every seed and the
  machine's load, and the commands that measured it;
- ``tables/measurements/verdicts.md.inc`` (``measurements_verdicts.md.inc.j2``): the margin of
  practical equivalence of each figure and why (:data:`.evidence.MARGINS`), which the verdicts use;
- ``tables/measurements/composability.md.inc`` (``measurements_composability.md.inc.j2``): what
  each outcome of a cell means, and per matrix file (``results/composability/*.json``) its
  hardware, date, settings and command;
- ``tables/measurements/training.md.inc`` (``measurements_training.md.inc.j2``): per training
  comparison (``results/*.json``), its hardware, settings and load, and what a comparison at that
  scale can and cannot show.

A card's snippets name their file's hardware and date in one line and link to the page.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .composability_pages import COLOURS, MATRIX_COMMAND, NOT_RUN, OUTCOMES, matrix_methods, matrix_view
from .composability_pages import PAGE as COMPOSABILITY_PAGE
from .docsgen import Content, Site
from .effects_pages import effects_views, margin_rows
from .training_pages import results_views

__all__ = ["PAGE", "PARTS", "render_measurements"]

PAGE = Path("measurements.md")  # written by hand: it includes the parts below
PARTS = Path("tables") / "measurements"


def render_measurements(
    site: Site, matrices: Sequence[tuple[Path, Mapping[str, Any]]] | None = None
) -> dict[Path, Content]:
    """The page's four generated parts, from ``site``'s effects and training results and from
    ``matrices`` (default: the site's matrix files)."""
    matrices = site.matrices if matrices is None else matrices
    methods = matrix_methods(site.methods)
    return {
        PARTS / "effects.md.inc": site.render("measurements_effects.md.inc.j2", effects=effects_views(site)),
        PARTS / "verdicts.md.inc": site.render("measurements_verdicts.md.inc.j2", margins=margin_rows()),
        PARTS / "composability.md.inc": site.render(
            "measurements_composability.md.inc.j2",
            matrices=[matrix_view(p, d, methods) for p, d in matrices],
            outcomes=OUTCOMES,
            colours=COLOURS,
            not_run=NOT_RUN,
            command=MATRIX_COMMAND,
            page=COMPOSABILITY_PAGE.with_suffix(""),
        ),
        PARTS / "training.md.inc": site.render("measurements_training.md.inc.j2", results=results_views(site)),
    }
