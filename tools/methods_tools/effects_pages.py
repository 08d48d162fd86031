"""The "Example Effects" of every method card and the overview's chart of them, from the committed
measurements (``results/effects/*.json``, written by ``tools/measure_methods.py``).

- ``tables/effects/<key>.md.inc`` (``effects_snippet.md.inc.j2``), for every method (not best
  practices, whose measured rows come from the training comparison), which its card pulls in
  with ``{include}``: per effects file that measured it, the baseline's and the method's figures
  with their ratios and changes and the spread over seeds; else that it is not measured yet.
- ``tables/effects/<stem>.svg``: per effects file, speed-up against the change in quality
  (accuracy, or a language model's validation loss) of every measured method with error bars,
  drawn like the training charts (matplotlib, text kept as text, reused while a hash of its
  inputs is unchanged); the overview shows it beside a sortable table of the same figures
  (:func:`overview_effects`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import inspect
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .docsgen import SVG_STYLE, Content, Site, pyplot, reuse_or_draw, svg_text
from .markup import literal
from .training_pages import ChartError

__all__ = ["EFFECTS", "EffectsFile", "MethodEffect", "effects_views", "overview_effects", "render_effects"]

EFFECTS = Path("tables") / "effects"
MIB = 2**20
BASELINE = "baseline"


# --------------------------------------------------------------------------------------------- view

def _pm(spread: Mapping[str, Any] | None, fmt: str, scale: float = 1.0, suffix: str = "") -> str:
    """``mean ± std`` (``mean`` alone with one seed), or ``—``."""
    if spread is None:
        return "—"
    text = format(spread["mean"] * scale, fmt) + suffix
    return text if spread["std"] is None else f"{text} ± {format(spread['std'] * scale, fmt.lstrip('+'))}"


@dataclass(frozen=True)
class MethodEffect:
    """One method's figures from one effects file, formatted; ``number`` keeps the raw ones."""

    key: str
    name: str
    seeds: int
    throughput: str
    memory: str
    accuracy: str
    loss: str
    throughput_ratio: str
    memory_ratio: str
    accuracy_change: str
    loss_change: str
    number: Mapping[str, Any]  # the summary entry: the chart and the sortable table's data-* values
    model: str | None = None  # the reference model it was measured on when not the workload's

    @property
    def label(self) -> str:
        """Its name, with the model it was measured on when that is not the workload's."""
        return self.name if self.model is None else f"{self.name} ({self.model})"


@dataclass(frozen=True)
class EffectsFile:
    """One effects file as the cards and the overview show it."""

    file: str  # results/effects/<name>.json
    hardware: str
    date: str  # YYYY-MM-DD
    torch: str
    settings: Mapping[str, Any]
    command: str
    seeds: tuple[int, ...]
    max_load: float | None  # the highest 1-minute load average of its runs when above the core count
    cpu_count: int
    memory_label: str
    baseline: MethodEffect | None  # the baseline of the workload's model
    methods: Mapping[str, MethodEffect]  # by key, in display-name order
    failures: Mapping[str, tuple[str, ...]]  # key -> the reasons its failed runs give
    chart: str | None  # the chart's path in the docs source; None when no method was measured
    baselines: Mapping[str | None, MethodEffect] = dataclasses.field(default_factory=dict)  # by model
    python: str = ""  # the interpreter's version: the standard-library corpus differs between them

    @property
    def title(self) -> str:
        return f"{self.hardware}, {self.date}"

    @property
    def is_loss(self) -> bool:
        """Whether quality is a language model's validation loss (lower is better), not accuracy."""
        return self.settings["metric"] == "loss"

    @property
    def throughput_label(self) -> str:
        return f"Throughput ({self.settings['throughput_unit']}/s)"

    @property
    def quality_change_label(self) -> str:
        return "the change in validation loss" if self.is_loss else "the change in test accuracy"

    def quality_change(self, effect: MethodEffect) -> str:
        return effect.loss_change if self.is_loss else effect.accuracy_change

    def baseline_of(self, effect: MethodEffect) -> MethodEffect | None:
        """The baseline ``effect`` is compared with: of the model it was measured on."""
        return self.baselines.get(effect.model)

    @property
    def chart_alt(self) -> str:
        """What the chart shows, in words, with every point's figures."""
        points = "; ".join(f"{m.label} {m.throughput_ratio} speed-up, {self.quality_change(m)}"
                           for m in self.methods.values())
        return (f"Speed-up (throughput over the baseline's) against {self.quality_change_label}, with the "
                f"spread over seeds as error bars, for {len(self.methods)} methods measured on {self.title}: "
                f"{points}")


