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

Nothing here imports torch until a job runs.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import compare
from .files import write_atomic
from .results import EFFECTS_DIR, V1_SETTINGS, ResultsError, effects_problems, load_effects

__all__ = ["BASELINE", "WORKLOADS", "Job", "MeasureError", "MeasureOptions", "Workload", "domain_methods",
           "merge_documents", "method_models", "plan_jobs", "run_measurement", "select_jobs", "summarize"]

BASELINE = "baseline"
Progress = Callable[[str], None]


class MeasureError(ValueError):
    """Options or files that cannot be used: one line per problem."""


@dataclass(frozen=True)
class Workload:
    """A domain's reference workload and its default size.

    ``image_size`` is for image data, ``seq_len`` for text; ``metric`` is the figure of quality:
    ``accuracy`` (higher is better) or ``loss`` (a language model's validation loss, lower is
    better); ``eval_examples`` evaluates that many held-out examples (evenly spaced) instead of all.
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


# The vision workload's defaults keep the whole sweep (a baseline and four methods, three seeds:
# 15 runs) near 10 minutes on two CPU cores: at 16 px a ResNet-20 epoch over the 1,438 training
# digits takes about 7 s there (32 px: about 24 s), and four epochs put the baseline far above
# the 10 % of chance (tools/measure_methods.py says more).
# The nlp workload: 150 AdamW steps of 32 windows of 128 bytes (614,400 tokens, about a sixth of
# an epoch of the 3.9 M training bytes), then the validation loss on 256 held-out windows. Measured
# on two CPU cores shared with other jobs: 100 steps trained in 12 s at load 3.1 (0.12 s a step),
# 200 steps in 68 s at load 3.4 to 4.2 (0.34 s a step), so a run of 150 takes 18 to 50 s plus about
# 4 s to start its process and read the corpus. The baseline's validation loss falls from ln 256
# = 5.55 nats per byte (chance) to 2.86 after 100 steps and 2.59 after 200.
WORKLOADS: Mapping[str, Workload] = {
    "vision": Workload(model="resnet20", data="digits", image_size=16, epochs=4, batch_size=64),
    "nlp": Workload(model="transformer_tiny", data="stdlib_text", image_size=None, seq_len=128, epochs=1,
                    max_batches=150, batch_size=32, lr=3e-3, optimizer="adamw", eval_examples=256, metric="loss"),
}


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

    def settings(self) -> dict[str, Any]:
        """What every run trains: two files merge, or a file is resumed, only when these are equal."""
        from algorithms.metadata import load_all_datasets

        classes = load_all_datasets()[self.data].raw.get("num_classes")
        chance = 1 / classes if classes and self.metric == "accuracy" else None
        return {"workload": self.workload, "model": self.model, "data": self.data, "image_size": self.image_size,
                "seq_len": self.seq_len, "epochs": self.epochs, "batch_size": self.batch_size,
                "max_batches": self.max_batches, "lr": self.lr, "optimizer": self.optimizer, "precision": "fp32",
                "eval_examples": self.eval_examples, "metric": self.metric,
                "throughput_unit": "samples" if self.seq_len is None else "tokens", "chance_accuracy": chance}


@dataclass(frozen=True)
class Job:
    method: str  # BASELINE or a method's key
    seed: int
    hparams: Mapping[str, Any] = field(default_factory=dict)
    model: str | None = None  # a reference model other than the workload's (a method's workload.model)

    @property
    def label(self) -> str:
        return f"{self.method}{f' ({self.model})' if self.model else ''} seed {self.seed}"


def domain_methods(domain: str, records: Mapping[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Every method (``kind: method``) of ``domain``, by key, with its suggested hyperparameters."""
    if records is None:
        from algorithms.metadata import load_all_metadata

        records = load_all_metadata()
    return {key: {name: h.suggested for name, h in record.hyperparameters.items()}
            for key, record in sorted(records.items()) if record.kind == "method" and domain in record.domains}


def method_models(domain: str, records: Mapping[str, Any] | None = None) -> dict[str, str]:
    """The methods of ``domain`` whose metadata names a reference model to measure them on
    (``workload: {"model": ...}``), by key."""
    if records is None:
        from algorithms.metadata import load_all_metadata

        records = load_all_metadata()
    return {key: record.raw["workload"]["model"] for key, record in sorted(records.items())
            if record.kind == "method" and domain in record.domains and record.raw.get("workload")}


def plan_jobs(methods: Mapping[str, Mapping[str, Any]], seeds: Sequence[int],
              models: Mapping[str, str] = {}) -> list[Job]:
    """Every job of a full sweep, in a fixed order: per seed, the baseline (then one of each other
    model in ``models``, a method key -> the model it is measured on), then each method, so a
    change in the machine's load over the sweep falls on the baselines and the methods alike."""
    others = sorted(set(models.values()))
    return [job for s in seeds
            for job in (Job(BASELINE, s), *(Job(BASELINE, s, model=m) for m in others),
                        *(Job(key, s, dict(h), models.get(key)) for key, h in methods.items()))]


