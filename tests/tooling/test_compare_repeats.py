"""methods_tools.compare: repeated runs in interleaved rounds, steady state apart from warm-up,
medians and ranges, and super-linear speed-ups re-measured once and flagged (no training: the
runs are made up, so each figure is checked against a hand computation)."""

from __future__ import annotations

import pytest
from methods_tools import compare
from methods_tools.results import results_problems

FP32, DDP = compare.Config("fp32", "single"), compare.Config("fp32", "ddp")


def _options(configs: str, repeats: int = 3, **kw) -> compare.CompareOptions:
    base = dict(
        model="resnet20",
        data="digits",
        image_size=8,
        epochs=2,
        batch_size=32,
        max_batches=20,
        nproc=2,
        configs=compare.parse_configs(configs),
        repeats=repeats,
    )
    return compare.CompareOptions(**{**base, **kw})


def _run(config: compare.Config, epoch_s, samples=640, round_=1, world_size=1, **extra):
    run = compare._empty_run(config, world_size, "ok", None)
    run.update(
        {
            "round": round_,
            "wall_s": sum(epoch_s),
            "epoch_s": list(epoch_s),
            "samples": samples,
            "throughput": samples / sum(epoch_s),
            "peak_memory_bytes": 400 * 2**20,
            "memory_kind": "cpu_peak_rss",
            "peak_memory_per_device_bytes": [400 * 2**20] * world_size,
            "model_memory_bytes": 2**20,
            "accuracy": 0.5,
            "loss": 1.0,
            **extra,
        }
    )
    return run


class FakeRunner:
    """Stands in for run_config: records the order of the calls and answers from ``plan``, a
    function of (config label, how many times it has run before)."""

    def __init__(self, plan):
        self.plan, self.calls = plan, []

    def __call__(self, config, options, env, progress=lambda line: None):
        count = sum(1 for label in self.calls if label == config.label)
        self.calls.append(config.label)
        return self.plan(config, count)


@pytest.fixture
def fake(monkeypatch):
    def install(plan):
        runner = FakeRunner(plan)
        monkeypatch.setattr(compare, "run_config", runner)
        return runner

    return install


# ------------------------------------------------------------------------------------------- rounds


def test_rounds_interleave_every_configuration_once_per_round(fake):
    runner = fake(lambda config, n: _run(config, [2.0, 1.0], world_size=2 if config.parallel == "ddp" else 1))
    document = compare.run_comparison(_options("fp32:single,amp_bf16:single,fp32:ddp", repeats=3))
    order = ["fp32:single", "amp_bf16:single", "fp32:ddp"]
    assert runner.calls == order * 3  # round 1, round 2, round 3: never three of one in a row
    assert [(r["round"], r["config"]) for r in document["runs"]] == [(k, c) for k in (1, 2, 3) for c in order]
    assert document["settings"]["repeats"] == 3 and document["schema_version"] == compare.SCHEMA_VERSION == 2
    assert [s["config"] for s in document["summary"]] == order
    assert all(s["runs"] == s["ok_runs"] == 3 for s in document["summary"])
    assert results_problems(document) == []


def test_a_skipped_configuration_is_recorded_once_and_a_failed_one_is_tried_every_round(fake):
    def plan(config, n):
        if config.parallel == "deepspeed":
            return compare._empty_run(config, 2, "skipped", "deepspeed is not installed")
        if config.parallel == "fsdp" and n == 1:
            return compare._empty_run(config, 2, "failed", "RuntimeError: boom")
        return _run(config, [2.0, 1.0], world_size=1 if config.parallel == "single" else 2)

    runner = fake(plan)
    document = compare.run_comparison(_options("fp32:single,fp32:fsdp,fp32:deepspeed", repeats=3))
    assert runner.calls == [
        "fp32:single",
        "fp32:fsdp",
        "fp32:deepspeed:2",
        "fp32:single",
        "fp32:fsdp",
        "fp32:single",
        "fp32:fsdp",
    ]
    summary = {s["config"]: s for s in document["summary"]}
    assert summary["fp32:deepspeed:2"]["status"] == "skipped" and summary["fp32:deepspeed:2"]["runs"] == 1
    fsdp = summary["fp32:fsdp"]
    assert (fsdp["status"], fsdp["runs"], fsdp["ok_runs"], fsdp["reason"]) == ("ok", 3, 2, "RuntimeError: boom")
    assert results_problems(document) == []


