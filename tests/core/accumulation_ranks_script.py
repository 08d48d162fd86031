"""Run under torchrun (2 ranks, gloo) by test_accumulation_ranks.py: for ``ddp``, ``fsdp`` and
``deepspeed`` (ZeRO stage 2), the
same run (CutMix, label smoothing, and under ddp EMA, over 4 batches of 6 examples of a DistributedSampler's
DataLoader) once with whole batches and once in microbatches of 2 (``microbatch_size=2``, three a
batch). Under ddp a communication hook counts the gradient all-reduces. Saves each rank's final
weights, the EMA average and the count. Usage: ``accumulation_ranks_script.py OUT_DIR``."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from algorithms import EMA, CutMix, LabelSmoothing
from algorithms.core import Trainer
from algorithms.core.distributed import unwrap_model


def loader() -> DataLoader:
    g = torch.Generator().manual_seed(0)
    dataset = TensorDataset(torch.randn(48, 3, 8, 8, generator=g), torch.randint(0, 4, (48,), generator=g))
    return DataLoader(dataset, batch_size=6, sampler=DistributedSampler(dataset, shuffle=True, seed=3), drop_last=True)


def model() -> torch.nn.Module:
    torch.manual_seed(5)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.GroupNorm(2, 8),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(8, 4),
    )


def sgd(params):
    return torch.optim.SGD(params, lr=0.05, momentum=0.9)


def full(tensor: torch.Tensor) -> torch.Tensor:
    """A DTensor's whole value (fsdp shards the parameters), else the tensor."""
    return (tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor).detach().clone()


def run(parallel: str, microbatch_size: int | None) -> dict:
    calls = [0]

    def counting_hook(state, bucket):
        calls[0] += 1
        return allreduce_hook(state, bucket)

    methods = [CutMix(alpha=1.0), LabelSmoothing(0.1), *([EMA("2ba")] if parallel == "ddp" else [])]  # fsdp refuses EMA
    if parallel == "deepspeed":
        from algorithms.core.distributed import deepspeed_unavailable_reason

        if deepspeed_unavailable_reason():
            return {"skipped": deepspeed_unavailable_reason()}
    trainer = Trainer(
        model(),
        loader(),
        "4ba",
        optimizer=sgd,
        algorithms=methods,
        parallel=parallel,
        seed=0,
        device="cpu",
        microbatch_size=microbatch_size,
    )
    if parallel == "ddp":
        trainer.state.model.register_comm_hook(None, counting_hook)
    trainer.fit()
    weights = {k: full(v) for k, v in unwrap_model(trainer.state.model).state_dict().items()}
    with trainer.loop.evaluating():
        average = {k: full(v) for k, v in unwrap_model(trainer.state.model).state_dict().items()}
    trainer.close()
    return {"weights": weights, "average": average, "allreduces": calls[0]}


def main(out_dir: str) -> None:
    dist.init_process_group("gloo")  # the script's own group: each Trainer uses it and leaves it open
    rank = dist.get_rank()
    seen = {f"{p}-{m}": run(p, m) for p in ("ddp", "fsdp", "deepspeed") for m in (None, 2)}
    torch.save(seen, Path(out_dir) / f"rank-{rank}.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
