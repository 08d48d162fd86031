"""The composability matrix's ``loops`` and ``models`` sections on the site, from the committed
results file (``results/composability/*.json``, written by ``tools/composability_matrix.py``).

- ``tables/loops.md.inc`` (``loops.md.inc.j2``), which the Composability page includes: per matrix
  file, a table of every method in each training loop (the project's Trainer, an own Loop, the
  Hugging Face Trainer, Lightning) and a table of the language-model methods on Hugging Face
  models, each cell's outcome as a symbol and a word, and numbered notes with the reason where a
  cell did not act.
- Each method card's composability snippet (``tables/composability/<key>.md.inc``, rendered by
  :mod:`.composability_pages` just before) gets two lines appended (``loops_snippet.md.inc.j2``):
  "Works in: Trainer ✓, own Loop ✓, HF Trainer ⊘ refused (the reason), Lightning ✓", and, where the
  method ran on real models, the same for each model.

Nothing here is prose: a method's lines come from its cells, or say that the file has none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .composability_pages import SNIPPETS, matrix_methods
from .docsgen import Content, Site

__all__ = ["LOOPS_INCLUDE", "OUTCOME_LABELS", "Section", "render_loops", "section_view"]

LOOPS_INCLUDE = Path("tables") / "loops.md.inc"
COMMAND = "python tools/composability_matrix.py --kinds loops,models --merge"

#: Each outcome as the tables and the cards show it: a symbol and words, never the symbol alone.
OUTCOME_LABELS = {
    "acted": "✓",
    "inactive": "⚠ did not act",
    "refused": "⊘ refused",
    "failed": "✗ failed",
    "not_run": "— not run",
}


@dataclass(frozen=True)
class Mark:
    """One cell as shown: its label, its outcome, the reason (None where it acted) and its note number."""

    label: str
    outcome: str
    detail: str | None = None
    number: int | None = None


@dataclass(frozen=True)
class Note:
    number: int
    cells: tuple[str, ...]
    detail: str


class _Notes:
    """Note numbers in order of first use; cells with the same reason share one."""

    def __init__(self) -> None:
        self.notes: list[Note] = []
        self._by_detail: dict[str, int] = {}

    def mark(self, cell: Mapping[str, Any] | None, where: str) -> Mark:
        if cell is None:
            return Mark(OUTCOME_LABELS["not_run"], "not_run", "the results file has no such cell", None)
        outcome, detail = cell["outcome"], cell["detail"]
        if outcome == "acted" or not detail:
            return Mark(OUTCOME_LABELS[outcome], outcome, detail)
        number = self._by_detail.get(detail)
        if number is None:
            number = self._by_detail[detail] = len(self.notes) + 1
            self.notes.append(Note(number, (where,), detail))
        else:
            old = self.notes[number - 1]
            self.notes[number - 1] = Note(number, (*old.cells, where), detail)
        return Mark(OUTCOME_LABELS[outcome], outcome, detail, number)


@dataclass(frozen=True)
class Section:
    """One section (loops or models) of one results file, as the page and the cards show it."""

    name: str
    file: str
    columns: tuple[tuple[str, str], ...]  # (key, heading)
    rows: tuple[tuple[str, str, tuple[Mark, ...]], ...]  # (method key, method name, a mark per column)
    notes: tuple[Note, ...]
    counts: Mapping[str, int]
    versions: Mapping[str, str | None]
    date: str
    command: str
    wall_s: float


def _column_key(name: str) -> str:
    return "loop" if name == "loops" else "model"


def section_view(name: str, file: str, section: Mapping[str, Any], methods: Sequence[Any]) -> Section:
    """The table of ``section`` (the results file's ``loops`` or ``models``), a row per method of
    ``methods`` that has a cell there, a column per loop or model in the order the cells name them."""
    from .matrix_loops import LOOPS, MODELS, TORCHVISION_TIMM

    headings = {**LOOPS, **MODELS, TORCHVISION_TIMM: "torchvision/timm"}
    column = _column_key(name)
    names = {r.key: r.name for r in methods}
    cells = {(c["method"], c[column]): c for c in section["cells"] if c["method"] in names and column in c}
    keys = list(dict.fromkeys(k for _, k in cells))
    order = list(LOOPS if name == "loops" else MODELS) + [TORCHVISION_TIMM]
    keys.sort(key=lambda k: order.index(k) if k in order else len(order))
    columns = tuple((k, headings.get(k, k)) for k in keys)
    notes = _Notes()
    rows = []
    for r in methods:
        if not any((r.key, k) in cells for k in keys):
            continue
        marks = tuple(
            notes.mark(cells.get((r.key, k)), f"{r.name} in {heading}")
            if (r.key, k) in cells or name == "loops"
            else Mark("", "none")
            for k, heading in columns
        )
        rows.append((r.key, r.name, marks))
    counts = {o: sum(c["outcome"] == o for c in cells.values()) for o in OUTCOME_LABELS}
    return Section(
        name=name,
        file=file,
        columns=columns,
        rows=tuple(rows),
        notes=tuple(notes.notes),
        counts=counts,
        versions=section["versions"],
        date=section["date"][:10],
        command=section["command"],
        wall_s=section["wall_s"],
    )


def _sections(site: Site, methods: Sequence[Any]) -> list[tuple[str, dict[str, Section]]]:
    """Per results file that has either section: its title and its sections by name."""
    out = []
    for path, document in site.matrices:
        found = {
            name: section_view(name, f"results/composability/{path.name}", document[name], methods)
            for name in ("loops", "models")
            if name in document
        }
        if found:
            env = document["environment"]
            out.append((f"{env['hardware']}, {env['date'][:10]}", found))
    return out


def render_loops(site: Site) -> dict[Path, Content]:
    """The page's include, and each method's composability snippet with its loops and models
    lines appended (the snippets :func:`.composability_pages.render_composability` rendered)."""
    methods = matrix_methods(site.methods)
    files = _sections(site, methods)
    outputs: dict[Path, Content] = {
        LOOPS_INCLUDE: site.render("loops.md.inc.j2", files=files, labels=OUTCOME_LABELS, command=COMMAND)
    }
    for record in methods:
        path = SNIPPETS / f"{record.key}.md.inc"
        if path not in site.rendered:
            continue
        rows = []
        for title, sections in files:
            found = {}
            for name, s in sections.items():
                marks = next((marks for key, _, marks in s.rows if key == record.key), None)
                found[name] = () if marks is None else tuple((c[1], m) for c, m in zip(s.columns, marks, strict=True))
            rows.append((title, found))
        lines = site.render("loops_snippet.md.inc.j2", record=record, files=rows, command=COMMAND)
        before = site.rendered[path]
        before = before.decode() if isinstance(before, bytes) else before
        outputs[path] = before.rstrip("\n") + "\n\n" + lines
    return outputs
