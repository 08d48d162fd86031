"""Sphinx extension of the Methods Library site.

* ``builder-inited``: render every generated page (``methods_tools.pages.GENERATORS``, in order:
  the table, the overview, the training results, the landing page, the navigation) into the source tree, writing
  only what changed, so every build regenerates them and none is committed. Bad metadata, a bad
  results file or a template error is reported as one error line per problem (``-W`` then fails
  the build) and nothing is written. ``-D methods_generate_pages=0`` builds the pages as a previous
  build left them (``benchmarks/docs_scale.py`` compares that bare build with the full one).
* ``html-page-context``: a sidebar whose size does not grow with the number of cards.
  Furo renders the whole toctree into every page, so a site of N cards costs N^2 (64 s for 300
  cards against 3 s for 30). Here a toctree section with more than ``methods_nav_card_limit``
  entries shows only its pages that are not cards plus the current page; the overview and the
  table lead to the rest. ``benchmarks/docs_scale.py`` measures both.
* The ``card-facts`` directive: a card's facts (its TL;DR, hyperparameter table, effects, API
  reference...) rendered from today's metadata, code and results when the page is read
  (:mod:`methods_tools.facts`). Each card notes its metadata and code files as dependencies, so
  an edit to one card's prose or one method's metadata rebuilds that one card.
* An HTML translator that makes the pages usable with a keyboard and a screen reader (WCAG 2.1
  AA, as axe-core checks it in the browser test): a toctree caption is a heading with a level,
  and a code block, wide table or display formula that may scroll sideways is a named region
  that takes the keyboard focus.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from docutils import nodes
from methods_tools import facts, pages
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective
from sphinx.writers.html5 import HTML5Translator

logger = logging.getLogger(__name__)

CARD_FOLDERS = ("method_cards/", "dataset_cards/", "model_cards/")
OVERVIEW = pages.METHODS_OVERVIEW.with_suffix("").as_posix()


def generate_pages(app: Sphinx) -> None:
    if not app.config.methods_generate_pages:
        return  # the pages as a previous build left them (the scale benchmark's bare build)
    # User mistakes are logged as errors, one line each (so -W fails the build), never raised:
    # Sphinx answers any exception with a traceback and a plea to report a Sphinx bug.
    root = app.config.methods_metadata_root
    generated = pages.generate(Path(app.srcdir), metadata_root=Path(root) if root else None)
    for problem in generated.problems:
        logger.error("%s", problem)
    if generated.problems:
        logger.error("methods_library: generated pages not updated — fix the problems above")
        return
    for path in pages.write_outputs(generated.outputs, Path(app.srcdir)):
        logger.info("methods_library: wrote %s", path)


# --- a card's facts --------------------------------------------------------------------------


def reset_card_facts(app: Sphinx) -> None:
    """Each build renders each card's template once, from the metadata and code as they are now."""
    root = app.config.methods_metadata_root
    app._methods_card_facts = facts.CardFacts(package_root=Path(root) if root else None)


class CardFactsDirective(SphinxDirective):
    """```` ```{card-facts} NAME ```` : the region NAME of this card's template, rendered now.

    A problem (no metadata for the card, a region its kind does not have, metadata the code
    contradicts) is one error line at the directive, and the fact is left out.
    """

    required_arguments = 1
    has_content = False

    def run(self) -> list[nodes.Node]:
        from methods_tools.codeinfo import CodeLookupError

        from algorithms.metadata import MetadataError

        found = facts.subject(self.env.docname)
        if found is None:
            logger.error(
                "%s: only a card (in %s) has facts — remove this directive",
                facts.DIRECTIVE,
                ", ".join(facts.FOLDERS),
                location=self.get_location(),
            )
            return []
        kind, key = found
        if not hasattr(self.env.app, "_methods_card_facts"):
            reset_card_facts(self.env.app)
        card_facts = self.env.app._methods_card_facts
        try:
            for path in card_facts.dependencies(kind, key):
                self.env.note_dependency(str(path))
            body = card_facts.body(kind, key, self.arguments[0])
        except (facts.FactsError, MetadataError, CodeLookupError) as exc:
            for line in str(exc).splitlines():
                logger.error("%s", line, location=self.get_location())
            return []
        return self.parse_text_to_nodes(body) if body.strip() else []


# --- the bounded sidebar ---------------------------------------------------------------------


def _root_sections(app: Sphinx) -> list[tuple[str, list[tuple[str | None, str]]]]:
    """(caption, [(explicit title, ref)]) of every toctree in the root document, in order."""
    doctree = app.env.get_doctree(app.config.root_doc)
    return [(node.get("caption") or "", list(node["entries"])) for node in doctree.findall(addnodes.toctree)]


def _is_card(docname: str) -> bool:
    return docname.startswith(CARD_FOLDERS) and docname != OVERVIEW


