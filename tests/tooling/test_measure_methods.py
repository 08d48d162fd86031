"""tools/measure_methods.py: its options, resuming, --only, --shard, --merge and --resummarize (with a
fake runner that trains nothing), both workloads, methods measured on their own model and precision,
the evidence in the summary (paired intervals, verdicts against margins of practical equivalence,
paired t-test p-values with Holm's correction, did not act, failed), and real runs of the
harness that show what it measures: EMA's averaged weights scored on text, tokens counted for
ALiBi, Layer Freezing recorded as not acting. The sweep tests use synthetic method records, so they
do not depend on the library's metadata."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import scipy.stats
from methods_tools import compare, evidence, measure
from methods_tools.results import discover_effects, discover_results, effects_problems, load_effects

REPO_ROOT = Path(__file__).resolve().parents[2]
TOOL = REPO_ROOT / "tools" / "measure_methods.py"


def _record(domains, model=None, kind="method", precision=None, **suggested):
    workload = {k: v for k, v in (("model", model), ("precision", precision)) if v}
    raw = {"workload": workload} if workload else {}
    return SimpleNamespace(
        kind=kind,
        domains=tuple(domains),
        raw=raw,
        hyperparameters={k: SimpleNamespace(suggested=v) for k, v in suggested.items()},
    )


RECORDS = {
    "cutmix": _record(["vision"], alpha=1.0),
    "cutout": _record(["vision"], num_holes=1, length=0.5, uniform_sampling=False),
    "label_smoothing": _record(["vision"], smoothing=0.1),
    "mixup": _record(["vision"], alpha=0.2),
    "bf16": _record(["vision", "nlp"], kind="best_practice"),
    "token_trick": _record(["nlp"], p=0.1),
    "wide_trick": _record(["nlp", "vision"], width=2),
}
GN_RECORDS = {
    "cutmix": RECORDS["cutmix"],
    "gn_trick": _record(["vision"], model="resnet20_gn", precision="amp_bf16", eps=1e-5),
}
METHODS = measure.domain_methods("vision", RECORDS)


@pytest.fixture(autouse=True)
def synthetic_methods(monkeypatch):
    """The command line sees the synthetic methods, not the library's."""
    import algorithms.metadata

    monkeypatch.setattr(algorithms.metadata, "load_all_metadata", lambda root=None: RECORDS)


ENV = {
    "hardware": "Test CPU, 2 cores (CPU only)",
    "device_type": "cpu",
    "device_name": "Test CPU",
    "device_count": 1,
    "cpu_model": "Test CPU",
    "cpu_count": 2,
    "torch": "2.0.0",
    "cuda": None,
    "python": "3.11.0",
    "platform": "Linux",
    "date": "2026-01-02T03:04:05Z",
    "load_average": [1.0, 1.0, 1.0],
}


def _options(**kw) -> measure.MeasureOptions:
    base = {
        "workload": "vision",
        "model": "resnet20",
        "data": "digits",
        "image_size": 8,
        "epochs": 1,
        "batch_size": 16,
        "seeds": (0, 1, 2),
        "max_batches": 1,
        "command": "python tools/measure_methods.py",
    }
    return measure.MeasureOptions(**{**base, **kw})


def _nlp_options(**kw) -> measure.MeasureOptions:
    base = {
        "workload": "nlp",
        "model": "transformer_tiny",
        "data": "stdlib_text",
        "image_size": None,
        "seq_len": 16,
        "epochs": 1,
        "batch_size": 4,
        "seeds": (0, 1),
        "max_batches": 2,
        "lr": 3e-3,
        "optimizer": "adamw",
        "eval_examples": 8,
        "metric": "loss",
        "command": "python tools/measure_methods.py",
    }
    return measure.MeasureOptions(**{**base, **kw})


# Per seed, what the fake runs report: the method's accuracy change varies by seed, so intervals
# can be computed by hand below.
ACCURACY_CHANGE = {0: -0.04, 1: -0.05, 2: -0.06}


class FakeRunner:
    """Records the jobs it is given; a method's figures are fixed by its key and seed. Runs of the
    seeds in ``tensor_seeds`` have tensor-memory figures (the others none, as runs measured before
    tensor memory was): a method's peak is 1.5 MB, the baseline's 2 MB, plus the seed in KB."""

    def __init__(
        self, fail: set[str] = frozenset(), idle: set[str] = frozenset(), tensor_seeds: set[int] = frozenset()
    ):
        self.jobs: list[measure.Job] = []
        self.fail, self.idle, self.tensor_seeds = fail, idle, tensor_seeds

    def __call__(self, job, options, env, progress):
        self.jobs.append(job)
        progress(f"{job.label} epoch 1/1 0.1 s")
        base = {
            "method": job.method,
            "model": job.model,
            "precision": job.precision,
            "seed": job.seed,
            "hparams": dict(job.hparams),
            "date": env["date"],
            "load_average": [1.0, 1.0, 1.0],
            "command": options.command,
            "eval_s": 1.0,
            "job_s": 15.0,
            "tokens": None,
        }
        if job.method in self.fail:
            return {
                **base,
                "status": "failed",
                "reason": "RuntimeError: boom",
                "wall_s": None,
                "eval_s": None,
                "samples": None,
                "throughput": None,
                "peak_memory_bytes": None,
                "memory_kind": None,
                "accuracy": None,
                "loss": None,
                "activity": None,
                "acted": None,
            }
        method = job.method != measure.BASELINE
        speed = (80.0 if method else 100.0) / (2 if job.model else 1)
        text = options.metric == "loss"
        accuracy = 0.9 + job.seed / 100 + (ACCURACY_CHANGE[job.seed] if method else 0.0)
        acted = job.method not in self.idle
        tokens = 1000 * options.seq_len if text else None
        return {
            **base,
            "status": "ok",
            "reason": None,
            "wall_s": 1000 / (speed + job.seed),
            "samples": 1000,
            "tokens": tokens,
            "throughput": (tokens or 1000) / (1000 / (speed + job.seed)),
            "peak_memory_bytes": 1000 + job.seed,
            "memory_kind": "cpu_peak_rss",
            "accuracy": None if text else accuracy,
            "loss": (2.0 if not method else 1.9 - job.seed / 100) + job.seed / 10 if text else 0.5,
            "activity": {"things_done": 5 if acted else 0} if method else None,
            "acted": acted if method else None,
            **({"tensor_memory": _tensor_memory(method, job.seed)} if job.seed in self.tensor_seeds else {}),
        }


