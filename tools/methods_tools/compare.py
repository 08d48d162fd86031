"""Compare training configurations (precision x parallel mode): the logic of
``tools/compare_training.py``.

Each run of a configuration is a process of its own, :mod:`methods_tools.compare_worker`; the
distributed ones (ddp, fsdp, deepspeed) under ``python -m torch.distributed.run --standalone``, and
``accelerate`` under ``accelerate launch --config_file configs/accelerate/<name>.yaml``.
Every configuration runs ``repeats`` times, interleaved: round 1 runs each configuration once,
then round 2, and so on, so a change in the machine's load reaches all of them. Per configuration
:func:`summarize` gives the median and range over its runs of the total time, the first epoch
(warm-up), the steady state (the epochs after it), the throughput in steady state, the peak
memory (the process's resident set on the CPU), the peak tensor memory with its split (torch's
accounting, measured apart from the timed run: :mod:`methods_tools.compare_worker`), accuracy and
loss. A multi-process configuration whose speed-up over the single-process
run of its precision exceeds its process count is re-measured once (one extra round of the two);
still above it, it is flagged, and the page does not publish it as a speed-up.

A configuration that fails is recorded with its error and the rest go on; one the machine
cannot run (DeepSpeed or Accelerate not installed, a precision its accelerator lacks, or an
Accelerate configuration that needs accelerator devices on a machine without them) is recorded as
skipped with the reason, once. The results are validated
against ``algorithms/results.schema.json`` before they are written.
"""

from __future__ import annotations

import collections
import datetime as _dt
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from algorithms.core.options import DISTRIBUTED, PARALLELS, PRECISIONS
from algorithms.data.names import dataset_names
from algorithms.models.names import model_input_sizes, model_names

from . import REPO_ROOT
from .results import RESULTS_DIR, results_problems

__all__ = [
    "Config",
    "CompareOptions",
    "SCHEMA_VERSION",
    "environment",
    "parse_configs",
    "run_comparison",
    "run_config",
    "default_output_path",
    "did_not_act",
    "run_worker",
    "spread",
    "steady_state",
    "summarize",
    "worker_failure",
]

SCHEMA_VERSION = 2  # algorithms/results.schema.json

# The Accelerate configuration files an ``accelerate`` configuration names (``fp32:accelerate:ddp``).
ACCELERATE_CONFIGS = REPO_ROOT / "configs" / "accelerate"
# The word that offloads a deepspeed or fsdp configuration to CPU memory: ``fp32:deepspeed:2+offload``,
# ``fp32:fsdp:offload``.
OFFLOAD = "offload"


Progress = Callable[[str], None]


@dataclass(frozen=True)
class Config:
    precision: str
    parallel: str
    zero_stage: int | None = None
    accelerate: str | None = None  # parallel "accelerate": the name of its file in configs/accelerate/
    # deepspeed and fsdp: offload to CPU memory everything the mode partitions (OFFLOAD below)
    offload: bool = False

    @property
    def label(self) -> str:
        third = self.zero_stage or self.accelerate
        if self.offload:
            third = f"{third}+{OFFLOAD}" if third else OFFLOAD
        return f"{self.precision}:{self.parallel}" + (f":{third}" if third else "")

    @property
    def accelerate_config(self) -> str | None:
        """The Accelerate configuration file, relative to the repository, or None."""
        return f"configs/accelerate/{self.accelerate}.yaml" if self.accelerate else None

    @property
    def accelerate_file(self) -> Path:
        """The Accelerate configuration file itself (``accelerate`` configurations only)."""
        assert self.accelerate_config is not None, self
        return REPO_ROOT / self.accelerate_config


def accelerate_config_names() -> list[str]:
    """The committed Accelerate configurations, by name (``configs/accelerate/<name>.yaml``)."""
    return sorted(path.stem for path in ACCELERATE_CONFIGS.glob("*.yaml"))


@dataclass(frozen=True)
class CompareOptions:
    model: str
    data: str
    epochs: int
    batch_size: int
    configs: tuple[Config, ...]
    nproc: int
    max_batches: int | None = None
    data_root: str | None = None
    image_size: int | None = None
    seed: int = 0
    lr: float = 0.05
    workers: int = 0
    timeout_s: float = 3600.0
    command: str = ""
    algorithm: str | None = None  # a method's key: the run trains with it (methods_tools.measure)
    hparams: str = "{}"  # that method's constructor arguments, a JSON object
    seq_len: int | None = None  # text data: tokens per example (default: the model's positions)
    eval_examples: int | None = None  # evaluate on this many held-out examples (default: all)
    optimizer: str = "sgd"  # or "adamw" (the language-model workload's)
    repeats: int = 1  # runs of each configuration, in interleaved rounds (tools/compare_training.py: 3)
    test_fraction: float | None = None  # digits: the held-out share (default: the data set's 0.2)
    schedule: str = "constant"  # or "onecycle" (the effects' vision workload)
    threads: int | None = None  # torch's intra-op threads per process (default: torch's choice)
    # The comparison's thread matching: the intra-op threads every run has in all, split evenly over
    # its processes (a single-process run uses them all, each of P processes 1/P of them); it
    # overrides ``threads``. None: each process takes ``threads``.
    threads_in_all: int | None = None


