"""Run under torchrun by test_distributed.py's resume tests: ``first`` trains the whole run, then
the first part of it and checkpoints; ``rest`` resumes from the checkpoint in fresh processes.
The mode is a name or one of distributed_script's spellings (``deepspeed:3+offload``,
``fsdp:offload``). The data comes from a DataLoader with a shuffled DistributedSampler and two
workers. Rank 0 saves each run's final parameters (full tensors, also for FSDP shards and ZeRO-3
partitions) and every rank's algorithm generator state, so the test can compare the resumed run
with the uninterrupted one."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist
from distributed_script import HIDDEN, gathered, parallel_of

from algorithms import CutMix
from algorithms.core import Trainer
from algorithms.core.distributed import rank_and_world_size

TOTAL, FIRST, GLOBAL_BATCH, BATCHES = 6, 3, 8, 4  # resumed mid-epoch: 3 of an epoch's 4 batches done


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3),
        torch.nn.ReLU(),
        torch.nn.Dropout(0.3),  # torch's global generator, per rank
        torch.nn.Flatten(),
        torch.nn.Linear(4 * 6 * 6, HIDDEN),  # large enough for ZeRO-3 to partition (distributed_script)
        torch.nn.ReLU(),
        torch.nn.Linear(HIDDEN, 5),
    )


def rank_batches() -> torch.utils.data.DataLoader:
    """A real loader, as users give one: a shuffled DistributedSampler (its own seed and epoch) and
    two workers (seeded from torch's global generator, per rank)."""
    rank, world = rank_and_world_size()
    g = torch.Generator().manual_seed(1)
    n = GLOBAL_BATCH * BATCHES
    data = torch.utils.data.TensorDataset(torch.randn(n, 3, 8, 8, generator=g), torch.randint(0, 5, (n,), generator=g))
    sampler = torch.utils.data.DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=1)
    return torch.utils.data.DataLoader(data, batch_size=GLOBAL_BATCH // world, sampler=sampler, num_workers=2)


def build(parallel: str, batches: int, load_path: str | None = None) -> Trainer:
    def optimizer(params):
        return torch.optim.SGD(params, lr=0.1, momentum=0.9)

    return Trainer(
        make_model(),
        rank_batches(),
        f"{batches}ba",
        optimizer=optimizer,
        algorithms=[CutMix(alpha=1.0)],  # its own generator, per rank
        parallel=parallel_of(parallel),
        device="cpu",
        seed=0,
        load_path=load_path,
    )


def finish(trainer: Trainer, out: Path) -> None:
    params = {}
    with gathered(trainer.state.model):
        for name, p in trainer.state.model.named_parameters():
            p = p.full_tensor() if hasattr(p, "full_tensor") else p
            params[name.removeprefix("module.")] = p.detach().cpu().clone()
    generators = [None] * trainer.state.world_size
    dist.all_gather_object(generators, trainer.state.algorithms[0].generator(trainer.state).get_state())
    if trainer.state.rank == 0:
        torch.save({"params": params, "generators": generators, "batch": trainer.state.timestamp.batch}, out)


def main(parallel: str, phase: str, folder: str) -> None:
    folder = Path(folder)
    if phase == "first":
        with build(parallel, TOTAL) as whole:
            whole.fit()
            finish(whole, folder / "whole.pt")
        with build(parallel, FIRST) as first:  # a second Trainer in the same processes: a new group
            first.fit()
            first.save_checkpoint(folder / "run.ckpt")
    else:
        with build(parallel, TOTAL, load_path=str(folder / "run.ckpt")) as resumed:
            assert resumed.state.timestamp.batch == FIRST
            resumed.fit()
            finish(resumed, folder / "resumed.pt")


if __name__ == "__main__":
    main(*sys.argv[1:])