def _hparams_key(hparams: Mapping[str, Any]) -> str:
    return json.dumps(hparams, sort_keys=True)


def _job_key(method: str, model: str | None, seed: int, hparams: Mapping[str, Any]) -> tuple[Any, ...]:
    return method, model, seed, _hparams_key(hparams)


def select_jobs(jobs: Sequence[Job], existing: Iterable[Mapping[str, Any]], *, only: Iterable[str] = (),
                shard: tuple[int, int] | None = None) -> list[Job]:
    """The jobs still to run: this shard's (jobs K, K+N, ... of the full list), of the ``only``
    methods when given (redone even when measured; the baseline only where a seed has none),
    else those without a successful run of the same method, model, seed and hyperparameters. With
    ``only``, a baseline is of the model the named methods are measured on."""
    only = set(only)
    only_models = {job.model for job in jobs if job.method in only}
    if shard is not None:
        k, n = shard
        jobs = jobs[k::n]
    done = {_job_key(r["method"], r.get("model"), r["seed"], r["hparams"]) for r in existing if r["status"] == "ok"}
    selected = []
    for job in jobs:
        if only and job.method != BASELINE and job.method not in only:
            continue
        if only and job.method == BASELINE and job.model not in only_models:
            continue
        if job.method in only or _job_key(job.method, job.model, job.seed, job.hparams) not in done:
            selected.append(job)
    return selected


# --------------------------------------------------------------------------------------------- runs

def run_job(job: Job, options: MeasureOptions, env: Mapping[str, Any], progress: Progress) -> dict[str, Any]:
    """One (method, seed) run in the comparison's harness, as an effects run entry."""
    compare_options = compare.CompareOptions(
        model=job.model or options.model, data=options.data, epochs=options.epochs, batch_size=options.batch_size,
        configs=(compare.Config("fp32", "single"),), nproc=1, max_batches=options.max_batches,
        data_root=options.data_root, image_size=options.image_size, seed=job.seed, lr=options.lr,
        timeout_s=options.timeout_s, algorithm=None if job.method == BASELINE else job.method,
        hparams=json.dumps(dict(job.hparams)), seq_len=options.seq_len, eval_examples=options.eval_examples,
        optimizer=options.optimizer)
    start = compare.environment()
    run = compare.run_config(compare_options.configs[0], compare_options, dict(env), progress)
    throughput = run["throughput"]
    if throughput is not None and options.seq_len is not None:
        throughput *= options.seq_len  # every example is a full window: tokens per second
    return {
        "method": job.method, "model": job.model, "seed": job.seed, "hparams": dict(job.hparams),
        "status": "ok" if run["status"] == "ok" else "failed", "reason": run["reason"],
        "date": start["date"], "load_average": start["load_average"], "throughput": throughput,
        **{k: run[k] for k in ("wall_s", "samples", "peak_memory_bytes", "memory_kind", "accuracy", "loss")},
    }


def _spread(values: Sequence[float]) -> dict[str, Any] | None:
    """Mean and sample standard deviation (None with one value); None with none."""
    if not values:
        return None
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else None
    return {"mean": mean, "std": std}


def _method_order(method: str, model: str | None = None) -> tuple[int, str, str]:
    """The baseline of the workload's model, the baselines of other models, then the methods."""
    if method == BASELINE:
        return (0, "", "") if model is None else (1, model, "")
    return 2, method, model or ""


def _per_seed(paired: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]], name: str,
              op: Callable[[float, float], float]) -> dict[str, Any] | None:
    """The spread of ``op(run, baseline)`` over the seeds where both have ``name``."""
    return _spread([op(r[name], b[name]) for r, b in paired
                    if r[name] is not None and b[name] is not None and (op is _change or b[name] > 0)])


def _ratio(a: float, b: float) -> float:
    return a / b


def _change(a: float, b: float) -> float:
    return a - b