def parse_configs(text: str) -> tuple[Config, ...]:
    """``"fp32:single,amp_bf16:ddp,fp16:deepspeed:1,fp32:accelerate:fsdp"`` as configurations;
    ValueError lists every bad item.

    The optional third field of a ``deepspeed`` item is its ZeRO stage (1, 2 or 3; default 2); that
    of an ``accelerate`` item names its configuration file in ``configs/accelerate/`` (default
    ``ddp``). Offload to CPU memory is spelled ``+offload`` after the stage, and ``offload`` as the
    third field of ``fsdp``; it offloads everything the mode partitions: ``fp32:deepspeed:1+offload``
    and ``fp32:deepspeed:2+offload`` the optimizer (``DeepSpeed(offload_optimizer=True)``),
    ``fp32:deepspeed:3+offload`` the optimizer and the parameters (also ``offload_param=True``),
    and ``fp32:fsdp:offload`` the parameters, gradients and optimizer state
    (``FSDP(cpu_offload=True)``).
    """
    configs, problems = [], []
    accelerate_names = accelerate_config_names()
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        fields = item.split(":")
        if len(fields) not in (2, 3):
            problems.append(f"--configs: {item!r}: write precision:parallel, e.g. amp_bf16:ddp")
            continue
        precision, parallel = fields[0], fields[1]
        stage = fields[2] if len(fields) == 3 else None
        if precision not in PRECISIONS:
            problems.append(f"--configs: {item!r}: precision {precision!r} — use one of {', '.join(PRECISIONS)}")
        if parallel not in PARALLELS:
            problems.append(f"--configs: {item!r}: parallel {parallel!r} — use one of {', '.join(PARALLELS)}")
        if parallel == "accelerate":
            name = stage or "ddp"
            if name not in accelerate_names:
                problems.append(
                    f"--configs: {item!r}: no Accelerate configuration configs/accelerate/{name}.yaml — "
                    f"use one of {', '.join(accelerate_names)}"
                )
                continue
            configs.append(Config(precision, parallel, None, name))
            continue
        offload = stage is not None and (stage == OFFLOAD if parallel == "fsdp" else stage.endswith(f"+{OFFLOAD}"))
        if offload:
            stage = stage.removesuffix(OFFLOAD).removesuffix("+") or None
        if stage is not None and (parallel != "deepspeed" or stage not in ("1", "2", "3")):
            problems.append(
                f"--configs: {item!r}: a third field is the ZeRO stage of deepspeed (1, 2 or 3; +{OFFLOAD} "
                f"offloads to CPU memory, e.g. fp32:deepspeed:2+{OFFLOAD}), {OFFLOAD} for fsdp "
                f"(fp32:fsdp:{OFFLOAD}), or the Accelerate configuration of accelerate (e.g. fp32:accelerate:fsdp)"
            )
            continue
        zero = int(stage) if stage else (2 if parallel == "deepspeed" else None)
        configs.append(Config(precision, parallel, zero, offload=offload))
    if not configs and not problems:
        problems.append("--configs: empty — give at least one precision:parallel, e.g. fp32:single")
    if problems:
        raise ValueError("\n".join(problems))
    return tuple(dict.fromkeys(configs))


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment() -> dict[str, Any]:
    """The machine and software a comparison ran on (the parent's view; workers see the same)."""
    import torch

    cpu_model, cpu_count = (
        _cpu_model(),
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1),
    )
    if torch.cuda.is_available():
        count, name = torch.cuda.device_count(), torch.cuda.get_device_name(0)
        hardware, device_type = f"{count}x {name}", "cuda"
    else:
        count, name = 1, cpu_model
        hardware, device_type = f"{cpu_model}, {cpu_count} cores (CPU only)", "cpu"
    return {
        "hardware": hardware,
        "device_type": device_type,
        "device_name": name,
        "device_count": count,
        "cpu_model": cpu_model,
        "cpu_count": cpu_count,
        "torch": torch.__version__,
        "cuda": torch.version.cuda if torch.cuda.is_available() else None,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "load_average": _load_average(),
    }


