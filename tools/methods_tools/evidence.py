"""Statistics a reader can act on: paired differences with a 95 % interval and a verdict.

A method's run and the baseline's run of the same seed share their initial weights and their
data order, so the effect is estimated from the per-seed differences (method minus baseline):

- quality (accuracy, or a language model's loss): the mean paired difference with a Student t
  interval at 95 % and the two-sided p-value of the paired t-test of the same pairs
  (:func:`paired_change`);
- speed and memory: the ratio of the method's median to the baseline's median, with a 95 %
  percentile bootstrap interval that resamples the seeds as pairs (:func:`ratio_of_medians`),
  since a ratio of medians has no closed-form interval and timings are skewed by load spikes.

A verdict (:func:`verdict`; the words, once, in :data:`VERDICTS` and :data:`VERDICT_WORDS`) says
*better* or *worse* only when the whole interval lies on one side of no change **and** the point
estimate lies beyond the figure's margin of practical equivalence (:data:`MARGINS`). Otherwise
it says *no practical difference* when the estimate lies within the margin and the interval
either excludes no change (a difference too small to matter was detected) or lies within the
margin itself (equivalence shown); else *no detectable difference* (at this scale).

The quality verdicts of one effects file are about 30 tests side by side, so some would come out
better or worse by chance alone. :func:`holm` adjusts their p-values by Holm's step-down method
(Holm, 1979), which keeps the chance of any false verdict among them at 5 %; a verdict of better
or worse *holds* after the correction when its adjusted p-value is below 5 %
(:func:`holds_after_correction`). Nothing here imports torch.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "ALPHA",
    "BETTER",
    "BOOTSTRAP_RESAMPLES",
    "CONFIDENCE",
    "MARGINS",
    "MARGIN_REASONS",
    "NO_DIFFERENCE",
    "NO_PRACTICAL_DIFFERENCE",
    "VERDICTS",
    "VERDICT_WORDS",
    "WORSE",
    "activity_text",
    "check_effects_main",
    "document_problems",
    "holds_after_correction",
    "holm",
    "margin_of",
    "mean_interval",
    "paired_change",
    "paired_p_value",
    "ratio_of_medians",
    "t_quantile",
    "verdict",
]

CONFIDENCE = 0.95
ALPHA = 1 - CONFIDENCE  # two-sided: an interval at CONFIDENCE excludes no change exactly when p < ALPHA
BETTER, WORSE = "better", "worse"
NO_PRACTICAL_DIFFERENCE = "no practical difference"
NO_DIFFERENCE = "no detectable difference"
#: Every verdict a figure can carry, as the effects files store it (the schema's enum holds the same).
VERDICTS = (BETTER, WORSE, NO_PRACTICAL_DIFFERENCE, NO_DIFFERENCE)
#: What *better* and *worse* mean for each figure, in the words the pages show.
VERDICT_WORDS: Mapping[str, Mapping[str, str]] = {
    "quality": {BETTER: "better", WORSE: "worse"},
    "throughput": {BETTER: "faster", WORSE: "slower"},
    "memory": {BETTER: "less memory", WORSE: "more memory"},
}
BOOTSTRAP_RESAMPLES = 4000
T_INTERVAL = "paired t, 95 %"
BOOTSTRAP_INTERVAL = "bootstrap over seed pairs, 95 %"

#: The margin of practical equivalence of each figure: a change whose estimate lies within it is
#: no practical difference, however sure the interval is that it is not zero. Quality margins are
#: in the metric's own units (a change of accuracy as a fraction, of loss in nats); the ratios'
#: are relative (within ``1 - m`` to ``1 + m`` of the baseline's median). Why each is what it is:
#: :data:`MARGIN_REASONS`, which the measurements page renders beside them.
MARGINS: Mapping[str, float] = {"accuracy": 0.001, "loss": 0.01, "throughput": 0.02, "memory": 0.01}
MARGIN_REASONS: Mapping[str, str] = {
    "accuracy": (
        "one test image of the vision workload's 1,438 is 0.07 points, and the smallest changes in accuracy "
        "that the cards quote at scale are a tenth to a few tenths of a point, so the margin hides none of them"
    ),
    "loss": (
        "exp(0.01) = 1.01: a change of perplexity of 1 %; the changes in loss that the cards quote at scale "
        "(ALiBi's and Gated Linear Units' log-perplexities) are 0.03 to 0.04 nats"
    ),
    "throughput": (
        "under the smallest change of speed that the cards quote at scale (about 5 %), and under what a "
        "handful of timed runs on a shared machine can tell apart"
    ),
    "memory": (
        "on a CPU the figure is the peak resident set of the whole process, the interpreter and torch "
        "included, so a method's few megabytes of buffers move it by under 1 %; a change that small decides "
        "nothing about which model or batch fits"
    ),
}


def margin_of(field: str, metric: str) -> float:
    """The margin of practical equivalence of ``field`` (quality, throughput or memory) for a
    workload scored by ``metric`` (accuracy or loss)."""
    return MARGINS[metric if field == "quality" else field]


def activity_text(activity: Mapping[str, float] | None) -> str:
    """``batches mixed 10, modules replaced 3``: each counter a method recorded, with its value."""
    return ", ".join(f"{name.replace('_', ' ')} {value:g}" for name, value in (activity or {}).items())


def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile of Student's t distribution with ``df`` degrees of freedom (scipy's)."""
    from scipy.stats import t

    return float(t.ppf(p, df))


