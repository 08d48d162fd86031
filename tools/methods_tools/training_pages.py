"""The "Training configurations" page, its charts and the best-practice cards' measured rows.

Reads every validated ``results/*.json`` (written by ``tools/compare_training.py``) and renders:

- ``training_configurations.md`` (``training_configurations.md.j2``): per results file, its
  hardware and settings, what a comparison at that scale cannot show (from the file's
  environment and settings), every configuration's row (the median and range over its repeated
  runs; a flagged super-linear speed-up shown as flagged, not as a figure) and a chart of
  throughput and memory; then the figures quoted from a reference experiment, with its source;
- ``tables/results/<stem>.svg``: those charts (matplotlib, text kept as text, no date), two panels
  side by side for a desktop's column, and ``<stem>-narrow.svg``, the same panels stacked and
  4.3 inches wide, whose text reads at about 11 px in a phone's 358 px column (the page shows one
  or the other by the screen's width). A chart carries the hash of its inputs (the results
  document, the variant, the matplotlib version, the drawing code) as its ``dc:identifier``; a
  chart already in the output folder with the same hash is reused rather than drawn again;
- ``tables/results/<key>.md.inc`` (``results_snippet.md.inc.j2``): for each best practice, the
  measured rows of its Trainer option beside the ``fp32:single`` baseline, with their flags and
  one line naming the file's hardware and scale (the caveats in full are on "How the cards'
  evidence is measured", :mod:`.measurements_page`), which its card pulls in with ``{include}``
  (the ``.inc`` suffix keeps Sphinx from reading the snippet as a page).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import inspect
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .compare import did_not_act
from .docsgen import SVG_STYLE, Content, Site, pyplot, reuse_or_draw, svg_text, text_measure, wrap_text

__all__ = [
    "PAGE",
    "REFERENCE_EXPERIMENT",
    "REFERENCE_SOURCE",
    "SNIPPETS",
    "ReferenceRow",
    "render_training_results",
    "results_views",
]

PAGE = Path("training_configurations.md")
SNIPPETS = Path("tables") / "results"
NARROW_SUFFIX = "-narrow.svg"  # a chart's variant for a phone's width
MIB = 2**20
# Below this many optimizer steps, accuracy and loss say how far a run got, not what the
# configuration reaches: the page says so.
FEW_STEPS = 1000


@dataclass(frozen=True)
class ReferenceRow:
    """One configuration of the reference experiment; None is a figure the source does not give."""

    configuration: str
    time_s: int | None  # 5 epochs
    memory_gb: float | None  # per GPU
    peak_utilization: int | None  # per GPU, %
    accuracy: int | None  # "about", %


# Quoted, not measured by this project: a reference experiment, a pretrained ResNet-50 fine-tuned
# on CIFAR-10 (5 epochs, batch 128) on four Tesla P40 GPUs, run by hand and published as a
# README (in Chinese). Every figure it gives is here; None is one it does not give.
REFERENCE_SOURCE = {
    "name": "xxcheng0708/pytorch-model-train-template, README.md",
    "url": "https://github.com/xxcheng0708/pytorch-model-train-template/blob/"
    "c8438928b7ce0c861cee92079b79a09d240fed63/README.md",
}
REFERENCE_EXPERIMENT = (
    ReferenceRow("Baseline: one GPU, batch 1", None, 0.34, 60, None),
    ReferenceRow("Single precision (fp32), one GPU", 1979, 11.24, 100, 85),
    ReferenceRow("Half precision (fp16), one GPU", 1946, 5.79, 100, 75),
    ReferenceRow("Automatic mixed precision, one GPU", 1546, 6.02, 100, 85),
    ReferenceRow("DataParallel, 4 GPUs", 742, 3.08, 99, 85),
    ReferenceRow("DistributedDataParallel, 4 GPUs", 560, 3.12, 99, 85),
    ReferenceRow("Fully Sharded Data Parallel, 4 GPUs", 581, 2.88, 99, 85),
    ReferenceRow("Fully Sharded Data Parallel, 4 GPUs, batch 1", None, 0.19, 60, None),
    ReferenceRow("DeepSpeed", None, None, None, None),
    # The same modes through Hugging Face Accelerate (accelerate launch --config_file
    # default_DDP.yml / default_FSDP.yml, 4 processes).
    ReferenceRow("Accelerate, DDP, 4 GPUs", 569, 3.15, 99, 85),
    ReferenceRow("Accelerate, FSDP, 4 GPUs", 576, 2.90, 99, 85),
    ReferenceRow("Accelerate, FSDP, 4 GPUs, batch 1", None, 0.38, 60, None),
    ReferenceRow("Accelerate, DeepSpeed", None, None, None, None),
)

# Precision modes shown together on a precision best practice's card.
PRECISION_FAMILY = {
    "amp_fp16": ("amp_fp16", "amp_bf16"),
    "amp_bf16": ("amp_fp16", "amp_bf16"),
    "fp16": ("fp16", "bf16"),
    "bf16": ("fp16", "bf16"),
}


class ChartError(ValueError):
    """A chart cannot be drawn (matplotlib missing): one line, what to install."""


# --------------------------------------------------------------------------------------------- view


def _spread(stat: Mapping[str, float] | None, fmt: Any = lambda v: f"{v:,.1f}") -> str:
    """``median (min–max)``; the median alone when the range is one value; "—" for no figure."""
    if stat is None:
        return "—"
    low, high = fmt(stat["min"]), fmt(stat["max"])
    return fmt(stat["median"]) if low == high else f"{fmt(stat['median'])} ({low}–{high})"


def _mib(digits: int = 0) -> Any:
    return lambda v: f"{v / MIB:,.{digits}f}"


def _pct(v: float) -> str:
    return f"{100 * v:.1f} %"


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
    runs: str  # "3", or "2 of 3" when some failed
    time: str
    first_epoch: str
    steady_epoch: str
    throughput: str
    speedup: str
    memory: str
    model_memory: str
    tensor_memory: Mapping[str, str] | None  # peak and split (MiB, median and range), where measured
    gpu_utilization: str
    accuracy: str
    loss: str
    flagged: bool
    flag_reason: str | None  # why a speed-up is flagged, or how its re-measurement came out
    throughput_median: float | None
    did_not_act: str | None  # why its runs are no evidence of its mode (one process, no replicas), or None
    threads_per_process: int | None = None  # torch's threads each process reported (None: not recorded)


def _speedup(entry: Mapping[str, Any]) -> str:
    check = entry["super_linear"]
    if check is not None and check["flagged"]:
        return "flagged"
    speedup = entry["speedup"]
    if speedup is None:
        return "—"
    text = _spread(speedup, lambda v: f"{v:.2f}x")
    return text if speedup["over"] == "fp32:single" else f"{text} over {speedup['over']}"


def _run(entry: Mapping[str, Any]) -> Run:
    check = entry["super_linear"]
    runs = str(entry["runs"]) if entry["ok_runs"] in (0, entry["runs"]) else f"{entry['ok_runs']} of {entry['runs']}"
    return Run(
        config=entry["config"],
        precision=entry["precision"],
        parallel=entry["parallel"],
        processes=entry["world_size"],
        status=entry["status"],
        reason=entry["reason"],
        note=entry["note"],
        runs=runs,
        time=_spread(entry["wall_s"]),
        first_epoch=_spread(entry["first_epoch_s"]),
        steady_epoch=_spread(entry["steady_epoch_s"], lambda v: f"{v:,.2f}"),
        throughput=_spread(entry["throughput"]),
        speedup="did not act" if did_not_act(entry) else _speedup(entry) if entry["status"] == "ok" else "—",
        memory=_spread(entry["peak_memory_bytes"], _mib()),
        model_memory=_spread(entry["model_memory_bytes"], _mib(2)),
        tensor_memory=_tensor_memory(entry.get("tensor_memory")),  # absent before it was measured
        gpu_utilization=_spread(entry["gpu_utilization"], lambda v: f"{v:.0f} %"),
        accuracy=_spread(entry["accuracy"], _pct),
        loss=_spread(entry["loss"], lambda v: f"{v:.3f}"),
        flagged=bool(check and check["flagged"]),
        flag_reason=check["reason"] if check else None,
        throughput_median=entry["throughput"]["median"] if entry["throughput"] else None,
        did_not_act=did_not_act(entry),
        threads_per_process=entry.get("threads_per_process"),  # absent before threads were recorded
    )


#: The figures of a summary's ``tensor_memory``, in the order the page's columns show them.
TENSOR_COLUMNS = ("peak_bytes", "weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes")
TENSOR_MEMORY_LABEL = "Peak tensor memory (MiB, torch's accounting)"


def _tensor_memory(figures: Mapping[str, Any] | None) -> dict[str, str] | None:
    """Each tensor-memory figure in MiB (median, range), "—" where the run could not tell it apart."""
    if figures is None:
        return None
    return {name: _spread(figures[name], _mib(2)) for name in TENSOR_COLUMNS}


def _memory_label(document: Mapping[str, Any]) -> str:
    kinds = {r["memory_kind"] for r in document["summary"] if r["memory_kind"]}
    if kinds == {"cuda_max_allocated"}:
        return "Peak GPU memory allocated per device (MiB)"
    return "Peak memory per process (MiB, resident set of the whole process)"


@dataclass(frozen=True)
class ResultsFile:
    """One results file as the page and the snippets show it."""

    file: str  # results/<name>.json
    hardware: str
    date: str  # YYYY-MM-DD
    torch: str
    settings: Mapping[str, Any]
    shared_load: float | None  # the highest 1-minute load average seen when it exceeded the cores, else None
    cpu_count: int
    cpu_model: str
    threads: int  # torch's threads in one process
    device_type: str  # cpu or cuda
    device_name: str
    device_count: int
    steady_state: bool  # more than one epoch per run: warm-up and steady state told apart
    steps: int | None  # optimizer steps per process in a run
    memory_label: str  # what the process's peak (peak_memory_bytes) is
    has_gpu_utilization: bool
    runs: tuple[Run, ...]
    chart: str | None  # the chart's path in the docs source; None when no run succeeded

    @property
    def narrow_chart(self) -> str | None:
        """The chart drawn for a phone's width (:data:`NARROW_SUFFIX`)."""
        return None if self.chart is None else self.chart.removesuffix(".svg") + NARROW_SUFFIX

    @property
    def title(self) -> str:
        return f"{self.hardware}, {self.date}"

    @property
    def few_steps(self) -> bool:
        return self.steps is not None and self.steps < FEW_STEPS

    @property
    def flagged(self) -> tuple[Run, ...]:
        return tuple(r for r in self.runs if r.flagged)

    @property
    def threads_in_all(self) -> int | None:
        """The threads every run had in all (the comparison matched them), or None in a file
        written before it did."""
        return self.settings.get("threads")

    @property
    def single_threads(self) -> int:
        """torch's threads in a single-process run: the matched threads in all where the file has
        them, else what the comparison's own process had (its environment's ``torch_threads``)."""
        return self.threads_in_all or self.threads

    @property
    def threads_recorded(self) -> bool:
        """Whether every successful configuration's processes recorded the threads they ran on,
        and those match the split the settings state."""
        split = self.threads_in_all
        ok = [r for r in self.runs if r.status == "ok"]
        return bool(split and ok) and all(
            r.threads_per_process == split // (1 if r.parallel in ("single", "dp") else r.processes) for r in ok
        )

    @property
    def has_tensor_memory(self) -> bool:
        """Whether a configuration of it has tensor-memory figures (files measured before have none)."""
        return any(r.tensor_memory is not None for r in self.runs)

    @property
    def tensor_memory_label(self) -> str:
        return TENSOR_MEMORY_LABEL

    @property
    def throughput_label(self) -> str:
        return (
            "Steady-state throughput (samples/s)" if self.steady_state else "Throughput, warm-up included (samples/s)"
        )


