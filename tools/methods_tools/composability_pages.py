"""The "Composability" page and every method card's composability snippet, from the committed
matrix (``results/composability/*.json``, written by ``tools/composability_matrix.py``, ``nox -s matrix``).

- ``tables/composability.md`` (``composability.md.j2``): per matrix file, one table of ordered
  pairs per domain (a row per first method, a column per second, the method alone on the
  diagonal), each method by precision mode and by parallel mode (each parallel mode in fp32 and in
  amp_bf16, side by side), then the numbered notes and details, each naming its cells; the
  hardware, date, file and command. Without a matrix file the page says so.
- ``tables/composability/<key>.md.inc`` (``composability_snippet.md.inc.j2``), for every method
  (``kind: method``), which its card's Composability section pulls in with ``{include}``: its row
  of every matrix file (with each other method in either order, each precision, each parallel
  mode), or that it is not in the matrix yet. Past :data:`CARD_PAIRS_LIMIT` methods sharing its
  domains, the row lists only the others whose cells do not simply run.

Each cell shows its outcome as a word with a symbol (never colour alone) and, where the cell has
a note (the metadata's ``interactions``), an error detail or effects not seen, a note number. What
a cell shows (:func:`shown_outcome`) is stricter than the results file's outcome, which says whether
a cell needs fixing: a combination that does not train (refused, or an error or non-finite losses
during the run, noted or not) is a red ✗ and counts in the ✗ total; one that trains but whose note
says to use one of the two (:data:`USE_ONE`) is amber, never green.
- ``tables/composability/<key>.md.inc`` for each best practice whose Trainer option is a precision or
  parallel mode: every method's cell in that mode (and its 16-bit sibling), the ones that do not
  simply run listed with their notes, and what the matrix ran the mode with (the parallel modes in
  fp32 and amp_bf16; the precisions in one process, and amp_bf16 under each parallel mode too). The
page's tables are HTML, each cell coloured by its outcome (``_static/methods_overview.css``), in a
frame that scrolls with its header row and method column in view; the pairs' matrices show the
symbol alone (the word is there for screen readers, and in the legend), so that 22 columns fit a
desktop's column.
The expected cells of a registry (:func:`expected_cells`) are also what ``check_cards`` holds the
committed matrix to.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from algorithms.core.options import MATRIX_PARALLELS, PRECISIONS
from algorithms.metadata import MethodRecord

from . import results
from .docsgen import Content, Site

__all__ = [
    "CARD_PAIRS_LIMIT",
    "COMPOSABILITY_DIR",
    "MATRIX_COMMAND",
    "OUTCOMES",
    "PAGE",
    "SNIPPETS",
    "CellKey",
    "cell_key",
    "cell_label",
    "column_header",
    "parallel_column",
    "composability_files",
    "expected_cells",
    "render_composability",
]

PAGE = Path("tables") / "composability.md"
SNIPPETS = Path("tables") / "composability"
COMPOSABILITY_DIR = results.COMPOSABILITY_DIR
MATRIX_COMMAND = "nox -s matrix"

#: What a cell shows (:func:`shown_outcome`), in the order the legend and the counts list them: a
#: symbol and a word, so neither colour nor the symbol alone carries it. Every ✗ is a combination
#: that does not train; the word says why.
OUTCOMES = {
    "runs": "✓ runs",
    "use_one": "⚠ use one",
    "interaction": "⚠ interaction",
    "refused": "✗ refused",
    "crashes": "✗ crashes",
    "fails": "✗ fails",
}
#: The colour of each (a class of ``_static/methods_overview.css``): green, amber or red.
COLOURS = {
    "runs": "runs",
    "use_one": "interaction",
    "interaction": "interaction",
    "refused": "fails",
    "crashes": "fails",
    "fails": "fails",
    "not_run": "not_run",
}
#: The outcomes that do not train, counted together as the ✗ total.
BROKEN = ("refused", "crashes", "fails")
NOT_RUN = "— not run"
#: A note that tells the reader to use only one of the two methods: such a pair trains, but is not
#: green. tests/docs/test_composability_pages.py holds every pair that ``REFUSED_TOGETHER`` (the
#: Engine) refuses in some configuration to a note that says so.
USE_ONE = re.compile(r"\buse (?:only )?one of (?:them|the two)\b", re.IGNORECASE)


def shown_outcome(cell: Mapping[str, Any]) -> str:
    """What a cell shows, a key of :data:`OUTCOMES`: the results file's outcome, except that an
    ``interaction`` cell with an error or non-finite losses (its ``detail``) ``crashes`` (a note
    explains it, but the combination does not train), and a ``runs`` pair whose note says to use one
    of the two is ``use_one``."""
    outcome = cell["outcome"]
    if outcome == "interaction" and cell["detail"]:
        return "crashes"
    if outcome == "runs" and cell["note"] and USE_ONE.search(cell["note"]):
        return "use_one"
    return outcome


#: ``(kind, methods, mode)``: a cell's identity; mode is the precision of a precision cell, the
#: :func:`parallel_column` of a parallel cell, else None.
CellKey = tuple[str, tuple[str, ...], str | None]
#: What joins a parallel mode and a precision other than fp32 in a parallel cell's mode (``ddp+amp_bf16``).
PRECISION_JOIN = "+"


def parallel_column(parallel: str, precision: str = "fp32") -> str:
    """A parallel cell's mode in its key, and its column in the tables: the parallel mode of an fp32
    cell (``ddp``), and with its precision for another (``ddp+amp_bf16``)."""
    return parallel if precision == "fp32" else f"{parallel}{PRECISION_JOIN}{precision}"


def column_modes(column: str) -> tuple[str, str]:
    """``(parallel mode, precision)`` of a :func:`parallel_column`."""
    parallel, _, precision = column.partition(PRECISION_JOIN)
    return parallel, precision or "fp32"


def column_header(kind: str, column: str) -> str:
    """A table's header for a column of ``kind``'s cells: a precision (``amp_bf16``), or a parallel
    mode with its precision (``ddp, fp32``, ``ddp, amp_bf16``)."""
    return ", ".join(column_modes(column)) if kind == "parallel" else column


def cell_key(cell: Mapping[str, Any]) -> CellKey:
    kind = cell["kind"]
    if kind == "parallel":
        return kind, tuple(cell["methods"]), parallel_column(cell["parallel"], cell["precision"])
    return kind, tuple(cell["methods"]), cell[kind] if kind in ("precision", "recipe") else None


def matrix_methods(records: Iterable[MethodRecord]) -> list[MethodRecord]:
    """The records the matrix runs: ``kind: method``, in display-name order."""
    return sorted((r for r in records if r.kind == "method"), key=lambda r: (r.name.casefold(), r.key))


def parallel_modes(document: Mapping[str, Any]) -> tuple[str, ...]:
    """The parallel modes a matrix file must have run for every method: the distributed ones,
    DeepSpeed only where the file ran it at all (the runner leaves it out where it cannot run)."""
    ran = {c["parallel"] for c in document["cells"] if c["kind"] == "parallel"}
    return tuple(m for m in MATRIX_PARALLELS if m != "deepspeed" or m in ran)


def expected_cells(
    records: Iterable[MethodRecord], document: Mapping[str, Any], parallels: Sequence[str] | None = None
) -> list[CellKey]:
    """Every cell the matrix of ``records`` has: each method alone, each ordered pair of distinct
    methods that share a domain, each method in each precision and each parallel mode
    (``parallels``, default :func:`parallel_modes` of ``document``)."""
    from .matrix import plan_cells  # the runner's own plan: the cells are defined once

    parallels = parallel_modes(document) if parallels is None else parallels
    return [cell_key(c.as_dict()) for c in plan_cells({r.key: r for r in records}, parallels=parallels)]


def cell_label(key: CellKey, names: Mapping[str, str]) -> str:
    """How a note names its cell: "CutMix, then MixUp", "CutMix in amp_bf16", "CutMix under ddp in
    fp32" (a parallel cell names its precision: the matrix runs each parallel mode in two), "the
    mild recipe's stack (BlurPool + EMA + ...)"."""
    kind, methods, mode = key
    shown = [names.get(m, m) for m in methods]
    if kind == "pair":
        return f"{shown[0]}, then {shown[1]}"
    if kind == "precision":
        return f"{shown[0]} in {mode}"
    if kind == "parallel":
        parallel, precision = column_modes(str(mode))
        return f"{shown[0]} under {parallel} in {precision}"
    if kind == "recipe":
        return f"the {mode} recipe's stack ({' + '.join(shown)})"
    return f"{shown[0]} alone"