def default_output_path(env: dict[str, Any], root: Path = RESULTS_DIR) -> Path:
    """``results/<cpu|gpu>-<hardware slug>-<date>.json``."""
    slug = "".join(c if c.isalnum() else "-" for c in env["device_name"].lower())
    slug = "-".join(part for part in slug.split("-") if part)[:40]
    kind = "gpu" if env["device_type"] == "cuda" else "cpu"
    return root / f"{kind}-{slug}-{env['date'][:10]}.json"


def _skipped_reason(config: Config, options: CompareOptions, env: dict[str, Any]) -> str | None:
    """Why this machine cannot run ``config``, known before launching it."""
    if config.parallel == "deepspeed":
        import torch

        from algorithms.core.distributed import deepspeed_precision_problem, deepspeed_unavailable_reason

        return deepspeed_unavailable_reason() or deepspeed_precision_problem(
            config.precision, torch.device(env["device_type"])
        )
    if config.parallel == "accelerate":
        return accelerate_skipped_reason(config, env["device_type"])
    return None


def accelerate_skipped_reason(config: Config, device_type: str) -> str | None:
    """Why ``config``'s Accelerate configuration cannot run on this machine, or None.

    Accelerate sets up its FSDP and DeepSpeed modes on accelerator devices only: on a machine with
    none it sets up MULTI_CPU (plain DDP) instead, or NO, one process, in each rank, and the
    Trainer refuses either rather than train in a mode the file did not ask for
    (``tests/core/test_accelerate.py``). Its DeepSpeed plugin also needs DeepSpeed, and, in
    Accelerate 1.16, ``transformers`` (it reads that package's version whatever the model)."""
    import importlib.util

    if importlib.util.find_spec("accelerate") is None:
        return "Accelerate is not installed: pip install 'methods-library[accelerate]'"
    from accelerate.commands.config.config_args import load_config_from_file

    loaded = load_config_from_file(str(config.accelerate_file))
    kind = getattr(loaded.distributed_type, "value", loaded.distributed_type)  # an enum, or its name
    if kind in ("FSDP", "DEEPSPEED") and device_type == "cpu":
        return (
            f"Accelerate runs its {kind} mode on accelerator devices only: on this machine, which has "
            "none, it sets up MULTI_CPU (plain DDP) or one process per rank, which the Trainer refuses "
            f"(the native {'fp32:fsdp' if kind == 'FSDP' else 'fp32:deepspeed'} rows run on the CPU)"
        )
    if kind == "DEEPSPEED":
        missing = [name for name in ("deepspeed", "transformers") if importlib.util.find_spec(name) is None]
        if missing:
            return (
                f"Accelerate's DeepSpeed plugin needs {' and '.join(missing)}, not installed: "
                f"pip install {' '.join(missing)}"
            )
    return None


def launch_environment(config: Config, device_type: str) -> dict[str, str]:
    """What a configuration's launch adds to the environment: ``ACCELERATE_USE_CPU=true`` for an
    Accelerate configuration on a machine without GPUs, so that ``accelerate launch`` of a
    ``MULTI_GPU`` file starts its processes (through torchrun) and Accelerate sets up its
    ``MULTI_CPU`` mode, DDP over gloo, in them."""
    if config.parallel == "accelerate" and device_type == "cpu":
        return {"ACCELERATE_USE_CPU": "true"}
    return {}


def launch_note(config: Config, device_type: str) -> str | None:
    """How an Accelerate configuration was launched, for its row."""
    if config.parallel != "accelerate":
        return None
    prefix = "ACCELERATE_USE_CPU=true " if launch_environment(config, device_type) else ""
    return f"launched with {prefix}accelerate launch --config_file {config.accelerate_config}"


def offload_note(config: Config, device_type: str) -> str | None:
    """What an offloaded configuration put in CPU memory, for its row; on a machine without GPUs,
    that it moved nothing (everything is in CPU memory there already)."""
    if not config.offload:
        return None
    if config.parallel == "fsdp":
        what = "FSDP CPUOffloadPolicy: parameter, gradient and optimizer-state shards in CPU memory"
    elif config.zero_stage == 3:
        what = "ZeRO offload_optimizer and offload_param: optimizer partitions and parameter partitions in CPU memory"
    else:
        what = "ZeRO offload_optimizer: optimizer partitions (state and fp32 master weights) in CPU memory"
    if device_type == "cpu":
        return f"{what}, where everything already is on this machine without GPUs: the offload moves nothing"
    return what


def _load_average() -> list[float] | None:
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None


