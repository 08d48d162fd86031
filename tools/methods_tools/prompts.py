"""The ``TODO(new_card)`` prompts a scaffold leaves for its author, and finding the ones left.

Standard library only: the pre-commit metadata check uses it too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["PLACEHOLDER", "hint", "json_prompts", "prompts"]

#: The prompt left wherever the author has something to write; the checks report each one.
PLACEHOLDER = "TODO(new_card)"
# As written, or as Markdown escaping writes it where a prompt from metadata.json reaches a card.
_FOUND = re.compile(r"TODO\(new\\?_card\)")


def hint(text: str) -> str:
    """What a prompt asks for: the words after the marker, without the syntax around them."""
    words = _FOUND.split(text, 1)[1].lstrip(":) ")
    # the syntax a prompt sits in: a string's closing quotes, a call's parenthesis, a comment's -->
    return re.sub(r"""[\s"'),|>-]+$""", "", words) or "write this part"


def prompts(path: Path) -> list[tuple[int, str]]:
    """``(line, what to write)`` for every prompt left in a text file."""
    return [
        (number, hint(line))
        for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1)
        if _FOUND.search(line)
    ]


def json_prompts(data: Any, where: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], str]]:
    """``(JSON path, what to write)`` for every string value of ``data`` that holds a prompt."""
    if isinstance(data, str) and _FOUND.search(data):
        yield where, hint(data)
    elif isinstance(data, dict):
        for key, value in data.items():
            yield from json_prompts(value, (*where, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield from json_prompts(value, (*where, index))


def read_json(path: Path) -> Any:
    """The JSON in ``path``, or None where it cannot be read (other checks report why)."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
