"""Run ONE training configuration and write its measurements: the worker of compare_training.

Launched by :mod:`methods_tools.compare` as ``python -m methods_tools.compare_worker``
(single, dp) or under ``python -m torch.distributed.run`` (ddp, fsdp, deepspeed). Every process
writes ``rank<r>.json`` into ``--out-dir``; the parent merges them. An exception is recorded in
that file (status ``failed``) rather than lost, and the exit status is 1.

``--algorithm KEY`` adds one method of the library (its metadata's class, built with the JSON
object of ``--hparams``) to the run: how :mod:`methods_tools.measure` measures each method. The
record then holds what the method reported doing (``activity``, from ``Trainer.method_log``) and
whether that shows it acted. ``--algorithm recipe:NAME`` adds a published recipe's whole stack
instead (:mod:`algorithms.recipes`; ``--hparams`` maps each member's key to its arguments): its
activity is every member's counters, named ``Class.counter``, and it acted when every member did.

A text data set (its metadata's ``input_shape`` is one sequence length, as ``stdlib_text``'s)
makes the run a language model's: dict batches ``{"input_ids", "labels"}`` of ``--seq-len``
tokens (default: the model's positions), :func:`algorithms.models.lm_loss`, and no accuracy:
the loss is the mean next-token cross entropy on the held-out split, or on ``--eval-examples``
of its windows spread evenly over it, computed by ``Trainer.eval`` as every workload's figures
are (so the weights EMA or SWA put in place for evaluation are the ones scored). ``tokens``
counts the tokens trained: every batch's input as the methods left it, at ``BEFORE_FORWARD``.

After the timed run and its evaluation, the run's tensor memory is measured apart
(:func:`measure_tensor_memory`, ``tensor_memory`` in the record): the same configuration is built
again, from its seed, inside :class:`algorithms.core.tensor_memory.TensorMemory`, and trains its
first :data:`WARMUP_BATCHES` + :data:`MEASURED_BATCHES` batches; the figures are taken over the
measured ones. On the CPU a profiler measures it, which slows those batches, so nothing timed runs
under it. The process's peak resident set (``peak_memory_bytes``, ``cpu_peak_rss``) and the CUDA
allocator's peaks of the timed run are read before it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import threading
import time
import traceback
from typing import Any

import torch
from torch.utils.data import DataLoader, DistributedSampler, Subset

from algorithms.core import Algorithm, Duration, Event, TimeUnit, Trainer
from algorithms.core.distributed import destroy_process_group, is_distributed, rank_and_world_size
from algorithms.core.strategies import FSDP, DeepSpeed
from algorithms.core.tensor_memory import TensorMemory
from algorithms.data import get_dataset
from algorithms.metadata import load_all_datasets
from algorithms.models import get_model, lm_loss
from algorithms.models.names import model_input_sizes
from methods_tools.files import write_atomic

__all__ = ["MEASURED_BATCHES", "WARMUP_BATCHES", "TensorMemoryWindow", "main", "measure_tensor_memory", "run_one"]


class _CappedLoader:
    """A data loader cut to at most ``max_batches`` per epoch (``len`` says so, for the Trainer)."""

    def __init__(self, loader: DataLoader, max_batches: int | None):
        self.loader, self.max_batches = loader, max_batches
        self.sampler, self.batch_size = loader.sampler, loader.batch_size

    def __len__(self) -> int:
        n = len(self.loader)
        return n if self.max_batches is None else min(n, self.max_batches)

    def __iter__(self):
        for i, batch in enumerate(self.loader):
            if i >= len(self):
                return
            yield batch


class EpochTimer(Algorithm):
    """Times each epoch (synchronizing CUDA first) and prints a progress line on rank 0."""

    def __init__(self, label: str, epochs: int):
        self.label, self.epochs = label, epochs
        self.epoch_s: list[float] = []
        self._start = 0.0

    def match(self, event: Event, state: Any) -> bool:
        return event in (Event.EPOCH_START, Event.EPOCH_END)

    def apply(self, event: Event, state: Any, logger: Any = None) -> None:
        if state.device.type == "cuda":
            torch.cuda.synchronize(state.device)
        if event is Event.EPOCH_START:
            self._start = time.perf_counter()
            return
        self.epoch_s.append(time.perf_counter() - self._start)
        if state.rank == 0:
            print(
                f"progress: {self.label} epoch {len(self.epoch_s)}/{self.epochs} {self.epoch_s[-1]:.1f} s",
                file=sys.stderr,
                flush=True,
            )


class TokenCounter(Algorithm):
    """Counts the tokens each training batch feeds the model, after the methods changed it (at
    ``BEFORE_FORWARD``): a method that shortens sequences trains fewer tokens, one that cuts them
    into more, shorter windows the same tokens in more examples. The count is its activity in the
    Trainer's ``method_log``."""

    activity = {"tokens": "tokens trained"}

    def __init__(self, input_key: int | str):
        self.input_key = input_key

    def match(self, event: Event, state: Any) -> bool:
        return event is Event.BEFORE_FORWARD

    def apply(self, event: Event, state: Any, logger: Any = None) -> None:
        self.report(logger, "tokens", int(state.batch[self.input_key].numel()))