def _empty_run(config: Config, world_size: int, status: str, reason: str | None) -> dict[str, Any]:
    return {
        "config": config.label,
        "precision": config.precision,
        "parallel": config.parallel,
        "zero_stage": config.zero_stage,
        "accelerate_config": config.accelerate_config,
        "world_size": world_size,
        "status": status,
        "reason": reason,
        "note": None,
        "wall_s": None,
        "epoch_s": [],
        "samples": None,
        "throughput": None,
        "peak_memory_bytes": None,
        "memory_kind": None,
        "peak_memory_per_device_bytes": [],
        "cuda_max_reserved_bytes": None,
        "model_memory_bytes": None,
        "parameters": None,
        "tensor_memory": None,
        "threads_per_process": None,
        "gpu_utilization": None,
        "gpu_utilization_reason": None,
        "accuracy": None,
        "loss": None,
    }


def processes(config: Config, options: CompareOptions) -> int:
    """The processes a run of ``config`` starts: ``options.nproc`` in a distributed mode, else 1
    (DataParallel replicates inside one process)."""
    return options.nproc if config.parallel in DISTRIBUTED else 1


def process_threads(config: Config, options: CompareOptions) -> int | None:
    """torch's intra-op threads in each process of a run of ``config``: with
    ``options.threads_in_all`` (which :func:`check_options` has checked divides evenly) that
    number over the run's processes, so every configuration of one comparison uses the same threads
    in all; else ``options.threads`` (None: torch's own choice)."""
    if options.threads_in_all is not None:
        return options.threads_in_all // processes(config, options)
    return options.threads


def worker_command(config: Config, options: CompareOptions, out_dir: Path, nproc: int) -> list[str]:
    """The command line that runs ``config``: the worker, under torchrun when it is distributed."""
    args = [
        "-m",
        "methods_tools.compare_worker",
        "--model",
        options.model,
        "--data",
        options.data,
        "--epochs",
        str(options.epochs),
        "--batch-size",
        str(options.batch_size),
        "--precision",
        config.precision,
        "--parallel",
        config.parallel,
        "--seed",
        str(options.seed),
        "--lr",
        str(options.lr),
        "--workers",
        str(options.workers),
        "--optimizer",
        options.optimizer,
        "--schedule",
        options.schedule,
        "--out-dir",
        str(out_dir),
    ]
    for flag, value in (
        ("--max-batches", options.max_batches),
        ("--data-root", options.data_root),
        ("--image-size", options.image_size),
        ("--seq-len", options.seq_len),
        ("--eval-examples", options.eval_examples),
        ("--zero-stage", config.zero_stage),
        ("--algorithm", options.algorithm),
        ("--test-fraction", options.test_fraction),
        ("--threads", process_threads(config, options)),
    ):
        if value is not None:
            args += [flag, str(value)]
    if options.algorithm is not None:
        args += ["--hparams", options.hparams]
    if config.offload:
        args.append("--offload")
    if config.parallel == "accelerate":
        # Accelerate's launcher reads the file and starts the processes through torchrun (port 0:
        # a free one on localhost).
        return [
            sys.executable,
            "-m",
            "accelerate.commands.launch",
            "--config_file",
            str(config.accelerate_file),
            "--num_processes",
            str(nproc),
            "--main_process_port",
            "0",
            *args,
        ]
    if config.parallel in DISTRIBUTED:
        # --standalone: a rendezvous on localhost with a free port, nothing leaves the machine.
        return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", *args]
    return [sys.executable, *args]


def _merge(config: Config, ranks: list[dict[str, Any]], nproc: int) -> dict[str, Any]:
    """One results entry from the per-process records of a configuration."""
    failed = [r for r in ranks if r["status"] != "ok"]
    world = ranks[0].get("world_size", nproc) if ranks else nproc
    if failed:
        return _empty_run(config, world, "failed", f"rank {failed[0]['rank']}: {failed[0]['reason']}")
    first = min(ranks, key=lambda r: r["rank"])
    wall = max(r["wall_s"] for r in ranks)  # the run ends when its slowest process does
    per_device = [r["peak_memory_bytes"] for r in sorted(ranks, key=lambda r: r["rank"])]
    run = _empty_run(config, first["world_size"], "ok", None)
    run.update(
        {
            "note": first["note"],
            "wall_s": wall,
            "epoch_s": [max(es) for es in zip(*(r["epoch_s"] for r in ranks), strict=True)],
            "samples": first["samples"],
            "throughput": first["samples"] / wall if wall > 0 else None,
            "peak_memory_bytes": max(per_device),
            "memory_kind": first["memory_kind"],
            "peak_memory_per_device_bytes": per_device,
            "cuda_max_reserved_bytes": max((r["cuda_max_reserved_bytes"] or 0) for r in ranks)
            if first["cuda_max_reserved_bytes"] is not None
            else None,
            "model_memory_bytes": max(r["model_memory_bytes"] for r in ranks),
            "parameters": first.get("parameters"),
            "tensor_memory": largest_tensor_memory(ranks),
            # What each process's torch reported at the end of its run (the most, were they to differ).
            "threads_per_process": max(r["threads"] for r in ranks) if all("threads" in r for r in ranks) else None,
            "gpu_utilization": first["gpu_utilization"],
            "gpu_utilization_reason": first["gpu_utilization_reason"],
            "accuracy": first["accuracy"],
            "loss": first["loss"],
        }
    )
    return run


