"""Report a mutmut run: the mutation score, by module and overall, and each surviving mutant.

Usage, in the folder where mutmut ran (``nox -s mutants`` does this at the end of its run)::

    python tools/mutation_score.py

A score to read and report, not a gate: it always exits 0 once it can read the run. A mutant that
survived (or that no test reaches, or whose run was not conclusive) is printed with the change it
makes, ``mutmut show NAME``'s diff in one line, so it can be killed with a test against the
definition or judged equivalent; nothing is kept entry by entry (mutmut numbers a function's
mutants afresh on every edit, so a ledger of them never stays current). Mutants that were not run
in this session (``not checked``) are left out.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path

# Statuses of `mutmut results` that no test explains: the mutant ran and every test passed, or no
# test reaches it, or its run was not conclusive.
UNEXPLAINED = frozenset({"survived", "no tests", "suspicious", "segfault"})
MUTMUT_FOLDER = "mutants"  # where mutmut 3 writes its mutated copy and each mutant's status


def code_span(code: str) -> str:
    """``code`` as a Markdown code span, with a longer fence (and spaces) where it holds backticks."""
    if "`" not in code:
        return f"`{code}`" if code else "(nothing)"
    fence = "`" * (max(len(run) for run in re.findall(r"`+", code)) + 1)
    return f"{fence} {code} {fence}"


def change_of(diff: str) -> str:
    """A mutant's change as the file records it: `` `removed` becomes `added` `` from a unified diff,
    each side's changed lines stripped and joined by a space, as code spans (:func:`code_span`)."""
    removed, added = [], []
    for line in diff.splitlines():
        if line.startswith(("---", "+++", "@@")):
            continue
        if line.startswith("-"):
            removed.append(line[1:].strip())
        elif line.startswith("+"):
            added.append(line[1:].strip())
    return f"{code_span(' '.join(removed))} becomes {code_span(' '.join(added))}"


def module_of(name: str) -> str:
    """The module a mutant is in: ``algorithms.cutout.cutout`` for
    ``algorithms.cutout.cutout.x_keep_mask__mutmut_3`` (or ``...xǁCutOutǁapply__mutmut_1``)."""
    return re.split(r"\.xǁ|\.x_", name, maxsplit=1)[0]


def tally(statuses: Iterable[tuple[str, str]]) -> dict[str, Counter]:
    """The statuses of the mutants run, counted by module (mutants not run are left out)."""
    counts: dict[str, Counter] = {}
    for name, status in statuses:
        if status != "not checked":
            counts.setdefault(module_of(name), Counter())[status] += 1
    return counts


def mutmut_statuses() -> Iterator[tuple[str, str]]:
    """Every mutant of the run in the current folder with its status, as ``mutmut results`` prints
    them (mutmut 3.8.1's own reading of its files)."""
    from mutmut.mutation.data import SourceFileMutationData
    from mutmut.stats import status_by_exit_code
    from mutmut.utils.file_utils import walk_mutatable_files

    for path in walk_mutatable_files():
        data = SourceFileMutationData(path=path)
        data.load()
        for name, code in data.exit_code_by_key.items():
            yield name, status_by_exit_code[code]


def mutmut_change(name: str) -> str:
    """The change of one mutant, from mutmut's own diff (as ``mutmut show NAME`` prints it)."""
    from mutmut.mutation.diff_apply import get_diff_for_mutant

    try:
        return change_of(get_diff_for_mutant(name))
    except Exception as error:  # mutmut cannot always find a function (two of one name in a file)
        return f"(no diff: {type(error).__name__}: {error})"


def score(statuses: Iterable[tuple[str, str]]) -> tuple[int, int]:
    """``(killed, judged)``: the mutants a test killed (or that timed out, an endless loop a test
    caught), of those run."""
    counts = Counter(status for _, status in statuses if status != "not checked")
    return counts["killed"] + counts["timeout"], counts.total()


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)
    if not Path(MUTMUT_FOLDER).is_dir():
        print(f"no mutant was run in this folder (no {MUTMUT_FOLDER}/): run mutmut first (nox -s mutants)")
        return 0
    statuses = list(mutmut_statuses())
    for module, counts in sorted(tally(statuses).items()):
        killed, judged = score((module, status) for status, n in counts.items() for _ in range(n))
        print(
            f"{module}: {killed / judged:.1%} killed ({judged} run: "
            + ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
            + ")"
        )
    survivors = [(name, status) for name, status in statuses if status in UNEXPLAINED]
    for name, status in survivors:
        print(f"{name}: {status}: {mutmut_change(name)}")
    killed, judged = score(statuses)
    if not judged:
        print("no mutant was run in this folder: run mutmut first (nox -s mutants)")
        return 0
    print(
        f"mutation score: {killed / judged:.1%} ({killed} of {judged} mutants killed; {len(survivors)} survived "
        "or are not reached, listed above)"
    )
    return 0