def _steps(document: Mapping[str, Any]) -> int | None:
    """Optimizer steps one process took in a run: the samples of a successful run over the
    examples one step of all its processes sees."""
    batch = document["settings"]["batch_size"]
    for run in document["runs"]:
        if run["status"] == "ok" and run["samples"]:
            return (
                round(run["samples"] / (batch * run["world_size"]))
                if run["parallel"] != "dp"
                else round(run["samples"] / batch)
            )
    return None


def _results_file(path: Path, document: Mapping[str, Any]) -> ResultsFile:
    env = document["environment"]
    loads = [load[0] for load in (env.get("load_average"), env.get("load_average_end")) if load]
    peak_load = max(loads) if loads else None
    summary = document["summary"]
    has_chart = bool(_charted(summary))
    return ResultsFile(
        file=f"results/{path.name}",
        hardware=env["hardware"],
        date=env["date"][:10],
        torch=env["torch"],
        settings=document["settings"],
        cpu_count=env["cpu_count"],
        shared_load=peak_load if peak_load is not None and peak_load > env["cpu_count"] else None,
        cpu_model=env["cpu_model"],
        threads=env["torch_threads"],
        device_type=env["device_type"],
        device_name=env["device_name"],
        device_count=env["device_count"],
        steady_state=document["settings"]["epochs"] >= 2,
        steps=_steps(document),
        memory_label=_memory_label(document),
        has_gpu_utilization=any(r["gpu_utilization"] is not None for r in summary),
        runs=tuple(_run(r) for r in summary),
        chart=(SNIPPETS / f"{path.stem}.svg").as_posix() if has_chart else None,
    )


