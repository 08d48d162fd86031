"""Scale benchmark of the docs build: linear in the number of methods, little above a bare Sphinx
build, and incremental after an edit of one card.

Three measurements, each side by side in one run, medians over interleaved repeats:

1. **Growth.** Synthetic checkouts (``benchmarks/synthetic_catalog.py``) of 30 and 300 generated
   methods, each with code, metadata, a figure the build draws by running that code, and a card.
   Each checkout is built once first: that build draws every figure, as a fresh checkout's first
   build does (its time is in the details). Then each is built in full (``-E`` into an empty
   folder: every page read and written, every generated page rendered, each figure's input hash
   computed and the figure reused as its inputs did not change, as in every later build), sizes
   interleaved. Target: the build of 300 takes at most 6x the build of 30.
2. **Overhead.** A copy of this checkout built in full, against a bare Sphinx build of the same
   pages: the same configuration, theme and extensions with ``-D methods_generate_pages=0``, so no
   generator runs (no metadata loaded, no page rendered, no figure hashed) and Sphinx builds the
   pages as the full build left them. Target: at most 1.5x.
3. **Incremental.** After a full build of that copy, a build with nothing changed, one after a
   sentence is added to one card's prose, and one after a sentence is added to that method's
   TL;DR in its metadata: the pages Sphinx read and wrote (from its output). Target: after the
   prose edit it reads only that card (a prose edit changes no metadata, so no generated page).
   Sphinx also writes the card's toctree parent (``index``), whose navigation shows the card's
   title. The metadata edit is reported in the details: the pages generated from it.

    python benchmarks/docs_scale.py                      # about 10 minutes on 2 cores
    python benchmarks/docs_scale.py --quick --output -   # a smoke run: tiny sizes, the numbers mean nothing
    python benchmarks/docs_scale.py --sizes 30 100 300 --variant furo-default --output artifacts/docs_scale.json

``--variant`` adds sidebar configurations to the growth measurement, for comparison:
``furo-full-nav`` lists every card in every sidebar (through the site's own renderer),
``furo-default`` leaves furo's sidebar as furo makes it (the whole toctree in every page: N^2).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [p for p in (str(HERE), str(HERE.parent / "tools")) if p not in sys.path]

from synthetic_catalog import copy_checkout, make_catalog  # noqa: E402

SIZES = (30, 300)
REPEATS = 3
QUICK_SIZES = (1, 2)
SCALE_TARGET = 6.0
OVERHEAD_TARGET = 1.5
VARIANTS = {
    "bounded-nav": [],  # the site's configuration
    "furo-full-nav": ["-D", "methods_nav_card_limit=1000000"],  # every card in every sidebar, our renderer
    "furo-default": ["-D", "methods_nav_card_limit=-1"],  # furo's own full toctree in every page
}
BARE = ["-D", "methods_generate_pages=0"]
#: The sentence the incremental measurement adds to a card, after its Considerations heading.
ADDED_PROSE = "A sentence added to the prose, to time the rebuild that follows."

Log = Callable[[str], None]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Build:
    """One sphinx-build run: its wall time and the docnames it read and wrote, in order."""

    seconds: float
    read: tuple[str, ...]
    written: tuple[str, ...]


_READ = re.compile(r"^reading sources\.\.\. \[\s*\d+%\] (\S+)\s*$", re.MULTILINE)
_WRITTEN = re.compile(r"^writing output\.\.\. \[\s*\d+%\] (\S+)\s*$", re.MULTILINE)


def pages_in_output(output: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(read, written)``: the docnames Sphinx's (not quiet, not a terminal) output lists as read
    and as written."""
    return tuple(_READ.findall(output)), tuple(_WRITTEN.findall(output))


