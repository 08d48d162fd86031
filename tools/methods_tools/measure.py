"""Measure each method's effects against a baseline: the logic of ``tools/measure_methods.py``.

A domain's reference workload (vision: a CIFAR ResNet on the digits; nlp: a small causal
transformer on the standard library's source) trains once as a baseline and once with each method
of that domain (``kind: method``) on its own, with its metadata's suggested hyperparameters, for
every seed. A method whose metadata names ``workload: {"model": ...}`` (one that acts on modules
the workload's model lacks, such as group norms) trains that reference model instead, and a
baseline of that model runs for the same seeds to compare it with. Every (method, seed) job is one run of the training
comparison's harness (:func:`methods_tools.compare.run_config`: its own worker process, the same
progress lines, failures recorded with their reason, a timeout). The runs, and per method the
mean and spread over seeds with its ratios and changes against the baseline of the same seed,
go to ``results/effects/*.json`` (``algorithms/effects.schema.json``), which the cards render.

The file is written after every job, so a run that stops can be resumed: jobs whose run is in
the file (same method, seed and hyperparameters, status ok) are skipped. ``only`` re-measures
the named methods (and the baseline of a seed that has none); ``shard = (K, N)`` runs jobs K,
K+N, K+2N, ... of the full list, and :func:`merge_documents` joins the pieces.
:func:`resummarize_files` recomputes the summaries of written files from their runs, nothing re-run.

Nothing here imports torch until a job runs.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from . import compare, evidence
from .files import write_atomic
from .results import EFFECTS_DIR, ResultsError, effects_problems, effects_runs_problems, load_effects

__all__ = [
    "BASELINE",
    "WORKLOADS",
    "Job",
    "MeasureError",
    "MeasureOptions",
    "Workload",
    "domain_methods",
    "merge_documents",
    "method_workloads",
    "plan_jobs",
    "resummarize_files",
    "resummarized",
    "run_measurement",
    "select_jobs",
    "summarize",
]

BASELINE = "baseline"
SCHEMA_VERSION = 4  # algorithms/effects.schema.json
Progress = Callable[[str], None]


class MeasureError(ValueError):
    """Options or files that cannot be used: one line per problem."""


@dataclass(frozen=True)
class Workload:
    """A domain's reference workload and its default size.

    ``image_size`` is for image data, ``seq_len`` for text; ``metric`` is the figure of quality:
    ``accuracy`` (higher is better) or ``loss`` (a language model's validation loss, lower is
    better); ``eval_examples`` evaluates that many held-out examples (evenly spaced) instead of all.
    ``domain`` is whose methods it measures (default: the workload's own name, ``vision`` or
    ``nlp``), and ``methods`` narrows them to those keys (default: all of them). ``recipes``
    measures published recipes (:mod:`algorithms.recipes`) instead of methods: each run trains a
    recipe's whole stack, with :data:`algorithms.recipes.SMALL_SCALE`'s changes, as one method.
    """

    model: str
    data: str
    image_size: int | None
    epochs: int
    batch_size: int
    lr: float = 0.05
    max_batches: int | None = None
    seq_len: int | None = None
    optimizer: str = "sgd"
    eval_examples: int | None = None
    metric: str = "accuracy"
    test_fraction: float | None = None
    schedule: str = "constant"
    domain: str | None = None
    methods: tuple[str, ...] | None = None
    recipes: tuple[str, ...] | None = None

    def options(self, workload: str, seeds: Iterable[int], **changes: Any) -> MeasureOptions:
        """The options of a sweep of this workload (named ``workload``) over ``seeds``, with ``changes``."""
        return MeasureOptions(workload=workload, seeds=tuple(seeds), **{**asdict(self), **changes})


# The vision workload: ResNet-20 on the digits at their native 8 px, trained on a fifth of them
# (359 images) for 12 epochs with a one-cycle schedule, tested on the other 1,438. Why: on all the
# training digits the baseline reaches about 98 % (no room left for an effect to show), and at 4
# epochs of a constant rate its accuracy swung by 2.3 points between seeds, so a paired change
# had a spread of 3 to 5 points. With a fifth of the images the baseline sits near 95 %, the
# larger test split and the annealed rate bring the paired spread to about one point (measured:
# 6 seeds, baseline 95.1 % +- 0.9, label smoothing's paired change +1.3 +- 1.0 points), and a run
# trains in about 2 s on two CPU cores, so 10 seeds give intervals of about +-1 point.
# The nlp workload: 100 AdamW steps of 32 windows of 128 bytes (409,600 tokens), then the
# validation loss on 256 held-out windows through Trainer.eval. A run trains in 12 to 35 s on two
# CPU cores, plus about 4 s to start its process and read the corpus. The baseline's validation
# loss falls from ln 256 = 5.55 nats per byte (chance) to about 2.9.
# The torchvision and gpt2 workloads measure the surgery and loss methods on the classes users
# train, beside the project's small models: torchvision's ResNet-18, unchanged, on the same digits
# and schedule as the vision workload but upsampled to 32 px (its stride-2 stem and max pooling
# would leave 2x2 maps of 8 px images); and a Hugging Face GPT2LMHeadModel built from a config of
# Transformer-tiny's size on the nlp workload's data and steps. A torchvision run trains in about
# 15 s on one CPU thread (0.2 s a step of 64 images); torchvision needs torch 2.14.1 here, so its
# sweep runs in the environment of nox -s models.
SURGERY_AND_LOSS = {
    "vision": (
        "blurpool",
        "cutmix",
        "factorize",
        "ghost_batchnorm",
        "label_smoothing",
        "mixup",
        "squeeze_excite",
        "stochastic_depth",
        "weight_standardization",
    ),
    "nlp": ("alibi", "gated_linear_units", "label_smoothing", "low_precision_layernorm"),
}
WORKLOADS: Mapping[str, Workload] = {
    "vision": Workload(
        model="resnet20",
        data="digits",
        image_size=8,
        epochs=12,
        batch_size=64,
        lr=0.1,
        test_fraction=0.8,
        schedule="onecycle",
    ),
    "nlp": Workload(
        model="transformer_tiny",
        data="stdlib_text",
        image_size=None,
        seq_len=128,
        epochs=1,
        max_batches=100,
        batch_size=32,
        lr=3e-3,
        optimizer="adamw",
        eval_examples=256,
        metric="loss",
    ),
}
# The same settings as the domain's own workload, on the model users train.
WORKLOADS = {
    **WORKLOADS,
    "torchvision": replace(
        WORKLOADS["vision"],
        model="torchvision_resnet18",
        image_size=32,
        domain="vision",
        methods=SURGERY_AND_LOSS["vision"],
    ),
    "gpt2": replace(WORKLOADS["nlp"], model="hf_gpt2_tiny", domain="nlp", methods=SURGERY_AND_LOSS["nlp"]),
}
# Composer's ResNet-50 recipes, each stack as one method, on the torchvision workload: ProgressiveResizing
# (a half-size start), ColOut (rows and columns dropped) and BlurPool (anti-aliased strides) need more
# than the digits' 8 pixels to mean anything, and ResNet-18 is the closest of the reference models to
# the recipes' ResNet-50.
WORKLOADS["recipes"] = replace(WORKLOADS["torchvision"], methods=None, recipes=("mild", "medium", "hot"))


@dataclass(frozen=True)
class MeasureOptions:
    workload: str
    model: str
    data: str
    image_size: int | None
    epochs: int
    batch_size: int
    seeds: tuple[int, ...]
    lr: float = 0.05
    max_batches: int | None = None
    data_root: str | None = None
    timeout_s: float = 1800.0
    command: str = ""
    seq_len: int | None = None
    optimizer: str = "sgd"
    eval_examples: int | None = None
    metric: str = "accuracy"
    test_fraction: float | None = None
    schedule: str = "constant"
    threads: int = 1  # one intra-op thread a run: on shared cores, oversubscribed threads make timings erratic
    domain: str | None = None  # whose methods: default the workload's name
    methods: tuple[str, ...] | None = None  # those of them measured: default all
    recipes: tuple[str, ...] | None = None  # recipes measured instead of methods (algorithms.recipes)

    def method_hparams(self, records: Mapping[str, Any] | None = None) -> dict[str, dict[str, Any]]:
        """The methods this sweep measures, by key, with their suggested hyperparameters; or the
        recipes, by key, with each member's arguments (``{member: {...}}``) as the stack runs here."""
        if self.recipes is not None:
            from algorithms.recipes import get_recipe, small_scale_hparams

            return {key: small_scale_hparams(get_recipe(key)) for key in self.recipes}
        methods = domain_methods(self.domain or self.workload, records)
        return methods if self.methods is None else {k: h for k, h in methods.items() if k in self.methods}

    def method_workloads(self, records: Mapping[str, Any] | None = None) -> dict[str, tuple[str | None, str | None]]:
        """:func:`method_workloads` of the methods this sweep measures (none for recipes)."""
        if self.recipes is not None:
            return {}
        chosen = self.method_hparams(records)
        return {k: w for k, w in method_workloads(self.domain or self.workload, records).items() if k in chosen}

    def settings(self) -> dict[str, Any]:
        """What every run trains: two files merge, or a file is resumed, only when these are equal."""
        from algorithms.metadata import load_all_datasets

        classes = load_all_datasets()[self.data].raw.get("num_classes")
        chance = 1 / classes if classes and self.metric == "accuracy" else None
        return {
            "workload": self.workload,
            "model": self.model,
            "data": self.data,
            "image_size": self.image_size,
            "seq_len": self.seq_len,
            "epochs": self.epochs,
            "batch_size": self.batch_size,
            "max_batches": self.max_batches,
            "lr": self.lr,
            "optimizer": self.optimizer,
            "precision": "fp32",
            "eval_examples": self.eval_examples,
            "metric": self.metric,
            "throughput_unit": "images" if self.seq_len is None else "tokens",
            "chance_accuracy": chance,
            "test_fraction": self.test_fraction,
            "schedule": self.schedule,
            "threads": self.threads,
        }


