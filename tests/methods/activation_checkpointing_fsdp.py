"""Run under torchrun by test_activation_checkpointing.py: train the reference ResNet blocks and
the reference transformer (dropout on) with parallel='fsdp', with and without
ActivationCheckpointing, and save rank 0's view of each run's final parameters and losses."""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist

from algorithms import ActivationCheckpointing
from algorithms.core import Algorithm, Event, Trainer
from algorithms.core.distributed import destroy_process_group, rank_and_world_size
from algorithms.models import lm_loss, transformer_tiny
from algorithms.models.resnet import BasicBlock

STEPS = 3


def vision():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        BasicBlock(8, 8),
        BasicBlock(8, 16, stride=2),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(16, 5),
    )
    g = torch.Generator().manual_seed(1 + dist.get_rank() if dist.is_initialized() else 1)
    batches = [(torch.randn(4, 3, 8, 8, generator=g), torch.randint(0, 5, (4,), generator=g)) for _ in range(STEPS)]
    return model, batches, {}


def nlp():
    torch.manual_seed(0)
    model = transformer_tiny(32)  # dropout 0.1: the recomputation must drop the same units
    g = torch.Generator().manual_seed(1 + dist.get_rank() if dist.is_initialized() else 1)
    tokens = [torch.randint(0, 32, (4, 17), generator=g) for _ in range(STEPS)]
    batches = [{"input_ids": t[:, :-1], "labels": t[:, 1:]} for t in tokens]
    return model, batches, {"input_key": "input_ids", "target_key": "labels", "loss_fn": lm_loss}


class Losses(Algorithm):
    """Records every step's loss (test_activation_checkpointing.py uses it too)."""

    activity = {"losses": "losses recorded"}

    def __init__(self):
        self.losses = []

    def match(self, event, state):
        return event is Event.BEFORE_BACKWARD

    def apply(self, event, state, logger=None):
        self.losses.append(state.loss.detach().clone())
        self.report(logger, "losses")


def train(workload, checkpointed: bool):
    model, batches, options = workload()
    losses = Losses()
    methods = [ActivationCheckpointing()] if checkpointed else []
    trainer = Trainer(
        model,
        batches,
        f"{STEPS}ba",
        optimizer=lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9),
        algorithms=[*methods, losses],
        parallel="fsdp",
        device="cpu",
        seed=0,
        **options,
    )
    trainer.fit()
    params = {
        n: (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().cpu().clone()
        for n, p in trainer.state.model.named_parameters()
    }
    kinds = sorted({type(m).__name__ for m in trainer.state.model.modules()})
    activity = trainer.method_log.records.get("ActivationCheckpointing", {}).get("activity")
    trainer.close()
    return {"params": params, "losses": torch.stack(losses.losses), "kinds": kinds, "activity": activity}


def main(out_path: str) -> None:
    runs = {}
    for name, workload in (("vision", vision), ("nlp", nlp)):
        for checkpointed in (False, True):
            runs[name, checkpointed] = train(workload, checkpointed)
    rank, _ = rank_and_world_size()
    if rank == 0:
        torch.save(runs, out_path)
    destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:])