def _effect(entry: Mapping[str, Any], name: str) -> MethodEffect:
    return MethodEffect(
        key=entry["method"], name=name, seeds=len(entry["seeds"]),
        throughput=_pm(entry["throughput"], ".1f"), memory=_pm(entry["peak_memory_bytes"], ".0f", 1 / MIB),
        accuracy=_pm(entry["accuracy"], ".1f", 100, " %"), loss=_pm(entry["loss"], ".3f"),
        throughput_ratio=_pm(entry["throughput_ratio"], ".2f", suffix="x"),
        memory_ratio=_pm(entry["memory_ratio"], ".2f", suffix="x"),
        accuracy_change=_pm(entry["accuracy_change"], "+.1f", 100, " points"),
        loss_change=_pm(entry["loss_change"], "+.3f"), number=entry, model=entry["model"],
    )


def effects_file(path: Path, document: Mapping[str, Any], names: Mapping[str, str]) -> EffectsFile:
    """The view of one validated effects document; ``names`` maps method keys to display names
    (in display order); a key it lacks (a method since removed) is left out."""
    env = document["environment"]
    summary = {entry["method"]: entry for entry in document["summary"] if entry["method"] != BASELINE}
    baselines = {entry["model"]: _effect(entry, "Baseline") for entry in document["summary"]
                 if entry["method"] == BASELINE}
    loads = [r["load_average"][0] for r in document["runs"] if r["load_average"]]
    kinds = {r["memory_kind"] for r in document["runs"] if r["memory_kind"]}
    methods = {key: _effect(summary[key], name) for key, name in names.items() if key in summary}
    failures: dict[str, list[str]] = {}
    for run in document["runs"]:
        if run["status"] != "ok":
            failures.setdefault(run["method"], []).append(f"seed {run['seed']}: {run['reason']}")
    return EffectsFile(
        file=f"results/effects/{path.name}", hardware=env["hardware"], date=env["date"][:10], torch=env["torch"],
        settings=document["settings"], command=document["commands"][-1] if document["commands"] else "",
        seeds=tuple(sorted({r["seed"] for r in document["runs"]})),
        max_load=max(loads) if loads and max(loads) > env["cpu_count"] else None, cpu_count=env["cpu_count"],
        memory_label="Peak GPU memory allocated (MiB)" if kinds == {"cuda_max_allocated"}
        else "Peak memory of the process (MiB, resident set)",
        baseline=baselines.get(None), methods=methods, failures={k: tuple(v) for k, v in failures.items()},
        chart=(EFFECTS / f"{path.stem}.svg").as_posix() if methods else None, baselines=baselines,
        python=env["python"],
    )


def _files(site: Site) -> list[tuple[EffectsFile, Mapping[str, Any]]]:
    names = {r.key: r.name for r in site.methods if r.kind == "method"}
    return [(effects_file(path, document, names), document) for path, document in site.effects]


# --------------------------------------------------------------------------------------------- chart

def _chart_key(view: EffectsFile) -> str:
    """The hash of everything a chart is drawn from."""
    try:
        version = importlib.metadata.version("matplotlib")
    except importlib.metadata.PackageNotFoundError:
        version = None
    points = [(m.label, dict(m.number)) for m in view.methods.values()]
    inputs = {"points": points, "title": view.title, "metric": view.settings["metric"], "matplotlib": version,
              "code": _DRAWING_CODE}
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


