"""The Trainer's parallel modes, one strategy object each: how a mode joins its processes, wraps
the model and optimizer, runs the backward pass and the optimizer step, unwraps, and closes.

==============  ==========================================================================
``single``      :class:`Single`: one process, one device
``dp``          :class:`DataParallel`: ``torch.nn.DataParallel`` over the visible GPUs
``ddp``         :class:`DDP`: ``DistributedDataParallel``, one process per device
``fsdp``        :class:`FSDP`: ``fully_shard`` (FSDP2) on every Conv2d and Linear and the model,
                optionally offloaded to CPU memory (``FSDP(cpu_offload=True)``)
``deepspeed``   :class:`DeepSpeed`: DeepSpeed ZeRO stage 1, 2 or 3, optionally offloaded to CPU
                memory; its engine scales, steps and clips
``accelerate``  :class:`Accelerate`: Hugging Face Accelerate, set up by ``accelerate launch
                --config_file`` (``configs/accelerate/``): it prepares the model and optimizer
==============  ==========================================================================

``Trainer(parallel=...)`` takes a mode's name (its strategy made with the defaults) or a strategy
object, which carries the mode's own options (``DeepSpeed(zero_stage=1)``) or is a subclass of the
user's. The :class:`~algorithms.core.Trainer` binds it to its precision, device and clipping
(:meth:`Strategy.bind`) and calls the same methods whatever the mode, so its loop (``fit``) has no
branch on the mode. The distributed strategies join
the process group ``torchrun`` describes when the process has none, and then own it: :meth:`close`
leaves it (:func:`~algorithms.core.distributed.destroy_process_group`, with its safeguards). A
group the user made stays the user's.

An optimizer with a ``first_step(closure)`` (:class:`~algorithms.sam.SAMOptimizer`) takes its
gradient at a second point: after the backward pass the strategy calls it with a closure that
runs the batch's forward, loss and backward once more, as torch's optimizer API passes closures to
``step``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import torch
import torch.distributed as dist

from .checkpoint import (
    FORMAT,
    KEYS,
    VERSION,
    CheckpointError,
    check_compatible,
    is_url,
    rank_view,
    read_checkpoint,
    setup_of,
    split_ranks,
    write_checkpoint,
)
from .distributed import (
    check_deepspeed,
    check_parallel,
    deepspeed_initialize,
    destroy_process_group,
    init_distributed,
    rank_and_world_size,
    unwrap_model,
    wrap_model,
)
from .precision import grad_scaler

if TYPE_CHECKING:
    from .state import State

__all__ = ["DDP", "FSDP", "STRATEGIES", "Accelerate", "DataParallel", "DeepSpeed", "Single", "Strategy", "strategy"]

Optimizer = torch.optim.Optimizer
#: What the Trainer is given as ``optimizer``: an optimizer, a function of the parameters that
#: makes one once the model is wrapped, or None for the default SGD.
OptimizerSpec = Optimizer | Callable[[Any], Optimizer] | None


def _default_optimizer(params: Any) -> Optimizer:
    return torch.optim.SGD(params, lr=0.01, momentum=0.9)


class Strategy:
    """A parallel mode of the Trainer (the base class is one process on one device). Made with the
    mode's own options only; the Trainer then binds it (:meth:`bind`). One object serves one
    Trainer: a bound strategy is refused by a second."""

    name: ClassVar[str] = "single"
    #: Whether the mode runs one process per device under ``torchrun``.
    distributed: ClassVar[bool] = False
    bound = False

    def bind(self, precision: str, device: torch.device, grad_clip_norm: float | None = None) -> None:
        """Take the Trainer's ``precision`` (``amp_fp16`` gets a GradScaler), this process's
        ``device`` and ``grad_clip_norm`` (clip the gradients' norm to it before each step; None:
        never). A ValueError where this object already serves a Trainer."""
        if self.bound:
            raise ValueError(
                f"parallel={self!r} already serves another Trainer: give each Trainer a strategy object of its own"
            )
        self.precision, self.device, self.grad_clip_norm = precision, device, grad_clip_norm
        self.scaler = grad_scaler(self.scaler_precision(precision), device)
        self.owns_process_group = False
        self.closed = False
        self.bound = True

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    @property
    def refusal_modes(self) -> tuple[str, ...]:
        """The names whose ``Algorithm.unsupported_parallel`` refusals apply to this mode (see
        :data:`~algorithms.core.options.REFUSAL_MODES`): its own name."""
        return (self.name,)

    def scaler_precision(self, precision: str) -> str:
        """The precision the GradScaler is made for: the Trainer's, unless the mode scales itself."""
        return precision

    def check(self, optimizer: OptimizerSpec) -> None:
        """Refuse, before anything is done, what this mode cannot train with."""

    def connect(self) -> tuple[int, int]:
        """Join this mode's processes, if it has any; ``(rank, world_size)``."""
        return 0, 1

    def wrap(
        self, model: torch.nn.Module, optimizer: OptimizerSpec, *, unused_parameters: bool, batch_size: int | None
    ) -> tuple[torch.nn.Module, Callable[..., Any], Optimizer]:
        """``(model, forward, optimizer)``: the model as ``state.model`` holds it, what the forward
        pass calls, and the optimizer over the wrapped model's parameters."""
        model = self.wrap_model(model, unused_parameters)
        if not isinstance(optimizer, Optimizer):
            optimizer = (optimizer or _default_optimizer)(model.parameters())
        return model, model, optimizer

    def wrap_model(self, model: torch.nn.Module, unused_parameters: bool) -> torch.nn.Module:
        return model

    def unwrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """The network inside whatever :meth:`wrap` put around it."""
        return unwrap_model(model)

    def backward(
        self,
        loss: torch.Tensor,
        optimizer: Optimizer | None,
        again: Callable[[], torch.Tensor],
        once: Callable[[torch.Tensor], Any] | None = None,
    ) -> None:
        """The backward pass of ``loss``: ``once(loss)`` (a loop's own, ``accelerator.backward``),
        else :meth:`backward_once`; an optimizer with ``first_step`` then takes the gradient at its
        second point through ``again`` (the batch's forward, loss and the same backward)."""
        (once or self.backward_once)(loss)
        first_step = getattr(optimizer, "first_step", None)
        if first_step is not None:
            first_step(again)

    def backward_once(self, loss: torch.Tensor) -> None:
        self.scaler.scale(loss).backward()

    def gradient_sync(self, model: torch.nn.Module, sync: bool) -> contextlib.AbstractContextManager[Any]:
        """Around one microbatch's forward and backward (:meth:`Loop.accumulate <algorithms.core.Loop.accumulate>`):
        where ``sync`` is false, the gradients stay on this rank (summed locally), to be
        synchronized in the last microbatch's backward. One process has nothing to synchronize."""
        return contextlib.nullcontext()

    def prepare_step(self, model: torch.nn.Module, optimizer: Optimizer) -> None:
        """Before ``Event.BEFORE_OPTIMIZER_STEP``: unscale the gradients and clip them, so the
        algorithms at that event see true (and clipped) gradients."""
        self.scaler.unscale_(optimizer)
        if self.grad_clip_norm is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), self.grad_clip_norm)

    def step(self, optimizer: Optimizer) -> None:
        """The optimizer's step (skipped by the scaler where the gradients overflowed), then clear
        the gradients."""
        self.scaler.step(optimizer)
        self.scaler.update()
        optimizer.zero_grad(set_to_none=True)

    # -- checkpoints -----------------------------------------------------------------------------

    def save(self, path: str | Path, state: State, overwrite: bool = False) -> str | Path:
        """Write ``state``'s checkpoint, with this run's setup (precision, mode, processes), to
        ``path``: one file, atomically, a local path or a URL through fsspec (see
        :mod:`algorithms.core.checkpoint`). Returns ``path`` as given."""
        return write_checkpoint(path, {**state.state_dict(), "setup": setup_of(state, self.name)}, overwrite)

    def load(self, path: str | Path, state: State) -> None:
        """Read the checkpoint at ``path``, refuse it (one line naming the file, before any weight,
        optimizer state or generator changes) unless it fits ``state`` in this mode, then load it."""
        saved = read_checkpoint(path)
        check_compatible(saved, state, path, self.name)
        state.load_state_dict(rank_view(saved, state.rank))

    def close(self) -> None:
        """Release what the mode holds: the process group it made, where it made one. Calling it
        again does nothing."""
        if self.closed:
            return
        self.closed = True
        self.release()
        if self.owns_process_group:
            destroy_process_group()
            self.owns_process_group = False

    def release(self) -> None:
        """What a mode frees before its process group goes (DeepSpeed's engine)."""


