"""Escape metadata text for the docs' source formats (MyST Markdown, reStructuredText).

Text from ``metadata.json`` must reach the site as plain text: a TL;DR holding ``<script>``,
a ```` ```{eval-rst} ```` fence, a ``{role}`x``` or an RST directive must not become markup.
CommonMark lets a backslash escape any ASCII punctuation. :func:`md_text` escapes every
character that can open or close inline markup (and folds whitespace, so no line can start a
block inside it); punctuation that means something only at the start of a line (``-``, ``+``,
``1.``, ``(target)=``, ``%``, ``:::``, ``=``) is left as it is, so the cards' source stays
readable, and :func:`md_paragraph` escapes it where the text does start a line.

These are the filters of the one Jinja environment (:func:`methods_tools.docsgen.jinja_environment`)
that every generated page and the card scaffold render with.
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

__all__ = [
    "json_literal",
    "literal",
    "md_code",
    "md_paragraph",
    "md_text",
    "md_url",
    "one_line",
    "rst_text",
    "safe_token",
]

# Punctuation that is inert inside a line of MyST: only its place at a line's start could make it
# markup (md_paragraph's rule), or it never is (",", ";", "?", "'", '"', "/", "@", "^").
_INERT = frozenset(".,;:?'\"/()=%+-@^")
_PUNCTUATION = frozenset(string.punctuation) - _INERT
_TOKEN = re.compile(r"^[a-z][a-z0-9_]*$")
# What opens a block when it starts a line: a heading, list, quote, MyST comment, colon fence or
# target, a setext underline, a thematic break, a code fence, a table row, an HTML block, an
# ordered list item ("1." or "1)").
_BLOCK_START = re.compile(r"^(?:[#+\-*>%:=(_~`|<]|\d{1,9}[.)])")


def one_line(text: str) -> str:
    """Fold every run of whitespace (newlines included) into one space."""
    return " ".join(str(text).split())


def md_text(text: str) -> str:
    """Plain text inside a MyST line: a paragraph's middle, a table cell, a heading or a directive
    argument (text that starts a line goes through :func:`md_paragraph`)."""
    return "".join("\\" + ch if ch in _PUNCTUATION else ch for ch in one_line(text))


def rst_text(text: str) -> str:
    """Plain text inside a line of reStructuredText (a paragraph's middle, a caption): every ASCII
    punctuation character backslash-escaped, which reStructuredText reads as the character itself."""
    return "".join("\\" + ch if ch in string.punctuation else ch for ch in one_line(text))


def md_paragraph(text: str) -> str:
    """:func:`md_text` for text that starts a line of its own (a card's TL;DR, a summary).

    Nothing it returns can open a block: a leading heading ``#``, list ``+ - *``, quote ``>``,
    MyST comment ``%``, colon fence ``:``, target ``(``, underline ``=``, fence, table row, HTML
    block or ordered-list number (``1.``, ``1)``) is escaped; :func:`md_text` leaves these inert
    characters alone inside a line.

    >>> print(md_paragraph("1. first"), md_paragraph("# not a heading"))
    1\\. first \\# not a heading
    """
    escaped = md_text(text)
    match = _BLOCK_START.match(escaped)
    if match is None:
        return escaped
    opener = match.group()
    return escaped[: len(opener) - 1] + "\\" + escaped[len(opener) - 1 :]


def _plain(value: Any) -> Any:
    """Frozen metadata values as plain Python data: tuples (JSON arrays) as lists, mappings as dicts."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def literal(value: Any) -> str:
    """``value`` as the Python literal a reader would type: ``repr``, with JSON arrays (and the
    tuples the loader freezes them into) shown as lists and mappings as dicts.

    >>> literal((0.5, None)), literal("x"), literal({"a": (1, 2)})
    ('[0.5, None]', "'x'", "{'a': [1, 2]}")
    """
    return repr(_plain(value))


def json_literal(value: Any) -> str:
    """``value`` as JSON (``"amp_bf16"``, ``[1, 2]``, ``null``), frozen metadata values included."""
    return json.dumps(_plain(value))


def md_code(text: str) -> str:
    """An inline code span showing ``text`` verbatim (fence longer than any backtick run inside)."""
    text = one_line(text)
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or longest else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def md_url(url: str) -> str:
    """An ``https://`` URL made safe for a Markdown link destination.

    Characters that could end the destination or the link (spaces, parentheses, angle brackets,
    backslashes, quotes) are percent-encoded; anything but ``https://`` is refused.
    """
    url = str(url).strip()
    if not url.startswith("https://"):
        raise ValueError(f"{url!r}: only https:// links are allowed — fix the metadata link")
    return quote(url, safe=":/?#[]@!$&'*+,;=%~-._")


def safe_token(value: str, what: str = "token") -> str:
    """A closed-vocabulary value (domain, tag, kind, key) used in CSS classes and roles."""
    if not _TOKEN.match(str(value)):
        raise ValueError(f"{value!r} is not a valid {what} (lower case, digits, underscores) — fix the metadata")
    return str(value)
