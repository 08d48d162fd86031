"""Two ranks under torchrun (ddp on gloo), as users launch them: per-rank randomness with the same
model on every rank, and durations in samples counted over all ranks (tests/core/ranks_script.py)."""

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
    out = tmp_path_factory.mktemp("ranks")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    env["OMP_NUM_THREADS"] = "1"
    script = Path(__file__).with_name("ranks_script.py")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script)]
    proc = subprocess.run([*command, str(out)], capture_output=True, text=True, env=env, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = [torch.load(out / f"rank-{rank}.pt") for rank in (0, 1)]
    for rank, seen in enumerate(found):
        seen["workers"] = sorted(torch.load(p) for p in out.glob(f"worker-{rank}-*.pt"))
    return found


def test_every_rank_draws_alike_before_the_model_is_wrapped(ranks):
    """Modules a method builds at INIT start from the same draws on every rank."""
    assert torch.equal(ranks[0]["init"], ranks[1]["init"])


def test_each_rank_draws_its_own_dropout_masks_and_worker_seeds(ranks):
    """Seeded ``seed + rank`` once the model is wrapped: the ranks' dropout masks, later draws and
    loader workers' seeds differ (with one seed for all, every rank dropped the same units)."""
    assert not torch.equal(ranks[0]["fit_start"], ranks[1]["fit_start"])
    assert all(not torch.equal(a, b) for a, b in zip(ranks[0]["masks"], ranks[1]["masks"], strict=True))
    assert len(ranks[0]["workers"]) == len(ranks[1]["workers"]) == 2
    assert set(ranks[0]["workers"]).isdisjoint(ranks[1]["workers"])


def test_samples_are_counted_over_every_rank(ranks):
    """Batches of 4 per rank on 2 ranks: ``16sp`` is 2 batches of 8 samples (per-rank counting took 4)."""
    for seen in ranks:
        assert (seen["batches"], seen["samples"]) == (2, 16)
        assert len(seen["masks"]) == 2
