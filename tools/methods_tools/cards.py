"""Read MyST cards: sections, code blocks, fences, regions, inline ``name=value``.

A card is parsed with markdown-it (the parser MyST itself uses), so headings, fences, HTML
comments and code spans mean here what they mean on the site. No torch, no Sphinx.

Regions: the facts of a card (its TL;DR, its hyperparameter table, its API reference) are
marked in its kind's template::

    <!-- generated: tldr -->

    Pastes a box from another image ...

    <!-- end generated: tldr -->

A card's source holds, in place of each region, a ``card-facts`` directive that the docs build
renders from the template (:mod:`.facts`); :func:`regions` reads a rendered template, and an old
card written with markers (``new_card.py NAME --update`` turns them into directives).

Hidden set-up blocks: code the test suite runs before a card's examples but the site does not
show, written as an HTML comment whose first line is ``<!-- card-setup``::

    <!-- card-setup
    import torch
    model = torch.nn.Linear(4, 2)
    -->

:func:`code_blocks` returns it (``hidden=True``) in document order with the visible
```` ```python ```` blocks. The test suite runs every card's blocks in order in one namespace. A
card whose example needs an optional package (e.g. ``deepspeed``) imports it in a set-up block:
where it is missing, the test of that card is skipped and names the package.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from markdown_it import MarkdownIt
from markdown_it.token import Token

__all__ = [
    "HYPERPARAMETER_SECTION",
    "PYTHON_LANGS",
    "CodeBlock",
    "InlineAssignment",
    "Region",
    "RegionError",
    "Section",
    "code_blocks",
    "fences",
    "inline_assignments",
    "prose",
    "read_card",
    "regions",
    "replace_regions",
    "sections",
]

HYPERPARAMETER_SECTION = "Suggested Hyperparameters"
SETUP_MARK = "<!-- card-setup"
PYTHON_LANGS = {"python", "py", "python3", "pycon"}

_OPEN = re.compile(r"^<!-- generated: ([a-z][a-z0-9_-]*) -->$")
_CLOSE = re.compile(r"^<!-- end generated: ([a-z][a-z0-9_-]*) -->$")


@dataclass(frozen=True)
class Section:
    level: int
    title: str
    line: int


@dataclass(frozen=True)
class CodeBlock:
    line: int  # line of the first line of code (1-based)
    language: str
    code: str
    hidden: bool = False


@dataclass(frozen=True)
class InlineAssignment:
    line: int
    name: str
    callee: str | None  # the called name for ``Callee(name=value)``; None for a bare ``name=value``
    text: str
    value: str | None = None  # the value's source, for a bare ``name=value`` and keyword arguments
    context: str = ""  # the source line it is on
    qualifier: str | None = None  # what the callee is reached through: ``torch.nn`` for ``torch.nn.DataParallel(...)``


@dataclass(frozen=True)
class Region:
    name: str
    line: int  # line of the opening marker (1-based)
    end: int  # line of the closing marker
    body: str  # the lines between the markers


class RegionError(ValueError):
    """Markers that do not pair up; ``line`` is where."""

    def __init__(self, line: int, message: str):
        self.line = line
        super().__init__(message)


@cache
def _parser(inline: bool = True) -> MarkdownIt:
    md = MarkdownIt("commonmark").enable("table")
    if not inline:  # block level only: an inline token keeps its text, without children
        md.core.ruler.disable("inline")
    return md


_PARSED: dict[str, tuple[list[Token], bool]] = {}  # the last few texts: (tokens, with inline children)


def _tokens(text: str, inline: bool = True) -> list[Token]:
    """The Markdown tokens of ``text``; ``inline=False`` leaves the inline tokens without children
    (enough for headings, comments and code blocks, at half the cost). The checks read a card's
    inline code, sections and regions in turn: the last few texts' tokens are kept, and only read."""
    found = _PARSED.get(text)
    if found is not None and (found[1] or not inline):
        return found[0]
    tokens = _parser(inline).parse(text)
    _PARSED.pop(text, None)
    _PARSED[text] = (tokens, inline)
    while len(_PARSED) > 8:
        del _PARSED[next(iter(_PARSED))]
    return tokens


def sections(text: str) -> list[Section]:
    """The headings outside code blocks and comments, in order."""
    tokens = _tokens(text, inline=False)
    return [
        Section(int(tok.tag[1]), tokens[i + 1].content.strip(), tok.map[0] + 1)
        for i, tok in enumerate(tokens)
        if tok.type == "heading_open" and tok.map
    ]


def code_blocks(text: str) -> list[CodeBlock]:
    """Fenced code blocks (```` ```python ```` and MyST ```` ```{code-block} python ````) and
    hidden ``<!-- card-setup`` blocks, in document order."""
    blocks = []
    for tok in _tokens(text, inline=False):
        if tok.type == "html_block" and tok.content.lstrip().startswith(SETUP_MARK) and tok.map:
            body = tok.content.split("\n", 1)[1] if "\n" in tok.content else ""
            body = body.split("-->")[0]
            blocks.append(CodeBlock(tok.map[0] + 2, "python", body.rstrip() + "\n", hidden=True))
        elif tok.type == "fence" and tok.map:
            lines = tok.content.splitlines()
            start = 0
            if tok.info.strip().startswith("{"):  # MyST directive options (``:caption: x``) are not code
                while start < len(lines) and re.match(r"^:[\w-]+:", lines[start]):
                    start += 1
            code = "\n".join(lines[start:])
            blocks.append(CodeBlock(tok.map[0] + 2 + start, _language(tok.info.strip()), code + "\n"))
    return blocks


