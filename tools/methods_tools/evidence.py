"""Statistics a reader can act on: paired differences with a 95 % interval and a verdict.

A method's run and the baseline's run of the same seed share their initial weights and their
data order, so the effect is estimated from the per-seed differences (method minus baseline):

- quality (accuracy, or a language model's loss): the mean paired difference with a Student t
  interval at 95 % (:func:`paired_change`);
- speed and memory: the ratio of the method's median to the baseline's median, with a 95 %
  percentile bootstrap interval that resamples the seeds as pairs (:func:`ratio_of_medians`),
  since a ratio of medians has no closed-form interval and timings are skewed by load spikes.

A verdict says *better* or *worse* only when the whole interval lies on one side of no change;
otherwise *no detectable difference* (at this scale). Nothing here imports torch.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "BETTER",
    "CONFIDENCE",
    "NO_DIFFERENCE",
    "WORSE",
    "BOOTSTRAP_RESAMPLES",
    "activity_text",
    "check_effects_main",
    "document_problems",
    "mean_interval",
    "paired_change",
    "ratio_of_medians",
    "t_quantile",
    "verdict",
]

CONFIDENCE = 0.95
BETTER, WORSE, NO_DIFFERENCE = "better", "worse", "no detectable difference"
BOOTSTRAP_RESAMPLES = 4000
T_INTERVAL = "paired t, 95 %"
BOOTSTRAP_INTERVAL = "bootstrap over seed pairs, 95 %"


def activity_text(activity: Mapping[str, float] | None) -> str:
    """``batches mixed 10, modules replaced 3``: each counter a method recorded, with its value."""
    return ", ".join(f"{name.replace('_', ' ')} {value:g}" for name, value in (activity or {}).items())


def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile of Student's t distribution with ``df`` degrees of freedom (scipy's)."""
    from scipy.stats import t

    return float(t.ppf(p, df))


def verdict(low: float, high: float, *, null: float, higher_is_better: bool) -> str:
    """``better`` or ``worse`` when the interval ``[low, high]`` excludes ``null``; otherwise
    ``no detectable difference``."""
    if low > null:
        return BETTER if higher_is_better else WORSE
    if high < null:
        return WORSE if higher_is_better else BETTER
    return NO_DIFFERENCE


def mean_interval(values: Sequence[float]) -> tuple[float, float, float]:
    """``(mean, low, high)``: the mean of ``values`` with its 95 % Student t interval (the mean
    itself at both ends with a single value, where there is no spread to go by)."""
    mean = statistics.fmean(values)
    n = len(values)
    half = t_quantile(0.5 + CONFIDENCE / 2, n - 1) * statistics.stdev(values) / math.sqrt(n) if n > 1 else 0.0
    return mean, mean - half, mean + half


def paired_change(
    method: Sequence[float], baseline: Sequence[float], *, higher_is_better: bool
) -> dict[str, Any] | None:
    """Mean of ``method[i] - baseline[i]`` with a paired t interval and its verdict; None with
    fewer than two pairs (no interval can be given)."""
    if len(method) != len(baseline):
        raise ValueError(f"paired_change: {len(method)} method values against {len(baseline)} baseline values")
    if len(method) < 2:
        return None
    mean, low, high = mean_interval([m - b for m, b in zip(method, baseline, strict=True)])
    return {
        "change": mean,
        "low": low,
        "high": high,
        "pairs": len(method),
        "interval": T_INTERVAL,
        "verdict": verdict(low, high, null=0.0, higher_is_better=higher_is_better),
    }


