"""Run under torchrun by test_distributed.py: train a few steps with parallel=<mode> (``ddp``,
``fsdp``, or ``deepspeed:<zero stage>``) and save rank 0's view of the final parameters (full
tensors, also for FSDP shards), what INIT saw and how much optimizer state each rank holds."""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist

from algorithms.core import Algorithm, Event, Trainer
from algorithms.core.distributed import destroy_process_group, rank_and_world_size
from algorithms.core.strategies import DeepSpeed

STEPS, GLOBAL_BATCH = 3, 8


def make_model() -> torch.nn.Module:
    # No batch norm: DDP does not synchronise its statistics, so it would differ by design.
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 5)
    )


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
    for name, p in model.named_parameters():
        p = p.full_tensor() if hasattr(p, "full_tensor") else p
        out[name.removeprefix("module.")] = p.detach().clone()
    return out


def optimizer_state_numel(optimizer: torch.optim.Optimizer) -> int:
    """Elements of the optimizer state this process holds (its own shard of a sharded tensor)."""
    tensors = [v for per_param in optimizer.state.values() for v in per_param.values() if torch.is_tensor(v)]
    return sum((t.to_local() if hasattr(t, "to_local") else t).numel() for t in tensors)


def main(mode: str, out_path: str, device: str = "cpu") -> None:
    parallel, _, zero_stage = mode.partition(":")
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
        parallel=DeepSpeed(zero_stage=int(zero_stage or 2)) if parallel == "deepspeed" else parallel,
        device=None if device == "auto" else device,
        seed=0,
    )
    trainer.fit()
    params = {name: p.cpu() for name, p in full_state(trainer.state.model).items()}
    seen, state_numel = [None] * world, [None] * world
    dist.all_gather_object(seen, probe.seen)
    dist.all_gather_object(state_numel, optimizer_state_numel(trainer.state.optimizer))
    trainer.close()  # before the process group goes: DeepSpeed's engine needs it to release its hooks
    if rank == 0:
        torch.save({"params": params, "seen": seen, "optimizer_state_numel": state_numel}, out_path)
    destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:])