def fences(text: str) -> list[tuple[int, str]]:
    """``(line of the opening fence, info string)`` of every fenced block, in order."""
    return [
        (tok.map[0] + 1, tok.info.strip()) for tok in _tokens(text, inline=False) if tok.type == "fence" and tok.map
    ]


def _language(info: str) -> str:
    directive = re.match(r"^\{(code-block|code|sourcecode)\}\s*(\S*)", info)
    if directive:
        return directive.group(2).lower()
    return info.split()[0].lower() if info else ""


# --------------------------------------------------------------------------------------------- regions


def _markers(text: str) -> Iterator[tuple[int, str, str]]:
    """``(line, "open" | "close", name)`` for every region marker (an HTML comment on a line of its
    own, not inside a code block)."""
    for tok in _tokens(text, inline=False):
        if tok.type == "html_block" and tok.map:
            content = tok.content.strip()
            for kind, pattern in (("open", _OPEN), ("close", _CLOSE)):
                if match := pattern.match(content):
                    yield tok.map[0] + 1, kind, match[1]


def regions(text: str) -> dict[str, Region]:
    """The generated regions of a card by name; :class:`RegionError` if the markers do not pair."""
    lines = text.splitlines()
    found: dict[str, Region] = {}
    open_name, open_line = None, 0
    for number, kind, name in _markers(text):
        if kind == "open":
            if open_name is not None:
                raise RegionError(
                    number,
                    f"region {name!r} opens inside region {open_name!r} (line {open_line}) — close that one first",
                )
            if name in found:
                raise RegionError(
                    number, f"a second region {name!r} (the first is at line {found[name].line}) — keep one"
                )
            open_name, open_line = name, number
        else:
            if name != open_name:
                raise RegionError(
                    number,
                    f"'end generated: {name}' closes no open region "
                    f"{'(open: ' + repr(open_name) + ')' if open_name else ''}— fix the marker",
                )
            found[name] = Region(name, open_line, number, "\n".join(lines[open_line : number - 1]))
            open_name = None
    if open_name is not None:
        raise RegionError(
            open_line, f"region {open_name!r} is never closed — add '<!-- end generated: {open_name} -->'"
        )
    return found


def replace_regions(text: str, fresh: dict[str, Region]) -> str:
    """``text`` with the body of each of its regions replaced by the body of the same region in
    ``fresh``; lines outside regions are kept byte for byte."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    position = 0
    for region in sorted(regions(text).values(), key=lambda r: r.line):
        if region.name not in fresh:
            continue
        out += lines[position : region.line]
        body = fresh[region.name].body
        out.append(body + "\n" if body else "")
        position = region.end - 1
    out += lines[position:]
    return "".join(out)


# --------------------------------------------------------------------------------------------- inline


def _code_spans(text: str) -> Iterator[tuple[int, str, str]]:
    """``(line, code, source line)`` for every inline code span outside code blocks and comments."""
    lines = text.splitlines()
    for tok in _tokens(text):
        if tok.type != "inline" or not tok.map or not tok.children:
            continue
        first, last = tok.map
        for child in tok.children:
            if child.type == "code_inline":
                number = next((n for n in range(first, last) if child.content in lines[n].replace("\\|", "|")), first)
                yield number + 1, child.content, lines[number]


def prose(text: str) -> list[tuple[int, str]]:
    """``(line, source)`` of every run of prose (a paragraph, a list item's text, a heading, a table
    cell) outside code blocks and HTML comments; ``source`` keeps its inline markup and line breaks,
    so a position in it is ``line`` plus the line breaks before it."""
    return [(tok.map[0] + 1, tok.content) for tok in _tokens(text, inline=False) if tok.type == "inline" and tok.map]


_BARE = re.compile(r"(?<![\w.=<>!])([A-Za-z_]\w*)=(?![=\s])")


def inline_assignments(text: str) -> list[InlineAssignment]:
    """Every ``name=value`` in inline code outside code blocks and HTML comments.

    ``Callee(name=value)`` records the callee (its last dotted part), so a check can look up the
    right signature. A bare ``name=value`` (``callee=None``) counts only when written keyword
    style, without spaces around ``=``: ``alpha=1.0`` names a parameter, ``y = a * x`` is math.
    """
    found = []
    for line, span, context in _code_spans(text):
        found.extend(_assignments_in(span.strip(), line, context))
    return found


def _assignments_in(span: str, line: int, context: str) -> list[InlineAssignment]:
    try:
        tree = ast.parse(span)
    except SyntaxError:
        return [InlineAssignment(line, m.group(1), None, span, None, context) for m in _BARE.finditer(span)]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            callee = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            qualifier = ast.unparse(node.func.value) if isinstance(node.func, ast.Attribute) else None
            found.extend(
                InlineAssignment(line, kw.arg, callee, span, ast.get_source_segment(span, kw.value), context, qualifier)
                for kw in node.keywords
                if kw.arg
            )
    for node in tree.body:
        if isinstance(node, ast.Assign) and not isinstance(node.value, ast.Call):
            for target in node.targets:
                if isinstance(target, ast.Name) and _BARE.match(span, target.col_offset):
                    found.append(
                        InlineAssignment(line, target.id, None, span, ast.get_source_segment(span, node.value), context)
                    )
    return sorted(found, key=lambda a: span.find(a.name))


def read_card(path: Path) -> str:
    return Path(path).read_text(encoding="utf-8")
