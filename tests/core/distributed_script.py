"""Run under torchrun by test_distributed.py: train a few steps with parallel=<mode> (``ddp``,
``fsdp``, ``fsdp:offload``, or ``deepspeed:<zero stage>[+offload]``, see :func:`parallel_of`) and
save rank 0's view of the final parameters (full tensors, also for FSDP shards and ZeRO-3
partitions), what INIT saw, how much optimizer state each rank holds, what each rank holds of each
parameter under ZeRO-3, and what each mode offloaded."""

from __future__ import annotations

import contextlib
import sys

import torch
import torch.distributed as dist

from algorithms.core import Algorithm, Event, Trainer
from algorithms.core.distributed import destroy_process_group, rank_and_world_size
from algorithms.core.strategies import FSDP, DeepSpeed

STEPS, GLOBAL_BATCH = 3, 8
#: The hidden layer's weight has 144 x 1024 elements, more than DeepSpeed's default
#: stage3_param_persistence_threshold (1e5): ZeRO-3 partitions it, and keeps the smaller ones whole.
HIDDEN = 1024


def make_model() -> torch.nn.Module:
    # No batch norm: DDP does not synchronise its statistics, so it would differ by design.
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3),
        torch.nn.ReLU(),
        torch.nn.Flatten(),
        torch.nn.Linear(4 * 6 * 6, HIDDEN),
        torch.nn.ReLU(),
        torch.nn.Linear(HIDDEN, 5),
    )


def parallel_of(mode: str):
    """``Trainer(parallel=...)`` for a mode of the tests: ``deepspeed:3`` is ``DeepSpeed(zero_stage=3)``;
    ``+offload`` offloads what the stage partitions (the optimizer; at stage 3 also the parameters);
    ``fsdp:offload`` is ``FSDP(cpu_offload=True)``; anything else is the mode's name."""
    parallel, _, option = mode.partition(":")
    stage, _, offload = option.partition("+")
    if parallel == "deepspeed":
        stage = int(stage or 2)
        return DeepSpeed(zero_stage=stage, offload_optimizer=bool(offload), offload_param=bool(offload) and stage == 3)
    if parallel == "fsdp" and option == "offload":
        return FSDP(cpu_offload=True)
    assert not option, mode
    return parallel


def gathered(model: torch.nn.Module):
    """ZeRO-3's parameters gathered whole on every rank for the block (DeepSpeed's own context; a
    collective, so every rank enters it); nothing to do in the other modes."""
    params = [p for p in model.parameters() if hasattr(p, "ds_id")]
    if not params:
        return contextlib.nullcontext()
    import deepspeed

    return deepspeed.zero.GatheredParameters(params)


def global_batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [
        (torch.randn(GLOBAL_BATCH, 3, 8, 8, generator=g), torch.randint(0, 5, (GLOBAL_BATCH,), generator=g))
        for _ in range(STEPS)
    ]


def optimizer(params):
    return torch.optim.SGD(params, lr=0.1, momentum=0.9)


class SeeInit(Algorithm):
    """Records what the state looks like when INIT runs."""

    def __init__(self):
        self.seen = None

    def match(self, event, state):
        return event is Event.INIT

    def apply(self, event, state, logger=None):
        self.seen = {
            "rank": state.rank,
            "world_size": state.world_size,
            "model_type": type(state.model).__name__,
            "draw": int(torch.randint(0, 2**31, (), generator=self.generator(state))),
        }


def full_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    out = {}
    with gathered(model):
        for name, p in model.named_parameters():
            p = p.full_tensor() if hasattr(p, "full_tensor") else p
            out[name.removeprefix("module.")] = p.detach().clone()
    return out


def zero3_holdings(model: torch.nn.Module) -> dict[str, dict[str, int]]:
    """What this rank holds of each ZeRO-3 parameter, from DeepSpeed's own attributes: the whole
    parameter's elements (``ds_numel``), this rank's partition (``ds_tensor``), and the elements of
    the parameter tensor itself outside a forward pass (0 once it is released)."""
    return {
        name: {"ds_numel": p.ds_numel, "partition": p.ds_tensor.numel(), "resident": p.numel()}
        for name, p in model.named_parameters()
        if hasattr(p, "ds_tensor")
    }


def offloaded(trainer: Trainer) -> dict[str, bool | str]:
    """What the mode put in CPU memory, as the engine or FSDP reports it: DeepSpeed's ZeRO optimizer's
    offload flags (stages 1 and 2: ``cpu_offload``; stage 3: ``offload_optimizer``, ``offload_param``)
    and its float32 partitions' device; FSDP's offload policy on the model and its shards' device."""
    engine = getattr(trainer.strategy, "_engine", None)
    if engine is not None:
        zero = engine.optimizer
        partitions = getattr(zero, "single_partition_of_fp32_groups", None) or zero.fp32_partitioned_groups_flat
        return {
            "optimizer": bool(getattr(zero, "cpu_offload", False) or getattr(zero, "offload_optimizer", False)),
            "param": bool(getattr(zero, "offload_param", False)),
            "partitions_device": partitions[0].device.type,
        }
    model = trainer.state.model
    # FSDP2's own record of the policy each fully_shard call was given (one parameter group a call)
    groups = [m._get_fsdp_state()._fsdp_param_group for m in model.modules() if hasattr(m, "_get_fsdp_state")]
    if not groups:
        return {}
    return {
        "policies": sorted({type(g.offload_policy).__name__ for g in groups if g is not None}),
        "sharded_calls": sum(g is not None for g in groups),
        "shards_device": sorted({p.to_local().device.type for p in model.parameters()}),
    }


def optimizer_state_numel(optimizer: torch.optim.Optimizer) -> int:
    """Elements of the optimizer state this process holds (its own shard of a sharded tensor)."""
    tensors = [v for per_param in optimizer.state.values() for v in per_param.values() if torch.is_tensor(v)]
    return sum((t.to_local() if hasattr(t, "to_local") else t).numel() for t in tensors)


def main(mode: str, out_path: str, device: str = "cpu") -> None:
    rank, world = rank_and_world_size()  # torchrun's environment
    per_rank = GLOBAL_BATCH // world
    rank_data = [
        (x[rank * per_rank : (rank + 1) * per_rank], y[rank * per_rank : (rank + 1) * per_rank])
        for x, y in global_batches()
    ]
    probe = SeeInit()
    trainer = Trainer(
        make_model(),
        rank_data,
        f"{STEPS}ba",
        optimizer=optimizer,
        algorithms=[probe],
        parallel=parallel_of(mode),
        device=None if device == "auto" else device,
        seed=0,
    )
    trainer.fit()
    holdings = zero3_holdings(trainer.state.model)  # before full_state gathers the parameters
    params = {name: p.cpu() for name, p in full_state(trainer.state.model).items()}
    seen, state_numel, held = [None] * world, [None] * world, [None] * world
    dist.all_gather_object(seen, probe.seen)
    dist.all_gather_object(state_numel, optimizer_state_numel(trainer.state.optimizer))
    dist.all_gather_object(held, holdings)
    offload = offloaded(trainer)
    trainer.close()  # before the process group goes: DeepSpeed's engine needs it to release its hooks
    if rank == 0:
        torch.save(
            {
                "params": params,
                "seen": seen,
                "optimizer_state_numel": state_numel,
                "zero3_holdings": held,
                "offloaded": offload,
            },
            out_path,
        )
    destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:])