def render_sidebar(app: Sphinx, pagename: str, pathto: Any) -> str:
    """The furo-compatible toctree HTML for ``pagename``: O(sections + non-card pages) links."""
    # Computed once per build run (not stored in the pickled environment, which outlives it).
    sections = getattr(app, "_methods_nav_sections", None)
    if sections is None:
        sections = app._methods_nav_sections = _root_sections(app)
    limit = app.config.methods_nav_card_limit
    parts = []
    for caption, entries in sections:
        shown = (
            entries
            if len(entries) <= limit
            else [(title, ref) for title, ref in entries if not _is_card(ref) or ref == pagename]
        )
        if not shown:
            continue
        if caption:
            parts.append(
                f'<p class="caption" role="heading" aria-level="{CAPTION_LEVEL}"><span class="caption-text">'
                f"{html.escape(caption)}</span></p>"
            )
        current = any(ref == pagename for _, ref in shown)
        parts.append('<ul class="current">' if current else "<ul>")
        for title, ref in shown:
            if ref in app.env.titles:
                text = title or app.env.titles[ref].astext()
                href, external = pathto(ref), False
            else:  # an external URL in the toctree
                text, href, external = title or ref, ref, True
            is_current = ref == pagename
            li_class = "toctree-l1 current" if is_current else "toctree-l1"
            a_class = (
                "reference external"
                if external
                else ("current reference internal" if is_current else "reference internal")
            )
            parts.append(
                f'<li class="{li_class}"><a class="{a_class}" href="{html.escape(href)}">{html.escape(text)}</a></li>'
            )
        parts.append("</ul>")
    return "\n".join(parts)


def bounded_toctree(app: Sphinx, pagename: str, templatename: str, context: dict, doctree: Any) -> None:
    # Runs before furo's handler (priority 500), which calls context["toctree"](...) on every page.
    # A negative limit leaves the theme's own toctree in place (the scale benchmark compares them).
    if app.config.methods_nav_card_limit >= 0 and "toctree" in context and "pathto" in context:
        html_text = render_sidebar(app, pagename, context["pathto"])
        context["toctree"] = lambda **kwargs: html_text


# --- accessible markup -------------------------------------------------------------------------

CAPTION_LEVEL = 2  # a toctree caption heads the list below it, under the page's title
# Containers that scroll sideways when their content is wider than the page (furo wraps tables and
# display math in them), with the name a screen reader announces for each.
SCROLLING = {"table-wrapper": "Table", "math-wrapper": "Formula"}


class AccessibleHTMLTranslator(HTML5Translator):
    """Sphinx's HTML5 translator with the attributes WCAG asks of its headings and code blocks
    (scrolling containers: :func:`_scrolling_container_handlers`)."""

    def visit_title(self, node: nodes.title) -> None:
        if isinstance(node.parent, addnodes.compact_paragraph) and node.parent.get("toctree"):
            # Sphinx writes role="heading" without the aria-level that role requires.
            self.body.append(
                self.starttag(node, "p", "", CLASS="caption", ROLE="heading", **{"aria-level": str(CAPTION_LEVEL)})
            )
            self.body.append('<span class="caption-text">')
            self.context.append("</span></p>\n")
            return
        super().visit_title(node)

    def region_label(self, kind: str) -> str:
        """``"Code 2"``, ``"Table 1"``: each region of a page gets a name of its own."""
        counts = self.__dict__.setdefault("_region_counts", {})
        counts[kind] = counts.get(kind, 0) + 1
        return f"{kind} {counts[kind]}"

    def visit_literal_block(self, node: nodes.literal_block) -> None:
        start = len(self.body)
        try:
            super().visit_literal_block(node)
        finally:
            # A code block scrolls sideways when a line is longer than the page: make its <pre> a
            # named region the keyboard can reach and scroll.
            for index in range(start, len(self.body)):
                if "<pre>" in self.body[index]:
                    self.body[index] = self.body[index].replace(
                        "<pre>", f'<pre tabindex="0" role="region" aria-label="{self.region_label("Code")}">', 1
                    )
                    break


def _scrolling_container_handlers(app: Sphinx) -> tuple[Any, Any]:
    """Container visitors that name the scrolling ones; other extensions' visitors (sphinx-design
    registers one for every container) still write the element."""
    visit, depart = app.registry.translation_handlers.get("html", {}).get(
        "container", (HTML5Translator.visit_container, HTML5Translator.depart_container)
    )

    def visit_container(self: HTML5Translator, node: nodes.container) -> None:
        visit(self, node)
        name = next((label for cls, label in SCROLLING.items() if cls in node["classes"]), None)
        if name is not None:
            label = self.region_label(name) if hasattr(self, "region_label") else name
            self.body[-1] = self.body[-1].replace("<div", f'<div role="region" tabindex="0" aria-label="{label}"', 1)

    return visit_container, depart


def setup(app: Sphinx) -> dict[str, Any]:
    app.set_translator("html", AccessibleHTMLTranslator, override=True)
    app.add_node(nodes.container, override=True, html=_scrolling_container_handlers(app))
    app.add_config_value("methods_metadata_root", None, "env")
    app.add_config_value("methods_generate_pages", True, "env", bool)
    # Every card of today's catalog (34 methods and best practices beside the section's pages) in
    # every sidebar; a catalog past 80 entries a section falls back to the bounded list.
    app.add_config_value("methods_nav_card_limit", 80, "html", int)
    app.connect("builder-inited", generate_pages)
    app.connect("builder-inited", reset_card_facts)
    app.add_directive(facts.DIRECTIVE, CardFactsDirective)
    app.connect("html-page-context", bounded_toctree, priority=400)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}


__all__ = ["AccessibleHTMLTranslator", "bounded_toctree", "generate_pages", "render_sidebar", "setup"]
