"""The "Example Effects" of every method card and the overview's charts of them, from the committed
measurements (``results/effects/*.json``, schema version 3, written by ``tools/measure_methods.py``).

Every figure is shown as evidence: the change or ratio with its 95 % interval and its verdict
(better, worse, or no detectable difference, which reads so first, never as a bare number), the
number of seed pairs and which interval. A row without an effect (the method did not act, does not
apply here, or failed) shows its reason, never a number.

- ``tables/effects/<key>.md.inc`` (``effects_snippet.md.inc.j2``), for every method (not best
  practices, whose measured rows come from the training comparison), which its card pulls in
  with ``{include}``: per effects file that has a row of it, one line naming the workload, the
  hardware, the date and the file, linked to "How the cards' evidence is measured" (the workload's
  settings, the seeds and the caveats: :mod:`.measurements_page`), then the row (its evidence or
  its reason, the command that measured it) and the figure at scale its metadata quotes
  (``at_scale``); else that it is not measured yet.
- ``tables/effects/<stem>.svg``: per effects file with a measured row, a forest plot: one row per
  measured method, sorted by its change in quality, with two panels sharing the method axis: the
  change in quality with its interval (a zero line) and the throughput ratio on a log axis with
  its interval (a 1x line); the methods without an effect are listed under it, not plotted. Drawn
  like the training charts (matplotlib, text kept as text, reused while a hash of its inputs is
  unchanged); the overview shows it above a sortable table of the same figures
  (:func:`overview_effects`), and the landing page shows it too.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import inspect
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .docsgen import SVG_STYLE, Content, Site, pyplot, reuse_or_draw, svg_text, text_measure, wrap_text
from .evidence import (
    MARGIN_REASONS,
    MARGINS,
    NO_DIFFERENCE,
    NO_PRACTICAL_DIFFERENCE,
    VERDICT_WORDS,
    activity_text,
    holds_after_correction,
)
from .markup import literal
from .training_pages import ChartError

__all__ = [
    "EFFECTS",
    "BaselineView",
    "EffectRow",
    "EffectsFile",
    "at_scale_of",
    "margin_rows",
    "margins_text",
    "effects_file",
    "effects_views",
    "overview_effects",
    "render_effects",
]

EFFECTS = Path("tables") / "effects"
BASELINE = "baseline"
MINUS = "\u2212"  # the typographic minus sign (the sortable table reads it as "-")

#: How a row without an effect is named, by its status.
STATUS_LABELS = {
    "measured": "measured",
    "did_not_act": "did not act",
    "not_applicable": "not applicable here",
    "failed": "failed",
}
#: The smallest image side (px) at which a method that makes images smaller is judged: CIFAR-10's
#: 32 px, the smallest images any of their sources trains on (Composer's ColOut and Progressive
#: Resizing cards: ResNet-56 on CIFAR-10, ResNet-50 on ImageNet). On a workload of smaller images
#: such a method's row is "not applicable at N px", with the reason, never an effect.
SMALLEST_RESIZED_SIDE = 32
#: The methods whose speed is a GPU's, each with the words of its metadata's ``use`` that say so
#: (a test holds each entry to the metadata, so rewording ``use`` cannot leave a stale entry). On a
#: CPU their throughput is "not measurable on this hardware", never shown as their cost.
GPU_SPEED: Mapping[str, str] = {
    "channels_last": "on GPUs with Tensor Cores",
    "low_precision_groupnorm": "on GPUs where autocast runs group_norm in float32",
    "low_precision_layernorm": "on GPUs where autocast runs layer_norm in float32",
}
NOT_MEASURABLE = "not measurable on this hardware"
# Beyond this many decimals an end that still rounds to no change is shown as it rounds: no
# measured figure here comes that close to it.
MOST_DECIMALS = 8
#: What a memory ratio compares: the peak of the tensors by torch's accounting where the runs
#: measured it, else the peak of the process (its resident set on a CPU), or of the GPU's allocator.
TENSOR_MEMORY_LABEL = "Peak tensor memory (torch's accounting)"
PROCESS_MEMORY_LABEL = "Peak memory of the process (resident set)"
GPU_MEMORY_LABEL = "Peak GPU memory allocated"
#: The parts of a tensor-memory split, as a page names them.
TENSOR_PARTS = (
    ("weights_bytes", "weights"),
    ("gradients_bytes", "gradients"),
    ("optimizer_bytes", "optimizer state"),
    ("activations_bytes", "activations"),
)


# --------------------------------------------------------------------------------------------- numbers


def _signed(value: float, decimals: int) -> str:
    """``+1.2`` / ``−0.4`` (a typographic minus), ``0.0`` for zero."""
    text = f"{value:+.{decimals}f}"
    if float(text) == 0:
        return f"{0:.{decimals}f}"
    return text.replace("-", MINUS)


def _plain(value: float, decimals: int) -> str:
    return f"{value:.{decimals}f}".replace("-", MINUS)


def _decimals(low: float, high: float, minimum: int, maximum: int) -> int:
    """Enough decimals (``minimum`` to ``maximum``) that an interval spans at least five steps of
    the last one shown, so that its ends differ and its width reads."""
    decimals = minimum
    while decimals < maximum and abs(high - low) * 10**decimals < 5:
        decimals += 1
    return decimals


def _showing_sign(values: Sequence[float], null: float, decimals: int) -> int:
    """``decimals``, or more (up to :data:`MOST_DECIMALS`) until every value of ``values`` that is
    not ``null`` reads as not ``null``: an interval's end that decided a verdict never shows as
    "0.0" or "1.00x", and every end shows on which side of no change it lies."""
    while decimals < MOST_DECIMALS and any(v != null and float(f"{v:.{decimals}f}") == null for v in values):
        decimals += 1
    return decimals


def quality_unit(metric: str) -> tuple[float, str, int]:
    """How a change in ``metric`` is shown: its scale, its unit and the fewest decimals."""
    return (100.0, "points", 1) if metric == "accuracy" else (1.0, "nats", 2)


def margin_text(field: str, figure: Mapping[str, Any]) -> str:
    """``±0.1 points``, ``±0.01 nats``, ``±1 %``: the margin of practical equivalence ``figure``'s
    verdict used, in the unit the figure is shown in."""
    if field == "quality":
        scale, unit, _ = quality_unit(figure["metric"])
        return f"\u00b1{figure['margin'] * scale:g} {unit}"
    return f"\u00b1{figure['margin'] * 100:g} %"


def margin_rows() -> list[tuple[str, str, str]]:
    """``(figure, margin, why)`` for every margin of practical equivalence, as the measurements page
    states them (:data:`.evidence.MARGINS` and :data:`.evidence.MARGIN_REASONS`)."""
    figures = {
        "accuracy": ("Change in test accuracy", "quality", {"metric": "accuracy"}),
        "loss": ("Change in a language model's validation loss", "quality", {"metric": "loss"}),
        "throughput": ("Throughput, ratio", "throughput", {}),
        "memory": ("Peak memory, ratio", "memory", {}),
    }
    return [
        (label, margin_text(field, {**extra, "margin": MARGINS[key]}), MARGIN_REASONS[key])
        for key, (label, field, extra) in figures.items()
    ]


def margins_text() -> str:
    """Every margin of practical equivalence (:data:`.evidence.MARGINS`) as the pages state them:
    ``±0.1 points of accuracy, ±0.01 nats of loss, ±2 % of throughput and ±1 % of memory``."""
    accuracy, loss = ({"metric": m, "margin": MARGINS[m]} for m in ("accuracy", "loss"))
    return (
        f"{margin_text('quality', accuracy)} of accuracy, {margin_text('quality', loss)} of loss, "
        f"{margin_text('throughput', {'margin': MARGINS['throughput']})} of throughput and "
        f"{margin_text('memory', {'margin': MARGINS['memory']})} of memory"
    )


def holm_text(quality: Mapping[str, Any]) -> str:
    """``holds after Holm's correction over 22 methods`` (or ``does not hold ...``) for a verdict
    of better or worse; "" for any other, which claims no difference."""
    holds = holds_after_correction(quality)
    if holds is None:
        return ""
    return f"{'holds' if holds else 'does not hold'} after Holm's correction over {_methods(quality['holm_family'])}"


def quality_text(quality: Mapping[str, Any]) -> str:
    """``+1.2 points (+0.4 to +2.0): better; holds after Holm's correction over 22 methods``,
    ``+0.05 points (+0.01 to +0.09): no practical difference (within ±0.1 points)``, or ``no
    detectable difference (−0.6 to +0.9 points)``."""
    scale, unit, minimum = quality_unit(quality["metric"])
    low, high, change = (quality[k] * scale for k in ("low", "high", "change"))
    shown = (low, high) if quality["verdict"] == NO_DIFFERENCE else (low, high, change)
    decimals = _showing_sign(shown, 0.0, _decimals(low, high, minimum, 4))
    interval = f"{_signed(low, decimals)} to {_signed(high, decimals)}"
    if quality["verdict"] == NO_DIFFERENCE:
        return f"{NO_DIFFERENCE} ({interval} {unit})"
    figure = f"{_signed(change, decimals)} {unit} ({interval})"
    if quality["verdict"] == NO_PRACTICAL_DIFFERENCE:
        return f"{figure}: {NO_PRACTICAL_DIFFERENCE} (within {margin_text('quality', quality)})"
    return f"{figure}: {VERDICT_WORDS['quality'][quality['verdict']]}; {holm_text(quality)}"


def ratio_text(ratio: Mapping[str, Any] | None, what: str) -> str:
    """``0.87x (0.83–0.93): slower``, ``1.004x (1.002–1.006): no practical difference (within
    ±1 %)``, or ``no detectable difference (0.90–1.10x)``; ``not measured``."""
    if ratio is None:
        return "not measured"
    shown = (ratio["low"], ratio["high"]) + (() if ratio["verdict"] == NO_DIFFERENCE else (ratio["ratio"],))
    decimals = _showing_sign(shown, 1.0, _decimals(ratio["low"], ratio["high"], 2, 3))
    interval = f"{ratio['low']:.{decimals}f}\u2013{ratio['high']:.{decimals}f}"
    if ratio["verdict"] == NO_DIFFERENCE:
        return f"{NO_DIFFERENCE} ({interval}x)"
    figure = f"{ratio['ratio']:.{decimals}f}x ({interval})"
    if ratio["verdict"] == NO_PRACTICAL_DIFFERENCE:
        return f"{figure}: {NO_PRACTICAL_DIFFERENCE} (within {margin_text(what, ratio)})"
    return f"{figure}: {VERDICT_WORDS[what][ratio['verdict']]}"


def _methods(count: int) -> str:
    """``1 method``, ``22 methods``."""
    return f"{count} method{'s' if count != 1 else ''}"


def _p(value: float) -> str:
    """``= 0.046``, ``< 0.001``: a p-value as the pages show it."""
    return "< 0.001" if value < 0.001 else f"= {value:.3f}"


def _count(value: float) -> str:
    """``2,076``: a throughput, to the unit."""
    return f"{value:,.0f}"


def mib_text(value: float) -> str:
    """``54.1 MiB``, ``1.04 MiB``, ``0.008 MiB``: bytes in MiB, to three significant figures."""
    mib = value / 2**20
    decimals = 1 if mib >= 10 else 2 if mib >= 0.1 else 3
    return f"{mib:,.{decimals}f} MiB"


def tensor_memory_text(figures: Mapping[str, Any] | None) -> str | None:
    """``peak 54.1 MiB: weights 1.05 MiB, gradients 1.04 MiB, optimizer state 1.04 MiB, activations
    47.9 MiB`` (a part the run could not tell apart is left out); None without figures."""
    if figures is None:
        return None
    parts = ", ".join(f"{name} {mib_text(figures[key])}" for key, name in TENSOR_PARTS if figures[key] is not None)
    return f"peak {mib_text(figures['peak_bytes'])}" + (f": {parts}" if parts else "")


# --------------------------------------------------------------------------------------------- view


@dataclass(frozen=True)
class BaselineView:
    """A baseline row: its own quality with its t interval, its throughput with its range."""

    model: str | None
    precision: str | None
    seeds: int
    quality: str  # "27.2 % test accuracy (95 % t interval ...)"
    throughput: str  # "median 2,076 images/s (range 1,655–2,497 over 2 seeds)"
    commands: tuple[str, ...]
    tensor_memory: str | None = None  # its tensor memory and split (medians over seeds), where measured


@dataclass(frozen=True)
class EffectRow:
    """One summary entry of a method (on one model and precision), formatted; ``number`` keeps it raw."""

    key: str
    name: str
    model: str | None  # the reference model when not the workload's
    precision: str | None  # the precision when not the workload's
    status: str  # measured | did_not_act | not_applicable | failed
    reason: str | None
    commands: tuple[str, ...]  # the command lines that measured this row
    hparams: Mapping[str, Any]
    activity: str  # the mean per run of each counter it recorded, in words ("" when none)
    pairs: int  # the seed pairs behind its intervals (0 without an effect)
    quality: str | None  # None without an effect
    throughput: str | None
    memory: str | None
    memory_label: str  # what its memory ratio compares: tensor memory where measured, else the process's peak
    tensor_memory: str | None  # its tensor memory and split (medians over its seed pairs), where measured
    quality_interval: str | None  # "paired t, 95 %"
    ratio_interval: str | None  # "bootstrap over seed pairs, 95 %"
    at_scale: Mapping[str, Any] | None  # the method's metadata "at_scale", when it quotes one
    number: Mapping[str, Any]  # the summary entry
    # what its status reads as where the pages know more than the file ("not applicable at 8 px")
    status_text: str | None = None
    # False where its speed is a GPU's and the file ran on a CPU: its throughput is not its cost
    speed_measurable: bool = True

    @property
    def measured(self) -> bool:
        return self.status == "measured"

    @property
    def status_label(self) -> str:
        return self.status_text or STATUS_LABELS[self.status]

    @property
    def test(self) -> str | None:
        """``p = 0.046; Holm-adjusted over 22 methods, p = 0.644``: the paired t-test of its change
        in quality, before and after Holm's correction; None without an effect."""
        if not self.measured:
            return None
        quality = self.number["quality"]
        return (
            f"p {_p(quality['p_value'])}; Holm-adjusted over {_methods(quality['holm_family'])}, "
            f"p {_p(quality['p_holm'])}"
        )

    @property
    def variant(self) -> str:
        """``resnet20_gn, amp_bf16``: what it ran as when not the workload's own ("" when it is)."""
        return ", ".join(v for v in (self.model, self.precision) if v is not None)

    @property
    def label(self) -> str:
        """Its name, with the model and precision it was measured in when not the workload's."""
        return f"{self.name} ({self.variant})" if self.variant else self.name