def largest_tensor_memory(ranks: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The tensor memory of the process whose peak was largest, its split with it (None when a
    process has no figure)."""
    figures = [r.get("tensor_memory") for r in ranks]
    if not figures or any(f is None or f["peak_bytes"] is None for f in figures):
        return None
    return dict(max(figures, key=lambda f: f["peak_bytes"]))


#: The figures of a run's ``tensor_memory`` that a summary gives the median and range of.
TENSOR_FIGURES = ("peak_bytes", "weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes")


def tensor_memory_spread(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The median and range over ``runs`` of each tensor-memory figure (a split figure is None
    unless every run has it), with how they were measured; None unless every run has a peak."""
    figures = [r.get("tensor_memory") for r in runs]
    if not figures or any(f is None or f["peak_bytes"] is None for f in figures):
        return None
    entry: dict[str, Any] = {
        name: spread([f[name] for f in figures]) if all(f[name] is not None for f in figures) else None
        for name in TENSOR_FIGURES
    }
    entry["how"] = figures[0]["how"]  # one file's runs share a device
    return entry


_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b")


def failure_line(stderr_lines: Sequence[str]) -> str:
    """The one line of a failed worker's stderr that says why.

    First torchrun's root cause for a rank killed by a signal (``traceback : Signal 11 (SIGSEGV)
    received by PID ...``: the other ranks' errors follow from it); else the last exception a
    worker raised (not torchrun's own ``ChildFailedError``, which only says a child failed); else
    the last line with words in it, never the ``=====`` banner.
    """
    lines = [line.strip() for line in stderr_lines if any(ch.isalnum() for ch in line)]
    for line in reversed(lines):
        if line.startswith("traceback") and "Signal" in line:
            return " ".join(line.split())
    for line in reversed(lines):
        if _EXCEPTION_LINE.match(line) and "ChildFailedError" not in line:
            return line
    return lines[-1] if lines else "no output"


def run_with_progress(
    command: list[str], env: Mapping[str, str], timeout_s: float, progress: Progress = lambda line: None
) -> tuple[int | None, list[str]]:
    """Run ``command`` (a worker, or torchrun and its workers) to its end: its ``progress: ...``
    stderr lines go to ``progress`` as they come, the last 80 others are kept for the error
    message. Returns ``(exit status, or None when it ran past timeout_s and was stopped, tail)``."""
    tail: collections.deque[str] = collections.deque(maxlen=80)
    # Its own session, so a last-resort kill reaches whatever it started in that session.
    proc = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=dict(env), start_new_session=True
    )

    def read_stderr() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            line = line.rstrip()
            if line.startswith("progress: "):
                progress(line[len("progress: ") :])
            else:
                tail.append(line)

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    try:
        return proc.wait(timeout=timeout_s), list(tail)
    except subprocess.TimeoutExpired:
        # torchrun starts its workers in sessions of their own and stops them on SIGTERM.
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        return None, list(tail)
    finally:
        reader.join(timeout=10)


def run_config(
    config: Config, options: CompareOptions, env: dict[str, Any], progress: Progress = lambda line: None
) -> dict[str, Any]:
    """Run one configuration in its own process(es) and return its results entry."""
    nproc = processes(config, options)
    reason = _skipped_reason(config, options, env)
    if reason:
        return _empty_run(config, nproc, "skipped", reason)
    launch = launch_environment(config, env["device_type"])
    threads = process_threads(config, options)
    if threads is not None:
        # OpenMP's pool as well as torch's (torchrun would otherwise set 1 for each process).
        launch = {**launch, "OMP_NUM_THREADS": str(threads)}
    returncode, tail, ranks = run_worker(
        lambda out_dir: worker_command(config, options, out_dir, nproc), options.timeout_s, progress, launch
    )
    failure = worker_failure(returncode, tail, ranks, options.timeout_s)
    if failure:
        return _empty_run(config, nproc, "failed", failure)
    run = _merge(config, ranks, nproc)
    for note in (launch_note(config, env["device_type"]), offload_note(config, env["device_type"])):
        if note and run["status"] == "ok":
            run["note"] = f"{note}: {run['note']}" if run["note"] else note
    return run