class Single(Strategy):
    """One process on one device."""


class DataParallel(Strategy):
    """``torch.nn.DataParallel``: one process splits each batch over the visible GPUs, its replicas
    running the Trainer's autocast (on the CPU it runs the module once)."""

    name = "dp"

    def wrap_model(self, model: torch.nn.Module, unused_parameters: bool) -> torch.nn.Module:
        return wrap_model(model, "dp", self.device, self.precision)


class _Distributed(Strategy):
    """The modes with one process per device. A checkpoint is one file (a local path or a URL),
    written by rank 0 and read by every rank, so it lies where every rank sees it. Saving and
    loading are collective: every rank calls them.

    The file holds once, from rank 0, what is the same on every rank: the weights, optimizers,
    schedulers, scaler, timestamp, and each algorithm's state but its generator; and under
    ``ranks`` (gathered to rank 0) what differs by rank: each algorithm's generator and the global
    generators (:func:`~algorithms.core.checkpoint.split_ranks`). So an algorithm's state other than
    its generator must be the same on every rank, or rank 0's is what every rank resumes with."""

    distributed = True

    def connect(self) -> tuple[int, int]:
        self.owns_process_group = init_distributed(self.device)
        return rank_and_world_size()

    def shared_state(self, state: State) -> dict[str, Any]:
        """What rank 0 writes of the weights and optimizers (DDP: its own copy, the same on every rank)."""
        return state.state_dict()

    def save(self, path: str | Path, state: State, overwrite: bool = False) -> str | Path:
        shared, own = split_ranks(self.shared_state(state))
        ranks: list[Any] | None = [None] * state.world_size if state.rank == 0 else None
        dist.gather_object(own, ranks, dst=0)
        failure: list[Any] = [None]
        if state.rank == 0:
            try:
                write_checkpoint(path, {**shared, "setup": setup_of(state, self.name), "ranks": ranks}, overwrite)
            except Exception as exc:  # every rank raises, not only the one that wrote
                failure[0] = exc
        dist.broadcast_object_list(failure, src=0)  # also keeps the others until the file is whole
        if failure[0] is not None:
            if state.rank == 0:
                raise failure[0]
            raise CheckpointError(f"{path}: rank 0 could not write the checkpoint: {failure[0]}")
        return path


