"""tools/measure_methods.py: its options, resuming, --only, --shard and --merge (with a fake runner
that trains nothing), both workloads (vision and nlp) and methods measured on their own model, the
effects schema and its version 1 files, the effects pages of both, and tiny real runs of the
harness. The methods are synthetic records, so these tests do not depend on the library's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from methods_tools import compare, effects_pages, measure
from methods_tools.results import (
    V1_SETTINGS,
    discover_effects,
    discover_results,
    effects_problems,
    load_effects,
    upgrade_effects,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
TOOL = REPO_ROOT / "tools" / "measure_methods.py"


def _record(domains, model=None, kind="method", **suggested):
    raw = {"workload": {"model": model}} if model else {}
    return SimpleNamespace(kind=kind, domains=tuple(domains), raw=raw,
                           hyperparameters={k: SimpleNamespace(suggested=v) for k, v in suggested.items()})


RECORDS = {
    "cutmix": _record(["vision"], alpha=1.0),
    "cutout": _record(["vision"], num_holes=1, length=0.5, uniform_sampling=False),
    "label_smoothing": _record(["vision"], smoothing=0.1),
    "mixup": _record(["vision"], alpha=0.2),
    "bf16": _record(["vision", "nlp"], kind="best_practice"),
    "token_trick": _record(["nlp"], p=0.1),
    "wide_trick": _record(["nlp", "vision"], width=2),
}
GN_RECORDS = {"cutmix": RECORDS["cutmix"], "gn_trick": _record(["vision"], model="resnet20_gn", eps=1e-5)}
METHODS = measure.domain_methods("vision", RECORDS)


@pytest.fixture(autouse=True)
def synthetic_methods(monkeypatch):
    """The command line sees the synthetic methods, not the library's."""
    import algorithms.metadata

    monkeypatch.setattr(algorithms.metadata, "load_all_metadata", lambda root=None: RECORDS)

ENV = {
    "hardware": "Test CPU, 2 cores (CPU only)", "device_type": "cpu", "device_name": "Test CPU", "device_count": 1,
    "cpu_model": "Test CPU", "cpu_count": 2, "torch": "2.0.0", "cuda": None, "python": "3.11.0",
    "platform": "Linux", "date": "2026-01-02T03:04:05Z", "load_average": [1.0, 1.0, 1.0],
}


def _options(**kw) -> measure.MeasureOptions:
    base = {"workload": "vision", "model": "resnet20", "data": "digits", "image_size": 8, "epochs": 1,
            "batch_size": 16, "seeds": (0, 1, 2), "max_batches": 1, "command": "python tools/measure_methods.py"}
    return measure.MeasureOptions(**{**base, **kw})


def _nlp_options(**kw) -> measure.MeasureOptions:
    base = {"workload": "nlp", "model": "transformer_tiny", "data": "stdlib_text", "image_size": None,
            "seq_len": 16, "epochs": 1, "batch_size": 4, "seeds": (0, 1), "max_batches": 2, "lr": 3e-3,
            "optimizer": "adamw", "eval_examples": 8, "metric": "loss", "command": "python tools/measure_methods.py"}
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
        speed = (100.0 if job.method == measure.BASELINE else 80.0) / (2 if job.model else 1)
        accuracy = 0.9 if job.method == measure.BASELINE else 0.85
        text = options.metric == "loss"
        return {"method": job.method, "model": job.model, "seed": job.seed, "hparams": dict(job.hparams),
                "status": "ok", "reason": None, "date": env["date"], "load_average": [1.0, 1.0, 1.0], "wall_s": 10.0,
                "samples": 1000, "throughput": speed + job.seed, "peak_memory_bytes": 1000 + job.seed,
                "memory_kind": "cpu_peak_rss", "accuracy": None if text else accuracy + job.seed / 100,
                "loss": (2.0 if job.method == measure.BASELINE else 1.9) + job.seed / 10 if text else 0.5}


def _measure(out: Path, runner: FakeRunner, **kw) -> dict:
    options = kw.pop("options", _options())
    return measure.run_measurement(options, out, runner=runner, env=ENV, records=kw.pop("records", RECORDS), **kw)


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
    assert result.returncode == 0 and "--workload" in result.stdout and "--seq-len" in result.stdout


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


# --------------------------------------------------------------------------------------------- nlp