def run_worker(
    command_for: Callable[[Path], list[str]],
    timeout_s: float,
    progress: Progress = lambda line: None,
    extra_env: Mapping[str, str] | None = None,
) -> tuple[int | None, list[str], list[dict[str, Any]]]:
    """Run a worker's command line (``command_for`` the folder its processes write ``rank<r>.json``
    into) to its end, with this checkout importable and ``extra_env`` set: ``(exit status, or None
    when it ran past timeout_s, the tail of its stderr, the records its processes wrote)``."""
    with tempfile.TemporaryDirectory(prefix="compare-") as tmp:
        out_dir = Path(tmp)
        env_vars = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
            **(extra_env or {}),
        }
        returncode, tail = run_with_progress(command_for(out_dir), env_vars, timeout_s, progress)
        ranks = [json.loads(p.read_text()) for p in sorted(out_dir.glob("rank*.json"))]
    return returncode, tail, ranks


def worker_failure(
    returncode: int | None, tail: Sequence[str], ranks: Sequence[Mapping[str, Any]], timeout_s: float
) -> str | None:
    """Why a worker's run gave no records to read (it timed out, or it ended in an error that no
    process recorded), or None: a process's own failure is in its record."""
    if returncode is None:
        return f"timed out after {timeout_s:.0f} s"
    if not ranks or (returncode != 0 and all(r["status"] == "ok" for r in ranks)):
        return f"exit status {returncode}: {failure_line(tail)}"
    return None


def run_comparison(options: CompareOptions, progress: Progress = lambda line: None) -> dict[str, Any]:
    """Run every configuration of ``options`` ``options.repeats`` times, interleaved, re-measure
    super-linear speed-ups once, and return the validated results document."""
    import torch

    # torch's threads in one process: what a single-process run uses (the effects and matrix
    # files share environment() and do not record it).
    env = {**environment(), "torch_threads": torch.get_num_threads()}
    runs: list[dict[str, Any]] = []
    skipped: set[Config] = set()

    def run_round(round_: int, configs: Sequence[Config], title: str) -> None:
        todo = [c for c in configs if c not in skipped]
        for i, config in enumerate(todo, start=1):
            prefix = f"[{title}, {i}/{len(todo)}]"
            progress(f"{prefix} {config.label}: starting")
            run = run_config(config, options, env, lambda line, prefix=prefix: progress(f"{prefix} {line}"))
            detail = run["reason"] if run["status"] != "ok" else f"{run['wall_s']:.1f} s"
            progress(f"{prefix} {config.label}: {run['status']} ({detail})")
            if run["status"] == "skipped":  # known before launching: the same in every round
                skipped.add(config)
            head = {
                k: run[k] for k in ("config", "precision", "parallel", "zero_stage", "accelerate_config", "world_size")
            }
            runs.append({**head, "round": round_, **{k: v for k, v in run.items() if k != "round"}})

    for round_ in range(1, options.repeats + 1):
        run_round(round_, options.configs, f"round {round_}/{options.repeats}")
    summary = summarize(runs, options.configs)
    again = [s for s in summary if _above_linear(s)]
    if again:  # one extra round, once: each super-linear configuration and the reference it beat
        wanted = {s["config"] for s in again} | {s["speedup"]["over"] for s in again}
        extra = options.repeats + 1
        progress(f"re-measuring {', '.join(s['config'] for s in again)}: a speed-up above the process count")
        run_round(extra, [c for c in options.configs if c.label in wanted], f"re-measurement, round {extra}")
        before = {s["config"]: s for s in again}
        summary = summarize(runs, options.configs, remeasured=(before, extra))
    env["load_average_end"] = _load_average()
    document = {
        "$schema": "../algorithms/results.schema.json",
        "schema_version": SCHEMA_VERSION,
        "environment": env,
        "settings": {
            "model": options.model,
            "data": options.data,
            "image_size": options.image_size or model_input_sizes()[options.model],
            "epochs": options.epochs,
            "batch_size": options.batch_size,
            "max_batches": options.max_batches,
            "nproc": options.nproc,
            "seed": options.seed,
            "lr": options.lr,
            "repeats": options.repeats,
            **({"threads": options.threads_in_all} if options.threads_in_all is not None else {}),
            "command": options.command,
        },
        "runs": runs,
        "summary": summary,
    }
    problems = results_problems(document)
    if problems:  # a bug in this tool, not a user mistake: never write an invalid file
        raise RuntimeError("results do not match the schema:\n" + "\n".join(problems))
    return document


# --------------------------------------------------------------------------------------------- summary


def spread(values: Sequence[float | None]) -> dict[str, float] | None:
    """``{"median", "min", "max"}`` of the values that are not None; None when there are none."""
    present = sorted(v for v in values if v is not None)
    if not present:
        return None
    return {"median": statistics.median(present), "min": present[0], "max": present[-1]}