class DDP(_Distributed):
    """``DistributedDataParallel``: one process per device, gradients all-reduced in the backward."""

    name = "ddp"

    def wrap_model(self, model: torch.nn.Module, unused_parameters: bool) -> torch.nn.Module:
        return wrap_model(model, "ddp", self.device, self.precision, unused_parameters)

    def gradient_sync(self, model: torch.nn.Module, sync: bool) -> contextlib.AbstractContextManager[Any]:
        """DDP's ``no_sync()`` where ``sync`` is false: no all-reduce in that backward."""
        return contextlib.nullcontext() if sync else model.no_sync()


class FSDP(_Distributed):
    """FSDP2 (``fully_shard``): parameters, gradients and optimizer state sharded over the ranks.

    Args:
        cpu_offload: give every ``fully_shard`` call torch's ``CPUOffloadPolicy``: each rank's
            shards of the parameters, their gradients and so the optimizer state live in CPU
            memory; a layer's shards are copied to the device before its all-gather, its gradient
            shards back to the CPU after the reduce-scatter, and the optimizer steps on the CPU
            (pinned memory on GPUs; torch refuses to pin without an accelerator). On a machine
            without GPUs everything is in CPU memory already: torch accepts the policy there,
            with gloo, and its copies are no-ops, so it trains and resumes as without it and saves
            nothing. A checkpoint is the full state dict, as without it.
    """

    name = "fsdp"

    def __init__(self, cpu_offload: bool = False):
        if not isinstance(cpu_offload, bool):
            raise TypeError(f"FSDP(cpu_offload={cpu_offload!r}): pass True or False")
        self.cpu_offload = cpu_offload

    def __repr__(self) -> str:
        return "FSDP(cpu_offload=True)" if self.cpu_offload else "FSDP()"

    def check(self, optimizer: OptimizerSpec) -> None:
        if isinstance(optimizer, Optimizer):
            raise ValueError(
                "parallel='fsdp' shards the parameters when it wraps the model: pass "
                "optimizer as a function of the parameters, e.g. "
                "lambda params: torch.optim.SGD(params, lr=0.1)"
            )

    def wrap_model(self, model: torch.nn.Module, unused_parameters: bool) -> torch.nn.Module:
        return wrap_model(model, "fsdp", self.device, self.precision, cpu_offload=self.cpu_offload)

    @contextlib.contextmanager
    def gradient_sync(self, model: torch.nn.Module, sync: bool) -> Any:
        """FSDP2's ``set_requires_gradient_sync(sync)`` for that backward (no reduce-scatter where
        false: each rank keeps its unsharded gradients), then back to synchronizing."""
        model.set_requires_gradient_sync(sync)
        try:
            yield
        finally:
            model.set_requires_gradient_sync(True)

    # A full (unsharded) state dict, gathered to rank 0 on the CPU: one file, independent of how
    # the weights were sharded, for the price of the whole model and optimizer state in rank 0's
    # memory while it is written (a run resumes with as many ranks for their generators' sake). A
    # sharded checkpoint (torch.distributed.checkpoint, a folder of per-rank files) would scale
    # further; at the sizes this Trainer is measured on one file is
    # simpler to check, move and refuse, so this is the full state dict.
    def shared_state(self, state: State) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

        self._one_optimizer(state)
        model, optimizer = get_state_dict(
            state.model, state.optimizers[0], options=StateDictOptions(full_state_dict=True, cpu_offload=True)
        )
        return {**state.state_dict(), "model": model, "optimizers": [optimizer]}

    def load(self, path: str | Path, state: State) -> None:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

        self._one_optimizer(state)
        saved = read_checkpoint(path)
        check_compatible(saved, state, path, self.name)
        saved = rank_view(saved, state.rank)
        state.load_parameter_groups(saved)
        set_state_dict(
            state.model,
            state.optimizers[0],
            model_state_dict=saved["model"],
            optim_state_dict=saved["optimizers"][0],
            options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True),
        )
        state.load_state_dict(saved, weights=False)

    @staticmethod
    def _one_optimizer(state: State) -> None:
        if len(state.optimizers) != 1:
            raise CheckpointError(
                f"parallel='fsdp' checkpoints hold one optimizer, this Trainer has {len(state.optimizers)}"
            )