def _draw_chart(view: EffectsFile, key: str) -> str:
    """Speed-up (throughput ratio) against the change in quality (accuracy in points, or a language
    model's validation loss), one labelled point per method with its spread over seeds as error
    bars; identical bytes for identical input."""
    plt = pyplot("the effects chart needs it", ChartError)

    def mean_std(entry: Mapping[str, Any] | None, scale: float = 1.0) -> tuple[float, float]:
        return (0.0, 0.0) if entry is None else (entry["mean"] * scale, (entry["std"] or 0.0) * scale)

    with plt.rc_context(SVG_STYLE):
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        ax.axhline(1.0, color="#888888", linewidth=0.8, linestyle="--")
        ax.axvline(0.0, color="#888888", linewidth=0.8, linestyle="--")
        change, scale = ("loss_change", 1.0) if view.is_loss else ("accuracy_change", 100.0)
        points = [(m.label, *mean_std(m.number[change], scale), *mean_std(m.number["throughput_ratio"]))
                  for m in view.methods.values()]
        xspan = (max(p[1] for p in points) - min(p[1] for p in points)) or 1.0
        yspan = (max(p[3] for p in points) - min(p[3] for p in points)) or 1.0
        placed: list[tuple[float, float]] = []
        for name, x, xerr, y, yerr in points:
            ax.errorbar([x], [y], xerr=[xerr], yerr=[yerr], fmt="o", color="#4c72b0", ecolor="#4c72b0",
                        elinewidth=1, capsize=3)
            # Points that (nearly) coincide get their labels stacked, one line lower each.
            near = sum(1 for px, py in placed if abs(px - x) < 0.05 * xspan and abs(py - y) < 0.05 * yspan)
            ax.annotate(name, (x, y), xytext=(6, 6 - 11 * near), textcoords="offset points")
            placed.append((x, y))
        ax.set_xlabel("validation loss change vs the baseline (lower is better)" if view.is_loss
                      else "test accuracy change vs the baseline (points)")
        ax.set_ylabel("speed-up: throughput / baseline's")
        ax.grid(alpha=0.3)
        ax.set_title(f"{view.settings['model']} on {view.settings['data']}: {view.title}")
        fig.tight_layout()
        return svg_text(plt, fig, key)


_DRAWING_CODE = inspect.getsource(_draw_chart)  # a change to the drawing redraws every chart


# --------------------------------------------------------------------------------------------- render

def effects_views(site: Site) -> list[EffectsFile]:
    """Every committed effects file as the pages show it (no chart is drawn)."""
    return [view for view, _ in _files(site)]


def overview_effects(site: Site) -> tuple[list[EffectsFile], dict[Path, Content]]:
    """The effects files the overview shows (each with its table rows) and their charts."""
    files = _files(site)
    charts = {Path(view.chart): _chart(view, site.out_dir / view.chart) for view, _ in files if view.chart}
    return [view for view, _ in files], charts


def _call(class_name: str | None, hparams: Mapping[str, Any]) -> str:
    """How the run built the method: ``CutMix(alpha=1.0, ...)``."""
    return f"{class_name}({', '.join(f'{k}={literal(v)}' for k, v in hparams.items())})"


def render_effects(site: Site) -> dict[Path, Content]:
    """One snippet per method: its measured effects in every effects file, or that it has none."""
    files = [view for view, _ in _files(site)]
    outputs: dict[Path, Content] = {}
    for record in site.methods:
        if record.kind == "method":
            measured: Sequence[tuple[EffectsFile, MethodEffect, str]] = [
                (f, f.methods[record.key], _call(record.class_name, f.methods[record.key].number["hparams"]))
                for f in files if record.key in f.methods]
            failed = [(f, f.failures[record.key]) for f in files
                      if record.key in f.failures and record.key not in f.methods]
            outputs[EFFECTS / f"{record.key}.md.inc"] = site.render(
                "effects_snippet.md.inc.j2", record=record, measured=measured, failed=failed)
    return outputs