def test_the_nlp_workload_is_the_transformer_on_the_stdlib_corpus_by_tokens():
    problems, options = measure.check_args(measure._parser(measure.__doc__).parse_args(["--workload", "nlp"]))
    assert problems == []
    assert (options.model, options.data, options.seq_len, options.image_size) == ("transformer_tiny", "stdlib_text",
                                                                                  128, None)
    assert (options.optimizer, options.metric, options.eval_examples, options.max_batches) == ("adamw", "loss", 256,
                                                                                              150)
    settings = options.settings()
    assert settings["throughput_unit"] == "tokens" and settings["chance_accuracy"] is None
    assert measure.domain_methods("nlp", RECORDS) == {"token_trick": {"p": 0.1}, "wide_trick": {"width": 2}}
    problems, _ = measure.check_args(measure._parser(measure.__doc__).parse_args(
        ["--workload", "nlp", "--image-size", "16", "--only", "cutmix"]))
    assert problems == ["--image-size: not for the nlp workload, whose data are text: give --seq-len",
                        "--only: 'cutmix' is not a nlp method — use one of token_trick, wide_trick"]
    problems, _ = measure.check_args(measure._parser(measure.__doc__).parse_args(["--seq-len", "64"]))
    assert problems == ["--seq-len: not for the vision workload, whose data are images: give --image-size"]


def test_an_nlp_sweep_measures_every_nlp_method_by_validation_loss(tmp_path):
    runner = FakeRunner()
    document = _measure(tmp_path / "nlp.json", runner, options=_nlp_options())
    assert {j.method for j in runner.jobs} == {"baseline", "token_trick", "wide_trick"}
    assert document["settings"]["metric"] == "loss" and document["settings"]["seq_len"] == 16
    trick = {e["method"]: e for e in document["summary"]}["token_trick"]
    assert trick["loss_change"] == pytest.approx({"mean": -0.1, "std": 0.0}, abs=1e-12)
    assert trick["accuracy"] is None and trick["accuracy_change"] is None


def test_a_method_with_its_own_model_is_compared_with_a_baseline_of_that_model(tmp_path):
    models = measure.method_models("vision", GN_RECORDS)
    assert models == {"gn_trick": "resnet20_gn"}
    jobs = measure.plan_jobs(measure.domain_methods("vision", GN_RECORDS), (0, 1), models)
    assert [(j.method, j.model) for j in jobs[:4]] == [("baseline", None), ("baseline", "resnet20_gn"),
                                                       ("cutmix", None), ("gn_trick", "resnet20_gn")]
    runner = FakeRunner()
    out = tmp_path / "v.json"
    document = _measure(out, runner, records=GN_RECORDS, options=_options(seeds=(0, 1)))
    assert load_effects(out) == document
    summary = {(e["method"], e["model"]): e for e in document["summary"]}
    assert set(summary) == {("baseline", None), ("baseline", "resnet20_gn"), ("cutmix", None),
                            ("gn_trick", "resnet20_gn")}
    # against its own model's baseline (half as fast as resnet20's in the fake): 40/50, not 40/100
    expected = [(40 + s) / (50 + s) for s in (0, 1)]
    assert summary[("gn_trick", "resnet20_gn")]["throughput_ratio"]["mean"] == pytest.approx(sum(expected) / 2)
    # --only gn_trick: its runs again, and only its model's baseline where a seed has none
    only = measure.select_jobs(jobs, [], only=["gn_trick"])
    assert [(j.method, j.model, j.seed) for j in only] == [
        ("baseline", "resnet20_gn", 0), ("gn_trick", "resnet20_gn", 0),
        ("baseline", "resnet20_gn", 1), ("gn_trick", "resnet20_gn", 1)]
    again = FakeRunner()
    _measure(out, again, records=GN_RECORDS, options=_options(seeds=(0, 1)))
    assert again.jobs == []  # the runs of the other model are found in the file too


def test_a_method_naming_an_unknown_model_is_one_line(monkeypatch):
    import algorithms.metadata

    monkeypatch.setattr(algorithms.metadata, "load_all_metadata",
                        lambda root=None: {"gn_trick": _record(["vision"], model="resnet21")})
    problems, _ = measure.check_args(measure._parser(measure.__doc__).parse_args([]))
    assert len(problems) == 1 and problems[0].startswith(
        "algorithms/gn_trick/metadata.json: workload: model 'resnet21' is not a reference model — use one of ")


# --------------------------------------------------------------------------------------------- version 1

