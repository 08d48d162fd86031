"""Every generated page of the docs, listed once (:data:`GENERATORS`), in the order they render.

The pages are build outputs, never committed (``.gitignore``): the Sphinx extension
(``docs/source/_ext/methods_library.py``) renders them into the source tree at the start of every
build, and ``python tools/generate_pages.py [--check] [--out DIR]`` renders them by hand, where
``--check`` writes nothing and names every problem (bad metadata, a bad results file, a template
error), one line each.

A generator is a function ``(site: Site) -> {path relative to the docs source: content}``, its
templates are ``docs/source/tables/*.j2``, rendered with the one environment of
:func:`.docsgen.jinja_environment`. A generator sees what the ones before it rendered
(``site.rendered``): the navigation, last, lists the training-configurations page.
"""

from __future__ import annotations

import argparse
import re
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import jinja2

from algorithms.metadata import discover_metadata_files, display_path, validate_files

from . import REPO_ROOT
from .composability_pages import PAGE as COMPOSABILITY_PAGE
from .composability_pages import composability_files, render_composability
from .docsgen import Content, Site, jinja_environment, method_option, sorted_methods
from .effects_pages import effects_views, margins_text, overview_effects, render_effects
from .figures import render_figures
from .files import write_if_changed
from .loops_pages import render_loops
from .markup import safe_token
from .measurements_page import render_measurements
from .memory_page import render_memory
from .recipes_page import render_recipes
from .results import ResultsError, load_committed
from .summaries import sourced_figure, verdict_boxes
from .training_pages import PAGE as TRAINING_PAGE
from .training_pages import render_training_results

__all__ = [
    "ALGORITHMS_TABLE",
    "COMPOSABILITY_PAGE",
    "DOCS_SOURCE",
    "GENERATORS",
    "LANDING",
    "METHODS_OVERVIEW",
    "NAVIGATION",
    "TEMPLATE_DIR",
    "TRAINING_PAGE",
    "Generated",
    "generate",
    "main",
    "write_outputs",
]

DOCS_SOURCE = REPO_ROOT / "docs" / "source"
TEMPLATE_DIR = DOCS_SOURCE / "tables"

ALGORITHMS_TABLE = Path("tables") / "algorithms_table.md"
METHODS_OVERVIEW = Path("method_cards") / "methods_overview.md"
NAVIGATION = Path("tables") / "navigation.rst.inc"  # .inc: Sphinx does not read it as a page
LANDING = Path("tables") / "landing.rst.inc"

# The landing page's "start here": a reader's goal and the tag whose overview answers it.
GOALS = (
    ("Train faster", "speedup"),
    ("Generalize better", "regularization"),
    ("Use less memory", "memory"),
    ("Train on more devices", "parallelism"),
    ("Compute in lower precision", "precision"),
)

Generator = Callable[[Site], Mapping[Path, Content]]


def algorithms_table(site: Site) -> dict[Path, Content]:
    """One row per method and best practice: its name (linked to its card), kind, domains and
    TL;DR; the card holds the rest, so that the table reads on a desktop without scrolling."""
    return {ALGORITHMS_TABLE: site.render("algorithms_table.md.j2", methods=site.methods)}


def methods_overview(site: Site) -> dict[Path, Content]:
    """A grid of cards, each with ``ml-domain-*``, ``ml-tag-*`` and ``ml-kind-*`` classes by which
    the page's filter (``_static/methods_overview.js``) shows and hides them, and with its sourced
    figure at scale (figure, setting, hardware, source: plain text, the card itself being a link)."""
    methods = [(record, method_option(record), sourced_figure(record)) for record in site.methods]
    effects, charts = overview_effects(site)
    return {
        METHODS_OVERVIEW: site.render(
            "methods_overview.md.j2", methods=methods, effects=effects, margins=margins_text()
        ),
        **charts,
    }