def _tensor_memory(method: bool, seed: int) -> dict:
    peak = (1_500_000 if method else 2_000_000) + 1000 * seed
    return {
        "peak_bytes": peak,
        "weights_bytes": 400_000,
        "gradients_bytes": 400_000,
        "optimizer_bytes": 400_000,
        "activations_bytes": peak - 1_300_000,
        "how": "cpu_profiler",
        "warmup_batches": 1,
        "batches": 2,
    }


def _measure(out: Path, runner: FakeRunner, **kw) -> dict:
    options = kw.pop("options", _options())
    return measure.run_measurement(options, out, runner=runner, env=ENV, records=kw.pop("records", RECORDS), **kw)


# --------------------------------------------------------------------------------------------- jobs


def test_the_sweep_interleaves_the_baseline_and_every_vision_method_per_seed():
    assert set(METHODS) >= {"cutmix", "mixup", "label_smoothing", "cutout"}
    assert METHODS["cutout"] == {"num_holes": 1, "length": 0.5, "uniform_sampling": False}
    jobs = measure.plan_jobs(METHODS, (0, 1, 2))
    assert len(jobs) == 3 * (1 + len(METHODS))
    per_seed = 1 + len(METHODS)
    for s in range(3):  # each seed's baseline, then its methods: they take turns through the sweep
        block = jobs[s * per_seed : (s + 1) * per_seed]
        assert [j.method for j in block] == [measure.BASELINE, *METHODS] and {j.seed for j in block} == {s}


def test_select_jobs_resumes_reruns_only_with_its_baseline_and_shards():
    jobs = measure.plan_jobs({"a": {"x": 1}, "b": {}}, (0, 1))
    done = [
        {
            "method": j.method,
            "model": None,
            "precision": None,
            "seed": j.seed,
            "hparams": dict(j.hparams),
            "status": "ok",
        }
        for j in jobs[:3]
    ]
    assert measure.select_jobs(jobs, done) == jobs[3:]
    # hyperparameters that changed since: measured again
    stale = [{**done[1], "hparams": {"x": 2}}]
    assert jobs[1] in measure.select_jobs(jobs, stale)
    # a failed run is retried
    assert measure.select_jobs(jobs, [{**done[0], "status": "failed"}]) == jobs
    # --only a: a's runs again, beside a fresh baseline of each seed, so each pair shares its load
    only = measure.select_jobs(jobs, done, only=["a"])
    assert [(j.method, j.seed) for j in only] == [("baseline", 0), ("a", 0), ("baseline", 1), ("a", 1)]
    # --shard K/N: jobs K, K+N, ...; the shards together are the sweep, once
    shards = [measure.select_jobs(jobs, [], shard=(k, 4)) for k in range(4)]
    assert sorted((j.method, j.seed) for s in shards for j in s) == sorted((j.method, j.seed) for j in jobs)
    assert shards[1] == [jobs[1], jobs[5]]


# --------------------------------------------------------------------------------------------- evidence


def test_a_sweep_writes_paired_intervals_and_verdicts(tmp_path):
    out = tmp_path / "effects" / "vision.json"
    runner = FakeRunner(fail={"mixup"})
    lines = []
    document = _measure(out, runner, progress=lines.append)
    assert load_effects(out) == document and document["schema_version"] == 4
    assert len(runner.jobs) == 3 * (1 + len(METHODS))
    assert any("cutmix seed 0: ok" in line for line in lines) and any("epoch 1/1" in line for line in lines)
    summary = {entry["method"]: entry for entry in document["summary"]}
    cutmix = summary["cutmix"]
    assert cutmix["status"] == "measured" and cutmix["seeds"] == [0, 1, 2]
    # the paired t interval by hand: differences -0.04, -0.05, -0.06: mean -0.05, sd 0.01, t(0.975, 2) = 4.303
    quality = cutmix["quality"]
    half = 4.302652729911275 * 0.01 / math.sqrt(3)
    assert quality["change"] == pytest.approx(-0.05, abs=1e-12)
    assert (quality["low"], quality["high"]) == pytest.approx((-0.05 - half, -0.05 + half), abs=1e-9)
    assert quality["verdict"] == "worse" and quality["pairs"] == 3 and quality["metric"] == "accuracy"
    assert quality["baseline"] == pytest.approx(0.91) and quality["margin"] == 0.001
    # the paired t-test of the same pairs: t = -0.05 / (0.01 / sqrt(3)) with 2 degrees of freedom
    p_value = 2 * scipy.stats.t.sf(0.05 / (0.01 / math.sqrt(3)), 2)
    assert quality["p_value"] == pytest.approx(p_value, rel=1e-6)
    # Holm over the four measured methods (mixup failed), whose p-values here are equal: each times 4,
    # 0.052, so the verdict of each alone (p 0.013) does not hold for the four together
    assert {e["method"] for e in document["summary"] if e["quality"]} == {
        "cutmix",
        "cutout",
        "label_smoothing",
        "wide_trick",
    }
    assert quality["holm_family"] == 4 and quality["p_holm"] == pytest.approx(4 * p_value, rel=1e-6)
    assert evidence.holds_after_correction(quality) is False
    # throughput: the ratio of medians, 81 / 101, and every resample of these pairs lies in [80/100, 82/102]
    speed = cutmix["throughput"]
    assert speed["ratio"] == pytest.approx(81 / 101)
    assert 80 / 100 - 1e-12 <= speed["low"] <= speed["ratio"] <= speed["high"] <= 82 / 102 + 1e-12
    assert speed["verdict"] == "worse" and speed["margin"] == 0.02
    # the same memory in every pair: a ratio of exactly 1, within its margin
    assert cutmix["memory"]["ratio"] == 1.0 and cutmix["memory"]["verdict"] == "no practical difference"
    assert cutmix["activity"] == {"things_done": 5} and cutmix["commands"] == ["python tools/measure_methods.py"]
    assert cutmix["hparams"] == METHODS["cutmix"]
    # every run failed: shown as failed, with the reason, and no effect
    assert summary["mixup"]["status"] == "failed" and summary["mixup"]["reason"] == "RuntimeError: boom"
    assert summary["mixup"]["quality"] is None and summary["mixup"]["throughput"] is None
    base = summary["baseline"]
    assert base["status"] == "baseline" and base["baseline"]["mean"] == pytest.approx(0.91)
    assert base["baseline"]["throughput_median"] == pytest.approx(101.0)
    assert document["settings"]["chance_accuracy"] == pytest.approx(0.1)
    assert document["settings"]["throughput_unit"] == "images"