#: Batches trained before the tensor-memory window opens: the optimizer's state exists after the
#: first step, and one-off allocations of the first batch are behind.
WARMUP_BATCHES = 1
#: Batches the tensor-memory figures are taken over (few: on the CPU the profiler runs through them).
MEASURED_BATCHES = 2


class TensorMemoryWindow(Algorithm):
    """Opens ``memory``'s window at the start of batch ``warmup`` (0-based), closes it at the end of
    batch ``warmup + batches - 1``, then ends the run there: the batches it measures are the first
    ones of the configuration's own run (its methods see the run's real duration), and it trains no
    more. Put it last in the algorithms, so that it closes after the methods' ``BATCH_END``."""

    def __init__(self, memory: TensorMemory, warmup: int, batches: int):
        self.memory, self.warmup, self.batches = memory, warmup, batches
        self.opened = self.closed = False

    def match(self, event: Event, state: Any) -> bool:
        if event is Event.BATCH_START:
            return not self.opened and state.timestamp.batch == self.warmup
        return event is Event.BATCH_END and self.opened and not self.closed

    def apply(self, event: Event, state: Any, logger: Any = None) -> None:
        if event is Event.BATCH_START:
            self.opened = True
            self.memory.begin_window(state.model)
            return
        if state.timestamp.batch < self.warmup + self.batches:
            return
        self.closed = True
        self.memory.end_window(state.optimizer)
        state.max_duration = Duration(state.timestamp.batch, TimeUnit.BATCH)  # the run ends here


class _UtilizationSampler:
    """Mean GPU utilisation (%) from NVML, sampled twice a second while training runs."""

    def __init__(self, device: torch.device):
        self.reason: str | None = None
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if device.type != "cuda":
            self.reason = "no GPU: the run used the CPU"
            return
        try:
            import pynvml

            pynvml.nvmlInit()
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(device.index or 0)
            self._nvml = pynvml
        except Exception as exc:  # pynvml missing or NVML unusable: say so in the results
            self.reason = f"NVML unavailable: {type(exc).__name__}: {exc}"

    def __enter__(self) -> _UtilizationSampler:
        if self.reason is None:
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(0.5):
            self.samples.append(self._nvml.nvmlDeviceGetUtilizationRates(self._handle).gpu)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def mean(self) -> float | None:
        if self.reason is not None:
            return None
        if not self.samples:
            self.reason = "the run was shorter than one NVML sample (0.5 s)"
            return None
        return sum(self.samples) / len(self.samples)


def _local_bytes(tensor: torch.Tensor) -> int:
    """The bytes of ``tensor`` this process holds: an FSDP shard's local part; a ZeRO-3 parameter's
    partition (``ds_tensor``) and what it keeps whole (nothing outside its layer's forward and
    backward, unless it is under DeepSpeed's persistence threshold: then all of it, once gathered)."""
    local = tensor.to_local() if hasattr(tensor, "to_local") else tensor  # an FSDP shard: this rank's part
    partition = getattr(tensor, "ds_tensor", None)
    held = local.numel() * local.element_size()
    return held + (partition.numel() * partition.element_size() if partition is not None else 0)


def _model_bytes(model: torch.nn.Module) -> int:
    return sum(_local_bytes(t) for t in (*model.parameters(), *model.buffers()))


