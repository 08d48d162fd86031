"""tools/compare_training.py: a small real run, failures and skips recorded, bad input rejected."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from methods_tools import compare
from methods_tools.results import load_results, results_problems

from algorithms.core.distributed import deepspeed_unavailable_reason

pytestmark = pytest.mark.slow  # it runs the training comparison's processes

REPO = Path(__file__).resolve().parents[2]
DEEPSPEED_MISSING = deepspeed_unavailable_reason()


def _cli():
    spec = importlib.util.spec_from_file_location("compare_training", REPO / "tools" / "compare_training.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _options(configs: str, **kw) -> compare.CompareOptions:
    base = dict(
        model="resnet20",
        data="digits",
        image_size=8,
        epochs=1,
        batch_size=8,
        max_batches=2,
        nproc=2,
        configs=compare.parse_configs(configs),
        timeout_s=300,
    )
    return compare.CompareOptions(**{**base, **kw})


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    """fp32 and amp_bf16, one process and 2-rank DDP, 2-rank DeepSpeed ZeRO-2 (skipped, with the
    reason, where DeepSpeed cannot run), and Accelerate's DDP and FSDP files under accelerate launch
    (FSDP skipped, with the reason, on a machine without GPUs)."""
    out = tmp_path_factory.mktemp("results") / "small.json"
    argv = [
        "--model",
        "resnet20",
        "--data",
        "digits",
        "--image-size",
        "8",
        "--epochs",
        "1",
        "--batch-size",
        "8",
        "--max-batches",
        "2",
        "--nproc",
        "2",
        "--repeats",
        "1",
        "--out",
        str(out),
        "--configs",
        "fp32:single,amp_bf16:single,fp32:ddp,amp_bf16:ddp,fp32:deepspeed,fp32:accelerate:ddp,fp32:accelerate:fsdp",
    ]
    status = _cli().main(argv)
    assert status == 0
    return out


def test_small_run_finishes_and_validates(small_run):
    document = load_results(small_run)  # raises on any schema problem
    assert results_problems(json.loads(small_run.read_text())) == []
    assert document["schema_version"] == 2 and document["settings"]["repeats"] == 1
    assert document["settings"]["threads"] == 2
    # Round 1; a round 2 re-measures only a super-linear speed-up (and the run it beat).
    runs = {r["config"]: r for r in document["runs"] if r["round"] == 1}
    assert {r["round"] for r in document["runs"]} <= {1, 2}
    assert [s["config"] for s in document["summary"]] == list(runs)
    assert list(runs) == [
        "fp32:single",
        "amp_bf16:single",
        "fp32:ddp",
        "amp_bf16:ddp",
        "fp32:deepspeed:2",
        "fp32:accelerate:ddp",
        "fp32:accelerate:fsdp",
    ]
    ran = ["fp32:single", "amp_bf16:single", "fp32:ddp", "amp_bf16:ddp", "fp32:accelerate:ddp"]
    if DEEPSPEED_MISSING is None:
        ran.append("fp32:deepspeed:2")
    else:
        assert runs["fp32:deepspeed:2"]["status"] == "skipped"
        assert runs["fp32:deepspeed:2"]["reason"] == DEEPSPEED_MISSING
    for label in ran:
        run = runs[label]
        assert run["status"] == "ok", run["reason"]
        ranks = 1 if label.endswith("single") else 2
        assert run["world_size"] == ranks
        assert len(run["epoch_s"]) == 1 and run["wall_s"] >= run["epoch_s"][0] > 0
        # Two batches of 8 per process: the sample count is global.
        assert run["samples"] == 2 * 8 * ranks
        assert run["throughput"] == pytest.approx(run["samples"] / run["wall_s"])
        assert len(run["peak_memory_per_device_bytes"]) == ranks
        assert run["peak_memory_bytes"] == max(run["peak_memory_per_device_bytes"]) > run["model_memory_bytes"] > 0
        assert run["memory_kind"] == "cpu_peak_rss"
        # Tensor memory, measured apart: two batches a run, no warm-up left. The parameters and
        # buffers are those the timed run held; at the step weights, gradients and state are alive.
        tensor = run["tensor_memory"]
        assert tensor["how"] == "cpu_profiler" and (tensor["warmup_batches"], tensor["batches"]) == (0, 2)
        assert tensor["weights_bytes"] == run["model_memory_bytes"]
        assert tensor["activations_bytes"] > 0
        assert tensor["peak_bytes"] >= tensor["weights_bytes"] + tensor["gradients_bytes"] + tensor["optimizer_bytes"]
        # The parameters counted whole: in fp32, with every gradient on each process, 4 bytes each.
        assert run["parameters"] > 0
        if label in ("fp32:single", "fp32:ddp"):
            assert tensor["gradients_bytes"] == 4 * run["parameters"]
        assert 0.0 <= run["accuracy"] <= 1.0 and run["loss"] > 0
        # Threads matched (--threads defaults to --nproc, 2): what each process's torch reported.
        assert run["threads_per_process"] == 2 // ranks
        assert run["gpu_utilization"] is None and run["gpu_utilization_reason"]
        entry = next(s for s in document["summary"] if s["config"] == label)
        assert entry["status"] == "ok" and entry["steady_state"] is False  # one epoch: no steady state
        assert entry["tensor_memory"]["peak_bytes"]["median"] == tensor["peak_bytes"] or entry["runs"] == 2
        assert entry["first_epoch_s"]["median"] == run["epoch_s"][0] or entry["runs"] == 2
        assert entry["speedup"]["over"] == (
            "fp32:single" if label.endswith("single") or "fp32" in label else "amp_bf16:single"
        )
    # Accelerate's rows: launched by accelerate launch with the file, in the mode Accelerate set up.
    accelerated = runs["fp32:accelerate:ddp"]
    assert accelerated["accelerate_config"] == "configs/accelerate/ddp.yaml"
    assert accelerated["note"] == (
        "launched with ACCELERATE_USE_CPU=true accelerate launch --config_file configs/accelerate/ddp.yaml: "
        "Accelerate set up MULTI_CPU, 2 processes"
    )
    # The same weights, data and steps as native DDP: the same model at the end.
    assert accelerated["loss"] == pytest.approx(runs["fp32:ddp"]["loss"], rel=1e-4)
    sharded = runs["fp32:accelerate:fsdp"]
    assert (
        sharded["status"] == "skipped"
        and "Accelerate runs its FSDP mode on accelerator devices only" in (sharded["reason"])
    )
    # All ranks together evaluated each test image once: accuracy is a multiple of 1 / 359.
    assert (runs["fp32:ddp"]["accuracy"] * 359) == pytest.approx(round(runs["fp32:ddp"]["accuracy"] * 359))
    env = document["environment"]
    assert env["cpu_count"] >= 1 and env["torch"] and env["hardware"]


def test_deepspeed_rows_are_skipped_with_the_reason_where_it_cannot_run(monkeypatch):
    configs = "fp32:deepspeed:1,fp32:deepspeed:2"
    with monkeypatch.context() as hidden:
        hidden.setitem(sys.modules, "deepspeed", None)  # as if the package were not installed
        runs = compare.run_comparison(_options(configs))["runs"]
    assert [(r["config"], r["status"]) for r in runs] == [
        ("fp32:deepspeed:1", "skipped"),
        ("fp32:deepspeed:2", "skipped"),
    ]
    assert all("deepspeed is not installed" in r["reason"] and r["wall_s"] is None for r in runs)
    if DEEPSPEED_MISSING is not None:
        return
    # Installed, on a CPU machine without the compiler its communication op is built with.
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    monkeypatch.setenv("CXX", "no-such-c++-compiler")
    monkeypatch.delenv("DS_ACCELERATOR", raising=False)
    runs = compare.run_comparison(_options(configs))["runs"]
    assert all(r["status"] == "skipped" and "C++ compiler" in r["reason"] for r in runs)


@pytest.mark.skipif(DEEPSPEED_MISSING is not None, reason=str(DEEPSPEED_MISSING))
def test_a_precision_deepspeed_lacks_here_is_skipped_naming_the_ones_it_has():
    (run,) = compare.run_comparison(_options("amp_fp16:deepspeed"))["runs"]
    assert run["status"] == "skipped" and "use one of fp32" in run["reason"], run["reason"]


def test_a_failing_configuration_is_recorded_and_the_rest_go_on(tmp_path):
    # An empty directory passes the option check but the worker cannot read CIFAR-10 from it.
    document = compare.run_comparison(_options("fp32:single", data="cifar10", data_root=str(tmp_path)))
    assert [r["status"] for r in document["runs"]] == ["failed"]
    for run in document["runs"]:
        assert "data_batch_1" in run["reason"] and run["wall_s"] is None


def test_parse_configs():
    assert compare.parse_configs("fp32:single, amp_bf16:ddp,fp16:deepspeed:1") == (
        compare.Config("fp32", "single"),
        compare.Config("amp_bf16", "ddp"),
        compare.Config("fp16", "deepspeed", 1),
    )
    assert compare.parse_configs("fp32:accelerate,amp_bf16:accelerate:fsdp") == (
        compare.Config("fp32", "accelerate", None, "ddp"),
        compare.Config("amp_bf16", "accelerate", None, "fsdp"),
    )
    assert compare.Config("fp32", "accelerate", None, "fsdp").label == "fp32:accelerate:fsdp"
    # ZeRO stage 3, and +offload: everything the mode partitions in CPU memory
    offloaded = "fp32:deepspeed:3,bf16:deepspeed:2+offload,fp32:deepspeed:3+offload,fp32:fsdp:offload"
    assert compare.parse_configs(offloaded) == (
        compare.Config("fp32", "deepspeed", 3),
        compare.Config("bf16", "deepspeed", 2, offload=True),
        compare.Config("fp32", "deepspeed", 3, offload=True),
        compare.Config("fp32", "fsdp", None, offload=True),
    )
    assert [c.label for c in compare.parse_configs(offloaded)] == offloaded.split(",")
    with pytest.raises(ValueError) as info:
        compare.parse_configs("fp8:single,fp32:tp,fp32,fp32:ddp:2,fp32:accelerate:tpu")
    lines = str(info.value).splitlines()
    assert len(lines) == 5
    assert "fp8" in lines[0] and "'tp'" in lines[1] and "precision:parallel" in lines[2] and "ZeRO" in lines[3]
    assert "configs/accelerate/tpu.yaml" in lines[4] and "ddp, deepspeed, fsdp" in lines[4]
    bad = [
        "fp32:deepspeed:4",
        "fp32:deepspeed:offload",
        "fp32:deepspeed:2+swap",
        "fp32:ddp:offload",
        "fp32:fsdp:3+offload",
    ]
    with pytest.raises(ValueError) as info:
        compare.parse_configs(",".join(bad))
    lines = str(info.value).splitlines()
    assert len(lines) == len(bad)
    for item, line in zip(bad, lines, strict=True):
        assert line == (
            f"--configs: {item!r}: a third field is the ZeRO stage of deepspeed (1, 2 or 3; +offload offloads to CPU "
            "memory, e.g. fp32:deepspeed:2+offload), offload for fsdp (fp32:fsdp:offload), or the Accelerate "
            "configuration of accelerate (e.g. fp32:accelerate:fsdp)"
        )


def test_zero3_and_offloaded_configurations_run_and_their_rows_say_what_moved():
    """A smoke run of the stage-3 and offloaded rows on this machine: each trains under torchrun (or
    is skipped with the reason where DeepSpeed cannot run), the results validate, and an offloaded
    row's note says what it put in CPU memory, and that on a machine without GPUs that moved nothing."""
    labels = ["fp32:deepspeed:3", "fp32:deepspeed:2+offload", "fp32:deepspeed:3+offload", "fp32:fsdp:offload"]
    document = compare.run_comparison(_options(",".join(labels)))
    assert results_problems(document) == []
    runs = {r["config"]: r for r in document["runs"]}
    assert list(runs) == labels
    assert [runs[label]["zero_stage"] for label in labels] == [3, 2, 3, None]
    device = document["environment"]["device_type"]
    for label, run in runs.items():
        if DEEPSPEED_MISSING is not None and "deepspeed" in label:
            assert run["status"] == "skipped" and run["reason"] == DEEPSPEED_MISSING
            continue
        assert run["status"] == "ok", run["reason"]
        assert run["world_size"] == 2 and run["samples"] == 2 * 8 * 2 and 0.0 <= run["accuracy"] <= 1.0
        assert run["model_memory_bytes"] > 0
        moved = {
            "fp32:deepspeed:2+offload": "ZeRO offload_optimizer: optimizer partitions (state and fp32 master weights)",
            "fp32:deepspeed:3+offload": "ZeRO offload_optimizer and offload_param: optimizer partitions and parameter "
            "partitions",
            "fp32:fsdp:offload": "FSDP CPUOffloadPolicy: parameter, gradient and optimizer-state shards",
        }
        if label in moved:
            here = ", where everything already is on this machine without GPUs: the offload moves nothing"
            assert run["note"] == f"{moved[label]} in CPU memory" + (here if device == "cpu" else "")
        else:
            assert run["note"] is None