@pytest.mark.slow  # trains small runs in worker processes: about 3 s
def test_the_memory_ratio_is_of_tensor_memory_where_every_pair_has_it_else_of_the_process(tmp_path):
    document = _measure(tmp_path / "tensor.json", FakeRunner(tensor_seeds={0, 1, 2}))
    summary = {e["method"]: e for e in document["summary"]}
    cutmix, base = summary["cutmix"], summary["baseline"]
    # The tensor peaks' ratio of medians (1,501,000 over 2,001,000), not the process peaks' (1001 / 1001).
    assert cutmix["memory"]["ratio"] == pytest.approx(1_501_000 / 2_001_000)
    assert cutmix["memory"]["verdict"] == "better"
    assert cutmix["tensor_memory"] == {
        "peak_bytes": 1_501_000,
        "weights_bytes": 400_000,
        "gradients_bytes": 400_000,
        "optimizer_bytes": 400_000,
        "activations_bytes": 201_000,
        "how": "cpu_profiler",
    }
    assert base["tensor_memory"]["peak_bytes"] == 2_001_000
    # One seed without tensor memory: every pair is compared by the process's peak instead.
    mixed = _measure(tmp_path / "mixed.json", FakeRunner(tensor_seeds={0, 1}))
    cutmix = {e["method"]: e for e in mixed["summary"]}["cutmix"]
    assert cutmix["tensor_memory"] is None and cutmix["memory"]["ratio"] == pytest.approx(1.0)
    # A file measured before tensor memory: no such field in its runs, nor in its summary.
    old = _measure(tmp_path / "old.json", FakeRunner())
    assert all("tensor_memory" not in r for r in old["runs"] + old["summary"])
    assert effects_problems(old, "old.json") == []


def test_a_method_that_never_acted_is_recorded_so_not_as_an_effect(tmp_path):
    document = _measure(tmp_path / "v.json", FakeRunner(idle={"cutout"}))
    cutout = {e["method"]: e for e in document["summary"]}["cutout"]
    assert cutout["status"] == "did_not_act"
    assert cutout["reason"] == (
        "its recorded activity shows it did not act in any of its 3 runs (things done 0 per run)"
    )
    assert cutout["quality"] is None and cutout["throughput"] is None and cutout["memory"] is None


def test_the_schema_refuses_an_effect_without_its_interval_or_a_did_not_act_row_with_numbers(tmp_path):
    document = _measure(tmp_path / "v.json", FakeRunner(idle={"cutout"}))
    broken = json.loads(json.dumps(document))
    rows = {e["method"]: e for e in broken["summary"]}
    del rows["cutmix"]["quality"]["low"]
    rows["cutout"]["quality"] = rows["mixup"]["quality"]
    problems = effects_problems(broken, "x.json")
    assert any("'low' is a required property" in p for p in problems), problems
    assert any("/summary/" in p and "quality" in p and "is not of type 'null'" in p for p in problems), problems


def test_no_detectable_difference_when_the_interval_spans_zero():
    result = evidence.paired_change([0.91, 0.89, 0.93], [0.90, 0.90, 0.90], higher_is_better=True, margin=0.001)
    assert result["low"] < 0 < result["high"] and result["verdict"] == "no detectable difference"
    assert evidence.paired_change([1.0], [0.5], higher_is_better=True, margin=0.001) is None  # one pair: no interval
    # a loss that falls in every pair is better
    falls = evidence.paired_change([1.8, 1.7, 1.9], [2.0, 1.95, 2.1], higher_is_better=False, margin=0.01)
    assert falls["verdict"] == "better"
    ratio = evidence.ratio_of_medians(
        [99.0, 101.0, 100.0, 98.0], [100.0, 99.0, 101.0, 100.0], higher_is_better=True, margin=0.02
    )
    assert ratio["low"] <= 1.0 <= ratio["high"] and ratio["verdict"] == "no detectable difference"
    # the interval spans 1x and lies within ±2 %: no practical difference
    close = evidence.ratio_of_medians(
        [99.5, 100.5, 100.0, 99.8], [100.0, 99.7, 100.3, 100.0], higher_is_better=True, margin=0.02
    )
    assert 0.98 <= close["low"] <= 1.0 <= close["high"] <= 1.02 and close["verdict"] == "no practical difference"
    wide = evidence.ratio_of_medians([80.0, 120.0, 100.0, 90.0], [100.0] * 4, higher_is_better=True, margin=0.02)
    assert wide["low"] < 0.98 and wide["verdict"] == "no detectable difference"


# (low, high, estimate) of a change in accuracy against no change 0 and a margin of 0.001 (a tenth of a point)
@pytest.mark.parametrize(
    ("low", "high", "estimate", "expected"),
    [
        (0.004, 0.020, 0.012, "better"),  # the interval above zero, the estimate beyond the margin
        (-0.020, -0.0002, -0.010, "worse"),  # an end only just below zero still decides
        (0.0001, 0.0009, 0.0005, "no practical difference"),  # detected, but within the margin
        (-0.0008, 0.0009, 0.0001, "no practical difference"),  # the whole interval within the margin
        (0.0002, 0.004, 0.0008, "no practical difference"),  # detected; the estimate within it, not the interval
        (-0.006, 0.009, 0.002, "no detectable difference"),  # spans zero and the margin
        (-0.0005, 0.004, 0.0018, "no detectable difference"),  # spans zero, the estimate beyond the margin
    ],
)
def test_a_verdict_needs_the_interval_beyond_no_change_and_the_estimate_beyond_the_margin(
    low, high, estimate, expected
):
    assert evidence.verdict(low, high, estimate, null=0.0, margin=0.001, higher_is_better=True) == expected
    flipped = {"better": "worse", "worse": "better"}.get(expected, expected)  # a loss: lower is better
    assert evidence.verdict(low, high, estimate, null=0.0, margin=0.001, higher_is_better=False) == flipped


def test_a_ratio_of_1_003_is_no_practical_difference_in_memory():
    """The memory ratio the fact-check found labelled "more memory": 0.3 % is within the 1 % margin."""
    margin = evidence.MARGINS["memory"]
    assert evidence.verdict(1.0013, 1.0045, 1.0026, null=1.0, margin=margin, higher_is_better=False) == (
        "no practical difference"
    )
    assert evidence.verdict(1.0124, 1.0157, 1.0139, null=1.0, margin=margin, higher_is_better=False) == "worse"
    assert evidence.verdict(
        0.85, 0.90, 0.87, null=1.0, margin=evidence.MARGINS["throughput"], higher_is_better=True
    ) == ("worse")


def test_the_p_value_is_scipys_paired_t_test_of_the_same_pairs():
    method, base = [0.93, 0.95, 0.91, 0.96, 0.94], [0.92, 0.93, 0.92, 0.94, 0.92]
    expected = scipy.stats.ttest_rel(method, base).pvalue
    assert evidence.paired_p_value(method, base) == pytest.approx(expected, rel=1e-12)
    # by hand: differences 0.01, 0.02, -0.01, 0.02, 0.02: mean 0.012, sd sqrt(0.00017), t with 4 df
    t = 0.012 / (math.sqrt(0.00017) / math.sqrt(5))
    assert evidence.paired_p_value(method, base) == pytest.approx(2 * scipy.stats.t.sf(t, 4), rel=1e-9)
    result = evidence.paired_change(method, base, higher_is_better=True, margin=0.001)
    assert result["p_value"] == pytest.approx(expected, rel=1e-12)
    # the interval excludes zero exactly when the p-value is below 0.05 (the same test)
    assert (result["low"] > 0) == (result["p_value"] < 0.05)
    # no spread: every difference zero is p = 1, a constant non-zero difference p = 0
    assert evidence.paired_p_value([1.0, 2.0], [1.0, 2.0]) == 1.0
    assert evidence.paired_p_value([1.5, 2.5], [1.0, 2.0]) == 0.0


def test_holms_correction_matches_a_worked_example():
    """Four p-values 0.01, 0.04, 0.03, 0.005: sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 are
    0.02, 0.03, 0.06, 0.04, and each is raised to the largest before it: 0.02, 0.03, 0.06, 0.06.
    At 5 %, the two smallest hold; Bonferroni (times 4) would keep only 0.005."""
    assert evidence.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert evidence.holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])  # capped at 1
    assert evidence.holm([0.02]) == [0.02]  # a family of one is not corrected
    assert evidence.holm([]) == []
    quality = {"verdict": "better", "p_holm": 0.03}
    assert evidence.holds_after_correction(quality) is True
    assert evidence.holds_after_correction({**quality, "p_holm": 0.06}) is False
    assert evidence.holds_after_correction({"verdict": "no practical difference", "p_holm": 0.001}) is None


def test_the_schema_holds_every_verdict_the_code_can_give():
    schema = json.loads((REPO_ROOT / "algorithms" / "effects.schema.json").read_text(encoding="utf-8"))
    assert tuple(schema["$defs"]["interval"]["properties"]["verdict"]["enum"]) == evidence.VERDICTS
    assert schema["properties"]["schema_version"]["const"] == measure.SCHEMA_VERSION


def test_a_rerun_resumes_and_only_remeasures_one_method_beside_its_baseline(tmp_path):
    out = tmp_path / "vision.json"
    _measure(out, FakeRunner())
    again = FakeRunner()
    _measure(out, again)
    assert again.jobs == []  # every job has a successful run in the file
    only = FakeRunner()
    document = _measure(
        out, only, only=["cutmix"], options=_options(command="python tools/measure_methods.py --only cutmix")
    )
    assert [j.method for j in only.jobs] == ["baseline", "cutmix"] * 3
    assert len(document["runs"]) == 3 * (1 + len(METHODS))  # replaced, not added
    rows = {e["method"]: e for e in document["summary"]}
    # the command shown for a row is the one that measured it
    assert rows["cutmix"]["commands"] == ["python tools/measure_methods.py --only cutmix"]
    assert rows["mixup"]["commands"] == ["python tools/measure_methods.py"]
    assert [r["method"] for r in document["runs"][-2:]] == ["baseline", "cutmix"]  # kept in the order they ran


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
    assert sorted((r["method"], r["seed"]) for r in merged["runs"]) == sorted(
        (r["method"], r["seed"]) for r in whole["runs"]
    )


def test_merge_refuses_pieces_with_other_settings(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    _measure(a, FakeRunner(), shard=(0, 2))
    _measure(b, FakeRunner(), shard=(1, 2), options=_options(image_size=16))
    with pytest.raises(measure.MeasureError, match=r"b\.json: settings: image_size is 16 there, 8 here"):
        measure.merge_documents([(str(a), load_effects(a)), (str(b), load_effects(b))])


# --------------------------------------------------------------------------------------------- command


def _cli(*args: str) -> SimpleNamespace:
    """The command line in this process (so it sees the synthetic methods): exit status and stderr."""
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = measure.main(list(args), doc=measure.__doc__)
    return SimpleNamespace(returncode=code, stderr=err.getvalue())


def test_the_command_line_runs_as_a_script():
    result = subprocess.run([sys.executable, str(TOOL), "--help"], capture_output=True, text=True, cwd=REPO_ROOT)
    assert result.returncode == 0 and "--workload" in result.stdout and "--test-fraction" in result.stdout


def test_bad_options_exit_1_with_one_line_each_and_write_nothing(tmp_path):
    out = tmp_path / "out.json"
    result = _cli(
        "--only",
        "cutmix,nope",
        "--shard",
        "4/4",
        "--seeds",
        "1",
        "--epochs",
        "0",
        "--batch-size",
        "-1",
        "--data",
        "imagenet",
        "--test-fraction",
        "1.5",
        "--out",
        str(out),
    )
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 7, result.stderr
    assert "Traceback" not in result.stderr
    for expected in (
        "--only: 'nope' is not a vision method",
        "--shard: '4/4'",
        "--seeds: 1",
        "--epochs: 0",
        "--batch-size: -1",
        "--data: 'imagenet'",
        "--test-fraction: 1.5",
    ):
        assert any(line.startswith(expected) for line in lines), (expected, lines)
    assert not out.exists()


def test_merge_options_and_refusal_to_overwrite(tmp_path):
    a, b, out = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "merged.json"
    result = _cli("--merge", str(a), "--only", "cutmix")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "--only: not with --merge, which runs nothing",
        "--merge: give --out, the merged file",
        f"{a}: no such file",
    ]
    _measure(a, FakeRunner(), shard=(0, 2))
    _measure(b, FakeRunner(), shard=(1, 2))
    assert _cli("--merge", str(a), str(b), "--out", str(out)).returncode == 0
    assert len(load_effects(out)["runs"]) == 3 * (1 + len(METHODS))
    result = _cli("--merge", str(a), str(b), "--out", str(out))
    assert (
        result.returncode == 1
        and result.stderr.strip() == f"{out}: exists — pass --force to overwrite it, or choose --out"
    )
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


# --------------------------------------------------------------------------------------------- workloads


def test_the_vision_workload_leaves_room_below_its_ceiling_on_a_fifth_of_the_digits():
    problems, options = measure.check_args(measure._parser(measure.__doc__).parse_args([]))
    assert problems == []
    assert (options.model, options.data, options.image_size, options.test_fraction) == ("resnet20", "digits", 8, 0.8)
    assert options.schedule == "onecycle" and options.seeds == tuple(range(10))
    assert options.settings()["throughput_unit"] == "images"


def test_the_nlp_workload_is_the_transformer_on_the_stdlib_corpus_by_tokens():
    problems, options = measure.check_args(measure._parser(measure.__doc__).parse_args(["--workload", "nlp"]))
    assert problems == []
    assert (options.model, options.data, options.seq_len, options.image_size) == (
        "transformer_tiny",
        "stdlib_text",
        128,
        None,
    )
    assert (options.optimizer, options.metric, options.eval_examples) == ("adamw", "loss", 256)
    assert options.test_fraction is None
    settings = options.settings()
    assert settings["throughput_unit"] == "tokens" and settings["chance_accuracy"] is None
    assert measure.domain_methods("nlp", RECORDS) == {"token_trick": {"p": 0.1}, "wide_trick": {"width": 2}}
    problems, _ = measure.check_args(
        measure._parser(measure.__doc__).parse_args(["--workload", "nlp", "--image-size", "16", "--only", "cutmix"])
    )
    assert problems == [
        "--image-size: not for the nlp workload, whose data are text: give --seq-len",
        "--only: 'cutmix' is not a nlp method — use one of token_trick, wide_trick",
    ]


def test_an_nlp_sweep_measures_every_nlp_method_by_validation_loss(tmp_path):
    runner = FakeRunner()
    document = _measure(tmp_path / "nlp.json", runner, options=_nlp_options())
    assert {j.method for j in runner.jobs} == {"baseline", "token_trick", "wide_trick"}
    assert document["settings"]["metric"] == "loss" and document["settings"]["seq_len"] == 16
    trick = {e["method"]: e for e in document["summary"]}["token_trick"]
    assert trick["quality"]["metric"] == "loss"
    # the loss fell by 0.10 and 0.11 in the two pairs: a lower loss is better
    assert trick["quality"]["change"] == pytest.approx(-0.105) and trick["quality"]["high"] < 0
    assert trick["quality"]["verdict"] == "better"


def test_a_workload_of_another_domain_measures_only_the_methods_it_names(tmp_path):
    """The torchvision and gpt2 workloads take their domain's methods, narrowed to a list: the
    sweep plans, and --only accepts, those and no other."""
    runner = FakeRunner()
    options = _options(workload="tv", model="resnet18", domain="vision", methods=("cutmix", "mixup", "gn_trick"))
    document = _measure(tmp_path / "tv.json", runner, options=options, records=GN_RECORDS | RECORDS)
    assert {(j.method, j.model) for j in runner.jobs} == {
        ("baseline", None),
        ("baseline", "resnet20_gn"),
        ("cutmix", None),
        ("mixup", None),
        ("gn_trick", "resnet20_gn"),
    }
    assert document["settings"]["workload"] == "tv"
    problems, _ = measure.check_args(
        measure._parser(measure.__doc__).parse_args(["--workload", "torchvision", "--only", "cutout"])
    )  # a vision method, but not one of those the torchvision workload names
    assert problems == ["--only: 'cutout' is not a torchvision method — use one of cutmix, label_smoothing, mixup"]


def test_the_real_architecture_workloads_name_methods_of_their_domain(library_methods):
    """Every method the torchvision and gpt2 workloads name is a method of their domain in the
    library's metadata: a renamed method cannot silently drop out of their sweeps."""
    for name in ("torchvision", "gpt2"):
        workload = measure.WORKLOADS[name]
        chosen = workload.options(name, (0, 1)).method_hparams(library_methods)
        assert sorted(chosen) == sorted(workload.methods), name
    assert measure.WORKLOADS["torchvision"].model == "torchvision_resnet18"
    assert measure.WORKLOADS["gpt2"].model == "hf_gpt2_tiny"


def test_a_method_with_its_own_model_and_precision_is_compared_with_a_baseline_of_both(tmp_path):
    workloads = measure.method_workloads("vision", GN_RECORDS)
    assert workloads == {"gn_trick": ("resnet20_gn", "amp_bf16")}
    jobs = measure.plan_jobs(measure.domain_methods("vision", GN_RECORDS), (0, 1), workloads)
    assert [(j.method, j.model, j.precision) for j in jobs[:4]] == [
        ("baseline", None, None),
        ("baseline", "resnet20_gn", "amp_bf16"),
        ("cutmix", None, None),
        ("gn_trick", "resnet20_gn", "amp_bf16"),
    ]
    out = tmp_path / "v.json"
    document = _measure(out, FakeRunner(), records=GN_RECORDS, options=_options(seeds=(0, 1)))
    assert load_effects(out) == document
    summary = {(e["method"], e["model"], e["precision"]): e for e in document["summary"]}
    assert set(summary) == {
        ("baseline", None, None),
        ("baseline", "resnet20_gn", "amp_bf16"),
        ("cutmix", None, None),
        ("gn_trick", "resnet20_gn", "amp_bf16"),
    }
    # against its own model's baseline (half as fast as resnet20's in the fake): 40.5/50.5, not 40.5/100.5
    assert summary[("gn_trick", "resnet20_gn", "amp_bf16")]["throughput"]["ratio"] == pytest.approx(40.5 / 50.5)
    again = FakeRunner()
    _measure(out, again, records=GN_RECORDS, options=_options(seeds=(0, 1)))
    assert again.jobs == []  # the runs of the other model are found in the file too


def test_a_method_naming_an_unknown_model_is_one_line(monkeypatch):
    import algorithms.metadata

    monkeypatch.setattr(
        algorithms.metadata, "load_all_metadata", lambda root=None: {"gn_trick": _record(["vision"], model="resnet21")}
    )
    problems, _ = measure.check_args(measure._parser(measure.__doc__).parse_args([]))
    assert len(problems) == 1 and problems[0].startswith(
        "algorithms/gn_trick/metadata.json: workload: model 'resnet21' is not a reference model — use one of "
    )


# --------------------------------------------------------------------------------------------- real runs


@pytest.fixture
def library_methods(monkeypatch):
    """The library's own metadata, which the autouse fixture hides from the other tests."""
    import algorithms.metadata

    monkeypatch.undo()
    return algorithms.metadata.load_all_metadata()


@pytest.mark.slow
def test_the_worker_trains_with_the_method_it_is_given_and_reports_its_activity(library_methods):
    job = measure.Job("cutout", 0, {"num_holes": 1, "length": 0.5, "uniform_sampling": False})
    lines = []
    run = measure.run_job(job, _options(), compare.environment(), lines.append)
    assert run["status"] == "ok", run["reason"]
    assert run["hparams"] == job.hparams and run["samples"] == 16 and run["throughput"] == 16 / run["wall_s"]
    assert run["acted"] is True and sum(run["activity"].values()) > 0
    assert run["job_s"] > run["wall_s"] + run["eval_s"]  # the process's start and the data lie outside both
    assert any("+ cutout epoch 1/1" in line for line in lines)
    bad = measure.run_job(measure.Job("cutout", 0, {"length": 7.0}), _options(), compare.environment(), lines.append)
    assert bad["status"] == "failed" and "length" in bad["reason"]