def ratio_of_medians(
    method: Sequence[float], baseline: Sequence[float], *, higher_is_better: bool, seed: int = 0
) -> dict[str, Any] | None:
    """``median(method) / median(baseline)`` with a percentile bootstrap interval that resamples
    the (method, baseline) pairs together, and its verdict against 1; None with fewer than two
    pairs or a non-positive median."""
    if len(method) != len(baseline):
        raise ValueError(f"ratio_of_medians: {len(method)} method values against {len(baseline)} baseline values")
    n = len(method)
    if n < 2 or statistics.median(baseline) <= 0:
        return None
    ratio = statistics.median(method) / statistics.median(baseline)
    rng = random.Random(seed)  # a fixed stream: the same file gives the same interval
    samples = []
    for _ in range(BOOTSTRAP_RESAMPLES):
        picks = [rng.randrange(n) for _ in range(n)]
        denominator = statistics.median(baseline[i] for i in picks)
        if denominator > 0:
            samples.append(statistics.median(method[i] for i in picks) / denominator)
    samples.sort()
    alpha = (1 - CONFIDENCE) / 2
    low = samples[int(alpha * (len(samples) - 1))]
    high = samples[math.ceil((1 - alpha) * (len(samples) - 1))]
    return {
        "ratio": ratio,
        "low": low,
        "high": high,
        "pairs": n,
        "interval": BOOTSTRAP_INTERVAL,
        "verdict": verdict(low, high, null=1.0, higher_is_better=higher_is_better),
    }


# --------------------------------------------------------------------------------------------- checks


def _null_of(field: str) -> float:
    return 0.0 if field == "quality" else 1.0


def document_problems(document: dict[str, Any], where: str) -> list[str]:
    """What a reader would be misled by in a (schema-valid) effects document, one line each:
    an effect whose verdict its interval does not support, a method shown as an effect although
    none of its runs acted, a row that does not name the commands that measured it, or a
    throughput in another unit than the workload's (images per second, or tokens trained per
    second for text)."""
    problems = []
    settings = document["settings"]
    text = settings["seq_len"] is not None
    unit = "tokens" if text else "images"
    if settings["throughput_unit"] != unit:
        problems.append(
            f"{where}: /settings/throughput_unit: {settings['throughput_unit']!r} for a "
            f"{'text' if text else 'image'} workload — it counts {unit}; measure again"
        )
    for i, run in enumerate(document["runs"]):
        if run["status"] != "ok":
            continue
        trained = run["tokens"] if text else run["samples"]
        if trained is None or not math.isclose(run["throughput"], trained / run["wall_s"], rel_tol=1e-6):
            problems.append(
                f"{where}: /runs/{i}/throughput: not the {unit} trained per second of training "
                f"({trained} in {run['wall_s']} s) — measure again with tools/measure_methods.py"
            )
    for i, row in enumerate(document["summary"]):
        key = (row["method"], row["model"], row["precision"])
        runs = [r for r in document["runs"] if (r["method"], r["model"], r["precision"]) == key]
        commands = list(dict.fromkeys(r["command"] for r in runs if r["command"]))
        if not row["commands"] or row["commands"] != commands:
            problems.append(
                f"{where}: /summary/{i}/commands: {row['commands']} — not the commands of its runs "
                f"({commands}); regenerate the summary"
            )
        if row["status"] != "measured":
            continue
        if not any(r["acted"] for r in runs if r["status"] == "ok"):
            problems.append(
                f"{where}: /summary/{i}: {row['method']} is shown as an effect, but none of its runs "
                "recorded any activity — it did not act"
            )
        for field, higher in (("quality", settings["metric"] == "accuracy"), ("throughput", True), ("memory", False)):
            figure = row[field]
            if figure is None:
                continue
            expected = verdict(figure["low"], figure["high"], null=_null_of(field), higher_is_better=higher)
            if figure["verdict"] != expected:
                problems.append(
                    f"{where}: /summary/{i}/{field}/verdict: {figure['verdict']!r}, but its interval "
                    f"[{figure['low']:.4g}, {figure['high']:.4g}] says {expected!r}"
                )
    return problems


def check_effects_main(paths: Sequence[str] | None = None) -> int:
    """``tools/check_effects.py``: every committed effects file (or ``paths``) against its schema
    and :func:`document_problems`; one line per problem and exit status 1, else one summary line."""
    import sys
    from pathlib import Path

    from .results import ResultsError, discover_effects, load_effects

    files = [Path(p) for p in paths] if paths else discover_effects()
    problems = []
    for path in files:
        try:
            problems += document_problems(load_effects(path), str(path))
        except ResultsError as exc:
            problems.append(str(exc))
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 1
    print(f"effects: {len(files)} files, every effect with its interval and verdict, from runs that acted")
    return 0
