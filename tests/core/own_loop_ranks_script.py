"""Run under torchrun (2 ranks, gloo) by test_own_loop_ranks.py: the same methods (Squeeze-Excite,
CutMix, label smoothing, EMA) for 6 batches of a DistributedSampler's DataLoader, once through the
project's ``Trainer(parallel="ddp")`` and once through a loop of one's own around a
``DistributedDataParallel`` model, as a user writes it. Saves each rank's final weights, EMA's
average and the samples counted. Usage: ``own_loop_ranks_script.py OUT_DIR``."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from algorithms import EMA, CutMix, LabelSmoothing, SqueezeExcite
from algorithms.core import Loop, Trainer
from algorithms.core.distributed import unwrap_model


def data() -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(48, 3, 8, 8, generator=g), torch.randint(0, 4, (48,), generator=g))


def loader() -> DataLoader:
    dataset = data()
    return DataLoader(dataset, batch_size=4, sampler=DistributedSampler(dataset, shuffle=True, seed=3), drop_last=True)


def model() -> torch.nn.Module:
    torch.manual_seed(5)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(16, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(16, 4),
    )


def methods() -> list:
    return [SqueezeExcite(latent_channels=4, min_channels=8), CutMix(alpha=1.0), LabelSmoothing(0.1), EMA("2ba")]


def sgd(params):
    return torch.optim.SGD(params, lr=0.05, momentum=0.9)


def main(out_dir: str) -> None:
    dist.init_process_group("gloo")  # the script's own group: the Trainer uses it and leaves it open
    rank = dist.get_rank()
    trainer = Trainer(
        model(), loader(), "6ba", optimizer=sgd, algorithms=methods(), parallel="ddp", seed=0, device="cpu"
    )
    trainer.fit()
    trainer.close()

    train = loader()
    loop = Loop(model(), methods(), max_duration="6ba", train_dataloader=train, seed=0)
    ddp = DistributedDataParallel(loop.model)
    loop.optimizer = sgd(ddp.parameters())
    epoch = 0
    while not loop.done():
        train.sampler.set_epoch(epoch)
        for batch in train:
            loop.batch(batch)
            loop.forward(lambda batch: ddp(batch[0]))
            loop.loss()
            loop.backward()
            loop.step()
            if loop.done():
                break
        else:
            loop.epoch_end()
            epoch += 1
    loop.end()

    def averaged(run) -> dict:
        return next(a for a in run.state.algorithms if a.name == "EMA").state_dict()["ema_weights"]

    torch.save(
        {
            "trainer": {k: v.clone() for k, v in unwrap_model(trainer.state.model).state_dict().items()},
            "loop": {k: v.clone() for k, v in loop.model.state_dict().items()},
            "trainer_ema": averaged(trainer),
            "loop_ema": averaged(loop),
            "samples": (trainer.state.timestamp.sample, loop.timestamp.sample),
        },
        Path(out_dir) / f"rank-{rank}.pt",
    )
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