@dataclass(frozen=True)
class EffectsFile:
    """One effects file as the cards and the overview show it."""

    file: str  # results/effects/<name>.json
    hardware: str
    device_type: str  # cpu | cuda
    device_count: int
    date: str  # YYYY-MM-DD
    torch: str
    python: str
    settings: Mapping[str, Any]
    seeds: tuple[int, ...]
    max_load: float | None  # the highest 1-minute load average of its runs when above the core count
    cpu_count: int
    memory_label: str  # what a memory ratio of the process's peaks compares (a row measured without tensor memory)
    rows: tuple[EffectRow, ...]  # every method row, in display-name order
    baselines: Mapping[tuple[str | None, str | None], BaselineView]  # by (model, precision)
    chart: str | None  # the chart's path in the docs source; None when no row was measured
    model_name: str = ""  # the workload model's name in its family's metadata ("" when no family lists it)
    model_card: str | None = None  # that family's key: its card is model_cards/<key>.md

    @property
    def is_loss(self) -> bool:
        """Whether quality is a language model's validation loss (lower is better), not accuracy."""
        return self.settings["metric"] == "loss"

    @property
    def unit(self) -> str:
        """``images/s`` or ``tokens/s``: what its throughput counts."""
        return f"{self.settings['throughput_unit']}/s"

    @property
    def workload_label(self) -> str:
        """``Vision`` / ``Text``: its workload, by what it trains on."""
        return "Text" if self.settings["seq_len"] is not None else "Vision"

    @property
    def shape(self) -> str:
        """``8 px images`` or ``windows of 128 tokens``."""
        if self.settings["seq_len"] is not None:
            return f"windows of {self.settings['seq_len']} tokens"
        return f"{self.settings['image_size']} px images"

    @property
    def title(self) -> str:
        settings = self.settings
        return f"{self.workload_label}: {settings['model']} on {settings['data']}, {self.hardware}, {self.date}"

    @property
    def device(self) -> str:
        """``a CPU`` / ``a GPU`` / ``4 GPUs``."""
        if self.device_type == "cpu":
            return "a CPU"
        return "a GPU" if self.device_count == 1 else f"{self.device_count} GPUs"

    @property
    def quality_label(self) -> str:
        return "Validation loss (lower is better), change" if self.is_loss else "Test accuracy, change"

    @property
    def memory_basis(self) -> str:
        """What the measured rows' memory ratios compare, in one sentence, where some of them
        compare tensor memory ("" where none does: each row's label names the process's peak)."""
        labels = {r.memory_label for r in self.measured}
        if TENSOR_MEMORY_LABEL not in labels:
            return ""
        if labels == {TENSOR_MEMORY_LABEL}:
            return (
                "Memory is the peak tensor memory, by torch's own accounting, measured over a few "
                "batches apart from the timed run."
            )
        return (
            "Memory is the peak tensor memory, by torch's own accounting, where the runs measured it; "
            f"the other rows compare the {_lower_first(self.memory_label)}, as their cards say."
        )

    @property
    def measured(self) -> tuple[EffectRow, ...]:
        return tuple(r for r in self.rows if r.measured)

    @property
    def unmeasured(self) -> tuple[EffectRow, ...]:
        return tuple(r for r in self.rows if not r.measured)

    @property
    def chart_rows(self) -> tuple[EffectRow, ...]:
        """The measured rows as the chart plots them: the best change in quality first."""
        sign = -1.0 if self.is_loss else 1.0
        return tuple(sorted(self.measured, key=lambda r: (-sign * r.number["quality"]["change"], r.label)))

    @property
    def holm_family(self) -> int:
        """How many methods its quality changes were corrected over (Holm's correction): the file's
        measured rows, those shown as not applicable at its resolution included."""
        families = {r.number["quality"]["holm_family"] for r in self.measured}
        return max(families) if families else 0

    @property
    def holm_unshown(self) -> int:
        """How many of the corrected changes the pages do not show as effects (not applicable at
        the file's resolution)."""
        return self.holm_family - len(self.measured) if self.measured else 0

    @property
    def speed_rows(self) -> tuple[EffectRow, ...]:
        """The measured rows whose throughput is a cost on this hardware (the chart's speed panel)."""
        return tuple(r for r in self.chart_rows if r.speed_measurable)

    @property
    def gpu_speed_rows(self) -> tuple[EffectRow, ...]:
        """The measured rows whose speed is a GPU's, measured here on a CPU: no throughput shown."""
        return tuple(r for r in self.chart_rows if not r.speed_measurable)

    @property
    def holm_holds(self) -> tuple[EffectRow, ...]:
        """Its rows whose quality verdict of better or worse holds after Holm's correction."""
        return tuple(r for r in self.chart_rows if holds_after_correction(r.number["quality"]) is True)

    @property
    def holm_fails(self) -> tuple[EffectRow, ...]:
        """Its rows whose quality verdict of better or worse does not hold after Holm's correction."""
        return tuple(r for r in self.chart_rows if holds_after_correction(r.number["quality"]) is False)

    @property
    def commands(self) -> tuple[str, ...]:
        """Every command that measured a row of it, once, in the order the rows name them."""
        return tuple(dict.fromkeys(c for r in (*self.baselines.values(), *self.rows) for c in r.commands))

    def rows_of(self, key: str) -> tuple[EffectRow, ...]:
        return tuple(r for r in self.rows if r.key == key)

    def baseline_of(self, row: EffectRow) -> BaselineView | None:
        """The baseline ``row`` is compared with: of the model and precision it was measured in."""
        return self.baselines.get((row.model, row.precision))

    @property
    def chart_caption(self) -> str:
        """What the chart shows, in one sentence (its figure caption)."""
        quality = "validation loss (lower is better)" if self.is_loss else "test accuracy"
        return (
            f"{self.workload_label} workload ({self.settings['model']} on {self.settings['data']}, {self.shape}), "
            f"measured at small scale on {self.device}: each measured method's change in {quality} against "
            f"the baseline of the same seeds and its throughput ratio ({self.unit}, log scale), both with "
            "their 95 % intervals; methods without an effect are listed under the chart, not plotted."
        )

    @property
    def chart_summary(self) -> str:
        """What the chart found, in one or two sentences: which methods changed quality and
        throughput (better or worse, beyond their 95 % intervals), by name."""
        rows = self.chart_rows
        moved = "validation loss" if self.is_loss else "test accuracy"
        up, down = ("lowered", "raised") if self.is_loss else ("raised", "lowered")
        quality, speed = [], []
        for verdict, phrase, word in (("better", f"{up} the {moved}", "faster"), ("worse", f"{down} it", "slower")):
            changed = [r.label for r in rows if r.number["quality"]["verdict"] == verdict]
            if changed:
                quality.append(f"{_names(changed)} {phrase}")
            ratios = [
                f"{r.label} ({r.number['throughput']['ratio']:.2f}x)"
                for r in self.speed_rows
                if r.number["throughput"]["verdict"] == verdict
            ]
            if ratios:
                speed.append(f"{_names(ratios)} ran {word}")
        claimed = len(self.holm_holds) + len(self.holm_fails)
        corrected = (
            f" After Holm's correction over {_methods(self.holm_family)}, {len(self.holm_holds)} of these "
            f"{claimed} changes in {moved} hold"
            + (f" ({_names([r.label for r in self.holm_holds])})." if self.holm_holds else ".")
            if claimed
            else ""
        )
        gpu = [r.label for r in self.gpu_speed_rows]
        unmeasurable = (
            f" The speed of {_names(gpu)} is a GPU's, {NOT_MEASURABLE}." if gpu and self.device_type == "cpu" else ""
        )
        return (
            f"{self.workload_label} workload, {self.settings['model']} on {self.settings['data']}: of "
            f"{len(rows)} methods measured, {'; '.join(quality) or f'none changed the {moved} detectably'}; "
            f"{', '.join(speed) or 'none changed the throughput detectably'}.{unmeasurable}{corrected}"
        )

    @property
    def chart_alt(self) -> str:
        """What the chart shows, in words, with every row's figures."""
        points = "; ".join(f"{r.label}: quality {r.quality}, throughput {r.throughput}" for r in self.chart_rows)
        others = "; ".join(f"{r.label}: {r.status_label}" for r in self.unmeasured)
        return (
            f"Forest plot of {len(self.measured)} methods measured on {self.hardware}, {self.date}, with 95 % "
            f"intervals: {points}." + (f" Not plotted: {others}." if others else "")
        )


