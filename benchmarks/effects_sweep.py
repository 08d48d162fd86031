"""The effects sweep's cost (``tools/measure_methods.py``): where a run's time goes, and how long
the whole sweep takes on this machine.

A slice of the vision sweep runs as the tool runs it (each job its own worker process, one
intra-op thread): the baseline and two methods, interleaved over seeds. Each run records its
training time (``wall_s``), its evaluation time (``eval_s``) and the time from starting its
process to its end (``job_s``); what lies outside training and evaluation is the process's start,
its imports and the data loading. The row is that outside time per run (median, range over the
runs), held under a target: a sweep is hundreds of such runs, so seconds spent outside training
decide how many seeds a sweep can afford.

The details give the medians of each part, the number of jobs of the full sweeps at their
default seeds (from the library's metadata), the full sweep's time estimated from this slice's
median job, and, for each committed effects file, the time its runs took (the sum of their
``job_s``) and the span from its first run to its last.

    python benchmarks/effects_sweep.py --seeds 2
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent
sys.path[:0] = [p for p in (str(HERE), str(REPO_ROOT / "tools")) if p not in sys.path]

SLICE = ("cutmix", "label_smoothing")  # two methods of the vision sweep, beside the baseline
OUTSIDE_TARGET_S = 10.0  # seconds outside training and evaluation, per run
SEEDS, QUICK_SEEDS = 3, 2


def _parse_date(text: str) -> _dt.datetime:
    return _dt.datetime.strptime(text[:19], "%Y-%m-%dT%H:%M:%S")


def committed_sweeps() -> dict[str, dict[str, Any]]:
    """Per committed effects file: its runs, their summed job time and the span from the first
    run's start to the last run's end (None for files without job times)."""
    from methods_tools.results import discover_effects, load_effects

    sweeps = {}
    for path in discover_effects():
        runs = load_effects(path)["runs"]
        jobs = [r["job_s"] for r in runs if r["job_s"] is not None]
        last = max(runs, key=lambda r: r["date"])
        span = (_parse_date(last["date"]) - _parse_date(min(r["date"] for r in runs))).total_seconds() + (
            last["job_s"] or 0.0
        )
        sweeps[path.name] = {
            "runs": len(runs),
            "seeds": len({r["seed"] for r in runs}),
            "job_seconds": round(sum(jobs), 1),
            "span_seconds": round(span, 1),
        }
    return sweeps


def run(
    quick: bool = False, *, seeds: int | None = None, log: Any = lambda line: print(line, file=sys.stderr)
) -> dict[str, Any]:
    """The slice, then the row and its details."""
    from methods_tools import compare, measure

    from algorithms.metadata import load_all_metadata

    records = load_all_metadata()
    seeds = seeds or (QUICK_SEEDS if quick else SEEDS)
    quick_sizes = {"epochs": 1, "max_batches": 1} if quick else {}
    options = measure.WORKLOADS["vision"].options(
        "vision", range(seeds), command="python benchmarks/effects_sweep.py", **quick_sizes
    )
    methods = {k: v for k, v in measure.domain_methods("vision", records).items() if k in SLICE}
    sliced = {k: records[k] for k in methods}
    with tempfile.TemporaryDirectory(prefix="effects-sweep-") as tmp:
        document = measure.run_measurement(options, Path(tmp) / "slice.json", records=sliced, progress=log)
    runs = [r for r in document["runs"] if r["status"] == "ok"]
    if len(runs) < len(document["runs"]):
        failed = next(r for r in document["runs"] if r["status"] != "ok")
        raise RuntimeError(f"effects_sweep: a run of the slice failed: {failed['method']}: {failed['reason']}")
    outside = [r["job_s"] - r["wall_s"] - r["eval_s"] for r in runs]
    job = statistics.median(r["job_s"] for r in runs)
    full = {}
    for workload, default_seeds in (("vision", 10), ("nlp", 5)):
        plan = measure.plan_jobs(
            measure.domain_methods(workload, records),
            tuple(range(default_seeds)),
            measure.method_workloads(workload, records),
        )
        full[workload] = {"seeds": default_seeds, "jobs": len(plan)}
    full["vision"]["estimated_seconds"] = round(full["vision"]["jobs"] * job, 1)
    env = compare.environment()
    return {
        "title": "Effects sweep: time a run spends outside training (process start, imports, data loading)",
        "rows": [
            {
                "what": f"outside training and evaluation, per run ({len(runs)} runs of the vision sweep)",
                "value": statistics.median(outside),
                "unit": "s",
                "spread": [min(outside), max(outside)],
                "target": OUTSIDE_TARGET_S,
                "compare": "<",
            }
        ],
        "details": {
            "median_job_s": round(job, 2),
            "median_training_s": round(statistics.median(r["wall_s"] for r in runs), 2),
            "median_evaluation_s": round(statistics.median(r["eval_s"] for r in runs), 2),
            "median_outside_s": round(statistics.median(outside), 2),
            "full_sweeps": full,
            "committed_sweeps": committed_sweeps(),
            "cpu_count": env["cpu_count"],
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, help=f"seeds of the slice (default {SEEDS})")
    parser.add_argument("--quick", action="store_true", help="one batch a run: checks the section runs")
    args = parser.parse_args(argv)
    print(json.dumps(run(args.quick, seeds=args.seeds), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