def test_bad_options_exit_1_with_one_line_each_and_write_nothing(tmp_path, capsys):
    out = tmp_path / "r.json"
    status = _cli().main(
        ["--model", "vgg", "--data", "cifar10", "--epochs", "0", "--configs", "fp8:single", "--out", str(out)]
    )
    assert status == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert [line.split(":")[0] for line in err] == ["--model", "--data-root", "--epochs", "--configs"]
    assert not out.exists()
    # Threads that cannot be split evenly over the processes of a distributed run.
    assert _cli().main(["--threads", "3", "--nproc", "2", "--out", str(out)]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        "--threads: 3 does not split evenly over --nproc 2 processes — pass a multiple of 2, so that every "
        "configuration runs on the same threads in all"
    ]
    assert not out.exists()
    out.write_text("{}")
    assert _cli().main(["--out", str(out), "--configs", "fp32:single"]) == 1
    assert "--force" in capsys.readouterr().err and out.read_text() == "{}"


def test_the_schema_rejects_an_ok_run_without_measurements(small_run):
    document = json.loads(small_run.read_text())
    document["runs"][0]["wall_s"] = None
    document["runs"][-1].update(status="skipped", reason=None)  # a skip must say why
    problems = results_problems(document, "x.json")
    assert any(p.startswith("x.json: /runs/0/wall_s:") for p in problems)
    assert any(p.startswith(f"x.json: /runs/{len(document['runs']) - 1}/reason:") for p in problems)


def test_a_configuration_that_runs_too_long_is_stopped_and_recorded():
    document = compare.run_comparison(_options("fp32:ddp", epochs=50, max_batches=None, timeout_s=3))
    (run,) = document["runs"]
    assert run["status"] == "failed" and run["reason"] == "timed out after 3 s"


@pytest.mark.parametrize(
    ("worker", "expected"),
    [
        ('raise RuntimeError("boom from the worker")\n', "RuntimeError: boom from the worker"),
        ("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n", "Signal 11 (SIGSEGV)"),
    ],
    ids=["exception", "signal"],
)
def test_failure_reason_is_the_root_cause_in_torchruns_output(worker, expected, tmp_path):
    """A failed distributed run is recorded with the line that says why, taken from torchrun's real
    stderr: the worker's exception or the signal that killed it, not torchrun's closing banner."""
    import subprocess
    import sys

    (tmp_path / "worker.py").write_text(worker, "utf-8")
    out = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1", "worker.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode != 0
    assert expected in compare.failure_line(out.stderr.splitlines())