class DeepSpeed(_Distributed):
    """DeepSpeed ZeRO: its engine runs the forward and backward, scales the loss in its own fp16
    mode, and steps, clips and zeroes the gradients itself.

    Args:
        zero_stage: the ZeRO stage: 1 partitions the optimizer state over the ranks, 2 also the
            gradients, 3 also the parameters (each rank keeps its partition of every parameter,
            and a layer's whole weights are gathered only while it runs forward or backward); a
            ValueError otherwise. ``Trainer(parallel="deepspeed")`` is stage 2.
        offload_optimizer: ZeRO-Offload, at any stage (DeepSpeed's ``zero_optimization.
            offload_optimizer: {device: cpu}``): each rank's partition of the optimizer state and
            of the float32 master weights lives in CPU memory, the gradients of the partition are
            copied there, and the optimizer steps on the CPU. The step is the Trainer's optimizer
            (DeepSpeed's guard that asks for its own, ``zero_force_ds_cpu_optimizer``, is turned
            off): torch's run on the CPU tensors, or DeepSpeed's vectorised ``DeepSpeedCPUAdam``
            (``deepspeed.ops.adam``; its op is built with the C++ compiler on first use) passed as
            ``optimizer=lambda params: DeepSpeedCPUAdam(params, lr=...)``.
        offload_param: stage 3 only (``offload_param: {device: cpu}``): the parameters' partitions
            live in CPU memory too, and are copied to the device for each layer's gather; a
            ValueError at stages 1 and 2, where every rank keeps the whole parameters on its
            device.

    On DeepSpeed's CPU accelerator (a machine without GPUs) the offloads move nothing, as
    everything is in CPU memory already; DeepSpeed still takes its offload paths (its ZeRO
    optimizer reports the offloads), and the CPU tests check that they train the weights of one
    process and resume exactly. A checkpoint records these options, and a run resumes only with
    the same ones.
    """

    name = "deepspeed"
    OFFLOADS: ClassVar[tuple[str, ...]] = ("offload_optimizer", "offload_param")

    def __init__(self, zero_stage: int = 2, offload_optimizer: bool = False, offload_param: bool = False):
        if isinstance(zero_stage, bool) or zero_stage not in (1, 2, 3):
            raise ValueError(f"DeepSpeed(zero_stage={zero_stage!r}): ZeRO stage 1, 2 or 3 is supported")
        for option, value in (("offload_optimizer", offload_optimizer), ("offload_param", offload_param)):
            if not isinstance(value, bool):
                raise TypeError(f"DeepSpeed({option}={value!r}): pass True or False")
        if offload_param and zero_stage != 3:
            raise ValueError(
                f"DeepSpeed(zero_stage={zero_stage}, offload_param=True): only ZeRO stage 3 partitions the "
                "parameters, and so can offload them — pass zero_stage=3, or offload the optimizer alone "
                "(offload_optimizer=True)"
            )
        self.zero_stage, self.offload_optimizer, self.offload_param = int(zero_stage), offload_optimizer, offload_param

    def options(self) -> dict[str, Any]:
        """The ZeRO options, as the constructor takes them (a checkpoint records them)."""
        return {"zero_stage": self.zero_stage, **{name: getattr(self, name) for name in self.OFFLOADS}}

    def __repr__(self) -> str:
        return _deepspeed_repr(self.options())

    @property
    def refusal_modes(self) -> tuple[str, ...]:
        """``deepspeed``, and at ZeRO stage 3 (parameters sharded, as under FSDP) ``deepspeed:3`` too."""
        return ("deepspeed", "deepspeed:3") if self.zero_stage == 3 else ("deepspeed",)

    _engine: Any = None
    #: The tag of DeepSpeed's checkpoint inside the folder (one checkpoint a folder).
    TAG = "checkpoint"
    #: The file of DeepSpeed's checkpoint the Trainer reads its client state from: the model
    #: states, at stages 1 and 2 one file; at stage 3 one a rank (rank 0's is read).
    MODEL_FILE = "mp_rank_00_model_states.pt"
    ZERO3_MODEL_FILE = "zero_pp_rank_0_mp_rank_00_model_states.pt"

    # A checkpoint is a folder written by DeepSpeed's own save_checkpoint. At stages 1 and 2: the
    # weights once, and each rank's ZeRO partition of the optimizer state (with its float32 master
    # weights) in a file of its own. At stage 3, where no rank holds the whole weights, each rank
    # writes its own model-states file, whose weights are empty placeholders, and its partition
    # file holds its part of the weights; DeepSpeed's zero_to_fp32.py, which it copies into the
    # folder, puts them together. The rest (schedulers, timestamp, the algorithms' state, the
    # setup, the ZeRO options, this format's name, and every rank's generators under ``ranks``,
    # as in one file) is its client state. It is written under a temporary name beside the target
    # and renamed by rank 0 once every rank has written its part, so a folder at the target is
    # always whole. DeepSpeed writes it with its own file I/O, so the folder is a local (or
    # mounted) path: a URL is refused.
    def save(self, path: str | Path, state: State, overwrite: bool = False) -> str | Path:
        import copy
        import shutil

        self._refuse_url(path)
        folder = Path(path)
        if folder.exists() and not overwrite:
            raise CheckpointError(f"{path}: exists — pass overwrite=True to replace it, or choose another path")
        # The optimizers are DeepSpeed's to save (their partitions). The torch optimizer ZeRO wraps
        # cannot give a state_dict at stage 3 (its groups hold one flat partition at a time, its
        # state all of them), so the state is read without it.
        without_optimizers = copy.copy(state)
        without_optimizers.optimizers = ()
        shared, own = split_ranks(without_optimizers.state_dict())
        ranks: list[Any] = [None] * state.world_size
        dist.all_gather_object(ranks, own)
        client = {key: value for key, value in shared.items() if key not in ("model", "optimizers")}
        client.update(
            format=FORMAT,
            version=VERSION,
            setup=setup_of(state, self.name),
            deepspeed=self.options(),
            ranks=ranks,
            optimizers=[None] * len(state.optimizers),
        )
        tmp = folder.with_name(f".{folder.name}.tmp")
        if state.rank == 0 and tmp.exists():
            shutil.rmtree(tmp)
        dist.barrier()
        self._engine.save_checkpoint(str(tmp), tag=self.TAG, client_state=client, save_latest=False)
        dist.barrier()
        if state.rank == 0:
            if folder.exists():
                shutil.rmtree(folder)
            os.replace(tmp, folder)
        dist.barrier()
        return path

    def load(self, path: str | Path, state: State) -> None:
        self._refuse_url(path)
        path = Path(path)
        mine, other = (
            (self.ZERO3_MODEL_FILE, self.MODEL_FILE)
            if self.zero_stage == 3
            else (self.MODEL_FILE, self.ZERO3_MODEL_FILE)
        )
        model_file, other = path / self.TAG / mine, path / self.TAG / other  # other: a folder of the other layout
        if not model_file.is_file() and not other.is_file():
            raise CheckpointError(
                f"{path}: not a checkpoint folder of parallel='deepspeed' (no {self.TAG}/{model_file.name}) — "
                "use one written by Trainer.save_checkpoint"
            )
        # DeepSpeed's file, its weights under "module", holds its own config objects, which torch's
        # safe loader refuses; DeepSpeed's load_checkpoint unpickles it all the same.
        keys = tuple("module" if key == "model" else key for key in KEYS)
        saved = read_checkpoint(model_file if model_file.is_file() else other, weights_only=False, keys=keys)
        saved = {**saved, "model": saved["module"]}
        check_compatible(saved, state, path, self.name)
        options = saved.get("deepspeed")
        if options is None:  # written before checkpoints recorded the ZeRO options: stage 1 or 2, no offload
            refused, shown = not model_file.is_file(), "DeepSpeed(zero_stage=1 or 2)"
        else:
            refused, shown = options != self.options(), _deepspeed_repr(options)
        if refused:
            raise CheckpointError(
                f"{path}: saved with {shown}, this Trainer has {self!r} — resume with the same ZeRO stage and offloads"
            )
        self._engine.load_checkpoint(
            str(path), tag=self.TAG, load_optimizer_states=True, load_lr_scheduler_states=False
        )
        state.load_state_dict(rank_view(saved, state.rank), weights=False)

    @staticmethod
    def _refuse_url(path: str | Path) -> None:
        if is_url(path):
            raise CheckpointError(
                f"{path}: parallel='deepspeed' checkpoints are folders DeepSpeed writes itself, on a local or "
                "mounted file system — save to a local path (and copy the folder to remote storage)"
            )

    def scaler_precision(self, precision: str) -> str:
        return "fp32"  # DeepSpeed scales the loss itself (its fp16 mode)

    def connect(self) -> tuple[int, int]:
        check_deepspeed(self.precision, self.device)
        return super().connect()

    def wrap(
        self, model: torch.nn.Module, optimizer: OptimizerSpec, *, unused_parameters: bool, batch_size: int | None
    ) -> tuple[torch.nn.Module, Callable[..., Any], Optimizer]:
        if not isinstance(optimizer, Optimizer):
            optimizer = (optimizer or _default_optimizer)(model.parameters())
        self._engine = deepspeed_initialize(
            model,
            optimizer,
            self.precision,
            self.zero_stage,
            batch_size,
            self.grad_clip_norm,
            offload_optimizer=self.offload_optimizer,
            offload_param=self.offload_param,
        )
        return self._engine.module, self._engine, optimizer

    def backward(
        self,
        loss: torch.Tensor,
        optimizer: Optimizer | None,
        again: Callable[[], torch.Tensor],
        once: Callable[[torch.Tensor], Any] | None = None,
    ) -> None:
        self._engine.backward(loss)

    def backward_once(self, loss: torch.Tensor) -> None:
        self._engine.backward(loss)

    @contextlib.contextmanager
    def gradient_sync(self, model: torch.nn.Module, sync: bool) -> Any:
        """DeepSpeed's ``set_gradient_accumulation_boundary(sync)`` for that microbatch: where false,
        its backward accumulates the gradients on this rank without ZeRO's reduction, which the
        last microbatch's backward (a boundary) runs; the step after it is then the one update.
        The engine's own ``gradient_accumulation_steps`` stays 1 (its backward divides by it)."""
        self._engine.set_gradient_accumulation_boundary(sync)
        try:
            yield
        finally:
            self._engine.set_gradient_accumulation_boundary(True)

    def prepare_step(self, model: torch.nn.Module, optimizer: Optimizer) -> None:
        """Nothing: DeepSpeed's engine clips (its config) inside its step."""

    def step(self, optimizer: Optimizer) -> None:
        self._engine.step()  # steps, clips and zeroes the gradients

    def release(self) -> None:
        """DeepSpeed's engine hooks every parameter's gradient, and those hooks hold the engine in a
        cycle the collector cannot free; left open it lives until the interpreter shuts down and is
        destroyed there, with its process groups, where a rank can abort after finishing its work.
        Its own ``destroy`` removes the hooks and needs the process group, so it runs first."""
        if self._engine is not None:
            self._engine.destroy()