_CARD_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def _cards(folder: Path) -> list[str]:
    """Docnames of the Markdown cards in ``folder``, by file name."""
    paths = sorted(folder.glob("*.md"))
    bad = [p.name for p in paths if not _CARD_NAME.match(p.stem)]
    if bad:
        raise ValueError(
            f"{display_path(folder)}: card file name(s) {', '.join(bad)} — use letters, digits, '_', '-', '.'"
        )
    return [f"{folder.name}/{p.stem}" for p in paths]


def navigation(site: Site) -> dict[Path, Content]:
    """The toctrees ``index.rst`` includes.

    "Methods Library" lists the overview, the table, the composability page (when it was rendered),
    then every method's card, and "Best Practices" every best practice's, each in name order, taken
    from the metadata (so a method without a card fails the build with "nonexisting document",
    and a card without metadata with "not included in any toctree"). The training page, dataset
    cards and model-family cards get a section only when they exist, so an empty folder never
    produces a warning.
    """

    def cards(kind: str) -> list[str]:
        return [f"method_cards/{safe_token(r.key, 'method key')}" for r in site.methods if r.kind == kind]

    method_cards, practice_cards = cards("method"), cards("best_practice")
    sections = [
        ("Dataset and Task Cards", _cards(site.source_dir / "dataset_cards")),
        ("Model Family Cards", _cards(site.source_dir / "model_cards")),
    ]
    training_pages = [TRAINING_PAGE.with_suffix("").as_posix()] if TRAINING_PAGE in site.rendered else []
    library_pages = [COMPOSABILITY_PAGE.with_suffix("").as_posix()] if COMPOSABILITY_PAGE in site.rendered else []
    return {
        NAVIGATION: site.render(
            "navigation.rst.inc.j2",
            method_cards=method_cards,
            practice_cards=practice_cards,
            training_pages=training_pages,
            library_pages=library_pages,
            sections=[s for s in sections if s[1]],
        )
    }


def landing(site: Site) -> dict[Path, Content]:
    """What the home page shows of the library: how many methods and best practices serve each
    domain alone and each set of domains together (each counted once, so the rows add up to the
    total), and a link per goal into the overview, filtered (``?tag=...``) to the entries that serve it."""
    kinds = ("method", "best_practice")
    served = {r.key: tuple(sorted(r.domains)) for r in site.methods}
    # one domain first, then the sets of several, each in name order
    groups = sorted(set(served.values()), key=lambda g: (len(g) > 1, len(g), g))
    rows = [
        (group, *(sum(1 for r in site.methods if served[r.key] == group and r.kind == k) for k in kinds))
        for group in groups
    ]
    totals = tuple(sum(1 for r in site.methods if r.kind == k) for k in kinds)
    goals = [(label, tag, sum(1 for r in site.methods if tag in r.tags)) for label, tag in GOALS]
    # sourced figures at scale first, then this project's toy-scale measurements: the overview's
    # charts of measured effects (already drawn: the overview renders before this page)
    sourced = [(r, a) for r in site.methods if (a := sourced_figure(r)) is not None and a.quoted]
    charts = [view for view in effects_views(site) if view.chart and Path(view.chart) in site.rendered]
    devices = {view.device for view in charts}
    return {
        LANDING: site.render(
            "landing.rst.inc.j2",
            rows=rows,
            totals=totals,
            overview=OVERVIEW_HTML,
            goals=[g for g in goals if g[2]],
            sourced=sourced,
            charts=charts,
            checked_here=CHECKED_HERE + (f" on {devices.pop()}" if len(devices) == 1 else ""),
        )
    }


#: The label of this project's own measurements on the landing page: what they are, before any figure.
CHECKED_HERE = "Checked here, at toy scale"


OVERVIEW_HTML = METHODS_OVERVIEW.with_suffix(".html").as_posix()

# In order: the navigation lists pages the generators before it write.
GENERATORS: tuple[Generator, ...] = (
    algorithms_table,
    methods_overview,
    render_figures,
    render_training_results,
    render_effects,
    render_composability,
    render_loops,  # after render_composability: it appends to the cards' composability snippets
    render_measurements,
    render_memory,
    render_recipes,
    verdict_boxes,
    landing,
    navigation,
)


