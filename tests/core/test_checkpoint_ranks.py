"""A two-rank DDP checkpoint holds what is the same on every rank once (EMA's averaged weights) and
each rank's generators apart, and a run resumed from it in fresh processes ends where the
uninterrupted run ends, bit for bit, EMA's average included.

The test launches this file under torchrun (gloo, two CPU processes): ``first`` trains the whole
run, then its first part and checkpoints; ``rest`` resumes from the checkpoint."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
TOTAL, FIRST, GLOBAL_BATCH, BATCHES = 6, 3, 8, 4  # resumed mid-epoch: 3 of an epoch's 4 batches done


def _build(batches: int, load_path: str | None = None):
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler

    from algorithms import EMA, CutMix
    from algorithms.core import Trainer

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Dropout(0.3), torch.nn.Flatten(), torch.nn.Linear(144, 5)
    )
    g = torch.Generator().manual_seed(1)
    data = TensorDataset(
        torch.randn(GLOBAL_BATCH * BATCHES, 3, 8, 8, generator=g),
        torch.randint(0, 5, (GLOBAL_BATCH * BATCHES,), generator=g),
    )
    sampler = None
    if "WORLD_SIZE" in os.environ:  # under torchrun
        world, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
        sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=False)
    loader = DataLoader(data, batch_size=GLOBAL_BATCH // int(os.environ.get("WORLD_SIZE", "1")), sampler=sampler)
    return Trainer(
        model,
        loader,
        f"{batches}ba",
        optimizer=lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9),
        algorithms=[EMA(half_life="2ba"), CutMix(alpha=1.0)],  # EMA: the same on every rank; CutMix: per rank
        parallel="ddp",
        device="cpu",
        seed=0,
        load_path=load_path,
    )


def _finish(trainer, out: Path) -> None:
    if trainer.state.rank == 0:
        model = trainer.state.model.module
        ema = trainer.engine.algorithms[0].ema_model
        torch.save({"params": model.state_dict(), "ema": ema.state_dict(), "batch": trainer.state.timestamp.batch}, out)


def _main(phase: str, folder: str) -> None:
    folder = Path(folder)
    if phase == "first":
        with _build(TOTAL) as whole:
            whole.fit()
            _finish(whole, folder / "whole.pt")
        with _build(FIRST) as first:
            first.fit()
            first.save_checkpoint(folder / "run.ckpt")
    else:
        with _build(TOTAL, load_path=str(folder / "run.ckpt")) as resumed:
            assert resumed.state.timestamp.batch == FIRST
            resumed.fit()
            _finish(resumed, folder / "resumed.pt")


def _torchrun(*args: str) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "1",
    }
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", __file__, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


def _count(value, key: str) -> int:
    """How many times ``key`` occurs as a dict key anywhere in ``value``."""
    if isinstance(value, dict):
        return sum((k == key) + _count(v, key) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return sum(_count(v, key) for v in value)
    return 0


@pytest.mark.slow
def test_a_two_rank_ddp_checkpoint_holds_emas_average_once_and_resumes_bit_for_bit(tmp_path):
    _torchrun("first", str(tmp_path))
    _torchrun("rest", str(tmp_path))
    whole, resumed = torch.load(tmp_path / "whole.pt"), torch.load(tmp_path / "resumed.pt")
    assert whole["batch"] == resumed["batch"] == TOTAL
    for part in ("params", "ema"):
        assert whole[part].keys() == resumed[part].keys()
        for name, expected in whole[part].items():
            assert torch.equal(resumed[part][name], expected), (part, name)

    checkpoint = torch.load(tmp_path / "run.ckpt", weights_only=True)
    assert _count(checkpoint, "ema_weights") == 1  # once, not once a rank
    ema, cutmix = checkpoint["algorithms"]
    assert ema["name"] == "EMA" and set(ema["state"]["ema_weights"]) == set(whole["ema"])
    assert cutmix == {"name": "CutMix", "state": {}}  # its generator differs by rank: under ranks
    assert len(checkpoint["ranks"]) == 2
    for own in checkpoint["ranks"]:
        assert set(own) == {"algorithms", "rng"} and own["algorithms"][0] == {}
        assert set(own["algorithms"][1]) == {"generator"}
        assert set(own["rng"]) == {"torch", "cuda", "python", "loader", "epoch"}
    first, second = checkpoint["ranks"]
    assert not torch.equal(first["algorithms"][1]["generator"], second["algorithms"][1]["generator"])


if __name__ == "__main__":
    _main(*sys.argv[1:])
