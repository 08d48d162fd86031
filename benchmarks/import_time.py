"""What ``import algorithms`` costs a user on top of ``import torch``.

Each repeat starts two fresh interpreters, interleaved: one that imports torch alone, and one that
imports torch and then uses the library as a script does (``import algorithms``, a class,
``import algorithms.functional`` and a form: ``algorithms.CutMix``, ``cf.cutmix_batch``). Inside the
second, the time from after ``import torch`` to after those uses is the library's own cost; the
row is its median over the repeats (target: under 30 ms). The details hold each interpreter's
whole import time too, side by side: torch's alone, and torch's with the library's.

    python benchmarks/import_time.py
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
REPEATS = 15
QUICK_REPEATS = 2
TARGET_MS = 30.0

_TORCH = "import time; t0 = time.perf_counter(); import torch; t1 = time.perf_counter()"
_PROBES = {
    "torch": _TORCH + "\nprint(1e3 * (t1 - t0), 0.0)",
    "torch + algorithms": _TORCH
    + "\nimport algorithms; algorithms.CutMix; import algorithms.functional as cf; cf.cutmix_batch"
    + "\nprint(1e3 * (t1 - t0), 1e3 * (time.perf_counter() - t1))",
}


def _probe(code: str) -> tuple[float, float]:
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO_ROOT, timeout=300
    )
    torch_ms, library_ms = map(float, out.stdout.split())
    return torch_ms, library_ms


def run(quick: bool = False, repeats: int = REPEATS) -> dict:
    if quick:
        repeats = QUICK_REPEATS
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in _PROBES}
    for _ in range(repeats):
        for name, code in _PROBES.items():
            times[name].append(_probe(code))
    library = [extra for _, extra in times["torch + algorithms"]]
    value = statistics.median(library)
    details = {"repeats": repeats, "uses": "import algorithms; algorithms.CutMix; cf.cutmix_batch"}
    for name, pairs in times.items():
        totals = [a + b for a, b in pairs]
        details[f"{name} ms"] = {"median": statistics.median(totals), "range": [min(totals), max(totals)]}
    return {
        "title": "Import time",
        "rows": [
            {
                "what": "import algorithms, a class and a functional form, after import torch",
                "value": value,
                "unit": "ms",
                "spread": [min(library), max(library)],
                "target": TARGET_MS,
                "compare": "<",
                "met": value < TARGET_MS,
            }
        ],
        "details": details,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=REPEATS)
    args = parser.parse_args(argv)
    print(json.dumps(run(repeats=args.repeats), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