# --------------------------------------------------------------------------------------------- files


def composability_files(root: Path | None = None) -> list[tuple[Path, Mapping[str, Any]]]:
    """Every committed matrix file under ``root`` (default ``results/composability/``), validated,
    by file name; :class:`~methods_tools.results.ResultsError` lists every problem of a bad one."""
    found, problems = results.load_each(results.discover_composability(root), results.load_composability)
    if problems:
        raise results.ResultsError("\n".join(problems))
    return found


# --------------------------------------------------------------------------------------------- view


@dataclass(frozen=True)
class Shown:
    """One cell as a table shows it: the outcome's label, its note number (None: no note) and its
    outcome (a key of :data:`OUTCOMES`, or ``not_run``), by which the page colours it."""

    label: str
    number: int | None = None
    outcome: str = "not_run"

    @property
    def colour(self) -> str:
        """The outcome's colour class (:data:`COLOURS`)."""
        return COLOURS[self.outcome]

    @property
    def symbol(self) -> str:
        """``✓``: the label's symbol, which a cell of the page's matrices shows alone."""
        return self.label.split(" ", 1)[0]

    @property
    def word(self) -> str:
        """``runs``: the label without its symbol."""
        return self.label.split(" ", 1)[1]


@dataclass(frozen=True)
class Footnote:
    """A note number's text (metadata and results text raw: the templates escape it) and the cells it is for."""

    number: int
    cells: tuple[str, ...]
    note: str | None
    detail: str | None
    missing: tuple[str, ...]