def test_repeats_below_one_is_a_bad_option():
    problems = compare.check_options("resnet20", "digits", None, 2, 32, None, 2, repeats=0)
    assert problems == ["--repeats: 0 — must be at least 1"]


# ------------------------------------------------------------------------------------------- figures


def test_steady_state_is_the_epochs_after_the_first():
    # 3 epochs of 640 samples (1,920 in all): epochs 2 and 3 took 1.0 and 3.0 s.
    seconds, throughput = compare.steady_state(_run(FP32, [16.0, 1.0, 3.0], samples=1920))
    assert seconds == pytest.approx(2.0)  # (1.0 + 3.0) / 2
    assert throughput == pytest.approx(320.0)  # 1,280 samples / 4.0 s
    assert compare.steady_state(_run(FP32, [5.0], samples=640)) == (None, None)  # one epoch: no steady state


def test_spread_is_median_and_range():
    assert compare.spread([3.0, None, 1.0, 2.0]) == {"median": 2.0, "min": 1.0, "max": 3.0}
    assert compare.spread([4.0, 1.0]) == {"median": 2.5, "min": 1.0, "max": 4.0}
    assert compare.spread([None]) is None


def test_summary_medians_ranges_warm_up_and_steady_state_by_hand():
    runs = [
        _run(FP32, [16.0, 1.0], round_=1, accuracy=0.70),  # a 16 s first epoch: warm-up
        _run(FP32, [4.0, 2.0], round_=2, accuracy=0.80),
        _run(FP32, [5.0, 1.6], round_=3, accuracy=0.75),
    ]
    (entry,) = compare.summarize(runs, [FP32])
    assert entry["steady_state"] is True
    assert entry["wall_s"] == {"median": 6.6, "min": 6.0, "max": 17.0}
    assert entry["first_epoch_s"] == {"median": 5.0, "min": 4.0, "max": 16.0}
    assert entry["steady_epoch_s"] == {"median": 1.6, "min": 1.0, "max": 2.0}
    # 320 samples per epoch over the second epoch: 320/1.0, 320/2.0, 320/1.6.
    assert entry["throughput"] == pytest.approx({"median": 200.0, "min": 160.0, "max": 320.0})
    assert entry["accuracy"] == {"median": 0.75, "min": 0.70, "max": 0.80}
    assert entry["speedup"] == {"over": "fp32:single", "median": 1.0, "min": 1.0, "max": 1.0, "rounds": 3}


def test_with_one_epoch_steady_state_is_not_separated_and_throughput_is_the_whole_runs():
    runs = [_run(FP32, [4.0], round_=1), _run(FP32, [2.0], round_=2)]
    (entry,) = compare.summarize(runs, [FP32])
    assert entry["steady_state"] is False and entry["steady_epoch_s"] is None
    assert entry["throughput"] == {"median": 240.0, "min": 160.0, "max": 320.0}  # 640 / 4, 640 / 2 s


def test_speedup_is_paired_by_round():
    runs = [
        _run(FP32, [9.0, 2.0], round_=1),
        _run(FP32, [9.0, 1.0], round_=2),
        # 2 processes: 1,280 samples, 640 per epoch.
        _run(DDP, [9.0, 2.0], samples=1280, round_=1, world_size=2),
        _run(DDP, [9.0, 1.0], samples=1280, round_=2, world_size=2),
    ]
    summary = {s["config"]: s for s in compare.summarize(runs, [FP32, DDP])}
    # Round 1: 320/s against 160/s; round 2: 640/s against 320/s.
    assert summary["fp32:ddp"]["speedup"] == {"over": "fp32:single", "median": 2.0, "min": 2.0, "max": 2.0, "rounds": 2}
    assert summary["fp32:ddp"]["super_linear"] is None


def test_a_multi_process_speedup_is_over_the_single_process_run_of_its_precision():
    amp, amp_ddp = compare.Config("amp_bf16", "single"), compare.Config("amp_bf16", "ddp")
    runs = [_run(FP32, [9.0, 4.0]), _run(amp, [9.0, 2.0]), _run(amp_ddp, [9.0, 2.0], samples=1280, world_size=2)]
    summary = {s["config"]: s for s in compare.summarize(runs, [FP32, amp, amp_ddp])}
    assert summary["amp_bf16:single"]["speedup"]["over"] == "fp32:single"
    assert summary["amp_bf16:single"]["speedup"]["median"] == 2.0
    assert summary["amp_bf16:ddp"]["speedup"]["over"] == "amp_bf16:single"
    assert summary["amp_bf16:ddp"]["speedup"]["median"] == 2.0