def _card_runs(results: ResultsFile, option: str, value: Any) -> list[Run]:
    """The runs a best practice's card shows: its own, after the fp32:single baseline."""
    runs = results.runs
    if option == "precision":
        wanted = PRECISION_FAMILY.get(value, (value,))
        chosen = [r for r in runs if r.parallel == "single" and r.precision in wanted]
    elif option == "parallel":  # the native mode, then the same mode through Accelerate's file for it
        chosen = [r for r in runs if r.parallel == value] + [
            r for r in runs if r.parallel == "accelerate" and r.config.split(":")[2:] == [value]
        ]
    else:  # the comparison varies only precision and parallel: nothing measures other options
        return []
    if not chosen:
        return []
    return [r for r in runs if r.config == "fp32:single" and r not in chosen] + chosen


# --------------------------------------------------------------------------------------------- charts


def _chart_key(document: Mapping[str, Any], narrow: bool = False) -> str:
    """The hash of everything a chart is drawn from."""
    try:
        version = importlib.metadata.version("matplotlib")
    except importlib.metadata.PackageNotFoundError:
        version = None
    inputs = {"document": document, "narrow": narrow, "matplotlib": version, "code": _DRAWING_CODE}
    return "sha256:" + hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


def _chart(document: Mapping[str, Any], previous: Path, narrow: bool = False) -> str:
    """The chart of ``document`` (its ``narrow`` variant): ``previous`` (the last run's output) when
    drawn from the same inputs, else drawn afresh."""
    key = _chart_key(document, narrow)
    return reuse_or_draw(previous, key, lambda: _draw_chart(document, key, narrow))