def steady_state(run: Mapping[str, Any]) -> tuple[float | None, float | None]:
    """``(seconds per epoch, samples per second)`` over a run's epochs after the first: its steady
    state, without the first epoch's warm-up. ``(None, None)`` with one epoch, where the two
    cannot be told apart."""
    epochs = run["epoch_s"]
    if len(epochs) < 2 or run["samples"] is None:
        return None, None
    steady = epochs[1:]
    seconds = sum(steady)
    per_epoch = run["samples"] / len(epochs)  # the same number of batches in every epoch
    return seconds / len(steady), (per_epoch * len(steady) / seconds if seconds > 0 else None)


def _throughput(run: Mapping[str, Any]) -> float | None:
    """Samples per second in steady state, or over the whole run where there is none."""
    _, steady = steady_state(run)
    return steady if len(run["epoch_s"]) >= 2 else run["throughput"]


def did_not_act(entry: Mapping[str, Any]) -> str | None:
    """Why a configuration's successful runs are no evidence of its parallel mode, or None: a mode
    that ran as one process (DataParallel with one device, or on the CPU) made no replicas, so its
    runs measured the single process again, and a ratio of theirs to ``fp32:single`` is noise, never
    an effect of the mode. The pages show such a row as did not act, with this reason."""
    if entry["status"] == "ok" and entry["parallel"] != "single" and entry["world_size"] == 1:
        return entry["note"] or "it ran as one process, with no replicas"
    return None


def _reference(entry: Mapping[str, Any], labels: Sequence[str]) -> str | None:
    """What ``entry``'s speed-up is over: the single-process run of its precision for a
    multi-process configuration (when measured), else ``fp32:single``."""
    own = f"{entry['precision']}:single"
    if entry["world_size"] > 1 and own in labels:
        return own
    return "fp32:single" if "fp32:single" in labels else None


def _above_linear(entry: Mapping[str, Any]) -> bool:
    """Whether a multi-process configuration's speed-up over the single-process run of its own
    precision exceeds its process count."""
    speedup = entry["speedup"]
    return (
        entry["world_size"] > 1
        and speedup is not None
        and speedup["over"] == f"{entry['precision']}:single"
        and speedup["median"] > entry["world_size"]
    )


def _paired(
    runs: Sequence[Mapping[str, Any]], reference: Sequence[Mapping[str, Any]], rounds_: Sequence[int] | None = None
) -> list[float]:
    """The per-round ratios of throughput, ``runs`` over ``reference``, in the rounds both ran."""
    mine = {r["round"]: _throughput(r) for r in runs if r["status"] == "ok"}
    theirs = {r["round"]: _throughput(r) for r in reference if r["status"] == "ok"}
    return [
        mine[k] / theirs[k]
        for k in sorted(mine.keys() & theirs.keys())
        if (rounds_ is None or k in rounds_) and mine[k] is not None and theirs[k]
    ]


def summarize(
    runs: Sequence[Mapping[str, Any]],
    configs: Sequence[Config],
    remeasured: tuple[Mapping[str, Mapping[str, Any]], int] | None = None,
) -> list[dict[str, Any]]:
    """One summary entry per configuration of ``configs`` (in their order) from its ``runs``: the
    median and range over its successful runs of each figure, its speed-up, and, given
    ``remeasured`` (the entries that were super-linear before a re-measurement, and its round),
    whether each of those is still super-linear over every round and so flagged. Where no run has a
    ``tensor_memory`` field (a file measured before it was), no entry has one either."""
    labels = [c.label for c in configs]
    # Runs measured before tensor memory have no such field, and their summary none either.
    tensor = any("tensor_memory" in run for run in runs)
    threaded = any("threads_per_process" in run for run in runs)  # likewise, before threads were recorded
    by_config: dict[str, list[Mapping[str, Any]]] = {label: [] for label in labels}
    for run in runs:
        by_config[run["config"]].append(run)
    entries = []
    for config in configs:
        mine = by_config[config.label]
        ok = [r for r in mine if r["status"] == "ok"]
        failures = [r for r in mine if r["status"] != "ok"]
        first = (ok or mine)[0]
        status = "ok" if ok else first["status"]
        steady = [steady_state(r) for r in ok]
        multi_epoch = bool(ok) and all(len(r["epoch_s"]) >= 2 for r in ok)
        entries.append(
            {
                "config": config.label,
                "precision": config.precision,
                "parallel": config.parallel,
                "zero_stage": config.zero_stage,
                "accelerate_config": config.accelerate_config,
                "world_size": first["world_size"],
                "status": status,
                "reason": failures[0]["reason"] if failures else None,
                "note": first["note"],
                "runs": len(mine),
                "ok_runs": len(ok),
                "steady_state": multi_epoch,
                "wall_s": spread([r["wall_s"] for r in ok]),
                "first_epoch_s": spread([r["epoch_s"][0] if r["epoch_s"] else None for r in ok]),
                "steady_epoch_s": spread([s for s, _ in steady]) if multi_epoch else None,
                "throughput": spread([_throughput(r) for r in ok]),
                "peak_memory_bytes": spread([r["peak_memory_bytes"] for r in ok]),
                "memory_kind": first["memory_kind"],
                "model_memory_bytes": spread([r["model_memory_bytes"] for r in ok]),
                **({"tensor_memory": tensor_memory_spread(ok)} if tensor else {}),
                **({"threads_per_process": _threads(ok)} if threaded else {}),
                "gpu_utilization": spread([r["gpu_utilization"] for r in ok]),
                "accuracy": spread([r["accuracy"] for r in ok]),
                "loss": spread([r["loss"] for r in ok]),
                "speedup": None,
                "super_linear": None,
            }
        )
    for entry in entries:
        over = _reference(entry, labels)
        ratios = _paired(by_config[entry["config"]], by_config[over]) if over and entry["status"] == "ok" else []
        if ratios:
            entry["speedup"] = {"over": over, **spread(ratios), "rounds": len(ratios)}
    if remeasured is not None:
        before, extra = remeasured
        for entry in entries:
            if entry["config"] in before:
                entry["super_linear"] = _super_linear(entry, before[entry["config"]], extra, by_config)
    return entries


