"""The process-group and wrapping helpers the parallel strategies (:mod:`algorithms.core.strategies`,
which lists the modes) build on.

The distributed modes expect to be launched by ``torchrun`` (``python -m
torch.distributed.run``), which sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and the rendezvous
address; the process group uses NCCL on GPUs and gloo on the CPU. In every distributed mode the
batch size a data loader yields is per process, so the global batch is ``world_size`` times it.
"""

from __future__ import annotations

import atexit
import gc
import importlib.util
import os
import shutil
import sys
import time
from typing import Any

import torch
import torch.distributed as dist

from .options import DISTRIBUTED, PARALLELS
from .precision import autocast

__all__ = [
    "DISTRIBUTED",
    "PARALLELS",
    "check_deepspeed",
    "check_parallel",
    "destroy_process_group",
    "distributed_sampler",
    "deepspeed_precision_problem",
    "deepspeed_unavailable_reason",
    "init_distributed",
    "is_distributed",
    "local_device",
    "rank_and_world_size",
    "all_reduce_sum",
    "deepspeed_initialize",
    "AutocastDataParallel",
    "unwrap_model",
    "wrap_model",
]


def check_parallel(parallel: str) -> str:
    if parallel not in PARALLELS:
        raise ValueError(f"parallel={parallel!r} is not supported — use one of {', '.join(PARALLELS)}")
    return parallel


def is_distributed(parallel: str) -> bool:
    return check_parallel(parallel) in DISTRIBUTED