class _Numbering:
    """Note numbers in order of first use; cells with the same note, detail and missing effects
    (a pair's note in both orders, say) share one number."""

    def __init__(self, names: Mapping[str, str]):
        self.names = names
        self.footnotes: list[Footnote] = []
        self._by_text: dict[tuple[Any, ...], int] = {}

    def shown(self, key: CellKey, cell: Mapping[str, Any] | None) -> Shown:
        if cell is None:
            return Shown(NOT_RUN)
        text = (cell["note"] or None, cell["detail"] or None, tuple(cell["missing"]))
        outcome = shown_outcome(cell)
        if text == (None, None, ()):
            return Shown(OUTCOMES[outcome], outcome=outcome)
        label = cell_label(key, self.names)
        if text in self._by_text:
            number = self._by_text[text]
            old = self.footnotes[number - 1]
            if label not in old.cells:
                self.footnotes[number - 1] = Footnote(number, (*old.cells, label), *text)
        else:
            number = len(self.footnotes) + 1
            self._by_text[text] = number
            self.footnotes.append(Footnote(number, (label,), *text))
        return Shown(OUTCOMES[outcome], number, outcome)


@dataclass(frozen=True)
class Matrix:
    """One matrix file as the page and the cards show it."""

    file: str  # results/composability/<name>.json
    hardware: str
    date: str  # YYYY-MM-DD
    device_type: str
    torch: str
    deepspeed: str | None
    settings: Mapping[str, Any]
    command: str
    wall_s: float
    counts: Mapping[str, int]  # shown outcome (a key of OUTCOMES) -> cells of the registry's methods
    precisions: tuple[str, ...]
    #: The parallel cells' columns (:func:`parallel_column`): each mode in each precision it ran in.
    parallels: tuple[str, ...]
    cells: Mapping[CellKey, Mapping[str, Any]]

    @property
    def parallel_headers(self) -> tuple[str, ...]:
        """The parallel columns' headers: ``ddp, fp32``, ``ddp, amp_bf16``."""
        return tuple(column_header("parallel", c) for c in self.parallels)

    @property
    def parallel_precisions(self) -> tuple[str, ...]:
        """The precisions the parallel cells ran in (fp32 first)."""
        return tuple(dict.fromkeys(column_modes(c)[1] for c in self.parallels))

    @property
    def broken(self) -> int:
        """The ✗ total: the cells that do not train."""
        return sum(self.counts.get(o, 0) for o in BROKEN)

    @property
    def title(self) -> str:
        return f"{self.hardware}, {self.date}"

    @property
    def examples(self) -> str:
        """What a batch holds, by workload: a cell trains on the first workload its methods share
        (:func:`.matrix._workload_domain`), vision's images or the language model's token sequences."""
        from .matrix import NLP_LENGTH, NLP_VOCAB

        return (
            f"images of {self.settings['image_size']} px where the methods share the vision domain, else "
            f"the language model's sequences of {NLP_LENGTH} tokens from a vocabulary of {NLP_VOCAB}"
        )


