"""Gradient accumulation on two ranks under torchrun (tests/core/accumulation_ranks_script.py), for
``ddp``, ``fsdp`` and ``deepspeed``: microbatches of 2 end where whole batches of 6 end, to float tolerance, on
every rank and for EMA's average, and DDP all-reduces the gradients once per optimizer step (in the
last microbatch's backward), not once per microbatch."""

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
    out = tmp_path_factory.mktemp("accumulation-ranks")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    env["OMP_NUM_THREADS"] = "1"
    script = Path(__file__).with_name("accumulation_ranks_script.py")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script)]
    proc = subprocess.run([*command, str(out)], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [torch.load(out / f"rank-{rank}.pt") for rank in (0, 1)]


@pytest.mark.parametrize("parallel", ["ddp", "fsdp", "deepspeed"])
def test_microbatches_end_where_whole_batches_end_on_every_rank(ranks, parallel):
    if "skipped" in ranks[0][f"{parallel}-2"]:
        pytest.skip(ranks[0][f"{parallel}-2"]["skipped"])
    for seen in ranks:
        whole, parts = seen[f"{parallel}-None"], seen[f"{parallel}-2"]
        for what in ("weights", "average"):
            for name, value in whole[what].items():
                torch.testing.assert_close(parts[what][name], value, rtol=1e-5, atol=1e-6, msg=f"{what} {name}")
    for name, value in ranks[0][f"{parallel}-2"]["weights"].items():  # the ranks stay alike
        torch.testing.assert_close(ranks[1][f"{parallel}-2"]["weights"][name], value, rtol=0, atol=0, msg=name)


def test_ddp_all_reduces_once_per_step_not_once_per_microbatch(ranks):
    for seen in ranks:
        steps = 4
        assert seen["ddp-None"]["allreduces"] == steps  # one bucket: the model is small
        assert seen["ddp-2"]["allreduces"] == steps  # 3 microbatches a step, the first two under no_sync
