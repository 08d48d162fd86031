"""The "Training configurations" page, its charts and the best-practice cards' measured rows.

Reads every validated ``results/*.json`` (written by ``tools/compare_training.py``) and renders:

- ``training_configurations.md`` (``training_configurations.md.j2``): per results file, its
  hardware and settings, every configuration's row and a chart of time and memory; then the
  figures quoted from a reference experiment;
- ``tables/results/<stem>.svg``: those charts (matplotlib, text kept as text, no date). A chart
  carries the hash of its inputs (the results document, the matplotlib version, the drawing
  code) as its ``dc:identifier``; a chart already in the output folder with the same hash is
  reused rather than drawn again;
- ``tables/results/<key>.md.inc`` (``results_snippet.md.inc.j2``): for each best practice, the
  measured rows of its Trainer option beside the ``fp32:single`` baseline, which its card pulls in
  with ``{include}`` (the ``.inc`` suffix keeps Sphinx from reading the snippet as a page).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import inspect
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .docsgen import SVG_STYLE, Content, Site, pyplot, reuse_or_draw, svg_text

__all__ = ["PAGE", "REFERENCE_EXPERIMENT", "SNIPPETS", "render_training_results"]

PAGE = Path("training_configurations.md")
SNIPPETS = Path("tables") / "results"
MIB = 2**20

# Quoted, not measured by this project: a reference experiment, a pretrained ResNet-50 fine-tuned
# on CIFAR-10 (5 epochs, batch 128) on four Tesla P40 GPUs, run by hand. None is a figure it does
# not quote.
REFERENCE_EXPERIMENT = (
    # configuration, time (s), GPU memory (GB), accuracy (%)
    ("Single precision (fp32)", 1979, 11.24, 85),
    ("Half precision (fp16)", 1946, 5.79, 75),
    ("Automatic mixed precision", 1546, 6.02, 85),
    ("DataParallel, 4 GPUs", 742, None, None),
    ("DistributedDataParallel, 4 GPUs", 560, 3.12, None),
    ("Fully Sharded Data Parallel, 4 GPUs", 581, 2.88, None),
    ("DeepSpeed", None, None, None),
)

# Precision modes shown together on a precision best practice's card.
PRECISION_FAMILY = {"amp_fp16": ("amp_fp16", "amp_bf16"), "amp_bf16": ("amp_fp16", "amp_bf16"),
                    "fp16": ("fp16", "bf16"), "bf16": ("fp16", "bf16")}


class ChartError(ValueError):
    """A chart cannot be drawn (matplotlib missing): one line, what to install."""


# --------------------------------------------------------------------------------------------- view

def _num(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def _mib(value: int | None, digits: int = 0) -> str:
    return "—" if value is None else f"{value / MIB:,.{digits}f}"


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f} %"


@dataclass(frozen=True)
class Run:
    """One configuration's row: metadata text raw (the template escapes it), numbers as shown."""

    config: str
    precision: str
    parallel: str
    processes: int
    status: str
    reason: str | None
    note: str | None
    time: str
    last_epoch: str
    throughput: str
    memory: str
    model_memory: str
    gpu_utilization: str
    accuracy: str
    loss: str
    wall_s: float | None


@dataclass(frozen=True)
class ResultsFile:
    """One results file as the page and the snippets show it."""

    file: str  # results/<name>.json
    hardware: str
    date: str  # YYYY-MM-DD
    torch: str
    settings: Mapping[str, Any]
    shared_load: float | None  # the load average when it exceeded the core count, else None
    cpu_count: int
    memory_label: str
    has_gpu_utilization: bool
    runs: tuple[Run, ...]
    chart: str | None  # the chart's path in the docs source; None when no run succeeded

    @property
    def title(self) -> str:
        return f"{self.hardware}, {self.date}"

    def baseline(self) -> Run | None:
        return next((r for r in self.runs if r.config == "fp32:single" and r.status == "ok"), None)


def _run(run: Mapping[str, Any]) -> Run:
    return Run(
        config=run["config"], precision=run["precision"], parallel=run["parallel"], processes=run["world_size"],
        status=run["status"],
        reason=None if run["status"] == "ok" else run["reason"], note=run["note"],
        time=_num(run["wall_s"]), last_epoch=_num(run["epoch_s"][-1] if run["epoch_s"] else None),
        throughput=_num(run["throughput"]), memory=_mib(run["peak_memory_bytes"]),
        model_memory=_mib(run["model_memory_bytes"], 2),
        gpu_utilization="—" if run["gpu_utilization"] is None else f"{run['gpu_utilization']:.0f} %",
        accuracy=_pct(run["accuracy"]), loss=_num(run["loss"], 3), wall_s=run["wall_s"],
    )


def _memory_label(document: Mapping[str, Any]) -> str:
    kinds = {r["memory_kind"] for r in document["runs"] if r["memory_kind"]}
    if kinds == {"cuda_max_allocated"}:
        return "Peak GPU memory allocated per device (MiB)"
    return "Peak memory per process (MiB, resident set of the whole process)"