def _deepspeed_repr(options: dict[str, Any]) -> str:
    """``DeepSpeed(...)`` with the stage and the offloads that are on."""
    shown = [f"zero_stage={options['zero_stage']}"]
    shown += [f"{name}=True" for name in DeepSpeed.OFFLOADS if options.get(name)]
    return f"DeepSpeed({', '.join(shown)})"


class Accelerate(_Distributed):
    """Hugging Face Accelerate: an ``accelerate.Accelerator`` made from the configuration
    ``accelerate launch --config_file configs/accelerate/<mode>.yaml`` puts in the environment
    (``ACCELERATE_*``; under plain ``torchrun`` set them yourself, without them it is one process).

    ``accelerator.prepare`` gets the model and the optimizer only. The data loader stays the
    user's, as in every mode: each rank iterates its own loader (a ``DistributedSampler``), and the
    Trainer counts batches and samples and skips a resumed epoch's batches itself, which a loader
    Accelerate re-shards would change under it. The backward pass is ``accelerator.backward``,
    clipping ``accelerator.clip_grad_norm_`` and unwrapping ``accelerator.unwrap_model``.

    Mixed precision stays the Trainer's ``precision``: the Trainer autocasts the forward pass and
    the loss and scales ``amp_fp16`` losses as in every mode, so the Accelerator is made with
    ``mixed_precision="no"``, or it would wrap the model's forward in a second autocast and add a
    second scaler. A configuration's ``mixed_precision`` must agree (``no``, or ``fp16`` with
    ``amp_fp16``, ``bf16`` with ``amp_bf16``); it is refused otherwise, so no setting is silently
    dropped. ``gradient_accumulation_steps`` above 1 is refused: the Trainer's events, schedulers
    and timestamp count one optimizer step per batch, and Accelerate's accumulation would skip the
    step on the other batches while ``BEFORE_OPTIMIZER_STEP`` and the schedulers still ran; the
    Trainer accumulates itself (``microbatch_size``), in ``accelerator.no_sync`` before the last
    microbatch.

    Accelerate's ``PartialState`` would create the process group itself (``env://``, whose keys a
    second group in the same torchrun processes would find stale, and wait on), and its
    ``end_training`` destroys whatever group there is, the user's too. So, as in the other modes,
    the strategy makes the group when the process has none (Accelerate then uses it), and
    :meth:`close` leaves only a group it made, with the safeguards of
    :func:`~algorithms.core.distributed.destroy_process_group`, not ``end_training``; it also
    forgets Accelerate's process-wide state where this Accelerator made it, so a later one starts
    clean.

    Checkpoints are one file, as under ``ddp``, in Accelerate's DDP and one-process modes; its FSDP
    and DeepSpeed modes refuse them, and they need accelerator devices (the CPU runs refused them,
    see ``configs/accelerate/README.md``), so their step through this class has not been run.
    """

    name = "accelerate"
    accelerator: Any = None
    _made_state = False

    def connect(self) -> tuple[int, int]:
        try:
            import accelerate
        except ImportError:
            raise RuntimeError(
                "parallel='accelerate' needs Hugging Face Accelerate: pip install 'methods-library[accelerate]'"
            ) from None
        check_accelerate_config(self.precision)
        if "WORLD_SIZE" in os.environ:  # launched: the group first, as every distributed mode makes it
            self.owns_process_group = init_distributed(self.device)
        self._made_state = not accelerate.PartialState._shared_state  # Accelerate's process-wide state
        self.accelerator = accelerate.Accelerator(mixed_precision="no")
        problem = self._setup_problem()
        if problem is not None:
            self.close()  # the group and Accelerate's state it made, before the refusal
            raise RuntimeError(problem)
        return self.accelerator.process_index, self.accelerator.num_processes

    def _setup_problem(self) -> str | None:
        """Why the Accelerator's setup is not what the launch and the Trainer asked for, or None."""
        kind, processes = self.accelerator.distributed_type.value, self.accelerator.num_processes
        for flag, asked in (("ACCELERATE_USE_FSDP", "FSDP"), ("ACCELERATE_USE_DEEPSPEED", "DEEPSPEED")):
            if os.environ.get(flag, "false").lower() == "true" and kind != asked:
                return (
                    f"the Accelerate configuration asks for {asked} but Accelerate set up {kind} here "
                    "(it runs FSDP and DeepSpeed on accelerator devices only) — see configs/accelerate/README.md"
                )
        launched = int(os.environ.get("WORLD_SIZE", "1"))
        if launched != processes:  # e.g. a MULTI_GPU configuration on a machine without GPUs: no sync
            return (
                f"Accelerate set up {processes} of the {launched} processes launched ({kind}); on a machine "
                "without GPUs set ACCELERATE_USE_CPU=true for accelerate launch (its MULTI_CPU mode) — see "
                "configs/accelerate/README.md"
            )
        device = self.accelerator.device
        if device.type != self.device.type or (device.type != "cpu" and device != self.device):  # cpu == cpu:0
            return (
                f"parallel='accelerate' runs on {device} (its configuration) but the Trainer's device is "
                f"{self.device}: leave device unset, or change the configuration"
            )
        return None

    def wrap(
        self, model: torch.nn.Module, optimizer: OptimizerSpec, *, unused_parameters: bool, batch_size: int | None
    ) -> tuple[torch.nn.Module, Callable[..., Any], Optimizer]:
        from accelerate.utils import DistributedDataParallelKwargs

        if unused_parameters:  # as under ddp: only when an algorithm leaves some parameters unused
            self.accelerator.ddp_handler = DistributedDataParallelKwargs(find_unused_parameters=True)
        if not isinstance(optimizer, Optimizer):
            optimizer = (optimizer or _default_optimizer)(model.parameters())
        model, optimizer = self.accelerator.prepare(model, optimizer)
        return model, model, optimizer

    def unwrap(self, model: torch.nn.Module) -> torch.nn.Module:
        return self.accelerator.unwrap_model(model)

    def backward_once(self, loss: torch.Tensor) -> None:
        self.accelerator.backward(self.scaler.scale(loss))

    def gradient_sync(self, model: torch.nn.Module, sync: bool) -> contextlib.AbstractContextManager[Any]:
        """``accelerator.no_sync(model)`` where ``sync`` is false."""
        return contextlib.nullcontext() if sync else self.accelerator.no_sync(model)

    def prepare_step(self, model: torch.nn.Module, optimizer: Optimizer) -> None:
        self.scaler.unscale_(optimizer)
        if self.grad_clip_norm is not None:
            self.accelerator.clip_grad_norm_(model.parameters(), self.grad_clip_norm)

    def save(self, path: str | Path, state: State, overwrite: bool = False) -> str | Path:
        self._check_checkpointable()
        if not dist.is_initialized():
            return Strategy.save(self, path, state, overwrite)
        return super().save(path, state, overwrite)

    def load(self, path: str | Path, state: State) -> None:
        self._check_checkpointable()
        super().load(path, state)

    def _check_checkpointable(self) -> None:
        kind = self.accelerator.distributed_type.value
        if kind not in ("NO", "MULTI_CPU", "MULTI_GPU"):
            raise CheckpointError(
                f"parallel='accelerate' checkpoints one file for Accelerate's DDP and one-process modes, "
                f"not its {kind} mode"
            )

    def release(self) -> None:
        if self.accelerator is None:
            return
        from accelerate.state import AcceleratorState, GradientState

        self.accelerator.free_memory()
        if self._made_state:  # as Accelerate's own tests do; a state the script made stays the script's
            AcceleratorState._reset_state(reset_partial_state=True)
            GradientState._reset_state()