def matrix_view(path: Path, document: Mapping[str, Any], records: Sequence[MethodRecord]) -> Matrix:
    keys = {r.key for r in records}
    cells = {cell_key(c): c for c in document["cells"] if set(c["methods"]) <= keys}  # removed methods left out
    shown = [shown_outcome(c) for c in cells.values()]
    counts = {outcome: shown.count(outcome) for outcome in OUTCOMES}
    ran = {k[2] for k in cells if k[0] == "precision"}
    precisions = tuple(m for m in PRECISIONS if m in ran) + tuple(sorted(ran - set(PRECISIONS)))
    ran = {str(k[2]) for k in cells if k[0] == "parallel"} | set(parallel_modes(document))
    parallels = tuple(sorted(ran, key=_column_order))
    env = document["environment"]
    return Matrix(
        file=f"results/composability/{path.name}",
        hardware=env["hardware"],
        date=env["date"][:10],
        device_type=env["device_type"],
        torch=env["torch"],
        deepspeed=env["deepspeed"],
        settings=document["settings"],
        command=document["commands"][-1] if document["commands"] else "",
        wall_s=document["wall_s"],
        counts=counts,
        precisions=precisions,
        parallels=tuple(str(m) for m in parallels),
        cells=cells,
    )


def _column_order(column: str) -> tuple[int, str, int, str]:
    """Parallel columns by mode (:data:`MATRIX_PARALLELS` first), each mode's precisions in
    :data:`PRECISIONS` order: a mode's fp32 and amp_bf16 cells side by side."""
    parallel, precision = column_modes(column)

    def place(value: str, known: Sequence[str]) -> int:
        return known.index(value) if value in known else len(known)

    return place(parallel, MATRIX_PARALLELS), parallel, place(precision, PRECISIONS), precision


@dataclass(frozen=True)
class PairTable:
    """The ordered pairs of one domain: ``rows`` is ``(first method's name, [cell per second method])``."""

    domain: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, tuple[Shown, ...]], ...]


@dataclass(frozen=True)
class PageMatrix:
    matrix: Matrix
    pairs: tuple[PairTable, ...]
    precision_rows: tuple[tuple[str, tuple[Shown, ...]], ...]
    parallel_rows: tuple[tuple[str, tuple[Shown, ...]], ...]
    footnotes: tuple[Footnote, ...]


def page_matrix(matrix: Matrix, methods: Sequence[MethodRecord]) -> PageMatrix:
    names = {r.key: r.name for r in methods}
    numbering = _Numbering(names)

    def shown(key: CellKey) -> Shown:
        return numbering.shown(key, matrix.cells.get(key))

    pairs = []
    for domain in sorted({d for r in methods for d in r.domains}):
        members = [r for r in methods if domain in r.domains]
        rows = tuple(
            (
                a.name,
                tuple(
                    shown(("solo", (a.key,), None)) if a.key == b.key else shown(("pair", (a.key, b.key), None))
                    for b in members
                ),
            )
            for a in members
        )
        pairs.append(PairTable(domain, tuple(r.name for r in members), rows))
    precision_rows = tuple(
        (r.name, tuple(shown(("precision", (r.key,), m)) for m in matrix.precisions)) for r in methods
    )
    parallel_rows = tuple((r.name, tuple(shown(("parallel", (r.key,), m)) for m in matrix.parallels)) for r in methods)
    return PageMatrix(matrix, tuple(pairs), precision_rows, parallel_rows, tuple(numbering.footnotes))


@dataclass(frozen=True)
class MethodRow:
    """One method's row of one matrix file, for its card."""

    matrix: Matrix
    alone: Shown
    others: tuple[tuple[str, Shown, Shown], ...]  # (other method's name, this one first, the other first)
    precisions: tuple[Shown, ...]
    parallels: tuple[Shown, ...]
    footnotes: tuple[Footnote, ...]
    #: How many other methods of its domains were left out of ``others`` because both their cells
    #: simply run; 0 when ``others`` lists them all.
    others_running: int = 0
    #: Their names, while there are at most :data:`CARD_PAIRS_LIMIT` of them (else the count alone).
    running: tuple[str, ...] = ()


#: A card's table lists the other methods of its domains with a cell that does not simply run (a
#: note, another outcome, not run); a sentence names the rest, which run in either order, while
#: they are at most this many, and counts them beyond. A card's size then stays bounded as the
#: catalog grows (``benchmarks/docs_scale.py``), while the Composability page keeps every cell.
CARD_PAIRS_LIMIT = 30