def _threads(runs: Sequence[Mapping[str, Any]]) -> int | None:
    """The intra-op threads a configuration's processes had: the most over its successful runs
    (None without one that recorded it)."""
    counts = [r["threads_per_process"] for r in runs if r.get("threads_per_process") is not None]
    return max(counts) if counts else None


def _super_linear(
    entry: dict[str, Any], before: Mapping[str, Any], extra: int, by_config: Mapping[str, Sequence[Mapping[str, Any]]]
) -> dict[str, Any]:
    """The record of one re-measured super-linear speed-up: flagged when still above the count."""
    n, old = entry["world_size"], before["speedup"]
    over = old["over"]
    again = _paired(by_config[entry["config"]], by_config[over], [extra])
    flagged = _above_linear(entry)
    now = entry["speedup"]["median"] if entry["speedup"] else None

    def times(value: float | None, missing: str) -> str:
        return missing if value is None else f"{value:.2f}x"

    reason = (
        f"{old['median']:.2f}x the throughput of {over} on {n} processes in rounds 1-{extra - 1}, "
        f"{times(again[0] if again else None, 'no figure (a run failed)')} in the re-measurement "
        f"(round {extra}) and {times(now, 'no figure')} over every round: "
        f"{'still more' if flagged else 'no more'} than {n}x"
    )
    return {
        "processes": n,
        "speedup_before": old["median"],
        "remeasure_round": extra,
        "speedup_remeasured": again[0] if again else None,
        "flagged": flagged,
        "reason": reason,
    }


def check_options(
    model: str,
    data: str,
    data_root: str | None,
    epochs: int,
    batch_size: int,
    max_batches: int | None,
    nproc: int,
    repeats: int = 1,
    threads_in_all: int | None = None,
) -> list[str]:
    """One line per bad option (empty when they are fine). ``threads_in_all`` must split evenly
    over ``nproc`` processes (a run of a distributed mode has that many)."""
    problems = []
    if model not in model_names():
        problems.append(f"--model: {model!r} — use one of {', '.join(model_names())}")
    if data not in dataset_names():
        problems.append(f"--data: {data!r} — use one of {', '.join(dataset_names())}")
    if data == "cifar10" and (data_root is None or not Path(data_root).is_dir()):
        problems.append(
            f"--data-root: {data_root!r} is not a directory — cifar10 reads the extracted "
            "cifar-10-batches-py folder (nothing is downloaded)"
        )
    for flag, value in (
        ("--epochs", epochs),
        ("--batch-size", batch_size),
        ("--nproc", nproc),
        ("--max-batches", max_batches),
        ("--repeats", repeats),
        ("--threads", threads_in_all),
    ):
        if value is not None and value < 1:
            problems.append(f"{flag}: {value} — must be at least 1")
    if threads_in_all is not None and nproc >= 1 and threads_in_all >= 1 and threads_in_all % nproc:
        problems.append(
            f"--threads: {threads_in_all} does not split evenly over --nproc {nproc} processes — pass a "
            f"multiple of {nproc}, so that every configuration runs on the same threads in all"
        )
    return problems


def format_command(argv: Sequence[str]) -> str:
    return " ".join(["python tools/compare_training.py", *argv])
