"""tools/compare_training.py: a small real run, failures and skips recorded, bad input rejected."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from methods_tools import compare
from methods_tools.results import load_results, results_problems

REPO = Path(__file__).resolve().parents[2]


def _cli():
    spec = importlib.util.spec_from_file_location("compare_training", REPO / "tools" / "compare_training.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _options(configs: str, **kw) -> compare.CompareOptions:
    base = dict(model="resnet20", data="digits", image_size=8, epochs=1, batch_size=8, max_batches=2,
                nproc=2, configs=compare.parse_configs(configs), timeout_s=300)
    return compare.CompareOptions(**{**base, **kw})


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    """fp32 and amp_bf16, one process and 2-rank DDP, plus DeepSpeed (not installed here)."""
    out = tmp_path_factory.mktemp("results") / "small.json"
    argv = ["--model", "resnet20", "--data", "digits", "--image-size", "8", "--epochs", "1",
            "--batch-size", "8", "--max-batches", "2", "--nproc", "2", "--out", str(out),
            "--configs", "fp32:single,amp_bf16:single,fp32:ddp,amp_bf16:ddp,fp32:deepspeed"]
    status = _cli().main(argv)
    assert status == 0
    return out


def test_small_run_finishes_and_validates(small_run):
    document = load_results(small_run)  # raises on any schema problem
    assert results_problems(json.loads(small_run.read_text())) == []
    runs = {r["config"]: r for r in document["runs"]}
    assert list(runs) == ["fp32:single", "amp_bf16:single", "fp32:ddp", "amp_bf16:ddp", "fp32:deepspeed:2"]
    for label in ("fp32:single", "amp_bf16:single", "fp32:ddp", "amp_bf16:ddp"):
        run = runs[label]
        assert run["status"] == "ok", run["reason"]
        ranks = 2 if label.endswith("ddp") else 1
        assert run["world_size"] == ranks
        assert len(run["epoch_s"]) == 1 and run["wall_s"] >= run["epoch_s"][0] > 0
        # Two batches of 8 per process: the sample count is global.
        assert run["samples"] == 2 * 8 * ranks
        assert run["throughput"] == pytest.approx(run["samples"] / run["wall_s"])
        assert len(run["peak_memory_per_device_bytes"]) == ranks
        assert run["peak_memory_bytes"] == max(run["peak_memory_per_device_bytes"]) > run["model_memory_bytes"] > 0
        assert run["memory_kind"] == "cpu_peak_rss"
        assert 0.0 <= run["accuracy"] <= 1.0 and run["loss"] > 0
        assert run["gpu_utilization"] is None and run["gpu_utilization_reason"]
    # All ranks together evaluated each test image once: accuracy is a multiple of 1 / 359.
    assert (runs["fp32:ddp"]["accuracy"] * 359) == pytest.approx(round(runs["fp32:ddp"]["accuracy"] * 359))
    skipped = runs["fp32:deepspeed:2"]
    if importlib.util.find_spec("deepspeed") is None:
        assert skipped["status"] == "skipped" and "deepspeed is not installed" in skipped["reason"]
    env = document["environment"]
    assert env["cpu_count"] >= 1 and env["torch"] and env["hardware"]


def test_a_failing_configuration_is_recorded_and_the_rest_go_on(tmp_path):
    # An empty directory passes the option check but the worker cannot read CIFAR-10 from it.
    document = compare.run_comparison(_options("fp32:single", data="cifar10", data_root=str(tmp_path)))
    assert [r["status"] for r in document["runs"]] == ["failed"]
    for run in document["runs"]:
        assert "data_batch_1" in run["reason"] and run["wall_s"] is None


def test_parse_configs():
    assert compare.parse_configs("fp32:single, amp_bf16:ddp,fp16:deepspeed:1") == (
        compare.Config("fp32", "single"), compare.Config("amp_bf16", "ddp"), compare.Config("fp16", "deepspeed", 1))
    with pytest.raises(ValueError) as info:
        compare.parse_configs("fp8:single,fp32:tp,fp32,fp32:ddp:2")
    lines = str(info.value).splitlines()
    assert len(lines) == 4
    assert "fp8" in lines[0] and "'tp'" in lines[1] and "precision:parallel" in lines[2] and "ZeRO" in lines[3]


def test_bad_options_exit_1_with_one_line_each_and_write_nothing(tmp_path, capsys):
    out = tmp_path / "r.json"
    status = _cli().main(["--model", "vgg", "--data", "cifar10", "--epochs", "0", "--configs", "fp8:single",
                          "--out", str(out)])
    assert status == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert [line.split(":")[0] for line in err] == ["--model", "--data-root", "--epochs", "--configs"]
    assert not out.exists()
    out.write_text("{}")
    assert _cli().main(["--out", str(out), "--configs", "fp32:single"]) == 1
    assert "--force" in capsys.readouterr().err and out.read_text() == "{}"


def test_the_schema_rejects_an_ok_run_without_measurements(small_run):
    document = json.loads(small_run.read_text())
    document["runs"][0]["wall_s"] = None
    document["runs"][-1]["reason"] = None
    problems = results_problems(document, "x.json")
    assert any(p.startswith("x.json: /runs/0/wall_s:") for p in problems)
    assert any(p.startswith(f"x.json: /runs/{len(document['runs']) - 1}/reason:") for p in problems)



def test_a_configuration_that_runs_too_long_is_stopped_and_recorded():
    document = compare.run_comparison(_options("fp32:ddp", epochs=50, max_batches=None, timeout_s=3))
    (run,) = document["runs"]
    assert run["status"] == "failed" and run["reason"] == "timed out after 3 s"


@pytest.mark.parametrize(("worker", "expected"), [
    ('raise RuntimeError("boom from the worker")\n', "RuntimeError: boom from the worker"),
    ("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n", "Signal 11 (SIGSEGV)"),
], ids=["exception", "signal"])
def test_failure_reason_is_the_root_cause_in_torchruns_output(worker, expected, tmp_path):
    """A failed distributed run is recorded with the line that says why, taken from torchrun's real
    stderr: the worker's exception or the signal that killed it, not torchrun's closing banner."""
    import subprocess
    import sys

    (tmp_path / "worker.py").write_text(worker, "utf-8")
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1",
                          "worker.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert expected in compare.failure_line(out.stderr.splitlines())
