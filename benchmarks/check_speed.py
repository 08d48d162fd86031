"""Speed of the checks a contributor runs on every commit: the pre-commit metadata validator, and
``nox -s check`` as the number of methods grows.

- ``tools/validate_metadata.py`` over every metadata file of this checkout, run as pre-commit runs
  it: the command's wall time, interpreter start-up included. Target: under 0.3 s.
- ``nox -s check``'s four commands (``tools/validate_metadata.py``, ``check_functional.py``,
  ``check_cards.py``, ``generate_pages.py --check``) on synthetic checkouts of 30 and 300
  generated methods (``benchmarks/synthetic_catalog.py``; code, metadata with a figure, cards).
  Each command runs in a fresh interpreter, as nox runs it, that first imports torch and the
  ``algorithms`` package (not timed: "without interpreter and torch start-up"; the validator
  imports neither) and then times the function its command line calls: every other import, the
  method code, the checks. The figures are drawn once before (``generate_pages.py``, as a docs
  build does), so ``--check`` finds them current. Targets: under 2 s for 30 methods, and at most
  10x that for 300 (linear in the number of methods).

The sum over the four commands is the measured figure; sizes and commands are interleaved over
the repeats, and the medians are reported. The details hold each command's medians, the CPU
seconds beside the wall seconds (on a busy machine the wall time waits for a core; the CPU time
does not), and the same figures for a copy of this checkout.

    python benchmarks/check_speed.py --output artifacts/check_speed.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent
sys.path[:0] = [p for p in (str(HERE), str(REPO_ROOT / "tools")) if p not in sys.path]

from synthetic_catalog import copy_checkout, make_catalog, tree_python  # noqa: E402

SIZES = (30, 300)
QUICK_SIZES = (1, 2)
REPEATS = 3
VALIDATE_REPEATS = 9
VALIDATE_TARGET = 0.3
CHECK_TARGET = 2.0
#: ``nox -s check``'s commands: (name, module, function, arguments, whether it imports torch).
COMMANDS = (
    ("validate_metadata", "methods_tools.commands", "validate_metadata_main", [], False),
    ("check_functional", "methods_tools.commands", "check_functional_main", [], True),
    ("check_cards", "methods_tools.commands", "check_cards_main", [], True),
    ("generate_pages --check", "methods_tools.pages", "main", ["--check"], True),
)

# Runs in the checkout (tree_python: its sys.path first); times one command after start-up.
_TIMED = r"""
import contextlib, importlib, io, json, sys, time
module, function, argv, preload = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4] == "1"
if preload:
    import torch, algorithms  # start-up, not timed
start, cpu = time.perf_counter(), time.process_time()
main = getattr(importlib.import_module(module), function)
out, err = io.StringIO(), io.StringIO()
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    rc = main(argv)
seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
print(json.dumps({"rc": rc, "seconds": seconds, "cpu_seconds": cpu, "stderr": err.getvalue()[-2000:]}))
"""

Log = Callable[[str], None]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def time_command(root: Path, command: tuple[str, str, str, list[str], bool]) -> tuple[float, float]:
    """``(wall, CPU)`` seconds of one of :data:`COMMANDS` in ``root`` after start-up; raises when
    the check fails."""
    name, module, function, argv, preload = command
    result = json.loads(
        tree_python(root, _TIMED, module, function, json.dumps(argv), "1" if preload else "0")
        .stdout.strip()
        .splitlines()[-1]
    )
    if result["rc"] != 0:
        raise RuntimeError(f"{name} fails in {root}:\n{result['stderr']}")
    return result["seconds"], result["cpu_seconds"]


def validate_wall(root: Path = REPO_ROOT) -> tuple[float, float]:
    """``(wall, CPU)`` seconds of ``python tools/validate_metadata.py`` in ``root``, start-up included."""
    before, start = os.times(), time.perf_counter()
    subprocess.run([sys.executable, "tools/validate_metadata.py"], cwd=root, check=True, capture_output=True)
    wall, after = time.perf_counter() - start, os.times()
    return wall, (after.children_user - before.children_user) + (after.children_system - before.children_system)


def prepare(root: Path, log: Log, warm: bool = True) -> float:
    """Draw the checkout's figures and pages once (as a docs build does) and, with ``warm``, run
    every command once untimed (compiling the bytecode); return the drawing's seconds."""
    start = time.perf_counter()
    tree_python(root, "import sys; from methods_tools.pages import main; sys.exit(main([]))")
    seconds = time.perf_counter() - start
    for command in COMMANDS if warm else ():
        time_command(root, command)
    log(f"check_speed: {root.name}: pages and figures drawn in {seconds:.1f} s")
    return seconds