def _lower_first(text: str) -> str:
    """``Peak GPU memory`` as ``peak GPU memory``: inside a sentence."""
    return text[:1].lower() + text[1:]


def _names(names: Sequence[str]) -> str:
    """``A``, ``A and B``, ``A, B and C``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _baseline_quality(metric: str, value: float, low: float, high: float, chance: float | None) -> str:
    """``27.2 % test accuracy (95 % t interval 20.1 to 34.3 %; chance 10 %)``, or the validation loss."""
    if metric == "accuracy":
        odds = f"; chance {100 * chance:.0f} %" if chance is not None else ""
        return (
            f"{_plain(100 * value, 1)} % test accuracy (95 % t interval {_plain(100 * low, 1)} to "
            f"{_plain(100 * high, 1)} %{odds})"
        )
    return f"validation loss {_plain(value, 3)} nats (95 % t interval {_plain(low, 3)} to {_plain(high, 3)})"


def _baseline(entry: Mapping[str, Any], settings: Mapping[str, Any]) -> BaselineView:
    b = entry["baseline"]
    seeds = len(entry["seeds"])
    unit = f"{settings['throughput_unit']}/s"
    return BaselineView(
        model=entry["model"],
        precision=entry["precision"],
        seeds=seeds,
        quality=_baseline_quality(b["metric"], b["mean"], b["low"], b["high"], settings["chance_accuracy"]),
        throughput=(
            f"median {_count(b['throughput_median'])} {unit} (range {_count(b['throughput_min'])}\u2013"
            f"{_count(b['throughput_max'])} over {seeds} seed{'s' if seeds != 1 else ''})"
        ),
        commands=tuple(entry["commands"]),
        tensor_memory=tensor_memory_text(entry.get("tensor_memory")),
    )


def at_scale_of(record: Any) -> dict[str, Any] | None:
    """The figure at scale a method's metadata quotes (``at_scale``: figure, setting, source,
    hardware and url, each required by the schema); None when it quotes none."""
    return dict(record.at_scale) if record.at_scale else None


def not_applicable_at(record: Any, settings: Mapping[str, Any]) -> str | None:
    """Why ``record`` does not apply at the image size of ``settings``, or None where it does: a
    vision method that makes images smaller (its metadata's ``observable`` has ``smaller_inputs``)
    on images smaller than :data:`SMALLEST_RESIZED_SIDE`."""
    side = settings.get("image_size")
    if side is None or side >= SMALLEST_RESIZED_SIDE:
        return None
    if "smaller_inputs" not in record.observable or "vision" not in record.domains:
        return None
    return (
        f"{record.name} makes the images smaller, and its sources train on images of {SMALLEST_RESIZED_SIDE} px "
        f"(CIFAR-10) and larger, not {side} px"
    )


def gpu_speed(record: Any) -> str | None:
    """The words of ``record``'s ``use`` that say its speed is a GPU's (:data:`GPU_SPEED`), or None."""
    words = GPU_SPEED.get(record.key)
    return words if words is not None and words in " ".join(record.use.split()) else None


def _row(
    entry: Mapping[str, Any], record: Any, process_label: str, settings: Mapping[str, Any], device_type: str
) -> EffectRow:
    inapplicable = not_applicable_at(record, settings) if entry["status"] == "measured" else None
    if inapplicable is not None:
        # the runs stay in the file; the pages show why they are no effect
        entry = {**entry, "status": "not_applicable", "reason": inapplicable}
    measured = entry["status"] == "measured"
    gpu_words = gpu_speed(record) if device_type == "cpu" else None
    quality, throughput, memory = entry["quality"], entry["throughput"], entry["memory"]
    tensor = entry.get("tensor_memory")  # absent in files measured before tensor memory was
    return EffectRow(
        key=entry["method"],
        name=record.name,
        model=entry["model"],
        precision=entry["precision"],
        status=entry["status"],
        reason=entry["reason"],
        commands=tuple(entry["commands"]),
        hparams=entry["hparams"],
        activity=activity_text(entry["activity"]),
        pairs=quality["pairs"] if measured else 0,
        quality=quality_text(quality) if measured else None,
        throughput=(
            (
                ratio_text(throughput, "throughput")
                if gpu_words is None
                else f"{NOT_MEASURABLE} (it is for use {gpu_words})"
            )
            if measured
            else None
        ),
        memory=ratio_text(memory, "memory") if measured else None,
        memory_label=TENSOR_MEMORY_LABEL if tensor is not None else process_label,
        tensor_memory=tensor_memory_text(tensor),
        quality_interval=quality["interval"] if measured else None,
        ratio_interval=throughput["interval"] if measured else None,
        at_scale=at_scale_of(record),
        number=entry,
        status_text=f"not applicable at {settings['image_size']} px" if inapplicable else None,
        speed_measurable=gpu_words is None,
    )


def model_member(builder: str) -> tuple[str, str | None]:
    """The name of the reference model ``builder`` in its family's metadata and the family's key
    (whose card is ``model_cards/<key>.md``); ``("", None)`` for a model no family lists."""
    from algorithms.metadata import load_all_model_families

    for key, family in load_all_model_families().items():
        for member in family.raw["members"]:
            if member["builder"] == builder:
                return member["name"], key
    return "", None


def effects_file(path: Path, document: Mapping[str, Any], records: Mapping[str, Any]) -> EffectsFile:
    """The view of one validated effects document; ``records`` maps method keys to their metadata
    records (in display order; a key it lacks, a method since removed, is left out)."""
    env, settings = document["environment"], document["settings"]
    order = {key: i for i, key in enumerate(records)}
    entries = sorted(
        (e for e in document["summary"] if e["method"] != BASELINE and e["method"] in records),
        key=lambda e: (order[e["method"]], e["model"] or "", e["precision"] or ""),
    )
    kinds = {r["memory_kind"] for r in document["runs"] if r["memory_kind"]}
    process_label = GPU_MEMORY_LABEL if kinds == {"cuda_max_allocated"} else PROCESS_MEMORY_LABEL
    rows = tuple(_row(e, records[e["method"]], process_label, settings, env["device_type"]) for e in entries)
    baselines = {
        (e["model"], e["precision"]): _baseline(e, settings) for e in document["summary"] if e["status"] == "baseline"
    }
    loads = [r["load_average"][0] for r in document["runs"] if r["load_average"]]
    model_name, model_card = model_member(settings["model"])
    return EffectsFile(
        file=f"results/effects/{path.name}",
        hardware=env["hardware"],
        device_type=env["device_type"],
        device_count=env["device_count"],
        date=env["date"][:10],
        torch=env["torch"],
        python=env["python"],
        settings=settings,
        seeds=tuple(sorted({r["seed"] for r in document["runs"]})),
        max_load=max(loads) if loads and max(loads) > env["cpu_count"] else None,
        cpu_count=env["cpu_count"],
        memory_label=process_label,
        rows=rows,
        baselines=baselines,
        chart=(EFFECTS / f"{path.stem}.svg").as_posix() if any(r.measured for r in rows) else None,
        model_name=model_name,
        model_card=model_card,
    )


def measures_recipes(document: Mapping[str, Any]) -> bool:
    """Whether an effects file measures recipes (its rows are recipes, not methods: the recipes
    page shows them, the methods' effects pages do not)."""
    from .measure import WORKLOADS

    return bool(getattr(WORKLOADS.get(document["settings"]["workload"]), "recipes", None))


def effects_files(methods: Sequence[Any], effects: Sequence[tuple[Path, Mapping[str, Any]]]) -> list[EffectsFile]:
    """Every effects file of ``effects`` as the pages show it, its rows named by ``methods``; not
    the files that measure recipes (:func:`measures_recipes`)."""
    records = {r.key: r for r in methods if r.kind == "method"}
    return [effects_file(path, document, records) for path, document in effects if not measures_recipes(document)]


def _files(site: Site) -> list[EffectsFile]:
    """The site's effects files; a workload model's card linked only where the site has it."""
    return [
        f
        if f.model_card is None or (site.source_dir / "model_cards" / f"{f.model_card}.md").is_file()
        else dataclasses.replace(f, model_card=None)
        for f in effects_files(site.methods, site.effects)
    ]


# --------------------------------------------------------------------------------------------- chart


def _chart_key(view: EffectsFile) -> str:
    """The hash of everything a chart is drawn from."""
    try:
        version = importlib.metadata.version("matplotlib")
    except importlib.metadata.PackageNotFoundError:
        version = None
    rows = [(r.label, r.status, dict(r.number)) for r in view.rows]
    inputs = {
        "rows": rows,
        "title": view.title,
        "settings": dict(view.settings),
        "matplotlib": version,
        "code": _DRAWING_CODE,
    }
    return "sha256:" + hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


def _chart(view: EffectsFile, previous: Path) -> str:
    """The chart of ``view``: ``previous`` (the last build's) when drawn from the same inputs."""
    key = _chart_key(view)
    return reuse_or_draw(previous, key, lambda: _draw_or_fail(view, key))


def _draw_or_fail(view: EffectsFile, key: str) -> str:
    try:
        return _draw_chart(view, key)
    except ChartError:
        raise
    except Exception as exc:
        raise ChartError(f"{view.file}: the effects chart cannot be drawn: {type(exc).__name__}: {exc}") from None


# Ticks a log axis of ratios may get: those within its limits, spread out from 1x.
_RATIO_TICKS = (
    0.01,
    0.02,
    0.05,
    0.1,
    0.2,
    0.3,
    0.5,
    0.7,
    0.8,
    0.9,
    1.0,
    1.1,
    1.25,
    1.5,
    2.0,
    3.0,
    5.0,
    10.0,
    20.0,
    50.0,
    100.0,
)
# by verdict: filled where the verdict says how large the change is, hollow where nothing was detected
_COLOURS = {"better": "#1a7f37", "worse": "#c0392b", NO_PRACTICAL_DIFFERENCE: "#57606a", NO_DIFFERENCE: "#57606a"}
_MARKERS = {"better": "o", "worse": "s", NO_PRACTICAL_DIFFERENCE: "D", NO_DIFFERENCE: "o"}
_LEGEND = ("better", "worse", NO_PRACTICAL_DIFFERENCE, NO_DIFFERENCE)  # the order of the legend's entries


def _ratio_ticks(low: float, high: float, most: int = 4) -> list[float]:
    """Ticks for a log axis from ``low`` to ``high``: 1x, then outwards the candidates at least a
    ``most``-th of the axis (in log) from the last one taken, so that their labels never touch."""
    step = (math.log(high) - math.log(low)) / most
    ticks = [1.0]
    for side in (
        sorted((t for t in _RATIO_TICKS if low <= t < 1.0), reverse=True),
        sorted(t for t in _RATIO_TICKS if 1.0 < t <= high),
    ):
        last = 1.0
        for tick in side:
            if abs(math.log(tick) - math.log(last)) >= step:
                ticks.append(tick)
                last = tick
    return sorted(ticks)


def _quality_limits(lows: Sequence[float], highs: Sequence[float]) -> tuple[float, float]:
    """The quality axis of a chart: zero and most rows' intervals (all ends but the farthest 15 %
    from zero, with a quarter more room), padded; a row beyond it is drawn at its edge."""
    lows, highs = [*lows, 0.0], [*highs, 0.0]
    ends = sorted(abs(v) for v in lows + highs)
    bound = max(ends[int(0.85 * (len(ends) - 1))] * 1.25, 1e-9)
    low, high = max(min(lows), -bound), min(max(highs), bound)
    pad = (high - low) * 0.08 or 1.0
    return low - pad, high + pad


def _draw_chart(view: EffectsFile, key: str) -> str:
    """A forest plot of ``view``'s measured rows (the best change in quality at the top): the change
    in quality with its 95 % interval (a zero line) beside the throughput ratio on a log axis with
    its 95 % interval (a 1x line), the rows sharing the method axis, each point coloured and shaped
    by its verdict (a grey diamond: no practical difference; hollow: no detectable difference); the
    rows without an effect are listed under it, not plotted. Every text is measured and wrapped, and
    the layout is set in inches from those measures, so that nothing is cut off or overlaps; each row
    is as tall as its label, and a tall chart repeats its axes' ticks above the first row. 4.3
    inches wide, so that its 10 pt text still reads at about 9 pt in a phone's 358 px column.
    Identical bytes for identical input."""
    plt = pyplot("the effects chart needs it", ChartError)
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator, NullLocator

    rows = view.chart_rows
    scale, unit, _ = quality_unit(view.settings["metric"])
    size, line = 10, 10 / 72 * 1.25  # the font size (pt) and the height of a line of it (inches)
    width, margin, gap = 4.3, 0.08, 0.16

    with plt.rc_context({**SVG_STYLE, "font.size": size}):
        fig = plt.figure(figsize=(width, 4.0))

        measure, measure_bold = text_measure(fig, fontsize=size), text_measure(fig, fontsize=size, fontweight="bold")

        labels = ["\n".join(wrap_text(r.label, 1.4, measure)) for r in rows]
        left = margin + max(measure(part) for label in labels for part in label.split("\n")) + 0.1
        panel_w = (width - left - gap - margin - 0.12) / 2
        title = wrap_text(
            f"{view.workload_label}: {view.settings['model']} on {view.settings['data']} ({view.shape})\n"
            f"{view.hardware}, {view.date}",
            width - 2 * margin,
            measure_bold,
        )
        panels = (
            wrap_text(
                f"Change in {'validation loss' if view.is_loss else 'test accuracy'}, {unit}"
                f"{' (lower is better)' if view.is_loss else ''}",
                panel_w,
                measure,
            ),
            wrap_text(f"Throughput ratio, {view.unit}\n(log scale)", panel_w, measure),
        )
        notes = [
            "Not plotted, no effect: " + "; ".join(f"{r.label}: {r.status_label}" for r in view.unmeasured)
        ] * bool(view.unmeasured)
        if view.gpu_speed_rows:
            notes.append(
                "Speed not plotted, a GPU's (not measurable on this hardware): "
                + ", ".join(r.label for r in view.gpu_speed_rows)
            )
        others = wrap_text("\n".join(notes), width - 2 * margin, measure) if notes else []

        # each row as tall as its label, so that one long label does not make every row tall
        heights = [max(0.26, line * (label.count("\n") + 1) + 0.1) for label in labels]
        ys = [sum(heights[:i]) + h / 2 for i, h in enumerate(heights)]  # in inches from the top
        plot_h = sum(heights)
        # a tall chart repeats the axes' ticks above its first row, where a phone's screen shows them
        ticks_above = len(rows) > 8
        top = margin + len(title) * line + 0.14 + max(map(len, panels)) * line + 0.08 + (line + 0.08) * ticks_above
        # the verdicts drawn, in the legend's order: in one row when three or fewer, else two
        drawn = {r.number["quality"]["verdict"] for r in rows} | {
            r.number["throughput"]["verdict"] for r in view.speed_rows
        }
        verdicts = [v for v in _LEGEND if v in drawn]
        columns = len(verdicts) if len(verdicts) <= 3 else 2
        legend_h = math.ceil(len(verdicts) / columns) * line + 0.1
        bottom = margin + len(others) * line + (0.08 if others else 0) + legend_h + 0.12 + line + 0.06
        height = top + plot_h + bottom
        fig.set_size_inches(width, height)

        ax_q = fig.add_axes((left / width, bottom / height, panel_w / width, plot_h / height))
        ax_t = fig.add_axes(
            ((left + panel_w + gap) / width, bottom / height, panel_w / width, plot_h / height), sharey=ax_q
        )
        # The quality axis spans most rows' intervals, not one outlier's: a method that wrecks
        # accuracy (tens of points) would squeeze every other row onto the zero line. A row beyond
        # the axis is drawn to its edge, with an arrow and its value there.
        q_limits = _quality_limits(
            [r.number["quality"]["low"] * scale for r in rows], [r.number["quality"]["high"] * scale for r in rows]
        )
        for y, row in zip(ys, rows, strict=True):
            for ax, part, factor in ((ax_q, row.number["quality"], scale), (ax_t, row.number["throughput"], 1.0)):
                if ax is ax_t and not row.speed_measurable:
                    ax.annotate("for GPUs", (1.0, y), ha="center", va="center", color="#57606a", fontsize=size - 1)
                    continue
                colour, verdict = _COLOURS[part["verdict"]], part["verdict"]
                value = part["change"] * factor if "change" in part else part["ratio"]
                low, high = part["low"] * factor, part["high"] * factor
                if ax is ax_q and not q_limits[0] <= value <= q_limits[1]:
                    edge = q_limits[0] if value < q_limits[0] else q_limits[1]
                    ax.plot(
                        [max(low, q_limits[0]), min(high, q_limits[1])],
                        [y, y],
                        color=colour,
                        linewidth=1.8,
                        solid_capstyle="butt",
                    )
                    ax.plot([edge], [y], marker="<" if value < edge else ">", markersize=7, color=colour)
                    ax.annotate(
                        f"{value:+.3g}".replace("-", MINUS),
                        (edge, y),
                        xytext=(6 if value < edge else -6, 0),
                        textcoords="offset points",
                        va="center",
                        ha="left" if value < edge else "right",
                        color=colour,
                        fontsize=size - 1,
                    )
                    continue
                ax.plot([low, high], [y, y], color=colour, linewidth=1.8, solid_capstyle="butt")
                ax.plot(
                    [value],
                    [y],
                    marker=_MARKERS[verdict],
                    markersize=6,
                    color=colour,
                    markerfacecolor="white" if verdict == NO_DIFFERENCE else colour,
                )
        ax_q.axvline(0.0, color="#444444", linewidth=0.8, linestyle="--")
        ax_t.axvline(1.0, color="#444444", linewidth=0.8, linestyle="--")
        ax_q.set_xlim(*q_limits)
        ax_q.xaxis.set_major_locator(MaxNLocator(3))
        ax_q.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:+g}".replace("-", MINUS) if v else "0"))

        ratios = [v for r in view.speed_rows for v in (r.number["throughput"]["low"], r.number["throughput"]["high"])]
        ratios += [1.0, 0.8, 1.25] if view.gpu_speed_rows else [1.0]  # room for "for GPUs" at 1x
        low, high = min(ratios) / 1.15, max(ratios) * 1.15
        ax_t.set_xscale("log")
        ax_t.set_xlim(low, high)
        ax_t.xaxis.set_major_locator(FixedLocator(_ratio_ticks(low, high)))
        ax_t.xaxis.set_minor_locator(NullLocator())
        ax_t.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))

        ax_q.set_yticks(ys, labels)
        ax_q.set_ylim(plot_h, 0)  # the first row at the top
        ax_q.tick_params(axis="y", length=0)
        ax_t.tick_params(axis="y", left=False, labelleft=False)
        for ax, text in ((ax_q, panels[0]), (ax_t, panels[1])):
            ax.tick_params(axis="x", top=ticks_above, labeltop=ticks_above)
            ax.set_title("\n".join(text), fontsize=size, loc="left", pad=6)
            ax.grid(axis="x", alpha=0.3)
        fig.text(margin / width, 1 - margin / height, "\n".join(title), ha="left", va="top", fontweight="bold")
        handles = [
            Line2D(
                [],
                [],
                color=_COLOURS[v],
                marker=_MARKERS[v],
                linewidth=1.8,
                label=v,
                markerfacecolor="white" if v == NO_DIFFERENCE else _COLOURS[v],
            )
            for v in verdicts
        ]
        legend_y = margin + len(others) * line + (0.08 if others else 0)
        fig.legend(
            handles=handles,
            loc="lower left",
            ncol=columns,
            frameon=False,
            handlelength=1.5,
            columnspacing=1.0,
            handletextpad=0.4,
            borderaxespad=0,
            borderpad=0,
            bbox_to_anchor=(margin / width, legend_y / height),
        )
        if others:
            fig.text(margin / width, margin / height, "\n".join(others), ha="left", va="bottom", color="#444444")
        return svg_text(plt, fig, key)