def _charted(summary: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The configurations a chart draws: those that ran, less those that did not act (a parallel
    mode run as one process), which the chart names under its title instead."""
    return [s for s in summary if s["status"] == "ok" and not did_not_act(s)]


# Both variants' text is 10 pt. The desktop one, 9 in wide, shows it at about 11.4 px in furo's
# 736 px column (and at about 5 px on a phone); the phone one is as wide as the effects charts
# (4.3 in), so that a 358 px column shows it at about 11.5 px.
FONT_PT, WIDE_WIDTH, NARROW_WIDTH = 10, 9.0, 4.3


def _draw_chart(document: Mapping[str, Any], key: str, narrow: bool = False) -> str:
    """Throughput and peak memory per configuration (median, range as error bars) as one SVG,
    identical bytes for identical input: two panels side by side, or stacked (``narrow``, the
    configurations named on each, the title wrapped). A flagged speed-up's throughput bar is
    hatched and labelled; a configuration that did not act is not drawn, only named."""
    plt = pyplot("the training charts need it", ChartError)

    ok = _charted(document["summary"])[::-1]
    idle = [s["config"] for s in document["summary"] if did_not_act(s)]
    flagged = [bool(s["super_linear"] and s["super_linear"]["flagged"]) for s in ok]
    labels = [s["config"] + (" (flagged)" if f else "") for s, f in zip(ok, flagged, strict=True)]

    def bars(ax: Any, field: Any, scale: float, color: str, mark: bool) -> None:
        spreads = [field(s) for s in ok]  # each row's figure: median, min and max
        medians = [f["median"] / scale for f in spreads]
        below = [m - f["min"] / scale for m, f in zip(medians, spreads, strict=True)]
        above = [f["max"] / scale - m for m, f in zip(medians, spreads, strict=True)]
        drawn = ax.barh(labels, medians, xerr=[below, above], color=color, ecolor="#333333", capsize=2)
        for bar, flag in zip(drawn, flagged, strict=True):
            if flag and mark:
                bar.set_hatch("//")
                bar.set_edgecolor("#333333")

    steady = document["settings"]["epochs"] >= 2
    title = [
        f"{document['settings']['model']} on {document['settings']['data']}: "
        f"{document['environment']['hardware']}, {document['environment']['date'][:10]}",
        "median over each configuration's runs, error bars: their range; hatched: a flagged super-linear speed-up",
    ] + ([f"not drawn, did not act (one process, no replicas): {', '.join(idle)}"] if idle else [])
    if narrow:
        layout = {"nrows": 2, "ncols": 1, "figsize": (NARROW_WIDTH, 4.0)}
    else:
        layout = {"nrows": 1, "ncols": 2, "figsize": (WIDE_WIDTH, 0.35 * max(len(ok), 2) + 1.5), "sharey": True}
    with plt.rc_context({**SVG_STYLE, "font.size": FONT_PT}):
        fig, (ax_speed, ax_mem) = plt.subplots(**layout)
        if narrow:  # the title wrapped to the width as drawn, then the height: two panels and the title
            title = wrap_text("\n".join(title), NARROW_WIDTH - 0.25, text_measure(fig))
            rows_h = 0.27 * max(len(ok), 2) + 0.75  # one panel: its bars and its axis label
            fig.set_size_inches(NARROW_WIDTH, 2 * rows_h + FONT_PT / 72 * 1.3 * len(title) + 0.2)
        bars(ax_speed, lambda s: s["throughput"], 1, "#4c72b0", mark=True)
        ax_speed.set_xlabel(
            "steady-state throughput (samples/s)" if steady else "throughput, warm-up included (samples/s)"
        )
        if all(s.get("tensor_memory") for s in ok):  # torch's accounting, where every row has it
            bars(ax_mem, lambda s: s["tensor_memory"]["peak_bytes"], MIB, "#dd8452", mark=False)
            ax_mem.set_xlabel("peak tensor memory per process (MiB, torch's accounting)")
        else:
            bars(ax_mem, lambda s: s["peak_memory_bytes"], MIB, "#dd8452", mark=False)
            ax_mem.set_xlabel(
                "peak memory per device (MiB)"
                if ok[0]["memory_kind"] == "cuda_max_allocated"
                else "peak memory per process (MiB)"
            )
        for ax in (ax_speed, ax_mem):
            ax.grid(axis="x", alpha=0.3)
        fig.suptitle("\n".join(title), **({"fontsize": FONT_PT} if narrow else {}))  # as wrap_text measured it
        fig.tight_layout()
        return svg_text(plt, fig, key)


# a change to the drawing redraws every chart
_DRAWING_CODE = (
    inspect.getsource(_charted)
    + inspect.getsource(wrap_text)
    + inspect.getsource(text_measure)
    + inspect.getsource(_draw_chart)
    + repr((FONT_PT, WIDE_WIDTH, NARROW_WIDTH, SVG_STYLE))
)


# --------------------------------------------------------------------------------------------- render


def results_views(site: Site) -> list[ResultsFile]:
    """Every committed results file as the pages show it (no chart is drawn)."""
    return [_results_file(path, document) for path, document in site.results]


def render_training_results(site: Site) -> dict[Path, Content]:
    """The page, one chart per results file with a successful run, one snippet per best practice."""
    files = [(_results_file(path, document), document) for path, document in site.results]
    outputs: dict[Path, Content] = {
        PAGE: site.render(
            "training_configurations.md.j2",
            results=[f for f, _ in files],
            reference=REFERENCE_EXPERIMENT,
            source=REFERENCE_SOURCE,
        ),
    }
    for results, document in files:
        if results.chart is not None and results.narrow_chart is not None:
            outputs[Path(results.chart)] = _chart(document, site.out_dir / results.chart)
            outputs[Path(results.narrow_chart)] = _chart(document, site.out_dir / results.narrow_chart, narrow=True)
    for record in site.methods:
        if not (record.is_best_practice and record.trainer_option):
            continue
        ((option, value),) = record.trainer_option.items()
        measured = [(results, runs) for results, _ in files if (runs := _card_runs(results, option, value))]
        outputs[SNIPPETS / f"{record.key}.md.inc"] = site.render(
            "results_snippet.md.inc.j2", record=record, option=option, value=value, files=measured
        )
    return outputs
