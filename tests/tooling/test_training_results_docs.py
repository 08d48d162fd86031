"""methods_tools.training_pages: the training-configurations page, its charts and the cards' rows."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from methods_tools import pages, training_pages
from methods_tools.results import discover_results, load_results, results_problems

from algorithms.metadata import load_all_metadata

HOSTILE = '<script>alert(1)</script> ```{eval-rst} | pipe |'
CHART = Path("tables/results/cpu-test.svg")


def _render(results: Path, out: Path, metadata_root: Path | None = None) -> pages.Generated:
    """The training generator alone, as the docs build runs it (``out``: where earlier charts lie)."""
    return pages.generate(out, metadata_root=metadata_root, results_root=results,
                          generators=(training_pages.render_training_results,))


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
    generated = _render(results, tmp_path / "src")
    assert generated.problems == []
    return generated.outputs


def test_outputs_page_chart_and_one_snippet_per_best_practice(rendered):
    best = sorted(k for k, r in load_all_metadata().items() if r.is_best_practice)
    assert len(best) == 7  # precisions (2), parallel modes (4), decoupled weight decay
    expected = {Path("training_configurations.md"), CHART, *(Path(f"tables/results/{k}.md.inc") for k in best)}
    assert set(rendered) == expected


def test_rendering_is_byte_stable(rendered, tmp_path):
    again = _render(tmp_path / "results", tmp_path / "elsewhere").outputs  # no earlier chart there: drawn again
    assert again == rendered
    svg = rendered[CHART]
    assert svg.lstrip().startswith("<?xml") and "<dc:date>" not in svg


def test_an_unchanged_chart_is_reused_not_redrawn(rendered, tmp_path, monkeypatch):
    out = tmp_path / "src"
    pages.write_outputs(rendered, out)

    def no_drawing(*args):
        raise AssertionError("redrawn although its inputs are unchanged")

    monkeypatch.setattr(training_pages, "_draw_chart", no_drawing)
    assert _render(tmp_path / "results", out).outputs[CHART] == rendered[CHART]

    drawn = []
    monkeypatch.setattr(training_pages, "_draw_chart", lambda document, key: drawn.append(key) or "<svg/>")
    document = json.loads((tmp_path / "results" / "cpu-test.json").read_text())
    document["runs"][0]["wall_s"] = 11.0
    (tmp_path / "results" / "cpu-test.json").write_text(json.dumps(document))
    assert _render(tmp_path / "results", out).outputs[CHART] == "<svg/>" and len(drawn) == 1


def test_the_chart_hash_covers_the_document_and_the_matplotlib_version(monkeypatch):
    document = _document()
    key = training_pages._chart_key(document)
    assert key.startswith("sha256:") and key == training_pages._chart_key(copy.deepcopy(document))
    changed = copy.deepcopy(document)
    changed["environment"]["hardware"] = "Other CPU"
    assert training_pages._chart_key(changed) != key
    monkeypatch.setattr(training_pages.importlib.metadata, "version", lambda name: "0.0")
    assert training_pages._chart_key(document) != key


def test_page_rows_name_hardware_and_escape_text(rendered):
    page = rendered[Path("training_configurations.md")]
    assert "Test CPU \\*bold\\*" in page and "results/cpu-test.json" in page
    assert "<script>" not in page and "```{eval-rst}" not in page
    rows = [line for line in page.splitlines() if line.startswith("| `")]
    assert [r.split(" | ")[0] for r in rows] == ["| `fp32:single`", "| `amp_bf16:single`", "| `fp32:ddp`",
                                                 "| `fp32:deepspeed:2`"]
    assert "| 10.0 | 4.0 | 64.0 | 300 | 1.00 |" in rows[0]  # wall, last epoch, throughput, MiB, model MiB
    assert "50.0 %" in rows[0]
    assert "skipped: \\<script\\>" in rows[3]
    assert "```{image} tables/results/cpu-test.svg" in page


def test_the_reference_experiment_is_quoted_and_named_for_readers(rendered):
    page = rendered[Path("training_configurations.md")]
    assert "## A reference experiment (quoted)" in page
    prose = " ".join(page.split())
    assert "quoted, not measured" in prose and "a pretrained ResNet-50 fine-tuned on CIFAR-10 for 5 epochs at " \
        "batch 128 on four Tesla P40 GPUs" in prose
    assert "| Single precision (fp32) | 1979 | 11.24 | 85 % |" in page
    assert "| DeepSpeed | — | — | — |" in page
    for text in rendered.values():
        assert "source experiment" not in text.lower() and "issue" not in text.lower()


@pytest.mark.parametrize(("key", "configs", "ratios"), [
    ("mixed_precision", ["fp32:single", "amp_bf16:single"], ["1.00x", "2.00x"]),
    ("ddp", ["fp32:single", "fp32:ddp"], ["1.00x", "0.50x"]),
    ("deepspeed_zero", ["fp32:single", "fp32:deepspeed:2"], ["1.00x", "—"]),
    ("fsdp", [], []),  # this file has no fsdp run: the card says so instead of showing the baseline alone
])
def test_card_snippets_show_their_option_beside_the_baseline(rendered, key, configs, ratios):
    snippet = rendered[Path(f"tables/results/{key}.md.inc")]
    rows = [line.split(" | ") for line in snippet.splitlines() if line.startswith("| `")]
    assert [r[0].strip("| `") for r in rows] == configs
    assert [r[4] for r in rows] == ratios  # time relative to fp32:single, computed from wall_s
    if configs:
        assert "Test CPU" in snippet and "results/cpu-test.json" in snippet
    else:
        assert "No committed results file measures `parallel='fsdp'` yet." in snippet
    assert snippet.rstrip().endswith("All configurations: [Training configurations](../training_configurations.md).")


def test_an_invalid_results_file_is_one_line_per_problem_and_writes_nothing(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    document = _document()
    document["runs"][0]["status"] = "great"
    del document["environment"]["torch"]
    (results / "bad.json").write_text(json.dumps(document))
    (results / "broken.json").write_text('{"schema_version": 1,\n "runs": [}')
    generated = _render(results, tmp_path / "src")
    assert generated.outputs == {}
    bad = [line for line in generated.problems if line.startswith(str(results / "bad.json"))]
    assert len(bad) == 2 and len(generated.problems) == 3
    assert any("/runs/0/status" in line for line in bad) and any("/environment:" in line for line in bad)
    assert generated.problems[-1].startswith(f"{results / 'broken.json'}:2: not valid JSON")
    assert not (tmp_path / "src").exists()


def test_committed_results_validate_and_render():
    pytest.importorskip("matplotlib", reason="matplotlib comes with the [docs] extra")
    paths = discover_results()
    assert paths, "commit a results file made by tools/compare_training.py"
    for path in paths:
        document = load_results(path)
        assert document["runs"] and document["environment"]["hardware"]
    assert pages.generate().problems == []


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
    generated = _render(tmp_path / "results", tmp_path / "src", metadata_root=metadata)
    snippet = generated.outputs[Path("tables/results/clipping.md.inc")]
    assert "No committed results file measures `grad_clip_norm=1.0` yet." in snippet
    assert "| `" not in snippet
