"""Read MyST method cards: sections, code blocks, the hyperparameter table, inline ``name=value``.

Pure text parsing (no torch, no Sphinx), so the checks and tests share one reading of a card.

Hidden set-up blocks: a card may hold code the test suite runs before its examples but the
site does not show, written as an HTML comment whose first line is ``<!-- card-setup``::

    <!-- card-setup
    import torch
    model = torch.nn.Linear(4, 2)
    -->

MyST passes the comment through as an HTML comment, so readers never see it; :func:`code_blocks`
returns it (``hidden=True``) in document order with the visible ```` ```python ```` blocks.
The test suite runs every card's blocks in order in one namespace, from a scratch directory.
A card whose example needs an optional package (e.g. ``deepspeed``) imports it in a set-up
block: where it is missing, the test of that card is skipped and names the package.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "HYPERPARAMETER_SECTION",
    "CodeBlock",
    "InlineAssignment",
    "Section",
    "Table",
    "code_blocks",
    "inline_assignments",
    "parse_literal",
    "parse_range",
    "rst_sections",
    "sections",
    "find_table",
    "same_value",
]

HYPERPARAMETER_SECTION = "Suggested Hyperparameters"
SETUP_MARK = "<!-- card-setup"
PYTHON_LANGS = {"python", "py", "python3", "pycon"}

_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_HEADING = re.compile(r"^(?P<hashes>#{1,6})\s+(?P<title>.+?)\s*#*\s*$")


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
class Table:
    line: int  # line of the header row
    header: tuple[str, ...]
    rows: tuple[tuple[int, tuple[str, ...]], ...]  # (line, cells)


@dataclass(frozen=True)
class InlineAssignment:
    line: int
    name: str
    callee: str | None  # the called name for ``Callee(name=value)``; None for a bare ``name=value``
    text: str


def _scan(text: str):
    """Yield ``(lineno, line, in_code)`` with fenced code and HTML comments marked as code."""
    fence: str | None = None
    comment = False
    for number, line in enumerate(text.splitlines(), 1):
        if comment:
            yield number, line, True
            if "-->" in line:
                comment = False
            continue
        if fence is None:
            match = _FENCE.match(line)
            if match and not (match["fence"][0] == "`" and "`" in match["info"]):
                fence = match["fence"]
                yield number, line, True
                continue
            if line.lstrip().startswith("<!--"):
                comment = "-->" not in line
                yield number, line, True
                continue
            yield number, line, False
        else:
            yield number, line, True
            stripped = line.strip()
            if stripped.startswith(fence[0] * len(fence)) and set(stripped) == {fence[0]}:
                fence = None


def sections(text: str) -> list[Section]:
    """The ATX headings (``#`` to ``######``) outside code blocks, in order."""
    found = []
    for number, line, in_code in _scan(text):
        if not in_code and (match := _HEADING.match(line)):
            found.append(Section(len(match["hashes"]), match["title"], number))
    return found


def rst_sections(text: str) -> list[Section]:
    """The section titles of an RST file, levels in order of first appearance of each underline.

    A title underlined with the same character as the document title is level 1, and so on —
    the same rule docutils uses, so the levels match the Markdown ``#`` count.
    """
    lines = text.splitlines()
    chars: list[str] = []
    found = []
    for i in range(1, len(lines)):
        under, title = lines[i], lines[i - 1]
        if (title.strip() and not title.startswith((" ", ".. ", ":")) and len(under) >= len(title.rstrip())
                and len(set(under)) == 1 and under[0] in "=-~^\"'`#*+<>"):
            if under[0] not in chars:
                chars.append(under[0])
            found.append(Section(chars.index(under[0]) + 1, title.strip(), i))
    return found


def code_blocks(text: str) -> list[CodeBlock]:
    """Fenced code blocks (```` ```python ```` and MyST ```` ```{code-block} python ````) and
    hidden ``<!-- card-setup`` blocks, in document order."""
    lines = text.splitlines()
    blocks = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.strip().startswith(SETUP_MARK):
            end = next((j for j in range(i, len(lines)) if "-->" in lines[j]), len(lines) - 1)
            body = lines[i + 1:end] + ([lines[end].split("-->")[0]] if end > i else [])
            blocks.append(CodeBlock(i + 2, "python", "\n".join(body).rstrip() + "\n", hidden=True))
            i = end + 1
            continue
        match = _FENCE.match(line)
        if match and not (match["fence"][0] == "`" and "`" in match["info"]):
            fence = match["fence"]
            end = i + 1
            while end < len(lines):
                stripped = lines[end].strip()
                if stripped.startswith(fence[0] * len(fence)) and set(stripped) == {fence[0]}:
                    break
                end += 1
            body = lines[i + 1:end]
            language = _language(match["info"].strip())
            # MyST directive options (``:caption: ...``) open the body; they are not code.
            start = 0
            if match["info"].strip().startswith("{"):
                while start < len(body) and re.match(r"^:[\w-]+:", body[start]):
                    start += 1
            blocks.append(CodeBlock(i + 2 + start, language, "\n".join(body[start:]) + "\n"))
            i = end + 1
            continue
        i += 1
    return blocks


def _language(info: str) -> str:
    directive = re.match(r"^\{(code-block|code|sourcecode)\}\s*(\S*)", info)
    if directive:
        return directive.group(2).lower()
    return info.split()[0].lower() if info else ""


def section_span(text: str, title: str) -> tuple[int, int] | None:
    """``(first, last)`` line numbers of the body of the section called ``title``."""
    found = sections(text)
    for index, section in enumerate(found):
        if section.title == title:
            end = next((s.line - 1 for s in found[index + 1:] if s.level <= section.level),
                       len(text.splitlines()))
            return section.line + 1, end
    return None


def find_table(text: str, section: str = HYPERPARAMETER_SECTION) -> Table | None:
    """The first pipe table in ``section`` (None if the section or the table is missing)."""
    span = section_span(text, section)
    if span is None:
        return None
    code_lines = {n for n, _, in_code in _scan(text) if in_code}
    lines = text.splitlines()
    rows: list[tuple[int, tuple[str, ...]]] = []
    for number in range(span[0], span[1] + 1):
        line = lines[number - 1]
        if number not in code_lines and line.lstrip().startswith("|"):
            rows.append((number, split_row(line)))
        elif rows:
            break
    if len(rows) < 2 or not all(re.fullmatch(r":?-{3,}:?", c) for c in rows[1][1]):
        return None
    return Table(rows[0][0], rows[0][1], tuple(rows[2:]))


def split_row(line: str) -> tuple[str, ...]:
    """Cells of a pipe-table row; ``\\|`` is a literal pipe, and pipes inside backticks count."""
    body = line.strip()
    body = body[1:] if body.startswith("|") else body
    body = body[:-1] if body.endswith("|") and not body.endswith("\\|") else body
    cells, current, escaped = [], "", False
    for char in body:
        if escaped:
            current += char if char == "|" else "\\" + char
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == "|":
            cells.append(current.strip())
            current = ""
        else:
            current += char
    cells.append(current.strip())
    return tuple(cells)


def unquote_code(cell: str) -> str | None:
    """The text inside a cell that is one inline code span, or None."""
    match = re.fullmatch(r"(`+)\s?(.*?)\s?\1", cell.strip())
    return match.group(2) if match else None


def parse_literal(source: str) -> Any:
    """A Python literal (``ast.literal_eval``); raises ValueError for anything else."""
    try:
        return ast.literal_eval(source.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as exc:
        raise ValueError(f"{source!r} is not a Python literal") from exc


def parse_range(source: str) -> tuple[str, Any]:
    """A Range cell: ``(low, high)`` with ``inf``/``-inf`` for no bound -> ``("range", (lo, hi))``,
    or a list/set of choices -> ``("choices", [...])``. Raises ValueError otherwise."""
    text = source.strip()
    swapped = re.sub(r"(?<![\w.])(-?)inf(?![\w.])", lambda m: f"{m.group(1)}1e999", text)
    value = parse_literal(swapped)
    if isinstance(value, tuple) and len(value) == 2 and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        return "range", value
    if isinstance(value, (list, set, frozenset)):
        return "choices", list(value)
    raise ValueError(f"{source!r} is neither a range (low, high) nor a list of choices")


def same_value(a: Any, b: Any) -> bool:
    """Equality of literals as values: ``1 == 1.0`` and lists equal tuples, but ``True != 1``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)")
_BARE = re.compile(r"(?<![\w.=<>!])([A-Za-z_]\w*)=(?![=\s])")


def inline_assignments(text: str) -> list[InlineAssignment]:
    """Every ``name=value`` in inline code outside code blocks and HTML comments.

    ``Callee(name=value)`` records the callee (its last dotted part), so a check can look up the
    right signature. A bare ``name=value`` (``callee=None``) counts only when written keyword
    style, without spaces around ``=``: ``alpha=1.0`` names a parameter, ``y = a * x`` is math.
    """
    found = []
    for number, line, in_code in _scan(text):
        if in_code:
            continue
        for match in _SPAN.finditer(line):
            found.extend(_assignments_in(match.group(2).strip(), number))
    return found


def _assignments_in(span: str, line: int) -> list[InlineAssignment]:
    try:
        tree = ast.parse(span)
    except SyntaxError:
        return [InlineAssignment(line, m.group(1), None, span) for m in _BARE.finditer(span)]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            callee = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            found.extend(InlineAssignment(line, kw.arg, callee, span) for kw in node.keywords if kw.arg)
    for node in tree.body:
        if isinstance(node, ast.Assign) and not isinstance(node.value, ast.Call):
            for target in node.targets:
                if isinstance(target, ast.Name) and _BARE.match(span, target.col_offset):
                    found.append(InlineAssignment(line, target.id, None, span))
    return sorted(found, key=lambda a: span.find(a.name))


def read_card(path: Path) -> str:
    return Path(path).read_text(encoding="utf-8")
