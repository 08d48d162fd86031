"""What a method or best practice buys, in a few lines: its sourced figure at scale and this project's
own measurements, as the "Should I use it?" box of every card and the "Choosing methods" page show them.

- The figure at scale is the one its metadata quotes (``at_scale``: figure, setting, source, hardware,
  url); a best practice also gets the reference experiment's row that the training-configurations
  page quotes (:data:`.training_pages.REFERENCE_EXPERIMENT`), when it has one for its option.
- The measured evidence of a method is its rows in the committed effects files
  (``results/effects/*.json``): the change in quality, the throughput and memory ratios, each with its
  95 % interval and verdict, as the cards show them (:mod:`.effects_pages`); a row without an effect
  (did not act, not applicable, failed) carries its reason and no number.
- The measured evidence of a best practice is its configurations in the training comparison
  (``results/*.json``): the speed-up and the peak memory against ``fp32:single`` (peak tensor memory,
  torch's accounting, where the file has it; else the process's peak), the median with the range
  over the repeated runs. A parallel mode that ran as one process (DataParallel on the CPU)
  did not act, and says so.

Every measured line names its hardware. Nothing here imports torch; :func:`summarise` is the one
function per method or best practice, :func:`load_inputs` what the ``method-choices`` directive reads.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from algorithms.metadata import MethodRecord, discover_metadata_files, validate_files

from .compare import did_not_act
from .docsgen import Content, Site, sorted_methods
from .effects_pages import NOT_MEASURABLE, STATUS_LABELS, EffectsFile, effects_files
from .markup import one_line
from .results import load_committed
from .training_pages import PRECISION_FAMILY, REFERENCE_EXPERIMENT, REFERENCE_SOURCE

__all__ = [
    "STAGE_TAGS",
    "VERDICTS",
    "AtScale",
    "Evidence",
    "Inputs",
    "Summary",
    "first_sentence",
    "load_inputs",
    "reference_figure",
    "stage_tags",
    "summarise",
    "summaries",
    "verdict_boxes",
]

VERDICTS = Path("tables") / "verdict"
BASELINE_CONFIG = "fp32:single"
MIB = 2**20

# Where a method's metadata ``use`` says it is for pre-training or fine-tuning (or not): the tag, and
# the words of ``use`` that say so. A tag shows only while its words are there, and a test holds
# every entry to the metadata, so rewording ``use`` cannot leave a stale tag behind.
STAGE_TAGS: Mapping[str, tuple[tuple[str, str], ...]] = {
    "alibi": (("pre-training", "language models trained from the start"),),
    "gated_linear_units": (("pre-training", "Transformer language models, trained from the start"),),
    "seq_length_warmup": (("pre-training", "Pre-training of causal (GPT-style) or masked language models"),),
    "sam": (("fine-tuning", "and in fine-tuning"),),
    "layer_freezing": (("fine-tuning", "transformers in the last part of training or in fine-tuning"),),
    "half_precision": (("fine-tuning", "e.g. inference or short fine-tuning"),),
    "ema": (("not for short fine-tuning", "It does not help where the weights barely move (short fine-tuning"),),
}

# The reference experiment's row for a best practice's Trainer option, and the row it is read against.
# Its automatic mixed precision is float16 autocast with a GradScaler (the source's code), so it is
# amp_fp16's row only: it is not shown as a figure for amp_bf16 (Mixed Precision's option).
REFERENCE_ROWS = {
    ("precision", "fp16"): "Half precision (fp16), one GPU",
    ("precision", "amp_fp16"): "Automatic mixed precision, one GPU",
    ("parallel", "dp"): "DataParallel, 4 GPUs",
    ("parallel", "ddp"): "DistributedDataParallel, 4 GPUs",
    ("parallel", "fsdp"): "Fully Sharded Data Parallel, 4 GPUs",
}
REFERENCE_BASELINE = "Single precision (fp32), one GPU"
REFERENCE_SETTING = (
    "a pretrained ResNet-50 fine-tuned on CIFAR-10, 5 epochs at batch 128, runs per configuration not stated "
    "(a hand-run experiment, not a paper)"
)


@dataclass(frozen=True)
class AtScale:
    """A figure at scale as its source states it; ``quoted`` is False where the source gives none
    (``setting`` then says what it does say)."""

    figure: str
    setting: str
    source: str
    hardware: str
    url: str

    @property
    def quoted(self) -> bool:
        return not self.figure.casefold().startswith("no figure")


@dataclass(frozen=True)
class Evidence:
    """One measurement of this project: a method's row in an effects file, or a best practice's
    configuration in a training comparison. A row that did not act, does not apply or failed has a
    ``reason`` and no figure."""

    what: str  # "Vision workload (resnet20 on digits, 8 px images)" or "`fp16:single` (resnet20 on digits, 8 px)"
    hardware: str
    status: str  # measured | did_not_act | not_applicable | failed | skipped
    reason: str | None
    quality: str | None  # with its interval and verdict; None for a training configuration or without an effect
    throughput: str | None  # ratio or speed-up with its interval
    memory: str | None
    file: str  # the results file it comes from
    status_text: str | None = None  # what the status reads as where the row knows more ("not applicable at 8 px")

    @property
    def measured(self) -> bool:
        return self.status == "measured"

    @property
    def status_label(self) -> str:
        return self.status_text or {**STATUS_LABELS, "skipped": "not run here"}[self.status]

    @property
    def cost(self) -> str:
        """What it costs in speed and memory, in one phrase: ``throughput ...; memory ...``."""
        parts = [
            f"throughput {self.throughput}" if self.throughput else "",
            f"memory {self.memory}" if self.memory else "",
        ]
        return "; ".join(p for p in parts if p) or "not measured"


@dataclass(frozen=True)
class Summary:
    """What a method or best practice buys: when it helps, its sourced figures, this project's evidence."""

    key: str
    name: str
    kind: str
    when: str  # the first sentence of its metadata's ``use``
    sourced: tuple[AtScale, ...]  # its metadata's figure at scale first, then the reference experiment's row
    evidence: tuple[Evidence, ...]
    stages: tuple[str, ...]  # "pre-training", "fine-tuning", "not for short fine-tuning"

    @property
    def hardware(self) -> str | None:
        """The hardware of every measurement, where they share one."""
        machines = {e.hardware for e in self.evidence}
        return machines.pop() if len(machines) == 1 else None

    @property
    def best(self) -> AtScale | None:
        """The figure a short box shows: the first one quoted, else what the source says without one."""
        return next((a for a in self.sourced if a.quoted), self.sourced[0] if self.sourced else None)