def check_accelerate_config(precision: str) -> None:
    """Refuse an Accelerate configuration (its ``ACCELERATE_*`` environment) the Trainer cannot
    follow, with one line naming the setting."""
    steps = os.environ.get("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "1")
    if steps.strip() != "1":
        raise ValueError(
            f"Accelerate's gradient_accumulation_steps={steps} is refused under parallel='accelerate': the Trainer "
            "steps the optimizer, schedulers and events once per batch; set it to 1 and accumulate with "
            "Trainer(microbatch_size=...)"
        )
    mixed = os.environ.get("ACCELERATE_MIXED_PRECISION", "no").lower()
    if mixed != "no" and precision != f"amp_{mixed}":
        raise ValueError(
            f"Accelerate's mixed_precision={mixed!r} disagrees with Trainer(precision={precision!r}): pass "
            f"precision='amp_{mixed}' or set mixed_precision: 'no' (the Trainer autocasts itself)"
        )


#: The strategy class of each ``Trainer(parallel=...)`` mode, in :data:`~algorithms.core.PARALLELS` order.
STRATEGIES: dict[str, type[Strategy]] = {
    cls.name: cls for cls in (Single, DataParallel, DDP, FSDP, DeepSpeed, Accelerate)
}


def strategy(parallel: str | Strategy) -> Strategy:
    """``parallel`` itself where it is a strategy object, else the strategy of the mode it names,
    with its defaults (a ValueError naming the modes for anything else:
    :func:`~algorithms.core.distributed.check_parallel`)."""
    if isinstance(parallel, Strategy):
        return parallel
    return STRATEGIES[check_parallel(parallel)]()