def rank_and_world_size() -> tuple[int, int]:
    """This process's rank and the world size: from the process group, else from torchrun's
    environment variables, else ``(0, 1)``."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def distributed_sampler(dataset: Any, **kwargs: Any) -> torch.utils.data.DistributedSampler:
    """A ``DistributedSampler`` over ``dataset`` for this process, made before any process group
    exists: the rank and world size come from torchrun's environment (:func:`rank_and_world_size`),
    so a script needs no process-group code before it builds its data loader; the
    :class:`~algorithms.core.Trainer` makes the group. ``kwargs`` go to the sampler (``shuffle``,
    ``seed``, ``drop_last``)."""
    rank, world_size = rank_and_world_size()
    return torch.utils.data.DistributedSampler(dataset, num_replicas=world_size, rank=rank, **kwargs)


_collect_registered = False


def collect_before_exit() -> None:
    """Free unreachable objects at exit, while the interpreter is still whole (registered once).

    A wrapped model holds the process group's backend, and a trainer can outlive its script's last
    reference in reference cycles. Left to interpreter finalization, a DDP or FSDP module and its
    gloo backend can be destroyed in an order where a rank aborts ("terminate called without an
    active exception", SIGABRT) after it has finished its work, even when the script called
    ``destroy_process_group``. Collecting at exit frees them while the interpreter is whole. What a
    script holds in module globals is still alive at exit whatever this does, so a distributed
    script trains in a function (as the cards' examples do), not at module level. A DeepSpeed
    engine is out of the collector's reach until :meth:`Trainer.close` has run.

    It collects until a pass frees nothing (at most four passes): freeing some objects runs
    finalizers that release others, as a closed DeepSpeed engine does, freed on the second pass.
    """
    global _collect_registered
    if not _collect_registered:
        atexit.register(_collect_until_nothing_is_freed)
        _collect_registered = True


def _collect_until_nothing_is_freed(passes: int = 4) -> None:
    for _ in range(passes):
        if gc.collect() == 0:
            return


#: How long :func:`destroy_process_group` lets gloo's worker threads run before it joins them.
RELEASE_PAUSE_S = 0.1


def destroy_process_group() -> None:
    """Leave the process group, as the last step of a distributed script (a no-op outside one).

    It adds two things to ``torch.distributed.destroy_process_group``:

    - A short pause (``RELEASE_PAUSE_S``) that releases the GIL first. gloo frees a finished
      collective on its own worker thread, and a collective launched during a backward pass (DDP's
      or ZeRO's gradient reductions) holds a Python object, so freeing it takes the GIL, while
      torch's destroy joins those threads holding the GIL: without the pause a thread that has not
      yet freed its last collective can wait for the GIL forever, and the process hangs.
    - DeepSpeed's own destroy where DeepSpeed set up communication in this process. It also drops
      the groups DeepSpeed cached from this world, so a later world in the same process does not
      find them stale.

    Close a DeepSpeed Trainer before this (see :meth:`Trainer.close`); its engine needs the group.
    """
    if not (dist.is_available() and dist.is_initialized()):
        return
    time.sleep(RELEASE_PAUSE_S)
    deepspeed_comm = sys.modules.get("deepspeed.comm.comm")  # where its backend (cdb) lives
    if deepspeed_comm is not None and getattr(deepspeed_comm, "cdb", None) is not None:
        deepspeed_comm.destroy_process_group()
    else:
        dist.destroy_process_group()


def init_distributed(device: torch.device) -> bool:
    """Join the process group torchrun describes, unless this process already has; either way,
    free what the process group's users left behind before the interpreter finalizes. Returns
    whether it made the group (whose maker then owns it: the Trainer leaves it in ``close()``)."""
    collect_before_exit()
    if dist.is_initialized():
        return False
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        raise RuntimeError(
            "a distributed parallel mode needs the torchrun environment (RANK, WORLD_SIZE, "
            "MASTER_ADDR): launch with `python -m torch.distributed.run --nproc_per_node N ...`"
        )
    backend = "nccl" if device.type == "cuda" else "gloo"
    # torchrun's rendezvous store outlives the groups made from it, and torch names every default
    # group's keys alike ("default_pg/0/..."), so a second group made after the first was destroyed
    # (a script with two Trainers) could read the first one's addresses from the store and hang.
    # Each group this process makes gets keys of its own; every rank makes them in the same order.
    global _groups_made
    store, rank, world_size = next(dist.rendezvous("env://"))
    store = dist.PrefixStore(f"methods-library-group-{_groups_made}", store)
    dist.init_process_group(
        backend=backend,
        store=store,
        rank=rank,
        world_size=world_size,
        device_id=device if device.type == "cuda" else None,
    )
    _groups_made += 1
    return True


#: How many process groups :func:`init_distributed` has made in this process.
_groups_made = 0


def local_device() -> torch.device:
    """The device this process should use: its own GPU under torchrun, else the CPU."""
    if torch.cuda.is_available():
        index = int(os.environ.get("LOCAL_RANK", 0)) % torch.cuda.device_count()
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    return torch.device("cpu")


def deepspeed_unavailable_reason() -> str | None:
    """Why DeepSpeed cannot run here, or None when it can be tried (answered without importing it).

    Without CUDA (or with ``DS_ACCELERATOR=cpu``), DeepSpeed picks its CPU accelerator, whose
    process group starts by building a shared-memory communication op with the system's C++
    compiler (once; torch caches the build).
    """
    if importlib.util.find_spec("deepspeed") is None:
        return "deepspeed is not installed (it is the optional extra: pip install 'methods-library[deepspeed]')"
    if os.environ.get("DS_ACCELERATOR", "cuda" if torch.cuda.is_available() else "cpu") == "cpu":
        compiler = os.environ.get("CXX", "c++")  # the compiler torch's extension builder calls
        if shutil.which(compiler) is None:
            return (
                f"DeepSpeed on the CPU builds its communication op with a C++ compiler, and {compiler!r} "
                "is not on PATH (install one, or set CXX)"
            )
    return None


def deepspeed_precision_problem(precision: str, device: torch.device) -> str | None:
    """Why DeepSpeed cannot train in the Trainer's ``precision`` on ``device``, or None when it can.

    The precisions follow the data types DeepSpeed's accelerator reports (on the CPU: float32, and
    bfloat16; float16 only where oneDNN has it); ``amp_fp16`` never, as DeepSpeed's fp16 mode
    scales the loss itself.
    """
    from deepspeed.accelerator import get_accelerator

    accelerator = get_accelerator()
    name = accelerator.device_name()
    if device.type != name:
        return (
            f"DeepSpeed's accelerator here is {name!r} but the Trainer's device is {device.type!r}: "
            "leave device unset, or choose DeepSpeed's accelerator (DS_ACCELERATOR=cpu for the CPU)"
        )
    dtypes = accelerator.supported_dtypes()
    supported = ["fp32"]
    if torch.float16 in dtypes:
        supported.append("fp16")
    if torch.bfloat16 in dtypes:
        supported += ["bf16", "amp_bf16"]
    if precision in supported:
        return None
    why = " (DeepSpeed's fp16 mode scales fp16 losses itself)" if precision == "amp_fp16" else ""
    return (
        f"parallel='deepspeed' cannot train in precision={precision!r} on DeepSpeed's {name} accelerator "
        f"here{why}: use one of {', '.join(supported)}"
    )


def check_deepspeed(precision: str, device: torch.device) -> None:
    """Raise unless DeepSpeed can train in ``precision`` on ``device`` here: RuntimeError when it
    cannot run at all, ValueError naming the precisions it can use."""
    reason = deepspeed_unavailable_reason()
    if reason is not None:
        raise RuntimeError(reason)
    problem = deepspeed_precision_problem(precision, device)
    if problem is not None:
        raise ValueError(problem)


class _AutocastReplica:
    """A DataParallel replica called inside the Trainer's autocast context, on its worker thread."""

    def __init__(self, replica: torch.nn.Module, precision: str, device_type: str):
        self.replica, self.precision, self.device_type = replica, precision, device_type

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with autocast(self.precision, torch.device(self.device_type)):
            return self.replica(*args, **kwargs)


class AutocastDataParallel(torch.nn.DataParallel):
    """``torch.nn.DataParallel`` whose replicas run the Trainer's autocast dtype.

    DataParallel runs each replica on a worker thread, and autocast's state is per thread: the
    worker re-enters autocast with ``enabled`` alone, so on two or more GPUs an ``amp_bf16`` forward
    would run in autocast's default float16, with no GradScaler. Each replica here enters the
    Trainer's own autocast context (the precision's dtype) on its thread. With one device
    DataParallel calls the module on the Trainer's thread, inside the Trainer's context.
    """

    def __init__(self, module: torch.nn.Module, precision: str = "fp32", device_type: str = "cuda", **kwargs: Any):
        super().__init__(module, **kwargs)
        self.precision, self.device_type = precision, device_type

    def parallel_apply(self, replicas: Any, inputs: Any, kwargs: Any) -> Any:
        return super().parallel_apply(
            [_AutocastReplica(r, self.precision, self.device_type) for r in replicas], inputs, kwargs
        )


def unwrap_model(model: torch.nn.Module) -> torch.nn.Module:
    """The network inside a DataParallel or DistributedDataParallel wrapper (``model`` itself
    otherwise: FSDP shards the module in place, DeepSpeed's engine is unwrapped when it is made)."""
    if isinstance(model, (torch.nn.DataParallel, torch.nn.parallel.DistributedDataParallel)):
        return model.module
    return model


def wrap_model(
    model: torch.nn.Module,
    parallel: str,
    device: torch.device,
    precision: str = "fp32",
    find_unused_parameters: bool = False,
    cpu_offload: bool = False,
) -> torch.nn.Module:
    """``model`` wrapped for ``parallel`` (DeepSpeed wraps in :func:`deepspeed_initialize`).

    ``find_unused_parameters``: DDP looks for parameters a step leaves without a gradient (a
    block Stochastic Depth dropped), at the cost of a graph traversal each step; the Trainer
    sets it when an algorithm says it needs it (``Algorithm.unused_parameters``).

    ``cpu_offload`` (FSDP only): every ``fully_shard`` call gets torch's ``CPUOffloadPolicy``, so
    the sharded parameters, their gradients and the optimizer state live in CPU memory, copied to
    ``device`` for each layer's all-gather. Pinned memory (the policy's ``pin_memory``) only where
    ``device`` is a GPU: pinning needs an accelerator, and on the CPU the copies are no-ops."""
    if parallel == "dp":
        return AutocastDataParallel(model, precision, device.type)
    if parallel == "ddp":
        return torch.nn.parallel.DistributedDataParallel(
            model,
            device_ids=[device.index] if device.type == "cuda" else None,
            find_unused_parameters=find_unused_parameters,
        )
    if parallel == "fsdp":
        from torch.distributed.fsdp import CPUOffloadPolicy, OffloadPolicy, fully_shard

        policy = CPUOffloadPolicy(pin_memory=device.type == "cuda") if cpu_offload else OffloadPolicy()
        # Shard layer by layer so only one layer's full parameters exist at a time; the root
        # call shards whatever is left (batch-norm parameters, biases of other modules).
        for module in model.modules():
            if isinstance(module, (torch.nn.Conv2d, torch.nn.Linear)):
                fully_shard(module, offload_policy=policy)
        fully_shard(model, offload_policy=policy)
        return model
    return model


#: DeepSpeed's own bucket size, in elements (its ``reduce_bucket_size`` and ``allgather_bucket_size``
#: defaults): the most :func:`deepspeed_initialize` gives a bucket.
DEEPSPEED_BUCKET_ELEMENTS = 500_000_000
#: What a bucket's size is a multiple of (DEEPSPEED_BUCKET_ELEMENTS is one too).
DEEPSPEED_BUCKET_ALIGNMENT = 256


def deepspeed_initialize(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    precision: str,
    zero_stage: int,
    batch_size: int | None,
    grad_clip_norm: float | None,
    offload_optimizer: bool = False,
    offload_param: bool = False,
) -> Any:
    """A DeepSpeed engine with ZeRO ``zero_stage`` over ``model`` and ``optimizer`` (see
    :func:`check_deepspeed`, which the Trainer calls before it starts). ``offload_optimizer`` and
    ``offload_param`` put DeepSpeed's ``offload_optimizer`` and ``offload_param`` sections, device
    ``cpu``, in its ``zero_optimization`` config (see :class:`~algorithms.core.strategies.DeepSpeed`).

    ZeRO's gradient buckets hold at most the model's parameter count (rounded up to a multiple of
    :data:`DEEPSPEED_BUCKET_ALIGNMENT`, as ZeRO requires an even one): DeepSpeed allocates its
    reduce bucket whole, 5e8 elements (2 GB of float32) by default, whatever the model's size, and a
    bucket larger than the model holds nothing more. Every gradient then still fits one bucket, as
    with DeepSpeed's default for any model below 5e8 parameters, so what is reduced, and when, is
    unchanged; a model above that keeps DeepSpeed's default."""
    import deepspeed

    parameters = sum(p.numel() for p in model.parameters())
    # rounded up to a multiple of DEEPSPEED_BUCKET_ALIGNMENT: ZeRO asserts that its allgather bucket
    # is a multiple of its start alignment (2 elements) on more than one rank
    bucket = min(
        DEEPSPEED_BUCKET_ELEMENTS, -(-max(parameters, 1) // DEEPSPEED_BUCKET_ALIGNMENT) * DEEPSPEED_BUCKET_ALIGNMENT
    )
    zero: dict[str, Any] = {"stage": zero_stage, "reduce_bucket_size": bucket, "allgather_bucket_size": bucket}
    if offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu"}
    if offload_param:
        zero["offload_param"] = {"device": "cpu"}
    config: dict[str, Any] = {
        "zero_optimization": zero,
        # The Trainer's optimizers are torch's (SGD by default), which DeepSpeed has not vetted
        # for ZeRO; their steps on a partition are ordinary torch steps.
        "zero_allow_untested_optimizer": True,
        # With offload_optimizer, DeepSpeed refuses any optimizer but its own CPU ones unless told
        # otherwise: the Trainer's optimizer is the user's, and steps the partitions on the CPU.
        "zero_force_ds_cpu_optimizer": False,
        "train_micro_batch_size_per_gpu": batch_size or 1,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": grad_clip_norm or 0.0,
        # The Trainer's precision already cast the model (fp16/bf16) or runs autocast (amp);
        # DeepSpeed's own fp16 mode would add its loss scaler on top of the model cast.
        "fp16": {"enabled": precision == "fp16"},
        "bf16": {"enabled": precision == "bf16"},
    }
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    return engine


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """Sum ``tensor`` over the processes in place (a no-op outside a process group)."""
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor
