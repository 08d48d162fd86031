"""tools/measure_methods.py: its options, resuming, --only, --shard and --merge (with a fake runner
that trains nothing), the effects schema, and one tiny real run of the harness with a method."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from methods_tools import compare, measure
from methods_tools.results import discover_effects, discover_results, effects_problems, load_effects

REPO_ROOT = Path(__file__).resolve().parents[2]
TOOL = REPO_ROOT / "tools" / "measure_methods.py"
METHODS = measure.domain_methods("vision")

ENV = {
    "hardware": "Test CPU, 2 cores (CPU only)", "device_type": "cpu", "device_name": "Test CPU", "device_count": 1,
    "cpu_model": "Test CPU", "cpu_count": 2, "torch": "2.0.0", "cuda": None, "python": "3.11.0",
    "platform": "Linux", "date": "2026-01-02T03:04:05Z", "load_average": [1.0, 1.0, 1.0],
}


def _options(**kw) -> measure.MeasureOptions:
    base = {"workload": "vision", "model": "resnet20", "data": "digits", "image_size": 8, "epochs": 1,
            "batch_size": 16, "seeds": (0, 1, 2), "max_batches": 1, "command": "python tools/measure_methods.py"}
    return measure.MeasureOptions(**{**base, **kw})


class FakeRunner:
    """Records the jobs it is given; a method's throughput and accuracy are fixed by its key and seed."""

    def __init__(self, fail: set[str] = frozenset()):
        self.jobs: list[measure.Job] = []
        self.fail = fail

    def __call__(self, job, options, env, progress):
        self.jobs.append(job)
        progress(f"{job.label} epoch 1/1 0.1 s")
        if job.method in self.fail:
            return {"method": job.method, "seed": job.seed, "hparams": dict(job.hparams), "status": "failed",
                    "reason": "RuntimeError: boom", "date": env["date"], "load_average": None, "wall_s": None,
                    "samples": None, "throughput": None, "peak_memory_bytes": None, "memory_kind": None,
                    "accuracy": None, "loss": None}
        speed = 100.0 if job.method == measure.BASELINE else 80.0
        accuracy = 0.9 if job.method == measure.BASELINE else 0.85
        return {"method": job.method, "seed": job.seed, "hparams": dict(job.hparams), "status": "ok", "reason": None,
                "date": env["date"], "load_average": [1.0, 1.0, 1.0], "wall_s": 10.0, "samples": 1000,
                "throughput": speed + job.seed, "peak_memory_bytes": 1000 + job.seed, "memory_kind": "cpu_peak_rss",
                "accuracy": accuracy + job.seed / 100, "loss": 0.5}


def _measure(out: Path, runner: FakeRunner, **kw) -> dict:
    options = kw.pop("options", _options())
    return measure.run_measurement(options, out, runner=runner, env=ENV, **kw)


# --------------------------------------------------------------------------------------------- jobs

def test_the_sweep_is_the_baseline_and_every_vision_method_per_seed():
    assert set(METHODS) >= {"cutmix", "mixup", "label_smoothing", "cutout"}
    assert METHODS["cutout"] == {"num_holes": 1, "length": 0.5, "uniform_sampling": False}
    jobs = measure.plan_jobs(METHODS, (0, 1, 2))
    assert len(jobs) == 3 * (1 + len(METHODS))
    assert [j.method for j in jobs[: 1 + len(METHODS)]] == [measure.BASELINE, *METHODS]
    assert {j.seed for j in jobs[: 1 + len(METHODS)]} == {0}


def test_select_jobs_resumes_reruns_only_and_shards():
    jobs = measure.plan_jobs({"a": {"x": 1}, "b": {}}, (0, 1))
    done = [{"method": j.method, "seed": j.seed, "hparams": dict(j.hparams), "status": "ok"} for j in jobs[:3]]
    assert measure.select_jobs(jobs, done) == jobs[3:]
    # hyperparameters that changed since: measured again
    stale = [{**done[1], "hparams": {"x": 2}}]
    assert jobs[1] in measure.select_jobs(jobs, stale)
    # a failed run is retried
    assert measure.select_jobs(jobs, [{**done[0], "status": "failed"}]) == jobs
    # --only a: a's runs again, the baseline only where its seed has none
    only = measure.select_jobs(jobs, done, only=["a"])
    assert [(j.method, j.seed) for j in only] == [("a", 0), ("baseline", 1), ("a", 1)]
    # --shard K/N: jobs K, K+N, ...; the shards together are the sweep, once
    shards = [measure.select_jobs(jobs, [], shard=(k, 4)) for k in range(4)]
    assert sorted((j.method, j.seed) for s in shards for j in s) == sorted((j.method, j.seed) for j in jobs)
    assert shards[1] == [jobs[1], jobs[5]]


# --------------------------------------------------------------------------------------------- runs

def test_a_sweep_writes_a_valid_file_with_ratios_and_changes_per_seed(tmp_path):
    out = tmp_path / "effects" / "vision.json"
    runner = FakeRunner(fail={"mixup"})
    lines = []
    document = _measure(out, runner, progress=lines.append)
    assert load_effects(out) == document
    assert len(runner.jobs) == 3 * (1 + len(METHODS))
    assert any("cutmix seed 0: ok" in line for line in lines) and any("epoch 1/1" in line for line in lines)
    summary = {entry["method"]: entry for entry in document["summary"]}
    assert "mixup" not in summary  # every run failed: recorded with the reason, not summarized
    assert {r["reason"] for r in document["runs"] if r["method"] == "mixup"} == {"RuntimeError: boom"}
    cutmix = summary["cutmix"]
    assert cutmix["seeds"] == [0, 1, 2]
    ratios = [(80 + s) / (100 + s) for s in range(3)]
    assert cutmix["throughput_ratio"]["mean"] == pytest.approx(sum(ratios) / 3)
    assert cutmix["accuracy_change"] == pytest.approx({"mean": -0.05, "std": 0.0}, abs=1e-12)
    assert cutmix["hparams"] == METHODS["cutmix"]
    assert summary["baseline"]["throughput_ratio"] is None
    assert document["settings"]["chance_accuracy"] == pytest.approx(0.1)


def test_a_rerun_resumes_and_only_remeasures_one_method(tmp_path):
    out = tmp_path / "vision.json"
    _measure(out, FakeRunner())
    again = FakeRunner()
    _measure(out, again)
    assert again.jobs == []  # every job has a successful run in the file
    only = FakeRunner()
    document = _measure(out, only, only=["cutmix"])
    assert {j.method for j in only.jobs} == {"cutmix"} and len(only.jobs) == 3
    assert len(document["runs"]) == 3 * (1 + len(METHODS))  # replaced, not added
    assert len(document["commands"]) == 2  # the rerun that ran nothing wrote nothing


def test_only_measures_a_missing_baseline_too(tmp_path):
    runner = FakeRunner()
    _measure(tmp_path / "vision.json", runner, only=["cutout"])
    assert sorted({j.method for j in runner.jobs}) == ["baseline", "cutout"]


def test_a_file_with_other_settings_is_not_resumed_without_force(tmp_path):
    out = tmp_path / "vision.json"
    _measure(out, FakeRunner())
    before = out.read_bytes()
    with pytest.raises(measure.MeasureError, match="settings: epochs is 1 there, 2 here"):
        _measure(out, FakeRunner(), options=_options(epochs=2))
    other_machine = {**ENV, "hardware": "Another CPU"}
    with pytest.raises(measure.MeasureError, match="environment: measured on Test CPU"):
        measure.run_measurement(_options(), out, runner=FakeRunner(), env=other_machine)
    assert out.read_bytes() == before
    fresh = FakeRunner()
    document = _measure(out, fresh, options=_options(epochs=2), force=True)
    assert len(fresh.jobs) == 3 * (1 + len(METHODS)) and document["settings"]["epochs"] == 2


def test_shards_merge_into_the_whole_sweep(tmp_path):
    pieces = []
    for k in range(3):
        path = tmp_path / f"shard{k}.json"
        _measure(path, FakeRunner(), shard=(k, 3))
        pieces.append((str(path), load_effects(path)))
    merged = measure.merge_documents(pieces)
    whole = _measure(tmp_path / "whole.json", FakeRunner())
    assert merged["summary"] == whole["summary"]
    assert [(r["method"], r["seed"]) for r in merged["runs"]] == [(r["method"], r["seed"]) for r in whole["runs"]]


def test_merge_refuses_pieces_with_other_settings(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    _measure(a, FakeRunner(), shard=(0, 2))
    _measure(b, FakeRunner(), shard=(1, 2), options=_options(image_size=16))
    with pytest.raises(measure.MeasureError, match=r"b\.json: settings: image_size is 16 there, 8 here"):
        measure.merge_documents([(str(a), load_effects(a)), (str(b), load_effects(b))])


# --------------------------------------------------------------------------------------------- command

def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, cwd=REPO_ROOT)