@pytest.mark.slow
def test_layer_freezing_in_a_one_epoch_run_did_not_act(library_methods, tmp_path):
    """It freezes at an epoch's end once training is past freeze_start: one epoch leaves no epoch
    to train frozen, so the run is recorded as not acting, never as an effect."""
    hparams = measure.domain_methods("vision", library_methods)["layer_freezing"]
    options = _options(seeds=(0, 1), epochs=1, max_batches=2)
    runs = [
        measure.run_job(
            measure.Job(m, s, hparams if m != measure.BASELINE else {}),
            options,
            compare.environment(),
            lambda line: None,
        )
        for s in (0, 1)
        for m in (measure.BASELINE, "layer_freezing")
    ]
    assert all(r["status"] == "ok" for r in runs), [r["reason"] for r in runs]
    frozen = [r for r in runs if r["method"] == "layer_freezing"]
    assert all(r["acted"] is False and r["activity"] == {"layers_frozen": 0} for r in frozen)
    row = {e["method"]: e for e in measure.summarize(runs, options.settings())}["layer_freezing"]
    assert row["status"] == "did_not_act" and row["quality"] is None
    assert "layers frozen 0 per run" in row["reason"]


@pytest.mark.slow
def test_the_text_workload_scores_emas_averaged_weights(library_methods):
    """EMA leaves training as it is (the same seed trains the same weights), so a validation loss
    that differs from the baseline's can only come from the averaged weights put in place for
    Trainer.eval; before, the harness scored the training weights and EMA matched bit for bit."""
    options = _nlp_options(max_batches=4)
    base = measure.run_job(measure.Job(measure.BASELINE, 0), options, compare.environment(), lambda line: None)
    ema = measure.run_job(
        measure.Job("ema", 0, {"half_life": "2ba", "update_interval": "1ba"}),
        options,
        compare.environment(),
        lambda line: None,
    )
    assert base["status"] == ema["status"] == "ok", (base["reason"], ema["reason"])
    assert ema["acted"] is True
    assert ema["loss"] != base["loss"]
    assert abs(ema["loss"] - base["loss"]) < 1.0


@pytest.mark.slow
def test_alibis_throughput_counts_the_tokens_it_trained(library_methods):
    """ALiBi trains on shorter windows cut from each batch: more examples of the same tokens. The
    throughput counts tokens, so cutting windows does not multiply it."""
    hparams = measure.domain_methods("nlp", library_methods)["alibi"]
    options = _nlp_options(max_batches=2)
    run = measure.run_job(measure.Job("alibi", 0, hparams), options, compare.environment(), lambda line: None)
    assert run["status"] == "ok", run["reason"]
    assert run["tokens"] == 2 * 4 * 16  # two batches of four 16-token windows, whatever ALiBi cut them into
    assert run["throughput"] == pytest.approx(run["tokens"] / run["wall_s"])
    base = measure.run_job(measure.Job(measure.BASELINE, 0), options, compare.environment(), lambda line: None)
    assert base["tokens"] == run["tokens"] and base["samples"] == 8


# --------------------------------------------------------------------------------------------- the check


def test_the_check_names_each_way_a_file_would_mislead_a_reader(tmp_path):
    from methods_tools import evidence

    document = _measure(tmp_path / "v.json", FakeRunner(idle={"cutout"}))
    assert evidence.document_problems(document, "v.json") == []
    broken = json.loads(json.dumps(document))
    rows = {e["method"]: (i, e) for i, e in enumerate(broken["summary"])}
    i, cutmix = rows["cutmix"]
    cutmix["quality"]["verdict"] = "no detectable difference"  # its interval lies below zero
    cutmix["commands"] = ["python tools/measure_methods.py --only something-else"]
    j, cutout = rows["cutout"]
    cutout.update(status="measured", reason=None, quality=cutmix["quality"], throughput=cutmix["throughput"])
    broken["settings"]["throughput_unit"] = "tokens"
    broken["runs"][0]["throughput"] *= 4  # samples counted four times over
    problems = evidence.document_problems(broken, "v.json")
    expected = [
        "v.json: /settings/throughput_unit: 'tokens' for a image workload",
        "v.json: /runs/0/throughput: not the images trained per second",
        f"v.json: /summary/{i}/commands: ['python tools/measure_methods.py --only something-else'] — not the commands",
        f"v.json: /summary/{i}/quality/verdict: 'no detectable difference', but its interval",
        f"v.json: /summary/{j}: cutout is shown as an effect, but none of its runs recorded any activity",
    ]
    for start in expected:
        assert sum(p.startswith(start) for p in problems) == 1, (start, problems)
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(broken))
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "tools" / "check_effects.py"), str(path)],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
    )
    assert result.returncode == 1 and len(result.stderr.strip().splitlines()) == len(problems)


def test_the_check_refuses_a_margin_a_p_value_or_a_holm_correction_that_its_pairs_do_not_give(tmp_path):
    from methods_tools import evidence

    document = _measure(tmp_path / "v.json", FakeRunner())
    broken = json.loads(json.dumps(document))
    rows = {e["method"]: (i, e) for i, e in enumerate(broken["summary"])}
    i, cutmix = rows["cutmix"]
    cutmix["quality"]["margin"] = 0.1  # ten points, not the stated margin: with it the verdict no longer follows
    j, cutout = rows["cutout"]
    cutout["quality"]["p_value"] = 0.5  # not the t-test of its interval (nor the input of its Holm p-value)
    k, smoothing = rows["label_smoothing"]
    smoothing["quality"]["holm_family"] = 2  # corrected over fewer methods than the file has
    problems = evidence.document_problems(broken, "v.json")
    expected = [
        f"v.json: /summary/{i}/quality/margin: 0.1, not the margin of practical equivalence stated for it (0.001) — "
        "recompute the summary from its runs: python tools/measure_methods.py --resummarize v.json",
        f"v.json: /summary/{i}/quality/verdict: 'worse', but its interval [-0.07484, -0.02516], estimate -0.05 and "
        "margin 0.1 say 'no practical difference'",
        f"v.json: /summary/{j}/quality/p_value: 0.5, but the paired t-test of its interval gives 0.0130",
        f"v.json: /summary/{j}/quality: Holm-adjusted p-value",
        f"v.json: /summary/{k}/quality: Holm-adjusted p-value 0.0653623 over 2 methods, but Holm's correction "
        "over the file's 5 gives",
    ]
    for start in expected:
        assert sum(p.startswith(start) for p in problems) == 1, (start, problems)
    # every row's Holm p-value is recomputed over the whole family: cutout's false p-value moves the others
    assert len(problems) >= len(expected)