# a change to the drawing redraws every chart
_DRAWING_CODE = "".join(
    inspect.getsource(f) for f in (_ratio_ticks, wrap_text, text_measure, _quality_limits, _draw_chart)
) + repr((_COLOURS, _MARKERS, _LEGEND))


# --------------------------------------------------------------------------------------------- render


def effects_views(site: Site) -> list[EffectsFile]:
    """Every committed effects file as the pages show it (no chart is drawn)."""
    return _files(site)


def overview_effects(site: Site) -> tuple[list[EffectsFile], dict[Path, Content]]:
    """The effects files the overview shows (each with its table rows) and their charts."""
    files = _files(site)
    charts = {Path(view.chart): _chart(view, site.out_dir / view.chart) for view in files if view.chart}
    return files, charts


def _call(class_name: str | None, hparams: Mapping[str, Any]) -> str:
    """How the run built the method: ``CutMix(alpha=1.0, ...)``."""
    return f"{class_name}({', '.join(f'{k}={literal(v)}' for k, v in hparams.items())})"


def render_effects(site: Site) -> dict[Path, Content]:
    """One snippet per method: its rows in every effects file (evidence, or why there is none), or
    that it has none."""
    files = _files(site)
    outputs: dict[Path, Content] = {}
    for record in site.methods:
        if record.kind == "method":
            shown: Sequence[tuple[EffectsFile, Sequence[tuple[EffectRow, str]]]] = [
                (f, [(row, _call(record.class_name, row.hparams)) for row in f.rows_of(record.key)])
                for f in files
                if f.rows_of(record.key)
            ]
            outputs[EFFECTS / f"{record.key}.md.inc"] = site.render(
                "effects_snippet.md.inc.j2", record=record, shown=shown, at_scale=at_scale_of(record)
            )
    return outputs