def _strategy(args: argparse.Namespace) -> Any:
    """What ``Trainer(parallel=...)`` gets: the mode's name, or its strategy with the run's options."""
    if args.parallel == "deepspeed":
        stage = args.zero_stage or 2
        return DeepSpeed(zero_stage=stage, offload_optimizer=args.offload, offload_param=args.offload and stage == 3)
    if args.parallel == "fsdp" and args.offload:
        return FSDP(cpu_offload=True)
    if args.offload:
        raise ValueError(f"--offload: parallel={args.parallel!r} has no offload; use deepspeed or fsdp")
    return args.parallel


def method_algorithm(key: str, hparams: dict[str, Any], plumbing: dict[str, Any] | None = None) -> Algorithm:
    """The Algorithm of the library's method ``key`` (its metadata's ``class_name``), built with
    ``hparams`` and, of ``plumbing`` (e.g. a text workload's ``input_key`` and ``target_key``), the
    arguments its metadata lists as plumbing."""
    import algorithms
    from algorithms.metadata import PACKAGE_ROOT, load_metadata

    record = load_metadata(PACKAGE_ROOT / key / "metadata.json")  # this method's file alone
    extra = {name: value for name, value in (plumbing or {}).items() if name in record.plumbing and name not in hparams}
    return getattr(algorithms, record.class_name)(**hparams, **extra)


RECIPE_PREFIX = "recipe:"


def run_algorithms(key: str, hparams: dict[str, Any], plumbing: dict[str, Any] | None = None) -> list[Algorithm]:
    """What ``--algorithm`` adds: the method ``key`` (:func:`method_algorithm`), or the stack of
    the recipe ``recipe:NAME`` built with ``hparams``, one entry per member."""
    if key.startswith(RECIPE_PREFIX):
        from algorithms.recipes import get_recipe

        return get_recipe(key.removeprefix(RECIPE_PREFIX)).algorithms(hparams, **(plumbing or {}))
    return [method_algorithm(key, hparams, plumbing)]


def stack_activity(log: Any, stack: list[Algorithm]) -> tuple[dict[str, int], bool]:
    """A method's activity and whether it acted; for a stack of several (a recipe), every
    member's counters as ``Class.counter``, and whether every member acted."""
    labels = [type(a).__name__ for a in stack]  # a label is the class name; a recipe's are distinct
    if len(stack) == 1:
        return dict(log.records[labels[0]]["activity"]), log.acted(labels[0])
    activity = {f"{label}.{name}": n for label in labels for name, n in log.records[label]["activity"].items()}
    return activity, all(log.acted(label) for label in labels)


def is_text_data(name: str) -> bool:
    """Whether the data set ``name`` holds token sequences (its metadata's input shape is one length)."""
    return len(load_all_datasets()[name].raw["input_shape"]) == 1


