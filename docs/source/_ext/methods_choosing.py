"""The ``method-choices`` directive of the "Choosing methods" page.

Its content is one method or best practice per line, in the order to try them, each with the
page's reason for it::

    ```{method-choices}
    channels_last: a faster memory layout for convolutions, with the same results
    label_smoothing: a free regularizer for any classifier
    ```

It renders a table, one row per line: the method (linked to its card, tagged for pre-training or
fine-tuning where its metadata says so) with the reason, its sourced figures at scale and this
project's own measurements of it, all from the metadata and the committed results through
:mod:`methods_tools.summaries`, so the page holds only its prose and its order. An unknown key or a
line without a reason is a build error of one line. A page that uses it is rebuilt when the
metadata or a results file changes.
"""

from __future__ import annotations

import posixpath
from pathlib import Path
from typing import Any

from docutils import nodes
from methods_tools import pages
from methods_tools.docsgen import jinja_environment
from methods_tools.summaries import Inputs, load_inputs
from sphinx.application import Sphinx
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

logger = logging.getLogger(__name__)

TEMPLATE = "method_choices.md.j2"
TEMPLATES = (TEMPLATE, "summaries.macros.j2")  # what the table is rendered from, besides the data


def parse_choices(lines: list[str], known: Any) -> list[tuple[str, str]]:
    """``(key, reason)`` of every non-blank ``key: reason`` line; a :class:`ValueError` of one line
    for a line without a reason or a key ``known`` does not hold."""
    choices = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        key, colon, reason = line.partition(":")
        key, reason = key.strip(), reason.strip()
        if not colon or not key or not reason:
            raise ValueError(f"method-choices: line {number} {line.strip()!r}: write 'key: reason'")
        if key not in known:
            raise ValueError(
                f"method-choices: line {number}: unknown method {key!r} — use a key of the metadata "
                "(algorithms/<key>/metadata.json or algorithms/core/<key>.metadata.json)"
            )
        choices.append((key, reason))
    return choices


def _inputs(app: Sphinx) -> Inputs:
    """The metadata and results, read once per build (per process under a parallel read)."""
    inputs = getattr(app, "_methods_choosing_inputs", None)
    if inputs is None:
        root = getattr(app.config, "methods_metadata_root", None)
        inputs = app._methods_choosing_inputs = load_inputs(Path(root) if root else None)
    return inputs


def _forget_inputs(app: Sphinx) -> None:
    app._methods_choosing_inputs = None


class MethodChoices(SphinxDirective):
    """A table of the methods to try, in the content's order (see the module's docstring)."""

    has_content = True

    def run(self) -> list[nodes.Node]:
        try:
            inputs = _inputs(self.env.app)
            choices = parse_choices(list(self.content), inputs.records)
        except ValueError as exc:
            for line in str(exc).splitlines():
                logger.error("%s", line, location=self.get_location())
            return []
        templates = [pages.TEMPLATE_DIR / name for name in TEMPLATES]
        for path in {*(inputs.records[key].path for key, _ in choices), *inputs.results_files, *templates}:
            self.env.note_dependency(str(path))
        here = posixpath.dirname(self.env.docname)
        rows = [
            (inputs.summary(key), reason, posixpath.relpath(f"method_cards/{key}.md", here or "."))
            for key, reason in choices
        ]
        environment = jinja_environment(pages.TEMPLATE_DIR)
        markdown = environment.get_template(TEMPLATE).render(rows=rows)
        return self.parse_text_to_nodes(markdown)


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("method-choices", MethodChoices)
    app.connect("builder-inited", _forget_inputs)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}


__all__ = ["MethodChoices", "parse_choices", "setup"]
