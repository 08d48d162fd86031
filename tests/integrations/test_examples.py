"""The examples of the "Use it in your own loop" page, run as a user runs them (``python
examples/own_loop/<name>.py`` from a checkout): each exits cleanly and trains, its EMA or final
weights classifying the held-out digits well above chance (0.1 for ten classes).

The Hugging Face Trainer's and Lightning's examples are run by their adapters' tests."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "own_loop"


def _run(name: str) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name)], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _accuracies(output: str, label: str) -> list[float]:
    return [float(x) for x in re.findall(rf"{label} (\d\.\d+)", output)]


@pytest.mark.slow
def test_the_plain_pytorch_loop_trains_evaluates_emas_weights_and_resumes_them():
    output = _run("plain_pytorch.py")
    averaged = _accuracies(output, r"\(EMA weights")
    (resumed,) = _accuracies(output, r"checkpoint: test accuracy \(EMA weights\)")
    assert len(averaged) == 4, output  # four epochs
    assert averaged[-1] > 0.5, output
    assert resumed == averaged[-1], "the resumed loop's EMA weights are not the saved ones"


@pytest.mark.slow
def test_the_accelerate_loop_trains_and_counts_every_sample():
    output = _run("accelerate_loop.py")
    assert "samples trained (all processes): 4200" in output, output  # 3 epochs of 1,400 digits
    (averaged,) = _accuracies(output, r"test accuracy \(EMA weights\):")
    assert averaged > 0.5, output


@pytest.mark.slow
def test_the_collate_fn_gives_mixed_smoothed_targets_that_train():
    output = _run("collate_fn.py")
    (accuracy,) = _accuracies(output, "test accuracy:")
    assert accuracy > 0.5, output