def test_version_1_files_are_read_as_version_2_and_migrate_with_merge(tmp_path):
    committed = REPO_ROOT / "results" / "effects" / "vision-cpu-amd-epyc.json"
    raw = json.loads(committed.read_text())
    document = _measure(tmp_path / "v2.json", FakeRunner())
    old = json.loads(json.dumps(document))
    old["schema_version"] = 1
    for name in V1_SETTINGS:
        del old["settings"][name]
    for entry in (*old["runs"], *old["summary"]):
        del entry["model"]
    assert effects_problems(old) != []  # a version 1 file is not a version 2 one...
    assert upgrade_effects(old) == document  # ...but reads as one
    path = tmp_path / "v1.json"
    path.write_text(json.dumps(old))
    assert load_effects(path) == document
    out = tmp_path / "migrated.json"
    assert _cli("--merge", str(path), "--out", str(out)).returncode == 0
    assert json.loads(out.read_text()) == document
    if raw["schema_version"] == 1:  # the committed file, before its migration
        assert load_effects(committed)["runs"][0]["model"] is None


# --------------------------------------------------------------------------------------------- pages

def _view(document: dict, names: dict) -> effects_pages.EffectsFile:
    return effects_pages.effects_file(Path("x.json"), document, names)


def _snippet(view: effects_pages.EffectsFile, key: str, name: str) -> str:
    from methods_tools.docsgen import jinja_environment

    env = jinja_environment(REPO_ROOT / "docs" / "source" / "tables")
    record = SimpleNamespace(name=name, key=key)
    effect = view.methods[key]
    return env.get_template("effects_snippet.md.inc.j2").render(
        record=record, measured=[(view, effect, f"Trick({effect.number['hparams']})")], failed=[])


def test_the_effects_page_of_an_nlp_method_shows_tokens_per_second_and_validation_loss(tmp_path):
    document = _measure(tmp_path / "nlp.json", FakeRunner(), options=_nlp_options())
    view = _view(document, {"token_trick": "Token Trick"})
    assert view.is_loss and view.throughput_label == "Throughput (tokens/s)"
    text = _snippet(view, "token_trick", "Token Trick")
    assert "| Throughput (tokens/s) |" in text
    assert "| Validation loss (lower is better) | 2.050 ± 0.071 | 1.950 ± 0.071 | -0.100 ± 0.000 |" in text
    assert "accuracy" not in text.lower()
    assert "transformer\\_tiny on stdlib\\_text (windows of 16 tokens)" in text and "Python 3.11.0" in text
    assert "The baseline reached a validation loss of 2.050 ± 0.071 (mean next-token cross entropy over 8 " \
           "held-out windows; lower is better)." in text
    assert "the change in validation loss" in view.chart_alt


def test_the_effects_page_names_the_model_a_method_was_measured_on(tmp_path):
    document = _measure(tmp_path / "v.json", FakeRunner(), records=GN_RECORDS, options=_options(seeds=(0, 1)))
    view = _view(document, {"cutmix": "CutMix", "gn_trick": "GN Trick"})
    assert set(view.baselines) == {None, "resnet20_gn"} and view.baseline is view.baselines[None]
    text = _snippet(view, "gn_trick", "GN Trick")
    assert "GN Trick was measured on `resnet20_gn` instead of `resnet20` (its metadata's workload model), " \
           "against a baseline of `resnet20_gn` trained with the same seeds." in text
    assert "| Test CPU, 2 cores (CPU only), 2026-01-02 | Baseline (resnet20\\_gn) | GN Trick |" in text
    assert "| Throughput (samples/s) | 50.5 ± 0.7 | 40.5 ± 0.7 |" in text
    assert "GN Trick (resnet20_gn)" in view.chart_alt
    assert "was measured on" not in _snippet(view, "cutmix", "CutMix")


# --------------------------------------------------------------------------------------------- harness (nlp)

def test_the_worker_trains_the_language_model_on_dict_batches_and_reports_its_validation_loss():
    options = compare.CompareOptions(model="transformer_tiny", data="stdlib_text", epochs=1, batch_size=4,
                                     configs=(compare.Config("fp32", "single"),), nproc=1, max_batches=2,
                                     seq_len=16, eval_examples=8, optimizer="adamw")
    command = compare.worker_command(options.configs[0], options, Path("/tmp/x"), 1)
    assert command[command.index("--seq-len") + 1] == "16" and command[command.index("--optimizer") + 1] == "adamw"
    run = measure.run_job(measure.Job(measure.BASELINE, 0), _nlp_options(), compare.environment(), lambda line: None)
    assert run["status"] == "ok", run["reason"]
    assert run["samples"] == 8 and run["accuracy"] is None and run["model"] is None
    assert 4.0 < run["loss"] < 6.0  # two steps from ln(256) = 5.55 nats per byte
    assert run["throughput"] == pytest.approx(8 * 16 / run["wall_s"], rel=0.05)