# --------------------------------------------------------------------------------------------- text

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")


def first_sentence(text: str) -> str:
    """The first sentence of ``text`` (whitespace folded)."""
    return _SENTENCE_END.split(one_line(text), maxsplit=1)[0]


def stage_tags(record: MethodRecord) -> tuple[str, ...]:
    """The training stages ``record``'s ``use`` names (:data:`STAGE_TAGS`), where its words still say so."""
    use = one_line(record.use)
    return tuple(tag for tag, words in STAGE_TAGS.get(record.key, ()) if words in use)


def _ratio(value: float) -> str:
    return f"{value:.3f}x" if value < 0.1 else f"{value:.2f}x"


def _range(median: float, low: float, high: float, runs: int) -> str:
    """``0.83x (range 0.71x–1.01x over 3 runs)``; with no spread, ``0.50x in every run``."""
    if _ratio(low) == _ratio(high):
        return f"{_ratio(median)} in each of {runs} runs"
    return f"{_ratio(median)} (range {_ratio(low)}\u2013{_ratio(high)} over {runs} runs)"


def _short(reason: str | None, limit: int = 120) -> str | None:
    """A reason cut to about ``limit`` characters at a word (a failure's message can run to a paragraph;
    the card shows it whole)."""
    if reason is None or len(reason) <= limit:
        return reason
    return reason[:limit].rsplit(" ", 1)[0].rstrip(",;:") + "\u2026"


# --------------------------------------------------------------------------------------------- methods


def _effects_evidence(view: EffectsFile, key: str) -> list[Evidence]:
    evidence = []
    for row in view.rows_of(key):
        what = f"{view.workload_label}, {view.settings['model']} on {view.settings['data']}"
        what += f" (run as {row.variant})" if row.variant else ""
        evidence.append(
            Evidence(
                what=what,
                hardware=view.hardware,
                status=row.status,
                reason=None if row.measured else _short(row.reason),
                quality=row.quality,
                throughput=row.throughput,
                memory=row.memory,
                file=view.file,
                status_text=row.status_label,
            )
        )
    return evidence


def sourced_figure(record: MethodRecord) -> AtScale | None:
    """The figure at scale ``record``'s metadata quotes (``at_scale``), whitespace folded; None without one."""
    return AtScale(**{k: one_line(v) if v else v for k, v in record.at_scale.items()}) if record.at_scale else None