def _runs_plainly(shown: Shown) -> bool:
    return shown.label == OUTCOMES["runs"] and shown.number is None


def method_row(matrix: Matrix, record: MethodRecord, methods: Sequence[MethodRecord]) -> MethodRow:
    numbering = _Numbering({r.key: r.name for r in methods})

    def shown(key: CellKey) -> Shown:
        return numbering.shown(key, matrix.cells.get(key))

    key = record.key
    alone = shown(("solo", (key,), None))
    others = tuple(
        (other.name, shown(("pair", (key, other.key), None)), shown(("pair", (other.key, key), None)))
        for other in methods
        if other.key != key and set(other.domains) & set(record.domains)
    )
    listed = tuple(o for o in others if not (_runs_plainly(o[1]) and _runs_plainly(o[2])))
    running = tuple(o[0] for o in others if o not in listed)
    precisions = tuple(shown(("precision", (key,), m)) for m in matrix.precisions)
    parallels = tuple(shown(("parallel", (key,), m)) for m in matrix.parallels)
    return MethodRow(
        matrix,
        alone,
        listed,
        precisions,
        parallels,
        tuple(numbering.footnotes),
        others_running=len(running),
        running=running if len(running) <= CARD_PAIRS_LIMIT else (),
    )


def practice_modes(record: MethodRecord) -> tuple[str, tuple[str, ...]] | None:
    """``("parallel", ("fsdp",))`` or ``("precision", ("amp_fp16", "amp_bf16"))``: the matrix cells a
    best practice's Trainer option stands for (a precision with its 16-bit sibling, as its card shows
    them); None for a best practice of another option (an optimizer)."""
    from .training_pages import PRECISION_FAMILY

    option = dict(record.trainer_option or {})
    if "parallel" in option:
        return "parallel", (str(option["parallel"]),)
    if "precision" in option:
        value = str(option["precision"])
        return "precision", tuple(PRECISION_FAMILY.get(value, (value,)))
    return None


@dataclass(frozen=True)
class PracticeRow:
    """A best practice's modes in one matrix file, for its card: every method alone in each of its
    columns the file ran (a parallel mode in each precision; a precision in one process and under
    each parallel mode), the methods that do not simply run in all of them listed (those that do
    not train first), with what else the file ran the mode with."""

    matrix: Matrix
    kind: str  # "parallel" or "precision"
    modes: tuple[str, ...]  # the practice's modes that this file ran
    missing_modes: tuple[str, ...]  # the practice's modes that it did not
    #: The table's columns, ``(cell kind, mode of its key)``, and their headers.
    columns: tuple[tuple[str, str], ...]
    headers: tuple[str, ...]
    rows: tuple[tuple[str, tuple[Shown, ...]], ...]
    running: int  # methods that simply run in every column
    methods: int
    counts: Mapping[str, int]  # shown outcome -> cells
    #: What the file ran these cells with: the precisions of a parallel mode's cells (fp32 first);
    #: for a precision, the parallel modes each of its modes ran under, ``((precision, modes), ...)``.
    tested_with: tuple[str, ...]
    parallel_runs: tuple[tuple[str, tuple[str, ...]], ...]
    footnotes: tuple[Footnote, ...]

    @property
    def broken(self) -> int:
        return sum(self.counts.get(o, 0) for o in BROKEN)

    @property
    def untested_parallel(self) -> tuple[str, ...]:
        """A precision practice's modes that ran in one process but under no parallel mode."""
        ran = {p for p, _ in self.parallel_runs}
        return tuple(m for m in self.modes if m not in ran)


def practice_columns(matrix: Matrix, kind: str, modes: Sequence[str]) -> list[tuple[str, str]]:
    """The columns of a best practice's modes: a parallel mode's in each precision the file ran it
    in; a precision's in one process, then under each parallel mode the file ran it under."""
    parallel = [("parallel", c) for c in matrix.parallels]
    if kind == "parallel":
        return [col for col in parallel if column_modes(col[1])[0] in modes]
    return [("precision", m) for m in modes] + [col for col in parallel if column_modes(col[1])[1] in modes]