def verdict(low: float, high: float, estimate: float, *, null: float, margin: float, higher_is_better: bool) -> str:
    """The verdict of a figure whose estimate is ``estimate`` with the interval ``[low, high]``,
    against no change ``null`` and the margin of practical equivalence ``margin`` (both in the
    figure's units: a ratio's null is 1 and its margin relative to it).

    ``better`` or ``worse`` when the interval lies wholly on one side of ``null`` and the estimate
    lies on that side beyond the margin; ``no practical difference`` when the estimate lies within
    the margin and the interval excludes ``null`` or lies within the margin; otherwise ``no
    detectable difference``."""
    within = abs(estimate - null) <= margin
    if low > null and estimate > null + margin:
        return BETTER if higher_is_better else WORSE
    if high < null and estimate < null - margin:
        return WORSE if higher_is_better else BETTER
    if within and (low > null or high < null or (null - margin <= low and high <= null + margin)):
        return NO_PRACTICAL_DIFFERENCE
    return NO_DIFFERENCE


def mean_interval(values: Sequence[float]) -> tuple[float, float, float]:
    """``(mean, low, high)``: the mean of ``values`` with its 95 % Student t interval (the mean
    itself at both ends with a single value, where there is no spread to go by)."""
    mean = statistics.fmean(values)
    n = len(values)
    half = t_quantile(0.5 + CONFIDENCE / 2, n - 1) * statistics.stdev(values) / math.sqrt(n) if n > 1 else 0.0
    return mean, mean - half, mean + half


def paired_p_value(method: Sequence[float], baseline: Sequence[float]) -> float:
    """The two-sided p-value of the paired t-test of ``method`` against ``baseline`` (scipy's
    ``ttest_rel``), the test whose interval :func:`paired_change` gives. Differences without spread
    give 1 when they are all zero and 0 otherwise (the limits scipy reaches or leaves undefined)."""
    differences = [m - b for m, b in zip(method, baseline, strict=True)]
    if len(differences) < 2:
        raise ValueError(f"paired_p_value: {len(differences)} pair(s) — a paired t-test needs two")
    if statistics.pstdev(differences) == 0:
        return 1.0 if statistics.fmean(differences) == 0 else 0.0
    from scipy.stats import ttest_rel

    return float(ttest_rel(method, baseline).pvalue)


def paired_change(
    method: Sequence[float], baseline: Sequence[float], *, higher_is_better: bool, margin: float
) -> dict[str, Any] | None:
    """Mean of ``method[i] - baseline[i]`` with a paired t interval, the paired t-test's p-value and
    the verdict against the margin of practical equivalence ``margin``; None with fewer than two
    pairs (no interval can be given)."""
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
        "margin": margin,
        "p_value": paired_p_value(method, baseline),
        "verdict": verdict(low, high, mean, null=0.0, margin=margin, higher_is_better=higher_is_better),
    }