def _at_scale(record: MethodRecord) -> list[AtScale]:
    figure = sourced_figure(record)
    return [figure] if figure else []


# --------------------------------------------------------------------------------------------- best practices


def reference_figure(option: str, value: Any) -> AtScale | None:
    """The reference experiment's row for ``option=value``, read against its fp32 row; None without one."""
    rows = {row.configuration: row for row in REFERENCE_EXPERIMENT}
    row, base = rows.get(REFERENCE_ROWS.get((option, value), "")), rows.get(REFERENCE_BASELINE)
    if row is None or base is None or row.time_s is None:
        return None
    parts = [f"{row.time_s:,} s for 5 epochs against {base.time_s:,} s in fp32 on one GPU"]
    if row.memory_gb is not None:
        parts.append(f"{row.memory_gb:.2f} GB of GPU memory per GPU against {base.memory_gb:.2f} GB")
    if row.accuracy is not None:
        parts.append(f"about {row.accuracy} % accuracy against {base.accuracy} %")
    gpus = "four NVIDIA Tesla P40 GPUs" if "4 GPUs" in row.configuration else "one NVIDIA Tesla P40 GPU"
    return AtScale(
        figure=f"{row.configuration}: " + ", ".join(parts),
        setting=REFERENCE_SETTING,
        source=f"reference experiment ({REFERENCE_SOURCE['name']})",
        hardware=gpus,
        url=REFERENCE_SOURCE["url"],
    )


def _runs_of(summary: Sequence[Mapping[str, Any]], option: str, value: Any) -> list[Mapping[str, Any]]:
    """A best practice's configurations in a training comparison: its precision and its sibling (the
    other 16-bit format, as its card shows them) in one process, or its parallel mode in every precision."""
    if option == "precision":
        family = PRECISION_FAMILY.get(value, (value,))
        return [e for e in summary if e["precision"] in family and e["parallel"] == "single"]
    if option == "parallel":
        return [e for e in summary if e["parallel"] == value]
    return []  # the comparison varies only precision and parallel mode


def _ratio_of(mine: Mapping[str, float], theirs: Mapping[str, float], runs: int) -> str:
    """Median over median, with the range the runs' extremes allow."""
    return _range(mine["median"] / theirs["median"], mine["min"] / theirs["max"], mine["max"] / theirs["min"], runs)


def _memory(entry: Mapping[str, Any], base: Mapping[str, Any], runs: int) -> str | None:
    """Peak memory against the baseline's (peak tensor memory, torch's accounting, where both have
    it; else the process's peak), and the weights' when they differ."""
    tensor, base_tensor = entry.get("tensor_memory"), base.get("tensor_memory")  # absent in older files
    if tensor and base_tensor:
        mine, theirs, kind = tensor["peak_bytes"], base_tensor["peak_bytes"], "peak tensor memory"
    else:
        mine, theirs = entry["peak_memory_bytes"], base["peak_memory_bytes"]
        kind = "peak GPU memory" if entry["memory_kind"] == "cuda_max_allocated" else "peak of the process"
    if not mine or not theirs:
        return None
    weights, base_weights = entry["model_memory_bytes"], base["model_memory_bytes"]
    if weights and base_weights and weights["median"] != base_weights["median"]:
        kind += f"; weights {_ratio_of(weights, base_weights, runs)}"
    return f"{_ratio_of(mine, theirs, runs)} ({kind})"


def _speedup(entry: Mapping[str, Any], runs: int) -> str | None:
    check, speedup = entry["super_linear"], entry["speedup"]
    if check is not None and check["flagged"]:
        return "flagged: a super-linear speed-up, re-measured and not published as a finding"
    if speedup is None:
        return None
    over = "" if speedup["over"] == BASELINE_CONFIG else f" over {speedup['over']}"
    return f"{_range(speedup['median'], speedup['min'], speedup['max'], runs)}{over}"


def _cpu_speed_reason(entry: Mapping[str, Any], env: Mapping[str, Any]) -> str:
    """Why a training configuration's speed on a CPU is not its cost: a parallel mode's processes
    share the machine's cores, and a 16-bit precision's speed is that of a GPU's 16-bit units."""
    if entry["world_size"] > 1:
        return f"its {entry['world_size']} processes share the machine's {env['cpu_count']} CPU cores"
    return "its speed is that of a GPU's 16-bit matrix units, which this CPU lacks"


