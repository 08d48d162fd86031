"""A loop of one's own around a ``DistributedDataParallel`` model, on two ranks under torchrun (as
users launch them), against the project's ``Trainer(parallel="ddp")`` with the same methods, seed,
model and DistributedSampler loader (tests/core/own_loop_ranks_script.py): the same weights and
EMA average on every rank, and samples counted over both ranks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow  # a torchrun launch of two ranks

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("own-loop-ranks")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    env["OMP_NUM_THREADS"] = "1"
    script = Path(__file__).with_name("own_loop_ranks_script.py")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script)]
    proc = subprocess.run([*command, str(out)], capture_output=True, text=True, env=env, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [torch.load(out / f"rank-{rank}.pt") for rank in (0, 1)]


def test_a_ddp_loop_of_ones_own_ends_at_the_trainers_weights_on_every_rank(ranks):
    for seen in ranks:
        for name, value in seen["trainer"].items():
            torch.testing.assert_close(seen["loop"][name], value, rtol=0, atol=0, msg=name)
        for name, value in seen["trainer_ema"].items():
            torch.testing.assert_close(seen["loop_ema"][name], value, rtol=0, atol=0, msg=name)
    for name, value in ranks[0]["loop"].items():  # DDP keeps the ranks' weights alike
        torch.testing.assert_close(ranks[1]["loop"][name], value, rtol=0, atol=0, msg=name)


def test_samples_are_counted_over_both_ranks(ranks):
    for seen in ranks:
        assert seen["samples"] == (48, 48)  # 6 batches of 4 on each of 2 ranks
