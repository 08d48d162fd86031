"""Check a mutmut run against the mutants listed as equivalent.

Usage, in the folder where mutmut ran (``nox -s mutants`` does this at the end of its run)::

    python tools/check_mutants.py tests/mutation_equivalents.md

Every mutant that survived its tests, that no test reaches, or whose run was not conclusive must
be listed in the equivalents file as ``- `NAME`: `LINE` becomes `MUTATED LINE`.``, with the change
``mutmut show NAME`` gives today. An entry whose recorded change differs from the mutant's (an
edit of the function renumbered its mutants, so the name now means another change) explains
nothing and is reported. Mutants that were not run in this session (``not checked``) are not
judged.

Prints one line per unexplained mutant, followed by the entry it would need once triaged, and
exits with status 1 if there is any; otherwise prints how many survivors the file explains. A
listed mutant that a test kills now, or that no longer exists, is named too (its entry is stale),
without failing.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

# Statuses of `mutmut results` that no test explains: the mutant ran and every test passed, or no
# test reaches it, or its run was not conclusive.
UNEXPLAINED = frozenset({"survived", "no tests", "suspicious", "segfault"})

# A Markdown code span: a run of backticks, the code, the same run again (longer runs let the code hold
# backticks, as in ``message=r"`lr_scheduler`"``).
# A side with no code (a line removed) is written "(nothing)".
_SPAN = r"(?:(?P<{0}>`+)(?!`).*?(?<!`)(?P={0})(?!`)|\(nothing\))"
# An entry: its name, then the change (`line` becomes `mutated line`), then, optionally, why.
ENTRY = re.compile(r"^- `(?P<name>[\w.ǁ]+__mutmut_\d+)`: (?P<change>" + _SPAN.format("a") + " becomes "
                   + _SPAN.format("b") + ")")


def code_span(code: str) -> str:
    """``code`` as a Markdown code span, with a longer fence (and spaces) where it holds backticks."""
    if "`" not in code:
        return f"`{code}`" if code else "(nothing)"
    fence = "`" * (max(len(run) for run in re.findall(r"`+", code)) + 1)
    return f"{fence} {code} {fence}"


def listed_changes(text: str) -> dict[str, str]:
    """Each listed mutant's recorded change, by name."""
    return {m["name"]: m["change"] for line in text.splitlines() if (m := ENTRY.match(line))}


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


def unexplained(statuses: Iterable[tuple[str, str]], listed: dict[str, str],
                change: Callable[[str], str]) -> Iterator[tuple[str, str, str]]:
    """``(name, status, why)`` for each judged mutant the listing does not explain; ``change(name)``
    gives a mutant's change as :func:`change_of` writes it."""
    for name, status in statuses:
        if status not in UNEXPLAINED:
            continue
        if name not in listed:
            yield name, status, "not listed"
            continue
        now = change(name)
        if listed[name] != now:
            yield name, status, f"listed as {listed[name]}, but the mutant now makes {now}"


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("equivalents", type=Path, help="the file that lists the equivalent mutants")
    args = parser.parse_args(argv)
    try:
        listed = listed_changes(args.equivalents.read_text(encoding="utf-8"))
    except OSError as error:
        print(f"{args.equivalents}: cannot read the equivalents file ({error.strerror}); pass its path",
              file=sys.stderr)
        return 1
    statuses = list(mutmut_statuses())
    judged = sum(status != "not checked" for _, status in statuses)
    survivors = sum(status in UNEXPLAINED for _, status in statuses)
    problems = list(unexplained(statuses, listed, mutmut_change))
    names = {name for name, _ in statuses}
    for name, status in statuses:
        if status == "killed" and name in listed:
            print(f"note: {name} is listed in {args.equivalents} but a test kills it now: remove its entry")
    for name in sorted(set(listed) - names):
        print(f"note: {name} is listed in {args.equivalents} but there is no such mutant: remove its entry")
    for module, counts in tally(statuses).items():
        print(f"{module}: {counts.total()} run, " + ", ".join(f"{n} {status}" for status, n in sorted(counts.items())))
    for name, status, why in problems:
        print(f"{name}: {status}, {why}")
        if why == "not listed":
            print(f"    - `{name}`: {mutmut_change(name)}.")
    if problems:
        print(f"{len(problems)} of {survivors} surviving mutants (of {judged} run) are not explained by "
              f"{args.equivalents}: kill each with a test, or list it there, with the change above, in the "
              "section that says why it is equivalent", file=sys.stderr)
        return 1
    print(f"all {survivors} surviving mutants (of {judged} run) are listed in {args.equivalents} with the change "
          "they make")
    return 0
