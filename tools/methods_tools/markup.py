"""Escape metadata text for the docs' source formats (MyST Markdown, reStructuredText).

Text from ``metadata.json`` must reach the site as plain text: a TL;DR holding ``<script>``,
a ```` ```{eval-rst} ```` fence, a ``{role}`x``` or an RST directive must not become markup.
CommonMark lets a backslash escape any ASCII punctuation, so escaping every one of them (and
folding whitespace, so no line can start a block) leaves nothing for the parser to interpret.
"""

from __future__ import annotations

import re
import string
from urllib.parse import quote

__all__ = ["md_code", "md_text", "md_url", "one_line", "safe_token"]

_PUNCTUATION = frozenset(string.punctuation)
_TOKEN = re.compile(r"^[a-z][a-z0-9_]*$")


def one_line(text: str) -> str:
    """Fold every run of whitespace (newlines included) into one space."""
    return " ".join(str(text).split())


def md_text(text: str) -> str:
    """Plain text for a MyST paragraph, table cell, heading or directive argument."""
    return "".join("\\" + ch if ch in _PUNCTUATION else ch for ch in one_line(text))


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


def safe_token(value: str, what: str) -> str:
    """A closed-vocabulary value (domain, tag, kind, key) used in CSS classes and roles."""
    if not _TOKEN.match(str(value)):
        raise ValueError(f"{value!r} is not a valid {what} (lower case, digits, underscores) — fix the metadata")
    return str(value)
