"""The ``method-choices`` directive of the "Choosing methods" page.

Its content is one method or best practice per line, in the order to try them, each with the
page's reason for it::

    ```{method-choices}
    :figures: mixed_precision
    channels_last: a faster memory layout for convolutions, with the same results
    mixed_precision: 16-bit matrix units on Tensor Core GPUs, with fp32 accuracy
    ```

It renders a numbered list, one item per line: the method (linked to its card, tagged for
pre-training or fine-tuning where its metadata says so) with the reason, and its sourced figures at
scale; under the list, a collapsed "Measured by this project" section gives this project's own
measurements of the list's methods, grouped by the machine they ran on, so each machine is named
once. Everything comes from the metadata and the committed results through
:mod:`methods_tools.summaries`, so the page holds only its prose and its order.

A page says each thing once: a method listed in several tables shows its figures in one of them,
and its other items link there. That table is the one whose ``:figures:`` option names it (a
chooser section that is about it), else the first that lists it. Within a table, a source's setting
is spelt out at its first figure only.

An unknown key, a line without a reason, a key listed twice in a table, or a ``:figures:`` key its
table does not list or that two tables claim is a build error of one line. A page that uses it is
rebuilt when the metadata or a results file changes.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.parsers.rst import directives
from methods_tools import pages
from methods_tools.docsgen import jinja_environment
from methods_tools.summaries import Evidence, Inputs, Summary, load_inputs
from sphinx.application import Sphinx
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

logger = logging.getLogger(__name__)

TEMPLATE = "method_choices.md.j2"
TEMPLATES = (TEMPLATE, "summaries.macros.j2")  # what the table is rendered from, besides the data

# A method-choices fence in a page's MyST source (backticks or colons), and the headings before it.
_BLOCK = re.compile(r"^(?P<fence>`{3,}|:{3,})\{method-choices\}[^\n]*\n(?P<body>.*?)^(?P=fence)[ \t]*$", re.M | re.S)
_OPTION = re.compile(r"^:(?P<name>[\w-]+):\s*(?P<value>.*)$")
_HEADING = re.compile(r"^#{1,6}[ \t]+(?P<title>.+?)[ \t]*$", re.M)


def parse_choices(lines: list[str], known: Any) -> list[tuple[str, str]]:
    """``(key, reason)`` of every non-blank ``key: reason`` line; a :class:`ValueError` of one line
    for a line without a reason, a key ``known`` does not hold, or a key listed twice."""
    choices: list[tuple[str, str]] = []
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
        if key in dict(choices):
            raise ValueError(f"method-choices: line {number}: {key!r} is listed twice — keep one line")
        choices.append((key, reason))
    return choices


def parse_figures(value: str | None) -> list[str]:
    """The keys of a ``:figures:`` option, separated by spaces or commas."""
    return [key for key in re.split(r"[\s,]+", value or "") if key]


@dataclass(frozen=True)
class Block:
    """One ``method-choices`` table of a page, as its source lists it."""

    heading: str  # the title of the section it is in ("" before the first heading)
    keys: tuple[str, ...]
    figures: tuple[str, ...]  # the keys whose figures it shows although another table lists them first


def page_blocks(source: str, known: Any) -> list[Block]:
    """Every ``method-choices`` table of a page's MyST ``source``, in order (parse errors as
    :func:`parse_choices`)."""
    blocks = []
    for match in _BLOCK.finditer(source):
        lines, figures = match.group("body").splitlines(), []
        while lines and (option := _OPTION.match(lines[0].strip())):
            if option.group("name") == "figures":
                figures = parse_figures(option.group("value"))
            lines = lines[1:]
        headings = list(_HEADING.finditer(source, 0, match.start()))
        blocks.append(
            Block(
                heading=headings[-1].group("title") if headings else "",
                keys=tuple(key for key, _ in parse_choices(lines, known)),
                figures=tuple(figures),
            )
        )
    return blocks


def figure_owners(blocks: list[Block]) -> dict[str, int]:
    """Which table shows each key's figures (its index in ``blocks``): the one whose ``:figures:``
    names it, else the first that lists it; a :class:`ValueError` of one line for a ``:figures:``
    key its table does not list, or that two tables claim."""
    owners: dict[str, int] = {}
    for index, block in enumerate(blocks):
        for key in block.figures:
            if key not in block.keys:
                raise ValueError(f"method-choices: ':figures: {key}' names a method its table does not list")
            if key in owners:
                raise ValueError(f"method-choices: two tables claim the figures of {key!r} — keep one ':figures:'")
            owners[key] = index
    for index, block in enumerate(blocks):
        for key in block.keys:
            owners.setdefault(key, index)
    return owners


def anchor(key: str) -> str:
    """The page's label for where a method's figures are shown."""
    return "choosing-" + key.replace("_", "-")


@dataclass(frozen=True)
class Choice:
    """One item of a table: the method, the page's reason, and where on the page its figures are."""

    summary: Summary
    reason: str
    link: str  # its card, relative to the page
    anchor: str
    here: bool  # its figures are in this table
    where: str  # else the section they are in, and whether it is "above" or "below"
    direction: str
    settings_shown: tuple[bool, ...]  # per sourced figure: spell out its setting (its first in this table)


