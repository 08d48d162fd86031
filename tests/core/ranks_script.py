"""Run under torchrun (2 ranks, ddp on gloo) by test_ranks.py: train a model with dropout on a real
DataLoader (a DistributedSampler, 2 workers) for ``16sp`` with ``seed=0``, and save what each rank
drew: at INIT (before wrapping), at FIT_START (after), its dropout masks, its loader workers' seeds,
and the batches and samples it counted. Usage: ``ranks_script.py OUT_DIR``."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset

from algorithms.core import Algorithm, Event, Trainer
from algorithms.core.distributed import destroy_process_group, distributed_sampler


class Draws(Algorithm):
    """What torch's global generator gives at INIT (where a method builds new modules) and at FIT_START."""

    def __init__(self):
        self.init = self.fit_start = None

    def match(self, event, state):
        return event in (Event.INIT, Event.FIT_START)

    def apply(self, event, state, logger=None):
        if event is Event.INIT:
            self.init = torch.rand(4)
        else:
            self.fit_start = torch.rand(4)


class MaskRecorder(torch.nn.Module):
    """Dropout that keeps each training mask it draws."""

    def __init__(self):
        super().__init__()
        self.masks = []

    def forward(self, x):
        if not self.training:
            return x
        mask = (torch.rand_like(x) > 0.5).float()
        self.masks.append(mask)
        return x * mask * 2


def _worker_seed(worker_id):
    torch.save(torch.initial_seed(), f"{sys.argv[1]}/worker-{torch.distributed.get_rank()}-{worker_id}.pt")


def main(out_dir: str) -> None:
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(64, 6, generator=g), torch.randint(0, 3, (64,), generator=g))
    loader = DataLoader(
        data,
        batch_size=4,
        sampler=distributed_sampler(data, shuffle=False),
        num_workers=2,
        worker_init_fn=_worker_seed,
    )
    torch.manual_seed(0)
    recorder = MaskRecorder()
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), recorder, torch.nn.Linear(8, 3))
    draws = Draws()
    with Trainer(model, loader, "16sp", parallel="ddp", seed=0, device="cpu", algorithms=[draws]) as trainer:
        trainer.fit()
        rank = trainer.state.rank
        torch.save(
            {
                "init": draws.init,
                "fit_start": draws.fit_start,
                "masks": recorder.masks,
                "batches": trainer.state.timestamp.batch,
                "samples": trainer.state.timestamp.sample,
            },
            Path(out_dir) / f"rank-{rank}.pt",
        )
    destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
