"""benchmarks/effects_sweep.py: a slice of the vision sweep, run as the tool runs it, split into
training, evaluation and what lies outside both."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import effects_sweep  # noqa: E402


@pytest.mark.slow
def test_the_slice_reports_the_time_outside_training_and_the_full_sweeps_size():
    report = effects_sweep.run(quick=True)
    (row,) = report["rows"]
    assert row["unit"] == "s" and row["compare"] == "<" and row["target"] == effects_sweep.OUTSIDE_TARGET_S
    low, high = row["spread"]
    assert 0 < low <= row["value"] <= high  # a process's start and imports always take some time
    assert "6 runs" in row["what"]  # the baseline and two methods, two seeds
    details = report["details"]
    assert details["median_outside_s"] == pytest.approx(row["value"], abs=0.01)
    vision = details["full_sweeps"]["vision"]
    assert vision["jobs"] > 10 * 20  # ten seeds of the baseline and every vision method
    assert vision["estimated_seconds"] == pytest.approx(vision["jobs"] * details["median_job_s"], rel=0.01)
    assert set(details["committed_sweeps"]) == {
        p.name for p in (effects_sweep.REPO_ROOT / "results" / "effects").glob("*.json")
    }