@dataclass(frozen=True)
class Job:
    method: str  # BASELINE or a method's key
    seed: int
    hparams: Mapping[str, Any] = field(default_factory=dict)
    model: str | None = None  # a reference model other than the workload's (a method's workload.model)
    precision: str | None = None  # a precision other than the workload's (a method's workload.precision)

    @property
    def label(self) -> str:
        where = ", ".join(filter(None, (self.model, self.precision)))
        return f"{self.method}{f' ({where})' if where else ''} seed {self.seed}"


def domain_methods(domain: str, records: Mapping[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Every method (``kind: method``) of ``domain``, by key, with its suggested hyperparameters."""
    if records is None:
        from algorithms.metadata import load_all_metadata

        records = load_all_metadata()
    return {
        key: {name: h.suggested for name, h in record.hyperparameters.items()}
        for key, record in sorted(records.items())
        if record.kind == "method" and domain in record.domains
    }


def method_workloads(domain: str, records: Mapping[str, Any] | None = None) -> dict[str, tuple[str | None, str | None]]:
    """The methods of ``domain`` whose metadata names where they apply (``workload: {"model": ...,
    "precision": ...}``), by key: (model or None, precision or None)."""
    if records is None:
        from algorithms.metadata import load_all_metadata

        records = load_all_metadata()
    return {
        key: (record.raw["workload"].get("model"), record.raw["workload"].get("precision"))
        for key, record in sorted(records.items())
        if record.kind == "method" and domain in record.domains and record.raw.get("workload")
    }


def plan_jobs(
    methods: Mapping[str, Mapping[str, Any]],
    seeds: Sequence[int],
    workloads: Mapping[str, tuple[str | None, str | None]] = {},
) -> list[Job]:
    """Every job of a full sweep, interleaved: per seed, the baseline (then one of each other model
    and precision in ``workloads``, a method key -> where it is measured), then each method, so
    the baselines and the methods take turns and a change in the machine's load over the sweep
    falls on them alike."""
    others = sorted(set(workloads.values()) - {(None, None)}, key=lambda w: (w[0] or "", w[1] or ""))
    return [
        job
        for s in seeds
        for job in (
            Job(BASELINE, s),
            *(Job(BASELINE, s, model=m, precision=p) for m, p in others),
            *(Job(key, s, dict(h), *workloads.get(key, (None, None))) for key, h in methods.items()),
        )
    ]


def _hparams_key(hparams: Mapping[str, Any]) -> str:
    return json.dumps(hparams, sort_keys=True)


def _job_key(
    method: str, model: str | None, precision: str | None, seed: int, hparams: Mapping[str, Any]
) -> tuple[Any, ...]:
    return method, model, precision, seed, _hparams_key(hparams)


def select_jobs(
    jobs: Sequence[Job],
    existing: Iterable[Mapping[str, Any]],
    *,
    only: Iterable[str] = (),
    shard: tuple[int, int] | None = None,
) -> list[Job]:
    """The jobs still to run: this shard's (jobs K, K+N, ... of the full list), of the ``only``
    methods when given (redone even when measured, and so are the baselines they are compared
    with, so that each pair is measured side by side, under the same load), else those without a
    successful run of the same method, model, precision, seed and hyperparameters. With ``only``,
    a baseline is of the model and precision the named methods are measured in."""
    only = set(only)
    only_models = {(job.model, job.precision) for job in jobs if job.method in only}
    if shard is not None:
        k, n = shard
        jobs = jobs[k::n]
    done = {
        _job_key(r["method"], r["model"], r["precision"], r["seed"], r["hparams"])
        for r in existing
        if r["status"] == "ok"
    }
    selected = []
    for job in jobs:
        if only and job.method != BASELINE and job.method not in only:
            continue
        if only and job.method == BASELINE and (job.model, job.precision) not in only_models:
            continue
        if only or _job_key(job.method, job.model, job.precision, job.seed, job.hparams) not in done:
            selected.append(job)
    return selected


# --------------------------------------------------------------------------------------------- runs


def compare_options(job: Job, options: MeasureOptions) -> compare.CompareOptions:
    """The training comparison's options for one job: its worker runs the job."""
    return compare.CompareOptions(
        model=job.model or options.model,
        data=options.data,
        epochs=options.epochs,
        batch_size=options.batch_size,
        configs=(compare.Config(job.precision or "fp32", "single"),),
        nproc=1,
        max_batches=options.max_batches,
        data_root=options.data_root,
        image_size=options.image_size,
        seed=job.seed,
        lr=options.lr,
        timeout_s=options.timeout_s,
        algorithm=None if job.method == BASELINE else f"recipe:{job.method}" if options.recipes else job.method,
        hparams=json.dumps(dict(job.hparams)),
        seq_len=options.seq_len,
        eval_examples=options.eval_examples,
        optimizer=options.optimizer,
        test_fraction=options.test_fraction,
        schedule=options.schedule,
        threads=options.threads,
    )


def run_job(job: Job, options: MeasureOptions, env: Mapping[str, Any], progress: Progress) -> dict[str, Any]:
    """One (method, seed) run in its own worker process (the training comparison's worker), as an
    effects run entry; a failure is recorded with its reason."""
    import time

    start = compare.environment()
    run: dict[str, Any] = {
        "method": job.method,
        "model": job.model,
        "precision": job.precision,
        "seed": job.seed,
        "hparams": dict(job.hparams),
        "status": "failed",
        "reason": None,
        "date": start["date"],
        "load_average": start["load_average"],
        "command": options.command,
        "wall_s": None,
        "eval_s": None,
        "job_s": None,
        "samples": None,
        "tokens": None,
        "throughput": None,
        "peak_memory_bytes": None,
        "memory_kind": None,
        "tensor_memory": None,
        "accuracy": None,
        "loss": None,
        "activity": None,
        "acted": None,
    }
    settings = compare_options(job, options)
    began = time.perf_counter()
    returncode, tail, ranks = compare.run_worker(
        lambda out_dir: compare.worker_command(settings.configs[0], settings, out_dir, 1), options.timeout_s, progress
    )
    run["job_s"] = time.perf_counter() - began
    failure = compare.worker_failure(returncode, tail, ranks, options.timeout_s)
    if failure or ranks[0]["status"] != "ok":
        return {**run, "reason": failure or ranks[0]["reason"]}
    record = ranks[0]
    trained = record["tokens"] if options.seq_len is not None else record["samples"]
    run.update(
        {
            k: record[k]
            for k in (
                "wall_s",
                "eval_s",
                "samples",
                "tokens",
                "peak_memory_bytes",
                "memory_kind",
                "tensor_memory",
                "accuracy",
                "loss",
                "activity",
                "acted",
            )
        }
    )
    run.update(status="ok", throughput=trained / record["wall_s"] if record["wall_s"] > 0 else 0.0)
    return run


def _method_order(method: str, model: str | None = None, precision: str | None = None) -> tuple[int, str, str, str]:
    """The baseline of the workload's model, the baselines of other models, then the methods."""
    if method == BASELINE:
        return (0, "", "", "") if model is None and precision is None else (1, model or "", precision or "", "")
    return 2, method, model or "", precision or ""


def _tensor_peak(run: Mapping[str, Any]) -> int:
    return run["tensor_memory"]["peak_bytes"]


def tensor_memory_medians(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The median over ``runs`` of each tensor-memory figure (a split figure is None unless every
    run has it), with how they were measured; None unless every run has a peak (runs measured
    before tensor memory was, or whose measurement failed)."""
    figures = [r.get("tensor_memory") for r in runs]
    if not figures or any(f is None or f["peak_bytes"] is None for f in figures):
        return None
    medians: dict[str, Any] = {
        name: statistics.median(f[name] for f in figures) if all(f[name] is not None for f in figures) else None
        for name in compare.TENSOR_FIGURES
    }
    return {**medians, "how": figures[0]["how"]}


def summarize(runs: Sequence[Mapping[str, Any]], settings: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per baseline, then per method, on its model and precision: the evidence over the seeds where
    both it and its baseline ran (:mod:`methods_tools.evidence`), or why it has none. The quality
    changes of every method row form one family, whose p-values are adjusted by Holm's correction
    (``p_holm``, over ``holm_family`` methods).

    A method whose every run recorded no activity *did not act*; a method whose runs all failed
    (or were not applicable) is shown so, with the first reason. The memory ratio is of the runs'
    peak tensor memory (torch's accounting) where every paired run has one, and the entry's
    ``tensor_memory`` then holds its medians; else it is of the process's peak (``peak_memory_bytes``)
    and ``tensor_memory`` is None. Where no run has a ``tensor_memory`` field (a file measured before
    it was), no entry has one either, so that such a file's summary is what it was."""
    higher = settings["metric"] == "accuracy"
    metric = settings["metric"]
    # Runs measured before tensor memory have no such field, and their summary none either.
    tensor_field = any("tensor_memory" in r for r in runs)
    keys = sorted({(r["method"], r["model"], r["precision"]) for r in runs}, key=lambda k: _method_order(*k))
    ok = [r for r in runs if r["status"] == "ok"]
    baseline = {(r["model"], r["precision"], r["seed"]): r for r in ok if r["method"] == BASELINE}
    summary = []
    for method, model, precision in keys:
        mine = sorted(
            (r for r in runs if (r["method"], r["model"], r["precision"]) == (method, model, precision)),
            key=lambda r: r["seed"],
        )
        good = [r for r in mine if r["status"] == "ok"]
        entry: dict[str, Any] = {
            "method": method,
            "model": model,
            "precision": precision,
            "hparams": mine[-1]["hparams"],
            "seeds": [],
            "status": "measured",
            "reason": None,
            "commands": list(dict.fromkeys(r["command"] for r in mine if r["command"])),
            "activity": None,
            "quality": None,
            "throughput": None,
            "memory": None,
            **({"tensor_memory": None} if tensor_field else {}),
            "baseline": None,
        }
        if not good:
            status = "not_applicable" if all(r["status"] == "not_applicable" for r in mine) else "failed"
            summary.append({**entry, "status": status, "reason": next(r["reason"] for r in mine if r["reason"])})
            continue
        if method == BASELINE:
            mean, low, high = evidence.mean_interval([r[metric] for r in good])
            speeds = compare.spread([r["throughput"] for r in good])
            summary.append(
                {
                    **entry,
                    "status": "baseline",
                    "seeds": [r["seed"] for r in good],
                    **({"tensor_memory": tensor_memory_medians(good)} if tensor_field else {}),
                    "baseline": {
                        "metric": metric,
                        "mean": mean,
                        "low": low,
                        "high": high,
                        **{f"throughput_{name}": value for name, value in speeds.items()},
                    },
                }
            )
            continue
        paired = [
            (r, baseline[(model, precision, r["seed"])]) for r in good if (model, precision, r["seed"]) in baseline
        ]
        counters = sorted({name for r in good for name in (r["activity"] or {})})
        entry["activity"] = {
            name: sum((r["activity"] or {}).get(name, 0) for r in good) / len(good) for name in counters
        }
        entry["seeds"] = [r["seed"] for r, _ in paired]
        if not any(r["acted"] for r in good):
            summary.append(
                {
                    **entry,
                    "status": "did_not_act",
                    "reason": (
                        f"its recorded activity shows it did not act in any of its {len(good)} runs "
                        f"({evidence.activity_text(entry['activity']) or 'no counter'} per run)"
                    ),
                }
            )
            continue
        quality = evidence.paired_change(
            [r[metric] for r, _ in paired],
            [b[metric] for _, b in paired],
            higher_is_better=higher,
            margin=evidence.margin_of("quality", metric),
        )
        speed = evidence.ratio_of_medians(
            [r["throughput"] for r, _ in paired],
            [b["throughput"] for _, b in paired],
            higher_is_better=True,
            margin=evidence.margin_of("throughput", metric),
        )
        # Tensor memory where every pair has it (torch's accounting), else the process's peak.
        tensor = tensor_memory_medians([r for r, _ in paired])
        if tensor is not None and tensor_memory_medians([b for _, b in paired]) is not None:
            mine, theirs = [_tensor_peak(r) for r, _ in paired], [_tensor_peak(b) for _, b in paired]
        else:
            tensor = None
            mine, theirs = [r["peak_memory_bytes"] for r, _ in paired], [b["peak_memory_bytes"] for _, b in paired]
        memory = evidence.ratio_of_medians(
            mine, theirs, higher_is_better=False, margin=evidence.margin_of("memory", metric)
        )
        if quality is None or speed is None:
            summary.append(
                {
                    **entry,
                    "status": "failed",
                    "reason": (
                        f"fewer than two seeds with both a run of the method and of its baseline ({len(paired)})"
                    ),
                }
            )
            continue
        baseline_mean = sum(b[metric] for _, b in paired) / len(paired)
        summary.append(
            {
                **entry,
                "quality": {"metric": metric, "baseline": baseline_mean, **quality},
                "throughput": speed,
                "memory": memory,
                **({"tensor_memory": tensor} if tensor_field else {}),
            }
        )
    # Holm's correction over the file's family: every method row with a change in quality
    family = [entry["quality"] for entry in summary if entry["quality"] is not None]
    for quality, adjusted in zip(family, evidence.holm([q["p_value"] for q in family]), strict=True):
        quality.update(p_holm=adjusted, holm_family=len(family))
    return summary


def build_document(
    env: Mapping[str, Any], settings: Mapping[str, Any], commands: Sequence[str], runs: Iterable[Mapping[str, Any]]
) -> dict[str, Any]:
    """The validated effects document of ``runs`` (one per method, model and seed: a later one wins).

    Runs are kept in the order they ran (interleaved by seed); a job run again replaces its
    earlier run and moves to when it ran."""
    by_job: dict[tuple[str, str | None, str | None, int], Mapping[str, Any]] = {}
    for run in runs:
        key = (run["method"], run["model"], run["precision"], run["seed"])
        by_job.pop(key, None)  # a rerun moves to when it ran
        by_job[key] = run
    ordered = list(by_job.values())
    document = {
        "$schema": "../../algorithms/effects.schema.json",
        "schema_version": SCHEMA_VERSION,
        "environment": dict(env),
        "settings": dict(settings),
        "commands": list(commands),
        "runs": ordered,
        "summary": summarize(ordered, settings),
    }
    problems = effects_problems(document)
    if problems:  # a bug in this tool, not a user mistake: never write an invalid file
        raise RuntimeError("effects do not match the schema:\n" + "\n".join(problems))
    return document


def _machine(env: Mapping[str, Any]) -> tuple[Any, ...]:
    """What must agree for runs to be compared: the hardware and the software."""
    return env["device_type"], env["hardware"], env["torch"]


def compatibility_problems(
    where: str, document: Mapping[str, Any], settings: Mapping[str, Any], env: Mapping[str, Any]
) -> list[str]:
    """Why runs measured with ``settings`` on ``env`` cannot join ``document`` (empty when they can)."""
    problems = []
    theirs = document["settings"]
    for name in sorted(set(theirs) | set(settings)):
        if theirs.get(name) != settings.get(name):
            problems.append(
                f"{where}: settings: {name} is {theirs.get(name)!r} there, {settings.get(name)!r} here "
                "— use the same settings, or another output file"
            )
    if _machine(document["environment"]) != _machine(env):
        problems.append(
            f"{where}: environment: measured on {document['environment']['hardware']} with torch "
            f"{document['environment']['torch']}, not {env['hardware']} with torch {env['torch']} "
            "— runs on different machines are not compared; use another output file"
        )
    return problems


def merge_documents(pieces: Sequence[tuple[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """One document of the pieces (a sweep split with shards): their settings and machine must be
    the same; for a job in two pieces, the later piece's run wins. Its environment is the latest
    piece's."""
    first_where, first = pieces[0]
    problems = []
    for where, piece in pieces[1:]:
        problems += compatibility_problems(where, piece, first["settings"], first["environment"])
    if problems:
        raise MeasureError("\n".join(problems))
    latest = max((piece for _, piece in pieces), key=lambda p: p["environment"]["date"])
    commands = list(dict.fromkeys(c for _, piece in pieces for c in piece["commands"]))
    return build_document(
        latest["environment"], first["settings"], commands, [run for _, piece in pieces for run in piece["runs"]]
    )


def read_existing(path: Path) -> dict[str, Any] | None:
    """The valid effects file at ``path``, None when there is none; :class:`MeasureError` when invalid."""
    if not path.exists():
        return None
    try:
        return load_effects(path)
    except ResultsError as exc:
        raise MeasureError(str(exc)) from None


def resummarized(path: Path) -> tuple[str, dict[str, Any], list[str]]:
    """The effects file at ``path`` with its summary recomputed from its runs, nothing re-run (the
    current schema version: its verdicts, margins and Holm's correction), as ``(its text, the
    document, one line per verdict that changed)``; a file of schema version 3 is read too, since
    its runs are those of the current one. :class:`MeasureError` when it cannot be read. The same
    runs give the same text, so recomputing twice changes nothing."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise MeasureError(f"{path}: no such file — name an effects file, e.g. results/effects/*.json") from None
    except json.JSONDecodeError as exc:
        raise MeasureError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg} — fix the file or measure again") from None
    problems = effects_runs_problems(data, str(path))
    if problems:
        raise MeasureError("\n".join(problems))
    document = build_document(data["environment"], data["settings"], data["commands"], data["runs"])
    before = {(e.get("method"), e.get("model"), e.get("precision")): e for e in data["summary"] if isinstance(e, dict)}
    changed = []
    for entry in document["summary"]:
        old = before.get((entry["method"], entry["model"], entry["precision"]), {})
        for figure in ("quality", "throughput", "memory"):
            was = (old.get(figure) or {}).get("verdict")
            now = (entry[figure] or {}).get("verdict")
            if was != now:
                label = ", ".join(v for v in (entry["method"], entry["model"], entry["precision"]) if v)
                changed.append(f"{label}: {figure} {was or 'none'} -> {now or 'none'}")
    return json.dumps(document, indent=2) + "\n", document, changed


def resummarize_files(paths: Sequence[Path], progress: Progress = lambda s: None) -> None:
    """Recompute the summary of each effects file of ``paths`` from its runs (:func:`resummarized`)
    and write it in place, atomically; every file is read before any is written, so one that
    cannot be read (:class:`MeasureError`, one line per problem) leaves them all as they were."""
    problems, done = [], []
    for path in paths:
        try:
            done.append((path, *resummarized(path)))
        except MeasureError as exc:
            problems.append(str(exc))
    if problems:
        raise MeasureError("\n".join(problems + ["nothing written"]))
    for path, text, document, changed in done:
        if path.read_text(encoding="utf-8") == text:
            progress(f"{path}: summary up to date ({len(document['runs'])} runs)")
            continue
        write_atomic(path, text, force=True)
        progress(
            f"{path}: summary recomputed from {len(document['runs'])} runs, schema version {SCHEMA_VERSION}; "
            + (f"{len(changed)} verdicts changed: {'; '.join(changed)}" if changed else "no verdict changed")
        )


def default_output_path(workload: str, env: Mapping[str, Any], root: Path = EFFECTS_DIR) -> Path:
    """``results/effects/<workload>-<cpu|gpu>-<hardware slug>.json`` (no date: a rerun resumes it)."""
    machine = compare.default_output_path(dict(env), root).stem.removesuffix(f"-{env['date'][:10]}")
    return root / f"{workload}-{machine}.json"


def run_measurement(
    options: MeasureOptions,
    out: Path,
    *,
    only: Sequence[str] = (),
    shard: tuple[int, int] | None = None,
    force: bool = False,
    progress: Progress = lambda s: None,
    runner: Callable[..., dict[str, Any]] = run_job,
    env: Mapping[str, Any] | None = None,
    records: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Run the jobs still to run into ``out`` (resumed when it holds compatible runs; started afresh
    with ``force``), writing it after every job; return the final document. The methods are those
    of ``records`` (default: the library's metadata)."""
    env = dict(env) if env is not None else compare.environment()
    settings = options.settings()
    existing = None if force else read_existing(out)
    if existing is not None:
        problems = compatibility_problems(str(out), existing, settings, env)
        if problems:
            raise MeasureError("\n".join(problems + [f"{out}: pass --force to measure afresh into it"]))
    old_runs = list(existing["runs"]) if existing else []
    commands = [*(existing["commands"] if existing else []), options.command]
    plan = plan_jobs(options.method_hparams(records), options.seeds, options.method_workloads(records))
    jobs = select_jobs(plan, old_runs, only=only, shard=shard)
    runs = old_runs
    document = None
    for i, job in enumerate(jobs, start=1):
        prefix = f"[{i}/{len(jobs)}]"
        progress(f"{prefix} {job.label}: starting")
        run = runner(job, options, env, lambda line, prefix=prefix: progress(f"{prefix} {line}"))
        detail = (
            run["reason"]
            if run["status"] != "ok"
            else f"trained {run['wall_s']:.1f} s of {run['job_s']:.1f} s, {options.metric} "
            f"{run[options.metric]:.4f}" + ("" if run["acted"] is not False else ", did not act")
        )
        progress(f"{prefix} {job.label}: {run['status']} ({detail})")
        runs = [*runs, run]
        document = build_document(env, settings, commands, runs)
        write_atomic(out, json.dumps(document, indent=2) + "\n", force=True)
    if document is None:
        if existing is None:
            raise MeasureError(f"{out}: no job to run — nothing written")
        progress("nothing to run: every job has a successful run in the file")
        document = existing
    return document


# --------------------------------------------------------------------------------------------- command


def _parse_shard(text: str) -> tuple[int, int]:
    k, sep, n = text.partition("/")
    if not sep or not k.isdigit() or not n.isdigit() or int(n) < 1 or int(k) >= int(n):
        raise ValueError(f"--shard: {text!r} — write K/N with 0 <= K < N, e.g. 0/4 (jobs 0, 4, 8, ...)")
    return int(k), int(n)


def _parser(doc: str) -> Any:
    import argparse

    p = argparse.ArgumentParser(prog="tools/measure_methods.py", description=doc.split("\n\n")[0])
    p.add_argument("--workload", default="vision", help=f"one of {', '.join(WORKLOADS)}")
    p.add_argument("--data", help="the workload's data set (vision: digits, or cifar10 with --data-root)")
    p.add_argument("--data-root", help="cifar10: the extracted cifar-10-batches-py directory")
    p.add_argument("--image-size", type=int, help="vision: input size in pixels (default: 8, the digits' own)")
    p.add_argument("--seq-len", type=int, help="nlp: tokens per example (default: 128)")
    p.add_argument("--epochs", type=int, help="epochs per run (vision default: 12, nlp: 1)")
    p.add_argument("--batch-size", type=int, help="(vision default: 64, nlp: 32)")
    p.add_argument("--max-batches", type=int, help="cap on batches per epoch (nlp default: 100), e.g. for smoke runs")
    p.add_argument("--lr", type=float, help="learning rate (vision: SGD, one cycle to 0.1; nlp: AdamW, 0.003)")
    p.add_argument("--test-fraction", type=float, help="digits: the held-out share of the images (vision default: 0.8)")
    p.add_argument("--seeds", type=int, default=10, help="seeds 0..N-1 per method (default 10)")
    p.add_argument("--only", help="comma-separated method keys: re-measure them (and a missing baseline)")
    p.add_argument("--shard", help="K/N: run jobs K, K+N, K+2N, ... of the sweep (needs --out)")
    p.add_argument("--merge", nargs="+", type=Path, metavar="FILE", help="merge effects files into --out; runs nothing")
    p.add_argument(
        "--resummarize",
        nargs="+",
        type=Path,
        metavar="FILE",
        help="recompute each effects file's summary (verdicts, margins, Holm's correction) from its runs, "
        "in place; runs nothing",
    )
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds allowed per run")
    p.add_argument(
        "--out", type=Path, help="effects file (default: results/effects/<workload>-<cpu|gpu>-<hardware>.json)"
    )
    p.add_argument("--force", action="store_true", help="measure afresh into --out, or overwrite it with --merge")
    return p


def check_args(args: Any) -> tuple[list[str], MeasureOptions | None]:
    """One line per bad option, and the options when there is none."""
    problems = []
    if args.workload not in WORKLOADS:
        return [f"--workload: {args.workload!r} — use one of {', '.join(WORKLOADS)}"], None
    if args.resummarize:
        for flag in (
            "merge",
            "only",
            "shard",
            "out",
            "data",
            "data_root",
            "image_size",
            "seq_len",
            "epochs",
            "batch_size",
            "max_batches",
            "lr",
            "test_fraction",
        ):
            if getattr(args, flag) not in (None, False):
                problems.append(f"--{flag.replace('_', '-')}: not with --resummarize, which runs nothing")
        if args.force:
            problems.append("--force: not with --resummarize, which rewrites only the summary of the files it names")
        return problems, None
    if args.merge:
        for flag in ("only", "shard"):
            if getattr(args, flag):
                problems.append(f"--{flag}: not with --merge, which runs nothing")
        if args.out is None:
            problems.append("--merge: give --out, the merged file")
        problems += [f"{p}: no such file" for p in args.merge if not p.is_file()]
        if args.out is not None and args.out.exists() and not args.force:
            problems.append(f"{args.out}: exists — pass --force to overwrite it, or choose --out")
        return problems, None
    default = WORKLOADS[args.workload]
    text = default.seq_len is not None
    for flag, value, wrong in (("--image-size", args.image_size, text), ("--seq-len", args.seq_len, not text)):
        if value is not None and wrong:
            problems.append(
                f"{flag}: not for the {args.workload} workload, whose data are "
                f"{'text: give --seq-len' if text else 'images: give --image-size'}"
            )
    options = default.options(
        args.workload,
        range(max(args.seeds, 0)),
        data=args.data or default.data,
        image_size=None if text else args.image_size or default.image_size,
        seq_len=args.seq_len or default.seq_len if text else None,
        epochs=args.epochs or default.epochs,
        batch_size=args.batch_size or default.batch_size,
        lr=args.lr if args.lr is not None else default.lr,
        max_batches=args.max_batches if args.max_batches is not None else default.max_batches,
        data_root=args.data_root,
        timeout_s=args.timeout,
        test_fraction=None if text else args.test_fraction if args.test_fraction is not None else default.test_fraction,
    )
    problems += compare.check_options(
        options.model, options.data, options.data_root, options.epochs, options.batch_size, options.max_batches, 1
    )
    for flag, value in (
        ("--epochs", args.epochs),
        ("--batch-size", args.batch_size),
        ("--image-size", args.image_size),
        ("--seq-len", args.seq_len),
    ):
        if value is not None and value < 1 and f"{flag}: {value} — must be at least 1" not in problems:
            problems.append(f"{flag}: {value} — must be at least 1")
    if args.test_fraction is not None and (text or not 0 < args.test_fraction < 1):
        problems.append(
            f"--test-fraction: {args.test_fraction} — "
            + ("not for text data" if text else "must be between 0 and 1 (the held-out share)")
        )
    if args.seeds < 2:
        problems.append(f"--seeds: {args.seeds} — must be at least 2: the spread over seeds needs two")
    if args.lr is not None and not args.lr > 0:
        problems.append(f"--lr: {args.lr} — must be positive")
    if not args.timeout > 0:
        problems.append(f"--timeout: {args.timeout} — must be positive")
    methods = options.method_hparams()
    known_models = set(compare.model_names())
    for key, (model, _) in options.method_workloads().items():
        if model is not None and model not in known_models:
            problems.append(
                f"algorithms/{key}/metadata.json: workload: model {model!r} is not a reference model "
                f"— use one of {', '.join(sorted(known_models))}"
            )
    for key in _only(args):
        if key not in methods:
            what = "a recipe" if options.recipes else f"a {args.workload} method"
            problems.append(f"--only: {key!r} is not {what} — use one of {', '.join(methods)}")
    if args.only is not None and not _only(args):
        problems.append("--only: empty — name at least one method, e.g. --only cutmix")
    if args.shard is not None:
        try:
            _parse_shard(args.shard)
        except ValueError as exc:
            problems.append(str(exc))
        if args.out is None:
            problems.append("--shard: give --out too: each shard writes its own piece, joined with --merge")
    return problems, options


def _only(args: Any) -> list[str]:
    return [k.strip() for k in (args.only or "").split(",") if k.strip()]


def main(argv: Sequence[str] | None = None, doc: str = __doc__) -> int:
    """``tools/measure_methods.py``: bad options are one line each, exit status 1, nothing written."""
    import sys

    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser(doc).parse_args(argv)
    problems, options = check_args(args)
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 1
    try:
        if args.resummarize:
            resummarize_files(args.resummarize, progress=print)
            return 0
        if args.merge:
            pieces = [(str(p), read_existing(p)) for p in args.merge]
            document = merge_documents([(w, d) for w, d in pieces if d is not None])
            write_atomic(args.out, json.dumps(document, indent=2) + "\n", force=args.force)
            print(f"wrote {args.out}: {len(document['runs'])} runs from {len(pieces)} files")
            return 0
        assert options is not None
        options = MeasureOptions(
            **{**options.__dict__, "command": " ".join(["python tools/measure_methods.py", *argv])}
        )
        env = compare.environment()
        out = args.out or default_output_path(options.workload, env)
        document = run_measurement(
            options,
            out,
            only=_only(args),
            shard=_parse_shard(args.shard) if args.shard else None,
            force=args.force,
            progress=lambda line: print(line, file=sys.stderr, flush=True),
            env=env,
        )
    except MeasureError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    failed = [r for r in document["runs"] if r["status"] != "ok"]
    print(f"{out}: {len(document['runs'])} runs, {len(failed)} failed")
    return 0