def ratio_of_medians(
    method: Sequence[float], baseline: Sequence[float], *, higher_is_better: bool, margin: float, seed: int = 0
) -> dict[str, Any] | None:
    """``median(method) / median(baseline)`` with a percentile bootstrap interval that resamples
    the (method, baseline) pairs together, and its verdict against 1 with the relative margin of
    practical equivalence ``margin``; None with fewer than two pairs or a non-positive median."""
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
        "margin": margin,
        "verdict": verdict(low, high, ratio, null=1.0, margin=margin, higher_is_better=higher_is_better),
    }


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's (1979) step-down adjusted p-values of a family of tests, in the order given.

    With the ``m`` p-values sorted ascending, the ``k``-th smallest (from 1) is multiplied by
    ``m - k + 1``, capped at 1, and raised to the largest adjusted value before it; a test is
    rejected at level alpha when its adjusted p-value is below alpha, which keeps the chance of
    any false rejection in the family at alpha, whatever the dependence between the tests."""
    m = len(p_values)
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(sorted(range(m), key=lambda i: p_values[i])):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def holds_after_correction(quality: Mapping[str, Any]) -> bool | None:
    """Whether a quality verdict of better or worse holds after Holm's correction over its file's
    methods (its adjusted p-value is below :data:`ALPHA`); None for any other verdict, which
    claims no difference to correct."""
    if quality["verdict"] not in (BETTER, WORSE):
        return None
    return quality["p_holm"] < ALPHA


# --------------------------------------------------------------------------------------------- checks


def _null_of(field: str) -> float:
    return 0.0 if field == "quality" else 1.0


RESUMMARIZE = "recompute the summary from its runs: python tools/measure_methods.py --resummarize"


def _t_test_p(quality: Mapping[str, Any]) -> float:
    """The paired t-test's p-value that a quality figure's own interval implies: the interval is
    the mean change plus or minus t(0.975, n - 1) standard errors, so it gives the t statistic."""
    df = quality["pairs"] - 1
    se = (quality["high"] - quality["low"]) / 2 / t_quantile(0.5 + CONFIDENCE / 2, df)
    if se == 0:
        return 1.0 if quality["change"] == 0 else 0.0
    from scipy.stats import t

    return float(2 * t.sf(abs(quality["change"]) / se, df))


def document_problems(document: dict[str, Any], where: str) -> list[str]:
    """What a reader would be misled by in a (schema-valid) effects document, one line each:
    an effect whose verdict its interval, estimate and margin do not support, a margin other than
    the one stated (:data:`MARGINS`), a p-value that is not the paired t-test of its interval, a
    Holm-adjusted p-value that is not Holm's over the file's methods, a method shown as an effect
    although none of its runs acted, a row that does not name the commands that measured it, or a
    throughput in another unit than the workload's (images per second, or tokens trained per
    second for text)."""
    problems = []
    settings = document["settings"]
    metric = settings["metric"]
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
        for field, higher in (("quality", metric == "accuracy"), ("throughput", True), ("memory", False)):
            figure = row[field]
            if figure is None:
                continue
            stated = margin_of(field, metric)
            if figure["margin"] != stated:
                problems.append(
                    f"{where}: /summary/{i}/{field}/margin: {figure['margin']!r}, not the margin of practical "
                    f"equivalence stated for it ({stated!r}) — {RESUMMARIZE} {where}"
                )
            estimate = figure["change"] if field == "quality" else figure["ratio"]
            expected = verdict(
                figure["low"],
                figure["high"],
                estimate,
                null=_null_of(field),
                margin=figure["margin"],
                higher_is_better=higher,
            )
            if figure["verdict"] != expected:
                problems.append(
                    f"{where}: /summary/{i}/{field}/verdict: {figure['verdict']!r}, but its interval "
                    f"[{figure['low']:.4g}, {figure['high']:.4g}], estimate {estimate:.4g} and margin "
                    f"{figure['margin']:g} say {expected!r}"
                )
        quality = row["quality"]
        implied = _t_test_p(quality)
        if not math.isclose(quality["p_value"], implied, rel_tol=1e-6, abs_tol=1e-12):
            problems.append(
                f"{where}: /summary/{i}/quality/p_value: {quality['p_value']:.6g}, but the paired t-test of its "
                f"interval gives {implied:.6g} — {RESUMMARIZE} {where}"
            )
    family = [(i, row["quality"]) for i, row in enumerate(document["summary"]) if row["quality"] is not None]
    adjusted = holm([q["p_value"] for _, q in family])
    for (i, quality), expected_p in zip(family, adjusted, strict=True):
        if quality["holm_family"] != len(family) or not math.isclose(
            quality["p_holm"], expected_p, rel_tol=1e-9, abs_tol=1e-12
        ):
            problems.append(
                f"{where}: /summary/{i}/quality: Holm-adjusted p-value {quality['p_holm']:.6g} over "
                f"{quality['holm_family']} methods, but Holm's correction over the file's {len(family)} gives "
                f"{expected_p:.6g} — {RESUMMARIZE} {where}"
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
    print(
        f"effects: {len(files)} files, every effect with its interval, its margin and a verdict they support, "
        "Holm's correction over each file's methods, from runs that acted"
    )
    return 0