def evenly_spaced(dataset: Any, count: int | None) -> Any:
    """``count`` examples of ``dataset`` at evenly spaced indices (all of it when None or more)."""
    n = len(dataset)
    if count is None or count >= n:
        return dataset
    return Subset(dataset, [i * n // count for i in range(count)])


def _optimizer(args: argparse.Namespace) -> Any:
    if args.optimizer == "adamw":
        return lambda params: torch.optim.AdamW(params, lr=args.lr, weight_decay=0.01)
    return lambda params: torch.optim.SGD(params, lr=args.lr, momentum=0.9, weight_decay=5e-4)


def run_one(args: argparse.Namespace) -> dict[str, Any]:
    """Train one configuration in this process and return its measurements."""
    if args.threads:
        torch.set_num_threads(args.threads)
    parallel, precision = args.parallel, args.precision
    label = f"{precision}:{parallel}" + (f" + {args.algorithm}" if args.algorithm else "")
    size = model_input_sizes()[args.model]
    text = is_text_data(args.data)
    if text:
        splits = get_dataset(args.data, root=args.data_root, seq_len=args.seq_len or size)
    else:
        splits = get_dataset(
            args.data, root=args.data_root, image_size=args.image_size or size, test_fraction=args.test_fraction
        )
    rank, world_size = rank_and_world_size() if is_distributed(parallel) else (0, 1)
    train_sampler, test_set = None, evenly_spaced(splits.test, args.eval_examples)
    if is_distributed(parallel):
        train_sampler = DistributedSampler(
            splits.train, num_replicas=world_size, rank=rank, shuffle=True, seed=args.seed
        )
        # Every test image exactly once over the ranks (a DistributedSampler would pad with repeats);
        # Trainer.eval sums the counts over the ranks.
        test_set = Subset(test_set, range(rank, len(test_set), world_size))
    g = torch.Generator().manual_seed(args.seed)
    train = DataLoader(
        splits.train,
        batch_size=args.batch_size,
        shuffle=train_sampler is None,
        sampler=train_sampler,
        generator=g,
        drop_last=True,
        num_workers=args.workers,
    )
    test = DataLoader(test_set, batch_size=args.batch_size, num_workers=args.workers)

    keys = {"input_key": "input_ids", "target_key": "labels"} if text else {}

    def build(algorithms: list[Algorithm]) -> tuple[Trainer, list[Algorithm]]:
        """The configuration's Trainer, from its seed, with the method (first) and ``algorithms``."""
        torch.manual_seed(args.seed)  # the same initial weights on every rank and in every configuration
        model = get_model(args.model, splits.num_classes)
        extra = run_algorithms(args.algorithm, json.loads(args.hparams), keys) if args.algorithm else []
        loader = _CappedLoader(train, args.max_batches)
        optimizer, schedulers = _optimizer(args), ()
        if args.schedule == "onecycle":  # a warm-up over the first 15 % of the steps to lr, then cosine annealing
            optimizer = optimizer(model.parameters())  # the scheduler needs it built (so not for fsdp)
            schedulers = (
                torch.optim.lr_scheduler.OneCycleLR(
                    optimizer, max_lr=args.lr, pct_start=0.15, total_steps=args.epochs * len(loader)
                ),
            )
        trainer = Trainer(
            model,
            loader,
            f"{args.epochs}ep",
            optimizer=optimizer,
            schedulers=schedulers,
            algorithms=[*extra, *algorithms],
            precision=precision,
            parallel=_strategy(args),
            seed=args.seed,
            **({"loss_fn": lm_loss, **keys} if text else {}),
        )
        return trainer, extra

    timer = EpochTimer(label, args.epochs)
    counter = TokenCounter(keys["input_key"]) if text else None
    trainer, extra = build([timer, *([counter] if counter else [])])
    note = None
    with trainer:  # closed before the process group goes (DeepSpeed releases its hooks)
        state = trainer.state
        device = state.device
        model_bytes = _model_bytes(state.model)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)

        with _UtilizationSampler(device) as utilization:
            start = time.perf_counter()
            trainer.fit()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            wall_s = time.perf_counter() - start
        samples = state.timestamp.sample  # the Trainer counts every rank's samples
        # Once trained too: ZeRO-3 keeps the parameters under its persistence threshold whole after
        # their first gather (the others hold the same before and after).
        model_bytes = max(model_bytes, _model_bytes(state.model))

        metrics, eval_s = {"accuracy": None, "loss": None}, None
        if text or splits.has_accuracy:
            eval_start = time.perf_counter()
            metrics = dict(trainer.eval(test))
            eval_s = time.perf_counter() - eval_start
        if text:  # a language model's figure is its validation loss, not next-byte accuracy
            metrics["accuracy"] = None
        tokens = trainer.method_log.records["TokenCounter"]["activity"]["tokens"] if counter else None
        if parallel == "accelerate":  # what Accelerate made of its configuration here
            accelerator = trainer.strategy.accelerator
            note = f"Accelerate set up {accelerator.distributed_type.value}, {accelerator.num_processes} processes"
        activity = acted = None
        if args.algorithm:  # the method (or the recipe's stack) comes first in the algorithms
            activity, acted = stack_activity(trainer.method_log, extra)

        # The timed run's memory figures, before the tensor-memory run adds to them.
        if device.type == "cuda":
            peak, kind = torch.cuda.max_memory_allocated(device), "cuda_max_allocated"
            reserved = torch.cuda.max_memory_reserved(device)
        else:
            # ru_maxrss is in KiB on Linux: the resident peak of the whole process, interpreter included.
            peak, kind = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "cpu_peak_rss"
            reserved = None
        # Inside the timed run's block: its process group serves the second Trainer too.
        tensor_memory = measure_tensor_memory(build, device, args.epochs * len(_CappedLoader(train, args.max_batches)))

    dp_devices = torch.cuda.device_count() if parallel == "dp" and device.type == "cuda" else 1
    if parallel == "dp" and dp_devices == 1:
        note = "DataParallel with one device (or the CPU) runs the model once: no replicas"
    return {
        "rank": rank,
        "world_size": world_size if is_distributed(parallel) else dp_devices,
        "status": "ok",
        "reason": None,
        "note": note,
        "wall_s": wall_s,
        "epoch_s": timer.epoch_s,
        "samples": samples,
        "eval_s": eval_s,
        "tokens": tokens * (world_size if is_distributed(parallel) else 1) if counter else None,
        "activity": activity,
        "acted": acted,
        "peak_memory_bytes": int(peak),
        "memory_kind": kind,
        "cuda_max_reserved_bytes": reserved,
        "model_memory_bytes": int(model_bytes),
        # The model's parameters, whole (before any sharding): what bytes per parameter divide by.
        "parameters": sum(p.numel() for p in get_model(args.model, splits.num_classes).parameters()),
        "tensor_memory": tensor_memory,
        # What torch ran on at the end (after the Trainer, Accelerate or DeepSpeed set up theirs).
        "threads": torch.get_num_threads(),
        "gpu_utilization": utilization.mean(),
        "gpu_utilization_reason": utilization.reason,
        "accuracy": metrics["accuracy"],
        "loss": metrics["loss"],
    }


def measure_tensor_memory(
    build: Any, device: torch.device, total_batches: int, warmup: int = WARMUP_BATCHES, batches: int = MEASURED_BATCHES
) -> dict[str, Any]:
    """The tensor memory of a configuration (``build(algorithms)`` makes its Trainer): a Trainer
    built inside :class:`~algorithms.core.tensor_memory.TensorMemory` trains ``warmup`` batches, then
    ``batches`` more in the window, and stops. A run shorter than that is measured over its last
    batches (``warmup`` shrinks first). The figures, with ``warmup_batches`` and ``batches``:
    what the record's ``tensor_memory`` holds."""
    batches = max(1, min(batches, total_batches))
    warmup = max(0, min(warmup, total_batches - batches))
    with TensorMemory(device) as memory:
        window = TensorMemoryWindow(memory, warmup, batches)
        trainer, _ = build([window])
        with trainer:
            trainer.fit()
    if memory.peak_bytes is None:  # a bug here, not a user's mistake: the run fails with it
        raise RuntimeError(f"tensor memory: the run ended before its window (batch {warmup + 1}) opened")
    return {**memory.figures(), "warmup_batches": warmup, "batches": batches}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m methods_tools.compare_worker", description=__doc__)
    p.add_argument("--model", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--data-root")
    p.add_argument("--image-size", type=int)
    p.add_argument("--seq-len", type=int, help="text data: tokens per example (default: the model's positions)")
    p.add_argument("--eval-examples", type=int, help="evaluate on this many held-out examples, evenly spaced")
    p.add_argument("--test-fraction", type=float, help="digits: the held-out share of the images (default 0.2)")
    p.add_argument("--threads", type=int, help="torch's intra-op threads (default: torch's choice)")
    p.add_argument(
        "--schedule",
        choices=("constant", "onecycle"),
        default="constant",
        help="learning rate: constant, or one cycle (15 %% warm-up to --lr, then cosine annealing)",
    )
    p.add_argument(
        "--optimizer",
        choices=("sgd", "adamw"),
        default="sgd",
        help="sgd: momentum 0.9, weight decay 5e-4; adamw: weight decay 0.01",
    )
    p.add_argument("--epochs", type=int, required=True)
    p.add_argument("--batch-size", type=int, required=True)
    p.add_argument("--max-batches", type=int)
    p.add_argument("--precision", required=True)
    p.add_argument("--parallel", required=True)
    p.add_argument("--zero-stage", type=int)
    p.add_argument(
        "--offload",
        action="store_true",
        help="deepspeed: offload the optimizer (stage 3: and the parameters) to CPU memory; fsdp: cpu_offload",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument(
        "--algorithm", help="a method's metadata key, e.g. cutmix, or recipe:NAME (algorithms.recipes): train with it"
    )
    p.add_argument("--hparams", default="{}", help="the method's constructor arguments, a JSON object")
    p.add_argument("--out-dir", required=True)
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    rank = int(os.environ.get("RANK", 0))
    try:
        record = run_one(args)
        status = 0
    except Exception as exc:
        traceback.print_exc(file=sys.stderr)
        record = {"rank": rank, "status": "failed", "reason": f"{type(exc).__name__}: {exc}".strip()}
        status = 1
    write_atomic(os.path.join(args.out_dir, f"rank{record['rank']}.json"), json.dumps(record), force=True)
    destroy_process_group()
    return status


if __name__ == "__main__":
    raise SystemExit(main())