def _training_evidence(path: Path, document: Mapping[str, Any], option: str, value: Any) -> list[Evidence]:
    env, settings = document["environment"], document["settings"]
    base = next((e for e in document["summary"] if e["config"] == BASELINE_CONFIG), None)
    evidence = []
    for entry in _runs_of(document["summary"], option, value):
        what = f"{entry['config']} against {BASELINE_CONFIG} ({settings['model']} on {settings['data']}"
        if env["device_type"] == "cpu" and entry["world_size"] > 1:
            what += f"; {entry['world_size']} processes sharing {env['cpu_count']} CPU cores"
        what += ")"
        status, reason, speed, memory = entry["status"], entry["reason"], None, None
        if did_not_act(entry):
            status, reason = "did_not_act", did_not_act(entry)
        elif status != "ok":
            reason = _short(reason)
        elif status == "ok":
            runs = entry["ok_runs"]
            status, speed = "measured", _speedup(entry, runs)
            if env["device_type"] == "cpu":  # what these modes buy in speed is a GPU's, or more devices'
                speed = f"{NOT_MEASURABLE} ({_cpu_speed_reason(entry, env)})"
            memory = _memory(entry, base, runs) if base is not None and base["status"] == "ok" else None
        evidence.append(
            Evidence(
                what=what,
                hardware=env["hardware"],
                status=status,
                reason=reason,
                quality=None,
                throughput=speed,
                memory=memory,
                file=f"results/{path.name}",
            )
        )
    return evidence


# --------------------------------------------------------------------------------------------- summaries


def summarise(
    record: MethodRecord, effects: Sequence[EffectsFile], results: Sequence[tuple[Path, Mapping[str, Any]]]
) -> Summary:
    """What ``record`` buys: its sourced figures and this project's evidence of it, from the effects
    files (a method) or the training comparisons (a best practice)."""
    sourced = _at_scale(record)
    evidence: list[Evidence] = []
    if record.is_best_practice:
        if record.trainer_option:
            ((option, value),) = record.trainer_option.items()
            reference = reference_figure(option, value)
            sourced += [reference] if reference else []
            for path, document in results:
                evidence += _training_evidence(path, document, option, value)
    else:
        for view in effects:
            evidence += _effects_evidence(view, record.key)
    return Summary(
        key=record.key,
        name=record.name,
        kind=record.kind,
        when=first_sentence(record.use),
        sourced=tuple(sourced),
        evidence=tuple(evidence),
        stages=stage_tags(record),
    )


def summaries(site: Site) -> dict[str, Summary]:
    """The summary of every method and best practice of ``site``, by key."""
    views = effects_files(site.methods, site.effects)
    return {r.key: summarise(r, views, site.results) for r in site.methods}


def verdict_boxes(site: Site) -> dict[Path, Content]:
    """``tables/verdict/<key>.md.inc`` for every method and best practice: the "Should I use it?" box
    its card includes (links in it are relative to ``method_cards/``)."""
    return {
        VERDICTS / f"{key}.md.inc": site.render("verdict_snippet.md.inc.j2", summary=summary)
        for key, summary in summaries(site).items()
    }


@dataclass(frozen=True)
class Inputs:
    """What the summaries are made of, read once: the records, the effects files as the cards show
    them, the training comparisons, and the results files read (for Sphinx's dependencies; a
    record's file is its ``path``)."""

    records: Mapping[str, MethodRecord]
    effects: Sequence[EffectsFile]
    results: Sequence[tuple[Path, Mapping[str, Any]]]
    results_files: Sequence[Path]

    def summary(self, key: str) -> Summary:
        return summarise(self.records[key], self.effects, self.results)


def load_inputs(metadata_root: Path | None = None, results_root: Path | None = None) -> Inputs:
    """Read and validate the metadata and the committed results; a problem is a :class:`ValueError`
    with one line per problem."""
    records, metadata_problems = validate_files(discover_metadata_files(metadata_root))
    committed, problems = load_committed(results_root)
    problems = [str(p) for p in metadata_problems] + problems
    if problems:
        raise ValueError("\n".join(problems))
    methods = sorted_methods(records)
    return Inputs(
        records={r.key: r for r in methods},
        effects=effects_files(methods, committed.effects),
        results=committed.results,
        results_files=[*(p for p, _ in committed.results), *(p for p, _ in committed.effects)],
    )