def test_bad_options_exit_1_with_one_line_each_and_write_nothing(tmp_path):
    out = tmp_path / "out.json"
    result = _cli("--only", "cutmix,nope", "--shard", "4/4", "--seeds", "1", "--epochs", "0", "--batch-size", "-1",
                  "--data", "imagenet", "--out", str(out))
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 6, result.stderr
    assert "Traceback" not in result.stderr
    for expected in ("--only: 'nope' is not a vision method", "--shard: '4/4'", "--seeds: 1", "--epochs: 0",
                     "--batch-size: -1", "--data: 'imagenet'"):
        assert any(line.startswith(expected) for line in lines), (expected, lines)
    assert not out.exists()


def test_merge_options_and_refusal_to_overwrite(tmp_path):
    a, b, out = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "merged.json"
    result = _cli("--merge", str(a), "--only", "cutmix")
    assert result.returncode == 1
    assert result.stderr.splitlines() == ["--only: not with --merge, which runs nothing",
                                          "--merge: give --out, the merged file", f"{a}: no such file"]
    _measure(a, FakeRunner(), shard=(0, 2))
    _measure(b, FakeRunner(), shard=(1, 2))
    assert _cli("--merge", str(a), str(b), "--out", str(out)).returncode == 0
    assert len(load_effects(out)["runs"]) == 3 * (1 + len(METHODS))
    result = _cli("--merge", str(a), str(b), "--out", str(out))
    assert result.returncode == 1 and result.stderr.strip() == f"{out}: exists — pass --force to overwrite it, " \
                                                               "or choose --out"
    assert _cli("--merge", str(a), str(b), "--out", str(out), "--force").returncode == 0


def test_shard_needs_its_own_output():
    result = _cli("--shard", "0/2")
    assert result.returncode == 1
    assert result.stderr.strip() == "--shard: give --out too: each shard writes its own piece, joined with --merge"


# --------------------------------------------------------------------------------------------- files

def test_the_schema_rejects_an_ok_run_without_measurements(tmp_path):
    document = _measure(tmp_path / "v.json", FakeRunner())
    broken = json.loads(json.dumps(document))
    broken["runs"][0]["wall_s"] = None
    broken["settings"]["nproc"] = 2
    problems = effects_problems(broken, "x.json")
    assert any(p.startswith("x.json: /runs/0/wall_s: None is not of type 'number'") for p in problems), problems
    assert any(p.startswith("x.json: /settings: Additional properties") for p in problems), problems


def test_each_loader_finds_only_its_own_files(tmp_path):
    (tmp_path / "effects").mkdir()
    (tmp_path / "cpu-x-2026-01-01.json").write_text("{}")
    (tmp_path / "effects" / "vision-cpu-x.json").write_text("{}")
    assert discover_results(tmp_path) == [tmp_path / "cpu-x-2026-01-01.json"]
    assert discover_effects(tmp_path / "effects") == [tmp_path / "effects" / "vision-cpu-x.json"]


def test_the_committed_effects_files_are_valid():
    for path in discover_effects():
        load_effects(path)


def test_default_output_names_the_workload_and_machine_without_a_date():
    assert measure.default_output_path("vision", ENV, Path("r")) == Path("r/vision-cpu-test-cpu.json")


# --------------------------------------------------------------------------------------------- harness

def test_the_worker_trains_with_the_method_it_is_given():
    options = compare.CompareOptions(model="resnet20", data="digits", epochs=1, batch_size=16,
                                     configs=(compare.Config("fp32", "single"),), nproc=1, max_batches=1,
                                     image_size=8, algorithm="cutout", hparams='{"length": 0.25}')
    command = compare.worker_command(options.configs[0], options, Path("/tmp/x"), 1)
    assert command[command.index("--algorithm") + 1] == "cutout"
    assert json.loads(command[command.index("--hparams") + 1]) == {"length": 0.25}
    job = measure.Job("cutout", 0, {"num_holes": 1, "length": 0.5, "uniform_sampling": False})
    lines = []
    run = measure.run_job(job, _options(), compare.environment(), lines.append)
    assert run["status"] == "ok", run["reason"]
    assert run["hparams"] == job.hparams and run["samples"] == 16
    assert any("+ cutout epoch 1/1" in line for line in lines)
    bad = measure.run_job(measure.Job("cutout", 0, {"length": 7.0}), _options(), compare.environment(), lines.append)
    assert bad["status"] == "failed" and "length" in bad["reason"]