def _results_file(path: Path, document: Mapping[str, Any]) -> ResultsFile:
    env = document["environment"]
    load = env.get("load_average")
    has_chart = any(r["status"] == "ok" for r in document["runs"])
    return ResultsFile(
        file=f"results/{path.name}", hardware=env["hardware"], date=env["date"][:10], torch=env["torch"],
        settings=document["settings"], cpu_count=env["cpu_count"],
        shared_load=load[0] if load and load[0] > env["cpu_count"] else None,
        memory_label=_memory_label(document),
        has_gpu_utilization=any(r["gpu_utilization"] is not None for r in document["runs"]),
        runs=tuple(_run(r) for r in document["runs"]),
        chart=(SNIPPETS / f"{path.stem}.svg").as_posix() if has_chart else None,
    )


def _card_runs(results: ResultsFile, option: str, value: Any) -> list[Run]:
    """The runs a best practice's card shows: its own, after the fp32:single baseline."""
    runs = results.runs
    if option == "precision":
        wanted = PRECISION_FAMILY.get(value, (value,))
        chosen = [r for r in runs if r.parallel == "single" and r.precision in wanted]
    elif option == "parallel":
        chosen = [r for r in runs if r.parallel == value]
    else:  # the comparison varies only precision and parallel: nothing measures other options
        return []
    if not chosen:
        return []
    return [r for r in runs if r.config == "fp32:single" and r not in chosen] + chosen


def _ratio(run: Run, baseline: Run | None) -> str:
    if baseline is None or run.status != "ok" or run.wall_s is None:
        return "—"
    return f"{run.wall_s / baseline.wall_s:.2f}x"


# --------------------------------------------------------------------------------------------- charts

def _chart_key(document: Mapping[str, Any]) -> str:
    """The hash of everything a chart is drawn from."""
    try:
        version = importlib.metadata.version("matplotlib")
    except importlib.metadata.PackageNotFoundError:
        version = None
    inputs = {"document": document, "matplotlib": version, "code": _DRAWING_CODE}
    return "sha256:" + hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


def _chart(document: Mapping[str, Any], previous: Path) -> str:
    """The chart of ``document``: ``previous`` (the last run's output) when drawn from the same
    inputs, else drawn afresh."""
    key = _chart_key(document)
    return reuse_or_draw(previous, key, lambda: _draw_chart(document, key))


def _draw_chart(document: Mapping[str, Any], key: str) -> str:
    """Time and peak memory per configuration as one SVG, identical bytes for identical input."""
    plt = pyplot("the training charts need it", ChartError)

    ok = [r for r in document["runs"] if r["status"] == "ok"]
    labels = [r["config"] for r in ok][::-1]
    with plt.rc_context(SVG_STYLE):
        fig, (ax_time, ax_mem) = plt.subplots(1, 2, figsize=(9, 0.35 * max(len(ok), 2) + 1.2), sharey=True)
        ax_time.barh(labels, [r["wall_s"] for r in ok][::-1], color="#4c72b0")
        ax_time.set_xlabel("training time (s)")
        ax_mem.barh(labels, [r["peak_memory_bytes"] / MIB for r in ok][::-1], color="#dd8452")
        ax_mem.set_xlabel("peak memory per device (MiB)" if ok[0]["memory_kind"] == "cuda_max_allocated"
                          else "peak memory per process (MiB)")
        for ax in (ax_time, ax_mem):
            ax.grid(axis="x", alpha=0.3)
        fig.suptitle(f"{document['settings']['model']} on {document['settings']['data']}: "
                     f"{document['environment']['hardware']}, {document['environment']['date'][:10]}")
        fig.tight_layout()
        return svg_text(plt, fig, key)


_DRAWING_CODE = inspect.getsource(_draw_chart)  # a change to the drawing redraws every chart


# --------------------------------------------------------------------------------------------- render

def render_training_results(site: Site) -> dict[Path, Content]:
    """The page, one chart per results file with a successful run, one snippet per best practice."""
    files = [(_results_file(path, document), document) for path, document in site.results]
    outputs: dict[Path, Content] = {
        PAGE: site.render("training_configurations.md.j2", results=[f for f, _ in files],
                          reference=REFERENCE_EXPERIMENT),
    }
    for results, document in files:
        if results.chart is not None:
            outputs[Path(results.chart)] = _chart(document, site.out_dir / results.chart)
    for record in site.methods:
        if not (record.is_best_practice and record.trainer_option):
            continue
        (option, value), = record.trainer_option.items()
        measured = []
        for results, _ in files:
            runs = _card_runs(results, option, value)
            if runs:
                baseline = results.baseline()
                measured.append((results, [(run, _ratio(run, baseline)) for run in runs]))
        outputs[SNIPPETS / f"{record.key}.md.inc"] = site.render(
            "results_snippet.md.inc.j2", record=record, option=option, value=value, files=measured)
    return outputs