@dataclass(frozen=True)
class Generated:
    """Every page with its content (paths relative to the docs source), or the problems that
    stopped the render (one line each; then ``outputs`` is empty)."""

    outputs: Mapping[Path, Content]
    problems: Sequence[str]


def generate(
    source_dir: Path | None = None,
    *,
    out_dir: Path | None = None,
    metadata_root: Path | None = None,
    results_root: Path | None = None,
    generators: Sequence[Generator] = GENERATORS,
) -> Generated:
    """Render every page of ``generators`` in order; write nothing.

    ``source_dir`` (default ``docs/source``) holds the card folders; ``out_dir`` (default
    ``source_dir``) is where the pages will go, and where an unchanged chart is reused from.
    Metadata and results are read and validated once, for all generators.
    """
    source_dir = Path(source_dir) if source_dir is not None else DOCS_SOURCE
    records, metadata_problems = validate_files(discover_metadata_files(metadata_root))
    committed, results_problems = load_committed(results_root)
    problems = [str(p) for p in metadata_problems] + results_problems
    try:
        matrices = composability_files()
    except ResultsError as exc:
        problems += str(exc).splitlines()
    if problems:
        return Generated({}, problems)
    site = Site(
        source_dir=source_dir,
        out_dir=Path(out_dir) if out_dir is not None else source_dir,
        env=jinja_environment(TEMPLATE_DIR, bytecode_cache=True),
        methods=sorted_methods(records),
        results=committed.results,
        effects=committed.effects,
        matrices=matrices,
    )
    for generator in generators:
        try:
            site.rendered.update(generator(site))
        except Exception as exc:
            lines = _problem_lines(exc)
            if lines is None:
                raise
            problems += lines
    return Generated({} if problems else dict(site.rendered), problems)


def _problem_lines(exc: Exception) -> list[str] | None:
    """The lines that report ``exc``, or None when it is a bug in Python code, not a problem with
    the inputs or the templates.

    An error in a template is ``template:line: template: what is wrong — fix the template``; a
    value a filter refuses is named at the template line that used it; any other refused value
    (:class:`ValueError`) is its own lines, which name their file.
    """
    if isinstance(exc, jinja2.TemplateSyntaxError):
        where, message = f"{display_path(Path(exc.filename or exc.name or '?'))}:{exc.lineno}", exc.message
    elif isinstance(exc, jinja2.TemplateNotFound):
        where, message = display_path(TEMPLATE_DIR), f"no template named {exc.name!r}"
    else:
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.endswith(".j2")]
        if not frames:
            return str(exc).splitlines() if isinstance(exc, ValueError) else None
        where, message = f"{display_path(Path(frames[-1].filename))}:{frames[-1].lineno}", str(exc)
    message = " ".join(str(message).split())
    if isinstance(exc, ValueError):
        return [f"{where}: {message}"]
    return [f"{where}: template: {message} — fix the template"]


def write_outputs(outputs: Mapping[Path, Content], out_dir: Path) -> list[Path]:
    """Write each page under ``out_dir`` whose content changed (atomically); return those written."""
    written = []
    for relative, content in outputs.items():
        path = Path(out_dir) / relative
        if write_if_changed(path, content):
            written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    """``tools/generate_pages.py``: render every generated page; ``--check`` writes nothing."""
    parser = argparse.ArgumentParser(prog="tools/generate_pages.py", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="render every page and write nothing; exit 1 with one line per problem"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="DIR",
        help="write the pages under DIR instead of docs/source (the card folders are still read from docs/source)",
    )
    args = parser.parse_args(argv)
    out_dir = args.out if args.out is not None else DOCS_SOURCE
    generated = generate(DOCS_SOURCE, out_dir=out_dir)
    for problem in generated.problems:
        print(problem, file=sys.stderr)
    if generated.problems:
        return 1
    if args.check:
        print(f"{len(generated.outputs)} generated pages render without a problem")
        return 0
    written = write_outputs(generated.outputs, out_dir)
    for path in written:
        print(f"wrote {display_path(path)}")
    print(f"{len(generated.outputs)} generated pages in {display_path(out_dir)}, {len(written)} changed")
    return 0