def sphinx_build(root: Path, out: Path, *options: str, fresh: bool = True) -> Build:
    """Build ``root``'s ``docs/source`` into ``out`` with its own ``conf.py``, every warning an
    error; ``fresh``: from scratch (``-E``, ``out`` emptied first), else incrementally."""
    if fresh:
        shutil.rmtree(out, ignore_errors=True)
    cmd = [
        sys.executable,
        "-m",
        "sphinx",
        "-b",
        "html",
        "-W",
        "--keep-going",
        *(["-E"] if fresh else []),
        *options,
        str(root / "docs" / "source"),
        str(out),
    ]
    # NO_COLOR: where CI=true or FORCE_COLOR is set, Sphinx takes even a pipe for a colour terminal and
    # prints its progress on one line, each item ending in a carriage return (``--no-color`` does not
    # change that), which pages_in_output does not read.
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "NO_COLOR": "1"}
    start = time.perf_counter()
    result = subprocess.run(cmd, cwd=root, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        raise RuntimeError(f"the build of {root} failed:\n{result.stderr[-4000:]}")
    return Build(seconds, *pages_in_output(result.stdout))


def _ratio_row(what: str, numerators: Sequence[float], denominators: Sequence[float], target: float) -> dict:
    """A row of the ratio of the medians, its spread the ratios of each repeat's pair."""
    pairs = [a / b for a, b in zip(numerators, denominators, strict=True)]
    value = statistics.median(numerators) / statistics.median(denominators)
    return {
        "what": what,
        "value": round(value, 3),
        "unit": "x",
        "spread": [round(min(pairs), 3), round(max(pairs), 3)],
        "target": target,
        "compare": "<=",
        "met": value <= target,
    }


def _pages_row(what: str, pages: Sequence[str], target: int) -> dict:
    return {
        "what": what,
        "value": len(pages),
        "unit": "pages",
        "spread": [len(pages), len(pages)],
        "target": target,
        "compare": "<=",
        "met": len(pages) <= target,
    }


def measure_growth(
    tmp: Path, sizes: Sequence[int], repeats: int, variants: Sequence[str], quick: bool, log: Log
) -> tuple[list[dict], dict, Path]:
    """The growth rows and details; also the smallest checkout (already built), for reuse."""
    catalogs = {}
    for n in sizes:
        start = time.perf_counter()
        catalogs[n] = make_catalog(tmp / f"catalog-{n}", n).root
        log(f"docs_scale: generated {n} synthetic methods in {time.perf_counter() - start:.1f} s")
    first = {}
    for n in sizes:  # draws every figure; in a quick run, this is the measured build
        first[n] = sphinx_build(catalogs[n], tmp / f"out-{n}")
        log(
            f"docs_scale: first build of {n} methods (figures drawn): {first[n].seconds:.1f} s, "
            f"{len(first[n].read)} pages"
        )
    times: dict[str, dict[int, list[float]]] = {v: {n: [] for n in sizes} for v in variants}
    if quick:
        times = {v: {n: [first[n].seconds] for n in sizes} for v in variants[:1]}
    for rep in range(0 if quick else repeats):
        for variant in variants:
            for n in sizes if rep % 2 == 0 else reversed(sizes):  # alternate the order against drift
                build = sphinx_build(catalogs[n], tmp / f"out-{n}", *VARIANTS[variant])
                times[variant][n].append(build.seconds)
                log(f"docs_scale: repeat {rep + 1}/{repeats} {variant} {n} methods: {build.seconds:.1f} s")
    small, large = min(sizes), max(sizes)
    main = variants[0]
    rows = [
        _ratio_row(
            f"full docs build, {large} synthetic methods / {small}",
            times[main][large],
            times[main][small],
            SCALE_TARGET,
        )
    ]
    details = {
        "sizes": list(sizes),
        "repeats": 1 if quick else repeats,
        "pages_built": {str(n): len(first[n].read) for n in sizes},
        "first_build_seconds": {str(n): round(first[n].seconds, 2) for n in sizes},
        "first_build_ratio": round(first[large].seconds / first[small].seconds, 3),
        "seconds": {v: {str(n): [round(s, 2) for s in times[v][n]] for n in sizes} for v in times},
        "median_seconds": {v: {str(n): round(statistics.median(times[v][n]), 2) for n in sizes} for v in times},
        "ratios": {v: round(statistics.median(times[v][large]) / statistics.median(times[v][small]), 3) for v in times},
    }
    return rows, details, catalogs[small]


def measure_overhead(root: Path, out: Path, repeats: int, built: bool, log: Log) -> tuple[list[dict], dict]:
    """Full builds of ``root`` against bare builds of the same pages; ``built``: ``root`` has been
    built before (its figures are drawn)."""
    details: dict[str, Any] = {}
    if not built:
        first = sphinx_build(root, out)
        details["first_build_seconds"] = round(first.seconds, 2)
        log(f"docs_scale: first build of {root.name} (figures drawn): {first.seconds:.1f} s, {len(first.read)} pages")
    full, bare = [], []
    # The bare builds go to a folder of their own: ``out`` keeps a full build's environment.
    runs = ((full, out, ()), (bare, out.with_name(out.name + "-bare"), BARE))
    for rep in range(repeats):
        for times, folder, options in runs if rep % 2 == 0 else reversed(runs):
            times.append(sphinx_build(root, folder, *options).seconds)
        log(f"docs_scale: repeat {rep + 1}/{repeats} full {full[-1]:.1f} s, bare {bare[-1]:.1f} s")
    details.update(
        seconds={"full": [round(s, 2) for s in full], "bare": [round(s, 2) for s in bare]},
        median_seconds={name: round(statistics.median(times), 2) for name, times in (("full", full), ("bare", bare))},
        bare_options=BARE,
    )
    return [_ratio_row("docs build / bare Sphinx build of the same pages", full, bare, OVERHEAD_TARGET)], details


def edit_card_prose(card: Path) -> None:
    """Add :data:`ADDED_PROSE` after the card's Considerations heading (prose, outside every region)."""
    text = card.read_text(encoding="utf-8")
    heading = "\n## Considerations\n"
    if heading not in text:
        raise ValueError(f"{card}: no '## Considerations' section to add prose to")
    card.write_text(text.replace(heading, f"{heading}\n{ADDED_PROSE}\n", 1), encoding="utf-8")


def edit_metadata_tldr(path: Path) -> None:
    """Add a sentence to the TL;DR of the one entry of a ``metadata.json``."""
    data = json.loads(path.read_text(encoding="utf-8"))
    key = next(k for k in data if k != "$schema")
    data[key]["tldr"] += " " + ADDED_PROSE
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def measure_incremental(root: Path, out: Path, card: str, full: bool, log: Log) -> tuple[list[dict], dict]:
    """Rebuild ``root`` into ``out`` (built in full before) after a prose edit of ``card`` (a
    docname such as ``method_cards/cutmix``); with ``full``, also with nothing changed first, and
    after an edit of that method's metadata (its TL;DR) last."""
    details: dict[str, Any] = {"card": card}

    def rebuild(what: str) -> Build:
        build = sphinx_build(root, out, fresh=False)
        details[what] = {"read": list(build.read), "written": list(build.written), "seconds": round(build.seconds, 2)}
        log(
            f"docs_scale: rebuild {what.replace('_', ' ')}: read {', '.join(build.read) or 'nothing'}; "
            f"wrote {', '.join(build.written) or 'nothing'}"
        )
        return build

    if full:
        rebuild("with_nothing_changed")
    edit_card_prose(root / "docs" / "source" / f"{card}.md")
    after = rebuild("after_a_prose_edit")
    if full:
        edit_metadata_tldr(root / "algorithms" / card.split("/")[-1] / "metadata.json")
        rebuild("after_a_metadata_edit")
    rows = [
        _pages_row("pages read after a prose edit of one card", after.read, 1),
        _pages_row("pages written after a prose edit of one card (and its toctree parent)", after.written, 2),
    ]
    return rows, details


def run(
    quick: bool = False,
    *,
    sizes: Sequence[int] | None = None,
    repeats: int | None = None,
    variants: Sequence[str] = ("bounded-nav",),
    log: Log = _stderr,
) -> dict:
    """Every measurement; ``quick``: tiny sizes, one repeat, the overhead and incremental builds on
    the smallest synthetic checkout instead of a copy of this one (the numbers mean nothing)."""
    sizes = sorted(set(sizes or (QUICK_SIZES if quick else SIZES)))
    repeats = 1 if quick else repeats or REPEATS
    if len(sizes) < 2 or sizes[0] < 1 or repeats < 1:
        raise ValueError("two or more sizes of at least 1, and at least one repeat")
    with tempfile.TemporaryDirectory(prefix="docs-scale-") as name:
        tmp = Path(name)
        rows, growth, smallest = measure_growth(tmp, sizes, repeats, list(variants), quick, log)
        if quick:
            project, out, card = smallest, tmp / f"out-{sizes[0]}", "method_cards/synthetic_0000"
        else:
            project, out = copy_checkout(tmp / "project"), tmp / "out-project"
            card = f"method_cards/{sorted(p.stem for p in (project / 'docs/source/method_cards').glob('*.md'))[0]}"
        overhead_rows, overhead = measure_overhead(project, out, repeats, built=quick, log=log)
        incremental_rows, incremental = measure_incremental(project, out, card, full=not quick, log=log)
    return {
        "title": f"Docs build: {sizes[-1]} synthetic methods against {sizes[0]}, generators and figures "
        "against a bare Sphinx build, and an incremental rebuild",
        "rows": rows + overhead_rows + incremental_rows,
        "details": {
            "growth": growth,
            "overhead": {"project": "synthetic" if quick else "this checkout", **overhead},
            "incremental": incremental,
            "quick": quick,
        },
    }


def main(argv: list[str] | None = None) -> int:
    from methods_tools.files import write_atomic

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", help=f"method counts to build (default {SIZES})")
    parser.add_argument("--repeats", type=int, help=f"builds of each (default {REPEATS})")
    parser.add_argument(
        "--variant",
        choices=sorted(VARIANTS),
        action="append",
        help="add a sidebar configuration to the growth measurement (repeatable)",
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run: tiny sizes, one repeat")
    parser.add_argument("--output", help="write the results as JSON here (- for stdout)")
    parser.add_argument("--force", action="store_true", help="overwrite --output if it exists")
    args = parser.parse_args(argv)
    output = Path(args.output) if args.output and args.output != "-" else None
    if output is not None and output.exists() and not args.force:
        parser.error(f"{output}: exists; pass --force to overwrite it")
    try:
        results = run(
            args.quick,
            sizes=args.sizes,
            repeats=args.repeats,
            variants=["bounded-nav", *[v for v in args.variant or () if v != "bounded-nav"]],
        )
    except ValueError as exc:
        parser.error(str(exc))
    for row in results["rows"]:
        print(
            f"{row['what']}: {row['value']:g} {row['unit']} (spread {row['spread'][0]:g}-{row['spread'][1]:g}; "
            f"target {row['compare']} {row['target']:g}: {'met' if row['met'] else 'MISSED'})"
        )
    text = json.dumps(results, indent=1) + "\n"
    if args.output == "-":
        sys.stdout.write(text)
    elif output is not None:
        write_atomic(output, text, force=args.force)
        print(f"results: {output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