def practice_row(matrix: Matrix, kind: str, modes: Sequence[str], methods: Sequence[MethodRecord]) -> PracticeRow:
    columns = tuple(
        col
        for col in practice_columns(matrix, kind, modes)
        if any((col[0], (r.key,), col[1]) in matrix.cells for r in methods)
    )
    cells = {r.key: [matrix.cells.get((k, (r.key,), m)) for k, m in columns] for r in methods}
    counts = dict.fromkeys(OUTCOMES, 0)
    for cell in (c for row in cells.values() for c in row if c is not None):
        counts[shown_outcome(cell)] += 1

    def plain(cell: Mapping[str, Any] | None) -> bool:
        return (
            cell is not None and cell["outcome"] == "runs" and not (cell["note"] or cell["detail"] or cell["missing"])
        )

    # the methods that do not simply run everywhere, those that do not train first, then the cautions
    severity = {o: -i for i, o in enumerate(OUTCOMES)} | {"not_run": 0}
    listed = sorted(
        (r for r in methods if not all(plain(c) for c in cells[r.key])),
        key=lambda r: min(severity[shown_outcome(c) if c is not None else "not_run"] for c in cells[r.key]),
    )
    numbering = _Numbering({r.key: r.name for r in methods})
    rows = tuple(
        (r.name, tuple(numbering.shown((k, (r.key,), m), c) for (k, m), c in zip(columns, cells[r.key], strict=True)))
        for r in listed
    )
    ran_parallel = [column_modes(m) for k, m in columns if k == "parallel"]
    if kind == "parallel":
        ran = tuple(m for m in modes if any(p == m for p, _ in ran_parallel))
        tested = tuple(p for p in PRECISIONS if any(q == p for _, q in ran_parallel))
        parallel_runs: tuple[tuple[str, tuple[str, ...]], ...] = ()
    else:
        ran = tuple(m for k, m in columns if k == "precision")
        tested = ("single",) if ran else ()
        parallel_runs = tuple(
            (m, tuple(p for p, q in ran_parallel if q == m)) for m in modes if any(q == m for _, q in ran_parallel)
        )
    return PracticeRow(
        matrix=matrix,
        kind=kind,
        modes=ran,
        missing_modes=tuple(m for m in modes if m not in ran),
        columns=columns,
        headers=tuple(column_header(k, m) for k, m in columns),
        rows=rows,
        running=len(methods) - len(listed),
        methods=len(methods),
        counts=counts,
        tested_with=tested,
        parallel_runs=parallel_runs,
        footnotes=tuple(numbering.footnotes),
    )


# --------------------------------------------------------------------------------------------- render


def render_composability(
    site: Site, files: Sequence[tuple[Path, Mapping[str, Any]]] | None = None
) -> dict[Path, Content]:
    """The page and one snippet per method, from ``files`` (default: the site's matrix files, which
    :func:`methods_tools.pages.generate` reads once for every generator)."""
    files = site.matrices if files is None else files
    methods = matrix_methods(site.methods)
    matrices = [matrix_view(path, document, methods) for path, document in files]
    outputs: dict[Path, Content] = {
        PAGE: site.render(
            "composability.md.j2",
            matrices=[page_matrix(m, methods) for m in matrices],
            outcomes=OUTCOMES,
            colours=COLOURS,
            not_run=NOT_RUN,
            command=MATRIX_COMMAND,
        )
    }
    in_matrix = [{k[1][0] for k in m.cells if len(k[1]) == 1} for m in matrices]  # once, not per method
    for record in methods:
        rows = [
            method_row(m, record, methods) for m, keys in zip(matrices, in_matrix, strict=True) if record.key in keys
        ]
        outputs[SNIPPETS / f"{record.key}.md.inc"] = site.render(
            "composability_snippet.md.inc.j2",
            record=record,
            rows=rows,
            matrices=matrices,
            page=PAGE.with_suffix(""),
            command=MATRIX_COMMAND,
            outcomes=OUTCOMES,
        )
    for record in site.methods:
        found = practice_modes(record) if record.is_best_practice else None
        if found is None:
            continue
        kind, modes = found
        outputs[SNIPPETS / f"{record.key}.md.inc"] = site.render(
            "composability_practice.md.inc.j2",
            record=record,
            kind=kind,
            wanted=modes,
            rows=[practice_row(m, kind, modes, methods) for m in matrices],
            page=PAGE.with_suffix(""),
            command=MATRIX_COMMAND,
            outcomes=OUTCOMES,
        )
    return outputs