def _ref_title(text: str) -> str:
    """Text that can stand as a ``{ref}`` role's title (no backtick or angle bracket)."""
    return re.sub(r"[`<>]", "", text).strip()


def measured_groups(choices: list[Choice]) -> list[tuple[str, list[tuple[Summary, Evidence]]]]:
    """The measurements of the methods whose figures a table shows, by the machine that made them
    (machines and methods in the table's order)."""
    groups: dict[str, list[tuple[Summary, Evidence]]] = {}
    for choice in choices:
        if choice.here:
            for evidence in choice.summary.evidence:
                groups.setdefault(evidence.hardware, []).append((choice.summary, evidence))
    return list(groups.items())


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
    """A list of the methods to try, in the content's order (see the module's docstring)."""

    has_content = True
    option_spec = {"figures": directives.unchanged}

    def _page(self, inputs: Inputs) -> tuple[list[Block], dict[str, int], int]:
        """The page's tables, which one shows each key's figures, and this table's index (the
        directive runs in the page's order; Sphinx clears ``temp_data`` after each page)."""
        data = self.env.temp_data.setdefault("method_choices", {})
        if "blocks" not in data:
            source = Path(self.env.doc2path(self.env.docname)).read_text(encoding="utf-8")
            data["blocks"] = page_blocks(source, inputs.records)
            data["owners"] = figure_owners(data["blocks"])
            data["count"] = 0
        index, data["count"] = data["count"], data["count"] + 1
        return data["blocks"], data["owners"], index

    def run(self) -> list[nodes.Node]:
        try:
            inputs = _inputs(self.env.app)
            choices = parse_choices(list(self.content), inputs.records)
            blocks, owners, index = self._page(inputs)
            keys = tuple(key for key, _ in choices)
            if index >= len(blocks) or blocks[index].keys != keys:
                raise ValueError(
                    "method-choices: this table is not where the page's source has it — write every "
                    "method-choices table in the page's own file, as a ``` or ::: fence"
                )
        except ValueError as exc:
            for line in str(exc).splitlines():
                logger.error("%s", line, location=self.get_location())
            return []
        templates = [pages.TEMPLATE_DIR / name for name in TEMPLATES]
        for path in {*(inputs.records[key].path for key in keys), *inputs.results_files, *templates}:
            self.env.note_dependency(str(path))
        here = posixpath.dirname(self.env.docname)
        settings_seen: set[tuple[str, str, str]] = set()
        rows = []
        for key, reason in choices:
            summary, owner = inputs.summary(key), owners[key]
            shown = []
            for a in summary.sourced if owner == index else ():
                setting = (a.setting.split("; ")[0], a.source, a.url)
                shown.append(setting not in settings_seen)
                settings_seen.add(setting)
            rows.append(
                Choice(
                    summary=summary,
                    reason=reason,
                    link=posixpath.relpath(f"method_cards/{key}.md", here or "."),
                    anchor=anchor(key),
                    here=owner == index,
                    where=_ref_title(blocks[owner].heading) or "this page",
                    direction="above" if owner < index else "below",
                    settings_shown=tuple(shown),
                )
            )
        environment = jinja_environment(pages.TEMPLATE_DIR)
        markdown = environment.get_template(TEMPLATE).render(rows=rows, groups=measured_groups(rows))
        return self.parse_text_to_nodes(markdown)


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("method-choices", MethodChoices)
    app.connect("builder-inited", _forget_inputs)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}


__all__ = [
    "Block",
    "Choice",
    "MethodChoices",
    "anchor",
    "figure_owners",
    "measured_groups",
    "page_blocks",
    "parse_choices",
    "parse_figures",
    "setup",
]
