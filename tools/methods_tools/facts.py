"""A card's facts, rendered when the site builds: the ``card-facts`` directive.

A card's source holds prose and, where its kind's template has a region (:mod:`.cards`), a
directive that names the region::

    ```{card-facts} hyperparameters
    ```

The docs build (``docs/source/_ext/methods_library.py``) renders the card's template from today's
metadata, code and committed results, takes that region's body and parses it in the card, the
way autodoc renders a signature. Nothing in a card's source can go stale, so ``check_cards`` keeps
only what prose can get wrong. The scaffold writes the directives (:func:`to_source`): the
template stays the one list of a kind's sections and of its facts.

The subject of a card is its file: ``method_cards/cutmix.md`` is the method (or best practice)
``cutmix``, ``dataset_cards/digits.md`` the data set ``digits``, ``model_cards/resnet.md`` the
model family ``resnet``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from algorithms.metadata import Kind

from . import cards

__all__ = ["DIRECTIVE", "FOLDERS", "CardFacts", "FactsError", "directive_fence", "directives", "subject", "to_source"]

DIRECTIVE = "card-facts"
#: The folder of each card kind under the docs source, and the kind a card there describes.
FOLDERS: Mapping[str, Kind] = {
    "method_cards": Kind.METHOD,
    "dataset_cards": Kind.DATASET,
    "model_cards": Kind.MODEL_FAMILY,
}
_FENCE = re.compile(r"^\{" + DIRECTIVE + r"\}\s*(\S*)\s*$")


class FactsError(LookupError):
    """A directive that cannot be rendered; the message says what to do."""


def directive_fence(name: str) -> str:
    """The directive a card's source holds for its region ``name``."""
    return f"```{{{DIRECTIVE}}} {name}\n```"


def to_source(rendered: str) -> str:
    """A card as the scaffold writes it: ``rendered`` (its template's output) with each region,
    markers and body, replaced by the directive that renders it at build time."""
    lines = rendered.splitlines(keepends=True)
    out: list[str] = []
    position = 0
    for region in sorted(cards.regions(rendered).values(), key=lambda r: r.line):
        out += lines[position : region.line - 1]
        out.append(directive_fence(region.name) + "\n")
        position = region.end
    out += lines[position:]
    return "".join(out)


def directives(text: str) -> list[tuple[int, str]]:
    """``(line, region name)`` of every ``card-facts`` directive in a card's source, in order."""
    return [(line, match[1]) for line, info in cards.fences(text) if (match := _FENCE.match(info))]


def subject(docname: str) -> tuple[Kind, str] | None:
    """``(kind, key)`` of the card ``docname`` (``method_cards/cutmix``), None for another page."""
    folder, _, key = docname.partition("/")
    kind = FOLDERS.get(folder)
    return (kind, key) if kind is not None and key and "/" not in key else None


@dataclass
class CardFacts:
    """The facts of every card in one build: each card's template rendered once, on first use.

    ``package_root`` is where the metadata is found (default: the installed package).
    """

    repo_root: Path | None = None
    package_root: Path | None = None
    _records: dict[Kind, Mapping[str, Any]] = field(default_factory=dict)
    _rendered: dict[tuple[Kind, str], dict[str, cards.Region]] = field(default_factory=dict)

    def records(self, kind: Kind) -> Mapping[str, Any]:
        """Every record of ``kind`` (a method's kind finds best practices too), read once."""
        from .scaffold import _records

        if kind not in self._records:
            self._records[kind] = _records(kind, self.package_root)
        return self._records[kind]

    def record(self, kind: Kind, key: str) -> Any:
        records = self.records(kind)
        if key not in records:
            raise FactsError(
                f"no {kind.value.replace('_', ' ')} {key!r} in the metadata: this card's file name "
                "must be its metadata key"
            )
        return records[key]

    def body(self, kind: Kind, key: str, name: str) -> str:
        """The MyST text of region ``name`` of card ``key``; :class:`FactsError` if its kind has none.

        Raises :class:`~algorithms.metadata.MetadataError` and
        :class:`~methods_tools.codeinfo.CodeLookupError` as the scaffold does.
        """
        from .scaffold import render_card

        found = self._rendered.get((kind, key))
        if found is None:
            record = self.record(kind, key)
            rendered = render_card(
                kind.value, key, repo_root=self.repo_root, package_root=self.package_root, record=record
            )
            found = self._rendered[(kind, key)] = cards.regions(rendered)
        if name not in found:
            raise FactsError(f"{DIRECTIVE} {name!r}: this card has no such fact — use one of: {', '.join(found)}")
        return found[name].body

    def dependencies(self, kind: Kind, key: str) -> list[Path]:
        """The files a card's facts are read from: its kind's template (and the regions' macros), its
        metadata file and, for a method, its code."""
        from . import REPO_ROOT
        from .scaffold import TEMPLATE_DIR, TEMPLATES

        record = self.record(kind, key)
        templates = (self.repo_root or REPO_ROOT) / TEMPLATE_DIR
        paths = [templates / TEMPLATES[kind], templates / "_regions.jinja", Path(record.path)]
        if kind is Kind.METHOD and Path(record.path).name == "metadata.json":
            paths += sorted(Path(record.path).parent.glob("*.py"))
        return paths