def summarize(runs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per method (baselines first) and model, over its successful seeds: mean and spread of each
    figure, and the per-seed ratios and changes against the baseline's run of the same model and
    seed."""
    ok = [r for r in runs if r["status"] == "ok"]
    baseline = {(r["model"], r["seed"]): r for r in ok if r["method"] == BASELINE}
    summary = []
    for method, model in sorted({(r["method"], r["model"]) for r in ok}, key=lambda k: _method_order(*k)):
        mine = sorted((r for r in ok if r["method"] == method and r["model"] == model), key=lambda r: r["seed"])
        paired = [(r, baseline[(model, r["seed"])]) for r in mine
                  if (model, r["seed"]) in baseline and method != BASELINE]
        summary.append({
            "method": method, "model": model, "hparams": mine[-1]["hparams"], "seeds": [r["seed"] for r in mine],
            **{name: _spread([r[name] for r in mine if r[name] is not None])
               for name in ("throughput", "peak_memory_bytes", "wall_s", "accuracy", "loss")},
            "throughput_ratio": _per_seed(paired, "throughput", _ratio),
            "memory_ratio": _per_seed(paired, "peak_memory_bytes", _ratio),
            "accuracy_change": _per_seed(paired, "accuracy", _change),
            "loss_change": _per_seed(paired, "loss", _change),
        })
    return summary


def build_document(env: Mapping[str, Any], settings: Mapping[str, Any], commands: Sequence[str],
                   runs: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The validated effects document of ``runs`` (one per method, model and seed: a later one wins).

    Settings a caller leaves out are those of the first (vision) workload's files, and a run
    without a ``model`` is of the workload's model (:func:`methods_tools.results.upgrade_effects`)."""
    settings = {**V1_SETTINGS, **settings}
    by_job: dict[tuple[str, str | None, int], Mapping[str, Any]] = {}
    for run in ({"model": None, **r} for r in runs):
        by_job[(run["method"], run["model"], run["seed"])] = run
    ordered = [by_job[k] for k in sorted(by_job, key=lambda k: (_method_order(k[0], k[1]), k[2]))]
    document = {
        "$schema": "../../algorithms/effects.schema.json", "schema_version": 2,
        "environment": dict(env), "settings": dict(settings), "commands": list(commands),
        "runs": ordered, "summary": summarize(ordered),
    }
    problems = effects_problems(document)
    if problems:  # a bug in this tool, not a user mistake: never write an invalid file
        raise RuntimeError("effects do not match the schema:\n" + "\n".join(problems))
    return document


def _machine(env: Mapping[str, Any]) -> tuple[Any, ...]:
    """What must agree for runs to be compared: the hardware and the software."""
    return env["device_type"], env["hardware"], env["torch"]


def compatibility_problems(where: str, document: Mapping[str, Any], settings: Mapping[str, Any],
                           env: Mapping[str, Any]) -> list[str]:
    """Why runs measured with ``settings`` on ``env`` cannot join ``document`` (empty when they can)."""
    problems = []
    theirs = document["settings"]
    for name in sorted(set(theirs) | set(settings)):
        if theirs.get(name) != settings.get(name):
            problems.append(f"{where}: settings: {name} is {theirs.get(name)!r} there, {settings.get(name)!r} here "
                            "— use the same settings, or another output file")
    if _machine(document["environment"]) != _machine(env):
        problems.append(f"{where}: environment: measured on {document['environment']['hardware']} with torch "
                        f"{document['environment']['torch']}, not {env['hardware']} with torch {env['torch']} "
                        "— runs on different machines are not compared; use another output file")
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
    return build_document(latest["environment"], first["settings"], commands,
                          [run for _, piece in pieces for run in piece["runs"]])


def read_existing(path: Path) -> dict[str, Any] | None:
    """The valid effects file at ``path``, None when there is none; :class:`MeasureError` when invalid."""
    if not path.exists():
        return None
    try:
        return load_effects(path)
    except ResultsError as exc:
        raise MeasureError(str(exc)) from None


def default_output_path(workload: str, env: Mapping[str, Any], root: Path = EFFECTS_DIR) -> Path:
    """``results/effects/<workload>-<cpu|gpu>-<hardware slug>.json`` (no date: a rerun resumes it)."""
    machine = compare.default_output_path(dict(env), root).stem.removesuffix(f"-{env['date'][:10]}")
    return root / f"{workload}-{machine}.json"


def run_measurement(options: MeasureOptions, out: Path, *, only: Sequence[str] = (),
                    shard: tuple[int, int] | None = None, force: bool = False, progress: Progress = lambda s: None,
                    runner: Callable[..., dict[str, Any]] = run_job, env: Mapping[str, Any] | None = None,
                    records: Mapping[str, Any] | None = None) -> dict[str, Any]:
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
    plan = plan_jobs(domain_methods(options.workload, records), options.seeds,
                     method_models(options.workload, records))
    jobs = select_jobs(plan, old_runs, only=only, shard=shard)
    runs = old_runs
    document = None
    for i, job in enumerate(jobs, start=1):
        prefix = f"[{i}/{len(jobs)}]"
        progress(f"{prefix} {job.label}: starting")
        run = runner(job, options, env, lambda line, prefix=prefix: progress(f"{prefix} {line}"))
        detail = (run["reason"] if run["status"] != "ok"
                  else f"{run['wall_s']:.1f} s, {options.metric} {run[options.metric]}")
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
    p.add_argument("--image-size", type=int, help="vision: input size in pixels (default: 16)")
    p.add_argument("--seq-len", type=int, help="nlp: tokens per example (default: 128)")
    p.add_argument("--epochs", type=int, help="epochs per run (vision default: 4, nlp: 1)")
    p.add_argument("--batch-size", type=int, help="(vision default: 64, nlp: 32)")
    p.add_argument("--max-batches", type=int, help="cap on batches per epoch (nlp default: 150), e.g. for smoke runs")
    p.add_argument("--lr", type=float, help="learning rate (vision: SGD, 0.05; nlp: AdamW, 0.003)")
    p.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 per method (default 3)")
    p.add_argument("--only", help="comma-separated method keys: re-measure them (and a missing baseline)")
    p.add_argument("--shard", help="K/N: run jobs K, K+N, K+2N, ... of the sweep (needs --out)")
    p.add_argument("--merge", nargs="+", type=Path, metavar="FILE", help="merge effects files into --out; runs nothing")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds allowed per run")
    p.add_argument("--out", type=Path,
                   help="effects file (default: results/effects/<workload>-<cpu|gpu>-<hardware>.json)")
    p.add_argument("--force", action="store_true", help="measure afresh into --out, or overwrite it with --merge")
    return p


def check_args(args: Any) -> tuple[list[str], MeasureOptions | None]:
    """One line per bad option, and the options when there is none."""
    problems = []
    if args.workload not in WORKLOADS:
        return [f"--workload: {args.workload!r} — use one of {', '.join(WORKLOADS)}"], None
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
            problems.append(f"{flag}: not for the {args.workload} workload, whose data are "
                            f"{'text: give --seq-len' if text else 'images: give --image-size'}")
    options = MeasureOptions(
        workload=args.workload, model=default.model, data=args.data or default.data,
        image_size=None if text else args.image_size or default.image_size,
        seq_len=args.seq_len or default.seq_len if text else None, epochs=args.epochs or default.epochs,
        batch_size=args.batch_size or default.batch_size, seeds=tuple(range(max(args.seeds, 0))),
        lr=args.lr if args.lr is not None else default.lr,
        max_batches=args.max_batches if args.max_batches is not None else default.max_batches,
        data_root=args.data_root, timeout_s=args.timeout, optimizer=default.optimizer,
        eval_examples=default.eval_examples, metric=default.metric)
    problems += compare.check_options(options.model, options.data, options.data_root, options.epochs,
                                      options.batch_size, options.max_batches, 1)
    for flag, value in (("--epochs", args.epochs), ("--batch-size", args.batch_size),
                        ("--image-size", args.image_size), ("--seq-len", args.seq_len)):
        if value is not None and value < 1 and f"{flag}: {value} — must be at least 1" not in problems:
            problems.append(f"{flag}: {value} — must be at least 1")
    if args.seeds < 2:
        problems.append(f"--seeds: {args.seeds} — must be at least 2: the spread over seeds needs two")
    if args.lr is not None and not args.lr > 0:
        problems.append(f"--lr: {args.lr} — must be positive")
    if not args.timeout > 0:
        problems.append(f"--timeout: {args.timeout} — must be positive")
    methods = domain_methods(args.workload)
    known_models = set(compare.model_names())
    for key, model in method_models(args.workload).items():
        if model not in known_models:
            problems.append(f"algorithms/{key}/metadata.json: workload: model {model!r} is not a reference model "
                            f"— use one of {', '.join(sorted(known_models))}")
    for key in _only(args):
        if key not in methods:
            problems.append(f"--only: {key!r} is not a {args.workload} method — use one of {', '.join(methods)}")
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
        if args.merge:
            pieces = [(str(p), read_existing(p)) for p in args.merge]
            document = merge_documents([(w, d) for w, d in pieces if d is not None])
            write_atomic(args.out, json.dumps(document, indent=2) + "\n", force=args.force)
            print(f"wrote {args.out}: {len(document['runs'])} runs from {len(pieces)} files")
            return 0
        assert options is not None
        options = MeasureOptions(**{**options.__dict__, "command": " ".join(["python tools/measure_methods.py",
                                                                               *argv])})
        env = compare.environment()
        out = args.out or default_output_path(options.workload, env)
        document = run_measurement(options, out, only=_only(args),
                                   shard=_parse_shard(args.shard) if args.shard else None, force=args.force,
                                   progress=lambda line: print(line, file=sys.stderr, flush=True), env=env)
    except MeasureError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    failed = [r for r in document["runs"] if r["status"] != "ok"]
    print(f"{out}: {len(document['runs'])} runs, {len(failed)} failed")
    return 0