def run(
    quick: bool = False, *, sizes: Sequence[int] | None = None, repeats: int | None = None, log: Log = _stderr
) -> dict[str, Any]:
    """Every measurement; ``quick``: tiny sizes, one repeat, no copy of this checkout."""
    sizes = sorted(set(sizes or (QUICK_SIZES if quick else SIZES)))
    repeats = 1 if quick else repeats or REPEATS
    if len(sizes) < 2 or sizes[0] < 1 or repeats < 1:
        raise ValueError("two or more sizes of at least 1, and at least one repeat")
    validate_wall()  # bytecode compiled, files in the page cache
    walls, validate_cpu = zip(*(validate_wall() for _ in range(1 if quick else VALIDATE_REPEATS)), strict=True)
    log(
        f"check_speed: tools/validate_metadata.py: median {statistics.median(walls):.3f} s "
        f"({statistics.median(validate_cpu):.3f} s of CPU)"
    )
    with tempfile.TemporaryDirectory(prefix="check-speed-") as name:
        tmp = Path(name)
        trees = {str(n): make_catalog(tmp / f"catalog-{n}", n).root for n in sizes}
        if not quick:
            trees["this checkout"] = copy_checkout(tmp / "project")
        drawn = {label: round(prepare(root, log, warm=not quick), 2) for label, root in trees.items()}
        times: dict[str, dict[str, list[float]]] = {label: {c[0]: [] for c in COMMANDS} for label in trees}
        cpu: dict[str, dict[str, list[float]]] = {label: {c[0]: [] for c in COMMANDS} for label in trees}
        for rep in range(repeats):
            for label, root in trees.items():
                for command in COMMANDS:
                    wall, seconds = time_command(root, command)
                    times[label][command[0]].append(wall)
                    cpu[label][command[0]].append(seconds)
                log(
                    f"check_speed: repeat {rep + 1}/{repeats} {label}: "
                    f"{sum(t[-1] for t in times[label].values()):.2f} s "
                    f"({sum(t[-1] for t in cpu[label].values()):.2f} s of CPU)"
                )
    totals = {label: [sum(per[c[0]][i] for c in COMMANDS) for i in range(repeats)] for label, per in times.items()}
    small, large = str(sizes[0]), str(sizes[-1])
    median = {label: statistics.median(values) for label, values in totals.items()}
    per_rep = [a / b for a, b in zip(totals[large], totals[small], strict=True)]
    linear = sizes[-1] / sizes[0]
    rows = [
        {
            "what": "tools/validate_metadata.py wall time, all metadata",
            "value": round(statistics.median(walls), 3),
            "unit": "s",
            "spread": [round(min(walls), 3), round(max(walls), 3)],
            "target": VALIDATE_TARGET,
            "compare": "<",
            "met": statistics.median(walls) < VALIDATE_TARGET,
        },
        {
            "what": f"nox -s check after start-up, {small} synthetic methods",
            "value": round(median[small], 3),
            "unit": "s",
            "spread": [round(min(totals[small]), 3), round(max(totals[small]), 3)],
            "target": CHECK_TARGET,
            "compare": "<",
            "met": median[small] < CHECK_TARGET,
        },
        {
            "what": f"nox -s check after start-up, {large} synthetic methods / {small}",
            "value": round(median[large] / median[small], 3),
            "unit": "x",
            "spread": [round(min(per_rep), 3), round(max(per_rep), 3)],
            "target": linear,
            "compare": "<=",
            "met": median[large] / median[small] <= linear,
        },
    ]
    details = {
        "validate_metadata_seconds": [round(w, 3) for w in walls],
        "validate_metadata_cpu_seconds": [round(c, 3) for c in validate_cpu],
        "timing": "each command in a fresh interpreter, timed after `import torch, algorithms` (the validator: "
        "after start-up alone); the sum over the four commands",
        "repeats": repeats,
        "median_seconds": {label: round(value, 3) for label, value in median.items()},
        "median_seconds_by_command": {
            label: {c: round(statistics.median(v), 3) for c, v in per.items()} for label, per in times.items()
        },
        "median_cpu_seconds": {
            label: round(statistics.median([sum(per[c[0]][i] for c in COMMANDS) for i in range(repeats)]), 3)
            for label, per in cpu.items()
        },
        "median_cpu_seconds_by_command": {
            label: {c: round(statistics.median(v), 3) for c, v in per.items()} for label, per in cpu.items()
        },
        "figures_and_pages_drawn_seconds": drawn,
        "quick": quick,
    }
    return {
        "title": f"Checks: the metadata validator, and nox -s check at {small} and {large} methods",
        "rows": rows,
        "details": details,
    }


def main(argv: list[str] | None = None) -> int:
    from methods_tools.files import write_atomic

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", help=f"method counts (default {SIZES})")
    parser.add_argument("--repeats", type=int, help=f"runs of each command (default {REPEATS})")
    parser.add_argument("--quick", action="store_true", help="a smoke run: tiny sizes, one repeat")
    parser.add_argument("--output", help="write the results as JSON here (- for stdout)")
    parser.add_argument("--force", action="store_true", help="overwrite --output if it exists")
    args = parser.parse_args(argv)
    output = Path(args.output) if args.output and args.output != "-" else None
    if output is not None and output.exists() and not args.force:
        parser.error(f"{output}: exists; pass --force to overwrite it")
    try:
        results = run(args.quick, sizes=args.sizes, repeats=args.repeats)
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