# ------------------------------------------------------------------------------------------- super-linear


def _ddp_plan(ddp_second_epochs):
    """fp32:single's second epoch always takes 2.0 s (160 samples/s); ddp's n-th run takes
    ``ddp_second_epochs[n]`` for twice the samples."""

    def plan(config, n):
        if config.parallel == "single":
            return _run(config, [16.0, 2.0])
        return _run(config, [1.0, ddp_second_epochs[n]], samples=1280, world_size=2)

    return plan


def test_a_super_linear_speedup_is_remeasured_once_and_flagged_when_it_stays(fake):
    # ddp: 0.4 s for 640 samples, 1,600/s, 10x one process's 160/s on 2 processes, every time.
    runner = fake(_ddp_plan([0.4, 0.4, 0.4, 0.4]))
    document = compare.run_comparison(_options("fp32:single,fp32:ddp", repeats=3))
    # One extra round, once: the super-linear configuration and the run it is compared with.
    assert runner.calls == ["fp32:single", "fp32:ddp"] * 4
    assert [r["round"] for r in document["runs"]] == [1, 1, 2, 2, 3, 3, 4, 4]
    ddp = {s["config"]: s for s in document["summary"]}["fp32:ddp"]
    assert ddp["runs"] == 4 and ddp["speedup"]["median"] == pytest.approx(10.0)
    check = ddp["super_linear"]
    assert check["flagged"] is True and check["processes"] == 2 and check["remeasure_round"] == 4
    assert check["speedup_before"] == pytest.approx(10.0) and check["speedup_remeasured"] == pytest.approx(10.0)
    assert "10.00x the throughput of fp32:single on 2 processes" in check["reason"]
    assert "still more than 2x" in check["reason"]
    assert results_problems(document) == []


def test_only_a_median_above_the_process_count_is_remeasured_and_the_flag_uses_every_round(fake):
    runner = fake(_ddp_plan([4.0, 0.4, 4.0]))  # 1x, 10x, 1x: median 1x, nothing to re-measure
    document = compare.run_comparison(_options("fp32:single,fp32:ddp", repeats=3))
    assert len(runner.calls) == 6
    assert {s["config"]: s for s in document["summary"]}["fp32:ddp"]["super_linear"] is None

    runner = fake(_ddp_plan([0.4, 0.4, 4.0, 4.0]))  # 10x, 10x, 1x: median 10x; re-measured: 1x
    document = compare.run_comparison(_options("fp32:single,fp32:ddp", repeats=3))
    assert len(runner.calls) == 8
    ddp = {s["config"]: s for s in document["summary"]}["fp32:ddp"]
    # Over the four rounds: 10, 10, 1, 1: median 5.5x, still above 2.
    assert ddp["speedup"]["median"] == pytest.approx(5.5) and ddp["super_linear"]["flagged"] is True
    assert ddp["super_linear"]["speedup_remeasured"] == pytest.approx(1.0)


def test_a_remeasurement_that_brings_the_median_down_clears_the_flag(fake):
    # Rounds 1-2: 10x and 1x (median 5.5x, above 2); the re-measurement: 1x. Over three rounds: 1x.
    runner = fake(_ddp_plan([0.4, 4.0, 4.0]))
    document = compare.run_comparison(_options("fp32:single,fp32:ddp", repeats=2))
    assert runner.calls == ["fp32:single", "fp32:ddp"] * 3
    ddp = {s["config"]: s for s in document["summary"]}["fp32:ddp"]
    assert ddp["speedup"]["median"] == pytest.approx(1.0)
    check = ddp["super_linear"]
    assert check["flagged"] is False and check["speedup_before"] == pytest.approx(5.5)
    assert "no more than 2x" in check["reason"]
    assert results_problems(document) == []


def test_a_single_process_configuration_is_never_flagged(fake):
    # bf16 4x faster than fp32 in one process: a speed-up, but no process count to exceed.
    def plan(config, n):
        return _run(config, [9.0, 2.0 if config.precision == "fp32" else 0.5])

    runner = fake(plan)
    document = compare.run_comparison(_options("fp32:single,bf16:single", repeats=3))
    assert len(runner.calls) == 6
    bf16 = document["summary"][1]
    assert bf16["speedup"]["median"] == pytest.approx(4.0) and bf16["super_linear"] is None