def _version_3(document: dict) -> dict:
    """``document`` as schema version 3 wrote it: the same runs, a summary without margins, p-values
    or Holm's correction, and its verdicts as the interval alone gave them."""
    old = json.loads(json.dumps(document))
    old["schema_version"] = 3
    for entry in old["summary"]:
        for field in ("quality", "throughput", "memory"):
            figure = entry[field]
            if figure is None:
                continue
            for name in ("margin", "p_value", "p_holm", "holm_family"):
                figure.pop(name, None)
            null = 0.0 if field == "quality" else 1.0
            if not (figure["low"] > null or figure["high"] < null):
                figure["verdict"] = "no detectable difference"
    return old


def test_resummarize_recomputes_a_files_summary_from_its_runs_in_place_and_twice_changes_nothing(tmp_path, capsys):
    document = _measure(tmp_path / "v.json", FakeRunner(idle={"cutout"}))
    path = tmp_path / "results" / "old.json"
    path.parent.mkdir()
    path.write_text(json.dumps(_version_3(document), indent=2) + "\n")
    with pytest.raises(Exception, match="schema_version: 3 is no longer read .* --resummarize"):
        load_effects(path)
    assert measure.main(["--resummarize", str(path)]) == 0
    first = path.read_text()
    assert json.loads(first) == document  # the summary the sweep wrote, from the same runs
    assert load_effects(path)["runs"] == document["runs"]
    out = capsys.readouterr().out
    assert f"{path}: summary recomputed from {len(document['runs'])} runs, schema version 4;" in out
    assert "cutmix: memory no detectable difference -> no practical difference" in out
    assert [p.name for p in path.parent.iterdir()] == ["old.json"]  # written through a temporary file, renamed
    mtime = path.stat().st_mtime_ns
    assert measure.main(["--resummarize", str(path)]) == 0
    assert path.read_text() == first and path.stat().st_mtime_ns == mtime
    assert "summary up to date" in capsys.readouterr().out


def test_resummarize_refuses_what_it_cannot_read_and_writes_nothing(tmp_path, capsys):
    document = _measure(tmp_path / "v.json", FakeRunner())
    good = tmp_path / "good.json"
    good.write_text(json.dumps(_version_3(document)))
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema_version": 3,\n "runs": [}')
    old = tmp_path / "old.json"
    old.write_text(json.dumps({**document, "schema_version": 2}))
    broken = tmp_path / "broken.json"
    runs = json.loads(json.dumps(document))
    del runs["runs"][0]["seed"]
    broken.write_text(json.dumps(runs))
    before = good.read_text()
    assert measure.main(["--resummarize", str(good), str(bad), str(old), str(broken)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"{bad}:2: not valid JSON")
    assert err[1].startswith(f"{old}: /schema_version: 2 is no longer read") and "measure again" in err[1]
    assert err[2].startswith(f"{broken}: /runs/0: 'seed' is a required property")
    assert err[-1] == "nothing written" and good.read_text() == before
    assert measure.main(["--resummarize", str(good), "--only", "cutmix", "--epochs", "3", "--force"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "--only: not with --resummarize, which runs nothing",
        "--epochs: not with --resummarize, which runs nothing",
        "--force: not with --resummarize, which rewrites only the summary of the files it names",
    ]


@pytest.mark.slow
def test_the_committed_effects_files_summaries_are_what_their_runs_give():
    """Every committed effects file is up to date: recomputing its summary from its runs gives its
    text (its bootstrap intervals too, which tools/check_effects.py does not recompute)."""
    paths = discover_effects()
    if not paths:
        pytest.skip("no effects file is committed")
    for path in paths:
        text, _, changed = measure.resummarized(path)
        assert changed == [] and text == path.read_text(encoding="utf-8"), path


@pytest.mark.slow
def test_the_worker_trains_the_language_model_on_dict_batches_and_reports_its_validation_loss():
    options = compare.CompareOptions(
        model="transformer_tiny",
        data="stdlib_text",
        epochs=1,
        batch_size=4,
        configs=(compare.Config("fp32", "single"),),
        nproc=1,
        max_batches=2,
        seq_len=16,
        eval_examples=8,
        optimizer="adamw",
    )
    command = compare.worker_command(options.configs[0], options, Path("/tmp/x"), 1)
    assert command[command.index("--seq-len") + 1] == "16" and command[command.index("--optimizer") + 1] == "adamw"
    run = measure.run_job(measure.Job(measure.BASELINE, 0), _nlp_options(), compare.environment(), lambda line: None)
    assert run["status"] == "ok", run["reason"]
    assert run["samples"] == 8 and run["tokens"] == 8 * 16 and run["accuracy"] is None and run["model"] is None
    assert 4.0 < run["loss"] < 6.0  # two steps from ln(256) = 5.55 nats per byte
    assert run["throughput"] == pytest.approx(8 * 16 / run["wall_s"])
    assert run["activity"] is None and run["acted"] is None  # a baseline runs no method


def test_an_effects_file_of_an_older_version_is_one_line_saying_to_measure_again(tmp_path):
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"schema_version": 2, "runs": []}))
    with pytest.raises(Exception) as caught:
        load_effects(path)
    assert str(caught.value) == (
        f"{path}: /schema_version: 2 is no longer read (no intervals, verdicts or record "
        "of what the methods did) — measure again with tools/measure_methods.py"
    )
