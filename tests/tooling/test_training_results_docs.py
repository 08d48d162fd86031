"""docs/source/tables/update_training_results.py: the page, charts and card rows from results files."""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path

import pytest
from methods_tools.files import generator_cli
from methods_tools.results import discover_results, load_results, results_problems

from algorithms.metadata import load_all_metadata

REPO = Path(__file__).resolve().parents[2]
GENERATOR = REPO / "docs" / "source" / "tables" / "update_training_results.py"
HOSTILE = '<script>alert(1)</script> ```{eval-rst} | pipe |'


def _generator():
    spec = importlib.util.spec_from_file_location("update_training_results", GENERATOR)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(config, status="ok", **extra):
    precision, parallel = config.split(":")[:2]
    ok = status == "ok"
    run = {
        "config": config, "precision": precision, "parallel": parallel, "zero_stage": None,
        "world_size": 2 if parallel in ("ddp", "fsdp") else 1, "status": status,
        "reason": None if ok else HOSTILE, "note": None, "wall_s": 10.0 if ok else None,
        "epoch_s": [6.0, 4.0] if ok else [], "samples": 640 if ok else None, "throughput": 64.0 if ok else None,
        "peak_memory_bytes": 300 * 2**20 if ok else None, "memory_kind": "cpu_peak_rss" if ok else None,
        "peak_memory_per_device_bytes": [300 * 2**20] if ok else [], "cuda_max_reserved_bytes": None,
        "model_memory_bytes": 2**20 if ok else None, "gpu_utilization": None, "gpu_utilization_reason": None,
        "accuracy": 0.5 if ok else None, "loss": 1.2 if ok else None,
    }
    return {**run, **extra}


def _document():
    return {
        "schema_version": 1,
        "environment": {"hardware": "Test CPU *bold*, 2 cores", "device_type": "cpu", "device_name": "Test CPU",
                        "device_count": 1, "cpu_model": "Test CPU", "cpu_count": 2, "torch": "2.13.0",
                        "cuda": None, "python": "3.11", "platform": "Linux", "date": "2026-12-02T10:00:00Z",
                        "load_average": [0.5, 0.5, 0.5]},
        "settings": {"model": "resnet20", "data": "digits", "image_size": 16, "epochs": 2, "batch_size": 32,
                     "max_batches": 8, "nproc": 2, "seed": 0, "lr": 0.05,
                     "command": "python tools/compare_training.py"},
        "runs": [_run("fp32:single"), _run("amp_bf16:single", wall_s=20.0), _run("fp32:ddp", wall_s=5.0),
                 _run("fp32:deepspeed:2", status="skipped", zero_stage=2)],
    }


@pytest.fixture
def rendered(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib comes with the [docs] extra")
    results = tmp_path / "results"
    results.mkdir()
    document = _document()
    assert results_problems(document) == []
    (results / "cpu-test.json").write_text(json.dumps(document))
    src = tmp_path / "src"
    return _generator().render(source_dir=src, results_root=results), src


def test_outputs_page_chart_and_one_snippet_per_best_practice(rendered):
    outputs, src = rendered
    best = sorted(k for k, r in load_all_metadata().items() if r.is_best_practice)
    assert len(best) == 6
    expected = {src / "training_configurations.md", src / "tables/results/cpu-test.svg",
                *(src / f"tables/results/{k}.md.inc" for k in best)}
    assert set(outputs) == expected


def test_rendering_is_byte_stable(rendered, tmp_path):
    outputs, src = rendered
    again = _generator().render(source_dir=src, results_root=tmp_path / "results")
    assert again == outputs
    svg = outputs[src / "tables/results/cpu-test.svg"]
    assert svg.lstrip().startswith("<?xml") and "<dc:date>" not in svg


def test_page_rows_name_hardware_and_escape_text(rendered):
    outputs, src = rendered
    page = outputs[src / "training_configurations.md"]
    assert "Test CPU \\*bold\\*" in page and "results/cpu-test.json" in page
    assert "<script>" not in page and "```{eval-rst}" not in page
    rows = [line for line in page.splitlines() if line.startswith("| `")]
    assert [r.split(" | ")[0] for r in rows] == ["| `fp32:single`", "| `amp_bf16:single`", "| `fp32:ddp`",
                                                 "| `fp32:deepspeed:2`"]
    assert "| 10.0 | 4.0 | 64.0 | 300 | 1.00 |" in rows[0]  # wall, last epoch, throughput, MiB, model MiB
    assert "50.0 %" in rows[0]
    assert "skipped: \\<script\\>" in rows[3]
    assert "quoted" in page and "1979" in page  # the source's figures, labelled as quoted


@pytest.mark.parametrize(("key", "configs", "ratios"), [
    ("mixed_precision", ["fp32:single", "amp_bf16:single"], ["1.00x", "2.00x"]),
    ("ddp", ["fp32:single", "fp32:ddp"], ["1.00x", "0.50x"]),
    ("deepspeed_zero", ["fp32:single", "fp32:deepspeed:2"], ["1.00x", "—"]),
    ("fsdp", [], []),  # this file has no fsdp run: the card says so instead of showing the baseline alone
])
def test_card_snippets_show_their_option_beside_the_baseline(rendered, key, configs, ratios):
    outputs, src = rendered
    snippet = outputs[src / f"tables/results/{key}.md.inc"]
    rows = [line.split(" | ") for line in snippet.splitlines() if line.startswith("| `")]
    assert [r[0].strip("| `") for r in rows] == configs
    assert [r[4] for r in rows] == ratios  # time relative to fp32:single, computed from wall_s
    if configs:
        assert "Test CPU" in snippet and "results/cpu-test.json" in snippet
    else:
        assert "No committed results file measures `parallel='fsdp'` yet." in snippet


def test_an_invalid_results_file_is_one_line_per_problem_and_writes_nothing(tmp_path, capsys):
    results = tmp_path / "results"
    results.mkdir()
    document = _document()
    document["runs"][0]["status"] = "great"
    del document["environment"]["torch"]
    (results / "bad.json").write_text(json.dumps(document))
    src = tmp_path / "src"
    render = _generator().render
    assert generator_cli(lambda: render(source_dir=src, results_root=results), []) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith(str(results / "bad.json")) for line in err)
    assert any("/runs/0/status" in line for line in err) and any("/environment:" in line for line in err)
    assert not src.exists()


def test_committed_results_validate_and_the_docs_are_current():
    pytest.importorskip("matplotlib", reason="matplotlib comes with the [docs] extra")
    paths = discover_results()
    assert paths, "commit a results file made by tools/compare_training.py"
    for path in paths:
        document = load_results(path)
        assert document["runs"] and document["environment"]["hardware"]
    generator = _generator()
    assert generator_cli(generator.render, ["--check"]) == 0, "run python docs/source/tables/update_training_results.py"


def test_the_schema_requires_a_reason_for_runs_that_are_not_ok():
    document = copy.deepcopy(_document())
    document["runs"][3]["reason"] = None
    assert any("/runs/3/reason" in p for p in results_problems(document))


def test_a_best_practice_for_an_option_the_comparison_does_not_vary_gets_no_rows(rendered, tmp_path):
    metadata = tmp_path / "metadata"
    entry = {"name": "Clipping", "kind": "best_practice", "class_name": None, "functional": None,
             "trainer_option": {"grad_clip_norm": 1.0}, "tldr": "Clips.", "attribution": "Someone, 2013",
             "link": "https://example.org", "domains": ["general"], "tags": ["optimization"], "summary": "Clips.",
             "use": "Anywhere.", "math_equivalent": False, "hyperparameters": {}, "plumbing": []}
    (metadata / "core").mkdir(parents=True)
    (metadata / "core" / "clipping.metadata.json").write_text(json.dumps({"clipping": entry}))
    outputs = _generator().render(metadata_root=metadata, source_dir=tmp_path / "src",
                                  results_root=tmp_path / "results")
    snippet = outputs[tmp_path / "src" / "tables/results/clipping.md.inc"]
    assert "No committed results file measures `grad_clip_norm=1.0` yet." in snippet
    assert "| `" not in snippet
