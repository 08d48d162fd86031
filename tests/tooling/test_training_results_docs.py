"""methods_tools.training_pages: the training-configurations page, its charts and the cards' rows."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from methods_tools import compare, pages, training_pages
from methods_tools.measurements_page import render_measurements
from methods_tools.results import ResultsError, discover_results, load_results, results_problems

from algorithms.metadata import load_all_metadata

HOSTILE = "<script>alert(1)</script> ```{eval-rst} | pipe |"
CHART = Path("tables/results/cpu-test.svg")
NARROW_CHART = Path("tables/results/cpu-test-narrow.svg")  # the same chart drawn for a phone


def _render(results: Path, out: Path, metadata_root: Path | None = None) -> pages.Generated:
    """The training generator alone, as the docs build runs it (``out``: where earlier charts lie)."""
    return pages.generate(
        out, metadata_root=metadata_root, results_root=results, generators=(training_pages.render_training_results,)
    )


def _run(config, status="ok", round_=1, epoch_s=(6.0, 4.0), **extra):
    precision, parallel = config.split(":")[:2]
    ok = status == "ok"
    world = 2 if parallel in ("ddp", "fsdp") else 1
    samples = 640 * world  # 2 epochs of 10 batches of 32 per process
    run = {
        "config": config,
        "precision": precision,
        "parallel": parallel,
        "zero_stage": None,
        "world_size": world,
        "round": round_,
        "status": status,
        "reason": None if ok else HOSTILE,
        "note": None,
        "wall_s": sum(epoch_s) if ok else None,
        "epoch_s": list(epoch_s) if ok else [],
        "samples": samples if ok else None,
        "throughput": samples / sum(epoch_s) if ok else None,
        "peak_memory_bytes": 300 * 2**20 if ok else None,
        "memory_kind": "cpu_peak_rss" if ok else None,
        "peak_memory_per_device_bytes": [300 * 2**20] * world if ok else [],
        "cuda_max_reserved_bytes": None,
        "model_memory_bytes": 2**20 if ok else None,
        "gpu_utilization": None,
        "gpu_utilization_reason": None,
        "accuracy": 0.5 if ok else None,
        "loss": 1.2 if ok else None,
    }
    return {**run, **extra}


CONFIGS = tuple(compare.parse_configs("fp32:single,amp_bf16:single,fp32:ddp,fp32:deepspeed:2"))


def _runs():
    """Two rounds, then the re-measurement of fp32:ddp (4x one process on 2 processes) and fp32:single.

    fp32:single: second epochs 4.0 s for 320 samples (80/s); wall 10, 8 and 8 s; first epochs 6, 4, 4 s.
    amp_bf16:single: 8.0 s (40/s): 0.50x. fp32:ddp: 2.0 s for 640 samples (320/s): 4x, every round.
    """
    runs = []
    for round_, first in ((1, 6.0), (2, 4.0)):
        runs += [
            _run("fp32:single", round_=round_, epoch_s=(first, 4.0)),
            _run("amp_bf16:single", round_=round_, epoch_s=(12.0, 8.0)),
            _run("fp32:ddp", round_=round_, epoch_s=(3.0, 2.0)),
        ]
        if round_ == 1:
            runs.append(_run("fp32:deepspeed:2", status="skipped", zero_stage=2))
    remeasured = [_run("fp32:single", round_=3, epoch_s=(4.0, 4.0)), _run("fp32:ddp", round_=3, epoch_s=(3.0, 2.0))]
    return runs, remeasured


def _document(runs=None, remeasured=None):
    if runs is None:
        runs, remeasured = _runs()
    before = {s["config"]: s for s in compare.summarize(runs, CONFIGS) if compare._above_linear(s)}
    every = runs + (remeasured or [])
    summary = compare.summarize(every, CONFIGS, remeasured=(before, 3) if remeasured else None)
    return {
        "schema_version": 2,
        "environment": {
            "hardware": "Test CPU *bold*, 2 cores",
            "device_type": "cpu",
            "device_name": "Test CPU",
            "device_count": 1,
            "cpu_model": "Test CPU",
            "cpu_count": 2,
            "torch": "2.13.0",
            "cuda": None,
            "python": "3.11",
            "platform": "Linux",
            "date": "2026-12-02T10:00:00Z",
            "load_average": [0.5, 0.5, 0.5],
            "load_average_end": [0.5, 0.5, 0.5],
            "torch_threads": 2,
        },
        "settings": {
            "model": "resnet20",
            "data": "digits",
            "image_size": 16,
            "epochs": 2,
            "batch_size": 32,
            "max_batches": 10,
            "nproc": 2,
            "seed": 0,
            "lr": 0.05,
            "repeats": 2,
            "command": "python tools/compare_training.py",
        },
        "runs": every,
        "summary": summary,
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
    assert len(best) == 9  # precisions (2), parallel modes (4), decoupled weight decay, LoRA, gradient accumulation
    expected = {
        Path("training_configurations.md"),
        CHART,
        NARROW_CHART,
        *(Path(f"tables/results/{k}.md.inc") for k in best),
    }
    assert set(rendered) == expected


def test_rendering_is_byte_stable(rendered, tmp_path):
    again = _render(tmp_path / "results", tmp_path / "elsewhere").outputs  # no earlier chart there: drawn again
    assert again == rendered
    for chart in (CHART, NARROW_CHART):
        svg = rendered[chart]
        assert svg.lstrip().startswith("<?xml") and "<dc:date>" not in svg


# furo's content column: its full width on a desktop, and what is left of a 390 px phone's screen
DESKTOP_COLUMN_PX, PHONE_COLUMN_PX = 736, 358
SMALLEST_TEXT_PX = 11  # the least a reader is asked to read


def _smallest_text_px(svg: str, column_px: float) -> float:
    """The smallest text of ``svg`` in CSS pixels when the chart is drawn ``column_px`` wide."""
    import re

    width = float(re.search(r'viewBox="0 0 ([\d.]+) [\d.]+"', svg).group(1))
    sizes = [float(v) for v in re.findall(r"font-size: ([\d.]+)px", svg)]
    assert sizes, "the chart keeps its text as text"
    return min(sizes) * column_px / width


def test_the_charts_text_reads_on_a_desktop_and_on_a_phone(rendered, tmp_path):
    """The page shows the side-by-side chart in furo's full column and the stacked one below it
    (methods_overview.css): each one's smallest text is at least 11 px where it is shown."""
    assert _smallest_text_px(rendered[CHART], DESKTOP_COLUMN_PX) >= SMALLEST_TEXT_PX
    assert _smallest_text_px(rendered[NARROW_CHART], PHONE_COLUMN_PX) >= SMALLEST_TEXT_PX
    assert _smallest_text_px(rendered[CHART], PHONE_COLUMN_PX) < SMALLEST_TEXT_PX  # why the phone has its own
    page = _page(rendered)
    assert "```{image} tables/results/cpu-test.svg\n" in page and ":class: ml-chart-wide" in page
    assert "```{image} tables/results/cpu-test-narrow.svg\n" in page and ":class: ml-chart-narrow" in page


def test_an_unchanged_chart_is_reused_not_redrawn(rendered, tmp_path, monkeypatch):
    out = tmp_path / "src"
    pages.write_outputs(rendered, out)

    def no_drawing(*args):
        raise AssertionError("redrawn although its inputs are unchanged")

    monkeypatch.setattr(training_pages, "_draw_chart", no_drawing)
    assert _render(tmp_path / "results", out).outputs[CHART] == rendered[CHART]

    drawn = []
    monkeypatch.setattr(
        training_pages, "_draw_chart", lambda document, key, narrow=False: drawn.append(key) or "<svg/>"
    )
    document = json.loads((tmp_path / "results" / "cpu-test.json").read_text())
    document["runs"][0]["wall_s"] = 11.0
    (tmp_path / "results" / "cpu-test.json").write_text(json.dumps(document))
    outputs = _render(tmp_path / "results", out).outputs
    assert outputs[CHART] == outputs[NARROW_CHART] == "<svg/>" and len(set(drawn)) == len(drawn) == 2


def test_the_chart_hash_covers_the_document_and_the_matplotlib_version(monkeypatch):
    document = _document()
    key = training_pages._chart_key(document)
    assert key.startswith("sha256:") and key == training_pages._chart_key(copy.deepcopy(document))
    changed = copy.deepcopy(document)
    changed["environment"]["hardware"] = "Other CPU"
    assert training_pages._chart_key(changed) != key
    assert training_pages._chart_key(document, narrow=True) != key  # the phone's variant is its own chart
    monkeypatch.setattr(training_pages.importlib.metadata, "version", lambda name: "0.0")
    assert training_pages._chart_key(document) != key


def _page(rendered):
    return rendered[Path("training_configurations.md")]


def _rows(text):
    return [line for line in text.splitlines() if line.startswith("| `")]


def _page_rows(page):
    """A configuration's row of each of the page's two tables (time and throughput; processes,
    runs, status, memory and quality), joined into one row in the columns' reading order:
    configuration, processes, runs, status, time, first epoch, steady epoch, throughput, speed-up,
    memory, model memory, [GPU utilisation,] accuracy, loss."""
    rows = _rows(page)
    half = len(rows) // 2
    joined = []
    for speed, rest in zip(rows[:half], rows[half:], strict=True):
        speed_cells, rest_cells = speed.removesuffix(" |").split(" | "), rest.removesuffix(" |").split(" | ")
        assert speed_cells[0] == rest_cells[0], (speed, rest)  # the same configuration
        joined.append(" | ".join([*rest_cells[:4], *speed_cells[1:], *rest_cells[4:]]) + " |")
    return joined


def test_page_rows_are_medians_and_ranges_and_escape_text(rendered):
    page = _page(rendered)
    assert "Test CPU \\*bold\\*" in page and "results/cpu-test.json" in page
    assert "<script>" not in page and "```{eval-rst}" not in page
    rows = _page_rows(page)
    assert [r.split(" | ")[0] for r in rows] == [
        "| `fp32:single`",
        "| `amp_bf16:single`",
        "| `fp32:ddp`",
        "| `fp32:deepspeed:2`",
    ]
    # Processes, runs (the re-measurement included), status, total time, first epoch, steady
    # epoch, steady-state throughput, speed-up, MiB, model MiB, accuracy, loss: computed by hand
    # in _runs.
    assert rows[0] == (
        "| `fp32:single` | 1 | 3 | ok | 8.0 (8.0–10.0) | 4.0 (4.0–6.0) | 4.00 | 80.0 | 1.00x | "
        "300 | 1.00 | 50.0 % | 1.200 |"
    )
    assert rows[1] == (
        "| `amp_bf16:single` | 1 | 2 | ok | 20.0 | 12.0 | 8.00 | 40.0 | 0.50x | 300 | 1.00 | 50.0 % | 1.200 |"
    )
    assert "skipped: \\<script\\>" in rows[3] and "| 1 |" in rows[3]
    assert "| Steady-state throughput (samples/s) | Speed-up |" in page
    assert "```{image} tables/results/cpu-test.svg" in page


def test_a_flagged_speedup_shows_its_figures_and_a_note_but_no_speedup(rendered):
    page = _page(rendered)
    ddp = _page_rows(page)[2]
    assert ddp == "| `fp32:ddp` | 2 | 3 | ok | 5.0 | 3.0 | 2.00 | 320.0 | flagged | 300 | 1.00 | 50.0 % | 1.200 |"
    note = next(line for line in page.splitlines() if line.startswith("- `fp32:ddp`:"))
    assert note.startswith(
        "- `fp32:ddp`: **flagged: super-linear speed-up on 2 processes, not published as a finding.**"
    )
    assert "in the re-measurement (round 3)" in note and "still more than 2x" in note
    snippet = rendered[Path("tables/results/ddp.md.inc")]
    assert "| flagged |" in snippet and "**flagged: super-linear speed-up on 2 processes" in snippet
    assert "4.00x" not in ddp and not any("4.00x |" in row for row in _rows(snippet))


def test_a_remeasured_speedup_that_came_down_is_published_with_its_history(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib comes with the [docs] extra")
    runs, _ = _runs()
    runs = [r for r in runs if not (r["config"] == "fp32:ddp" and r["round"] == 2)]
    runs.append(_run("fp32:ddp", round_=2, epoch_s=(3.0, 8.0)))  # rounds 1-2: 4x and 1x, median 2.5x
    # Re-measured: 1x; over every round 4x, 1x, 1x: median 1x.
    document = _document(
        runs, [_run("fp32:single", round_=3, epoch_s=(4.0, 4.0)), _run("fp32:ddp", round_=3, epoch_s=(3.0, 8.0))]
    )
    page = _page(_render_document(tmp_path, document))
    ddp = _page_rows(page)[2]
    assert "| 1.00x (1.00x–4.00x) |" in ddp and "flagged" not in ddp
    note = next(line for line in page.splitlines() if line.startswith("- `fp32:ddp`:"))
    assert "re-measured once" in note and "no more than 2x" in note and "not published" not in note


def _render_document(tmp_path, document):
    results = tmp_path / "results"
    results.mkdir(exist_ok=True)
    assert results_problems(document) == []
    (results / "cpu-test.json").write_text(json.dumps(document))
    generated = _render(results, tmp_path / "src")
    assert generated.problems == []
    return generated.outputs


def test_the_page_states_the_cores_and_what_this_scale_cannot_show(rendered, tmp_path):
    shared = pages.generate(tmp_path / "src", results_root=tmp_path / "results", generators=(render_measurements,))
    for text in (_page(rendered), shared.outputs[Path("tables/measurements/training.md.inc")]):
        prose = " ".join(text.split())
        assert "The machine: 2 CPU cores (Test CPU)." in prose
        assert (
            "A parallel speed-up cannot show here. A single process runs torch on 2 threads over the machine's 2 "
            "cores, and the 2 processes of a multi-process run share those same cores: more processes bring no "
            "more hardware."
        ) in prose
        assert "Accuracy and loss are after 20 optimizer steps per process" in prose
        assert "not the accuracy a precision or a parallel mode reaches" in prose
        assert "steady state is the second epoch" in prose
        assert "Each configuration ran 2 times, interleaved" in prose and "range (min–max)" in prose
        assert "The machine was shared" not in prose


def test_a_card_names_its_files_hardware_and_scale_in_one_line_and_links_to_the_caveats(rendered):
    """The caveats every card would repeat are on the shared page; a card keeps the few that its
    own figures need: the runs a cell is the median of, the steps behind its accuracy, and, for a
    parallel mode, that more processes bring no more hardware here."""
    ddp, amp = (rendered[Path(f"tables/results/{k}.md.inc")] for k in ("ddp", "mixed_precision"))
    for snippet in (ddp, amp):
        assert (
            "**Training configurations, small scale:** resnet20 on digits, Test CPU \\*bold\\*, 2 cores, "
            "2026-12-02; each cell the median (range) of 2 interleaved runs, accuracy after 20 optimizer steps "
            "per process; results file `results/cpu-test.json`."
        ) in snippet
        assert "{ref}`What these figures can and cannot show <measurements-training>`" in snippet
        assert "The machine: 2 CPU cores" not in snippet and "Warm-up and steady state" not in snippet
    assert "A parallel speed-up cannot show here: the 2 processes share the same CPU cores." in ddp
    assert "A parallel speed-up cannot show here" not in amp


@pytest.mark.parametrize(
    ("change", "present", "absent"),
    [
        (
            {"environment": {"cpu_count": 8, "torch_threads": 8, "load_average_end": [9.5, 4.0, 2.0]}},
            ["8 CPU cores", "torch on 8 threads over the machine's 8 cores", "reached 9.5 on 8 cores"],
            ["taking turns"],
        ),
        (
            {"environment": {"cpu_count": 1, "torch_threads": 1}},
            ["1 CPU core (Test CPU)", "share that same core, taking turns on them"],
            [],
        ),
        (
            {"environment": {"device_type": "cuda", "device_count": 1, "device_name": "Test GPU", "cuda": "12.4"}},
            ["The machine: 1 GPU (Test GPU) and 2 CPU cores", "share 1 GPU."],
            ["torch on 2 threads"],
        ),
        (
            {"environment": {"device_type": "cuda", "device_count": 2, "device_name": "Test GPU", "cuda": "12.4"}},
            ["2 GPUs (Test GPU)"],
            ["A parallel speed-up cannot show"],
        ),
        (
            {"settings": {"max_batches": 1000, "repeats": 1}},
            ["Each configuration ran once: there is no range"],
            ["optimizer steps per process"],
        ),
    ],
)
def test_the_caveats_follow_the_files_environment_and_settings(tmp_path, change, present, absent):
    pytest.importorskip("matplotlib", reason="matplotlib comes with the [docs] extra")
    document = _document()
    for part, values in change.items():
        document[part].update(values)
    if document["settings"]["max_batches"] == 1000:  # 1,000 steps: no longer "a few"
        for run in document["runs"]:
            if run["samples"]:
                run["samples"] *= 100
    prose = " ".join(_page(_render_document(tmp_path, document)).split())
    for text in present:
        assert text in prose
    for text in absent:
        assert text not in prose


def test_with_one_epoch_the_page_says_steady_state_cannot_be_separated(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib comes with the [docs] extra")
    runs = [_run(config.label, round_=r, epoch_s=(5.0,)) for r in (1, 2) for config in CONFIGS[:3]]
    runs.append(_run("fp32:deepspeed:2", status="skipped", zero_stage=2))
    document = _document(runs, [])
    document["settings"]["epochs"] = 1
    page = _page(_render_document(tmp_path, document))
    prose = " ".join(page.split())
    assert "With one epoch per run, steady state cannot be separated from the warm-up" in prose
    assert "| Throughput, warm-up included (samples/s) |" in page
    assert _page_rows(page)[0].split(" | ")[6] == "—"  # no steady epoch
    assert _page_rows(page)[2].split(" | ")[8] == "2.00x"  # 256/s against 128/s: the whole run's throughput


def test_the_reference_experiment_gives_every_figure_its_source_gives(rendered):
    page = _page(rendered)
    assert "## A reference experiment (quoted)" in page
    prose = " ".join(page.split())
    assert (
        "quoted, not measured" in prose
        and "a pretrained ResNet-50 fine-tuned on CIFAR-10 for 5 epochs at batch 128 on a machine with four Tesla P40"
        in prose
        and "the source does not say how many runs each configuration had" in prose
    )
    assert f"]({training_pages.REFERENCE_SOURCE['url']})" in page
    assert training_pages.REFERENCE_SOURCE["url"].startswith("https://github.com/xxcheng0708/")
    rows = [line for line in page.splitlines() if line.startswith("| ") and not line.startswith("| `")]
    for row in (
        "| Baseline: one GPU, batch 1 | — | 0.34 | 60 % | — |",
        "| Single precision (fp32), one GPU | 1979 | 11.24 | 100 % | about 85 % |",
        "| Half precision (fp16), one GPU | 1946 | 5.79 | 100 % | about 75 % |",
        "| Automatic mixed precision, one GPU | 1546 | 6.02 | 100 % | about 85 % |",
        "| DataParallel, 4 GPUs | 742 | 3.08 | 99 % | about 85 % |",
        "| DistributedDataParallel, 4 GPUs | 560 | 3.12 | 99 % | about 85 % |",
        "| Fully Sharded Data Parallel, 4 GPUs | 581 | 2.88 | 99 % | about 85 % |",
        "| Fully Sharded Data Parallel, 4 GPUs, batch 1 | — | 0.19 | 60 % | — |",
        "| DeepSpeed | — | — | — | — |",
        "| Accelerate, DDP, 4 GPUs | 569 | 3.15 | 99 % | about 85 % |",
        "| Accelerate, FSDP, 4 GPUs | 576 | 2.90 | 99 % | about 85 % |",
        "| Accelerate, FSDP, 4 GPUs, batch 1 | — | 0.38 | 60 % | — |",
        "| Accelerate, DeepSpeed | — | — | — | — |",
    ):
        assert row in rows
    assert "did not start" in prose and "accelerate launch --config_file default_DDP.yml" in prose
    for text in rendered.values():
        assert "source experiment" not in text.lower() and "issue" not in text.lower()


@pytest.mark.parametrize(
    ("key", "configs", "speedups"),
    [
        ("mixed_precision", ["fp32:single", "amp_bf16:single"], ["1.00x", "0.50x"]),
        ("ddp", ["fp32:single", "fp32:ddp"], ["1.00x", "flagged"]),
        ("deepspeed_zero", ["fp32:single", "fp32:deepspeed:2"], ["1.00x", "—"]),
        ("fsdp", [], []),  # this file has no fsdp run: the card says so instead of showing the baseline alone
    ],
)
def test_card_snippets_show_their_option_beside_the_baseline(rendered, key, configs, speedups):
    snippet = rendered[Path(f"tables/results/{key}.md.inc")]
    rows = [line.split(" | ") for line in _rows(snippet)]
    assert [r[0].strip("| `") for r in rows] == configs
    assert [r[5] for r in rows] == speedups  # steady-state throughput over fp32:single's
    if configs:
        assert "Test CPU" in snippet and "results/cpu-test.json" in snippet
    else:
        assert "No committed results file measures `parallel='fsdp'` yet." in snippet
    assert snippet.rstrip().endswith("All configurations: [Training configurations](../training_configurations.md).")


def test_a_parallel_mode_run_as_one_process_did_not_act_and_is_not_charted(tmp_path):
    """DataParallel on a CPU runs the model once, with no replicas: its ratio to fp32:single is
    noise, so its row says it did not act (no speed-up), and the chart names it without a bar."""
    pytest.importorskip("matplotlib", reason="matplotlib comes with the [docs] extra")
    note = "DataParallel with one device (or the CPU) runs the model once: no replicas"
    runs = [
        run
        for round_ in (1, 2)
        for run in (
            _run("fp32:single", round_=round_, epoch_s=(6.0, 4.0)),
            _run("fp32:dp", round_=round_, epoch_s=(6.0, 3.7), note=note),  # 1.08x: noise, not an effect
        )
    ]
    configs = tuple(compare.parse_configs("fp32:single,fp32:dp"))
    document = _document()
    document.update(runs=runs, summary=compare.summarize(runs, configs))
    dp = document["summary"][1]
    assert dp["speedup"]["median"] == pytest.approx(4.0 / 3.7) and compare.did_not_act(dp) == note
    assert compare.did_not_act(document["summary"][0]) is None
    out = _render_document(tmp_path, document)
    page = _page(out)
    row = _page_rows(page)[1]
    assert row.split(" | ")[3] == f"did not act: {note}" and row.split(" | ")[8] == "did not act"
    assert "1.08x" not in page
    assert not any(line.startswith("- `fp32:dp`:") for line in page.splitlines())  # the reason is said once
    assert "its row says it did not act, with no speed-up, and the chart leaves it out" in " ".join(page.split())
    chart = out[CHART]
    assert chart.count("fp32:dp") == 1 and "not drawn, did not act (one process, no replicas): fp32:dp" in chart
    snippet = out[Path("tables/results/data_parallel.md.inc")]
    (_, dp_row) = [line.split(" | ") for line in _rows(snippet)]
    assert dp_row[2] == f"did not act: {note}" and dp_row[5] == "did not act"


def test_an_invalid_results_file_is_one_line_per_problem_and_writes_nothing(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    document = _document()
    document["runs"][0]["status"] = "great"
    del document["environment"]["torch"]
    (results / "bad.json").write_text(json.dumps(document))
    (results / "broken.json").write_text('{"schema_version": 2,\n "runs": [}')
    generated = _render(results, tmp_path / "src")
    assert generated.outputs == {}
    bad = [line for line in generated.problems if line.startswith(str(results / "bad.json"))]
    assert len(bad) == 2 and len(generated.problems) == 3
    assert any("/runs/0/status" in line for line in bad) and any("/environment:" in line for line in bad)
    assert generated.problems[-1].startswith(f"{results / 'broken.json'}:2: not valid JSON")
    assert not (tmp_path / "src").exists()


def test_a_version_1_file_is_one_line_saying_to_regenerate_it(tmp_path):
    path = tmp_path / "old.json"
    document = _document()
    document["schema_version"] = 1
    path.write_text(json.dumps(document))
    with pytest.raises(ResultsError) as info:
        load_results(path)
    (line,) = str(info.value).splitlines()
    assert line.startswith(f"{path}: /schema_version: 1 is no longer read") and "tools/compare_training.py" in line


def _configs(document):
    configs = compare.parse_configs(",".join(s["config"] for s in document["summary"]))
    assert [(c.precision, c.parallel, c.zero_stage) for c in configs] == [
        (s["precision"], s["parallel"], s["zero_stage"]) for s in document["summary"]
    ]
    return configs


def test_committed_results_validate_render_and_summarize_their_runs():
    pytest.importorskip("matplotlib", reason="matplotlib comes with the [docs] extra")
    paths = discover_results()
    assert paths, "commit a results file made by tools/compare_training.py"
    for path in paths:
        document = load_results(path)
        assert document["runs"] and document["environment"]["hardware"]
        repeats, configs = document["settings"]["repeats"], _configs(document)
        assert repeats >= 3, f"{path}: run each configuration at least 3 times (--repeats)"
        first = [r for r in document["runs"] if r["round"] <= repeats]
        assert [(r["round"], r["config"]) for r in first if r["status"] != "skipped"] == [
            (k, c.label)
            for k in range(1, repeats + 1)
            for c in configs
            if not any(r["config"] == c.label and r["status"] == "skipped" for r in first)
        ]
        # The summary is what summarize makes of the runs, the re-measurement included.
        before = {s["config"]: s for s in compare.summarize(first, configs) if compare._above_linear(s)}
        extra = repeats + 1
        assert any(r["round"] == extra for r in document["runs"]) == bool(before)
        assert compare.summarize(document["runs"], configs, (before, extra) if before else None) == document["summary"]
        # Nothing published is above linear.
        for entry in document["summary"]:
            if compare._above_linear(entry):
                assert entry["super_linear"]["flagged"], entry["config"]
    assert pages.generate().problems == []


def test_the_schema_requires_a_reason_for_runs_that_are_not_ok():
    document = copy.deepcopy(_document())
    document["runs"][3]["reason"] = None
    document["summary"][3]["reason"] = None
    problems = results_problems(document)
    assert any("/runs/3/reason" in p for p in problems) and any("/summary/3/reason" in p for p in problems)


def test_a_best_practice_for_an_option_the_comparison_does_not_vary_gets_no_rows(rendered, tmp_path):
    metadata = tmp_path / "metadata"
    entry = {
        "name": "Clipping",
        "kind": "best_practice",
        "class_name": None,
        "functional": None,
        "trainer_option": {"grad_clip_norm": 1.0},
        "tldr": "Clips.",
        "attribution": "Someone, 2013",
        "link": "https://example.org",
        "domains": ["general"],
        "tags": ["optimization"],
        "summary": "Clips.",
        "use": "Anywhere.",
        "math_equivalent": False,
        "hyperparameters": {},
        "plumbing": [],
    }
    (metadata / "core").mkdir(parents=True)
    (metadata / "core" / "clipping.metadata.json").write_text(json.dumps({"clipping": entry}))
    generated = _render(tmp_path / "results", tmp_path / "src", metadata_root=metadata)
    snippet = generated.outputs[Path("tables/results/clipping.md.inc")]
    assert "No committed results file measures `grad_clip_norm=1.0` yet." in snippet
    assert "| `" not in snippet


def test_a_parallel_cards_rows_add_the_same_mode_through_accelerate_after_the_native_one(tmp_path):
    """The DDP card shows fp32:accelerate:ddp after fp32:ddp, the DeepSpeed card Accelerate's
    DeepSpeed row (skipped here, with its reason); the page lists both with their notes."""
    pytest.importorskip("matplotlib", reason="matplotlib comes with the [docs] extra")
    configs = compare.parse_configs(
        "fp32:single,fp32:ddp,fp32:accelerate:ddp,fp32:deepspeed:2,fp32:accelerate:deepspeed"
    )
    note = "launched with accelerate launch --config_file configs/accelerate/ddp.yaml"
    runs = []
    for round_ in (1, 2):
        runs += [
            _run("fp32:single", round_=round_, epoch_s=(6.0, 4.0)),
            _run("fp32:ddp", round_=round_, epoch_s=(6.0, 4.0)),
            _run(
                "fp32:accelerate:ddp",
                round_=round_,
                epoch_s=(6.0, 5.0),
                world_size=2,
                note=note,
                accelerate_config="configs/accelerate/ddp.yaml",
                samples=1280,
                throughput=1280 / 11.0,
            ),
        ]
    runs += [
        _run("fp32:deepspeed:2", status="skipped", zero_stage=2),
        _run("fp32:accelerate:deepspeed", status="skipped", accelerate_config="configs/accelerate/deepspeed.yaml"),
    ]
    document = _document()
    document["runs"], document["summary"] = runs, compare.summarize(runs, configs)
    assert results_problems(document) == []
    results = tmp_path / "results"
    results.mkdir()
    (results / "cpu-test.json").write_text(json.dumps(document))
    generated = _render(results, tmp_path / "src")
    assert generated.problems == []

    def configs_on(key):
        return [
            line.split(" | ")[0].strip("| `") for line in _rows(generated.outputs[Path(f"tables/results/{key}.md.inc")])
        ]

    assert configs_on("ddp") == ["fp32:single", "fp32:ddp", "fp32:accelerate:ddp"]
    assert configs_on("deepspeed_zero") == ["fp32:single", "fp32:deepspeed:2", "fp32:accelerate:deepspeed"]
    page = _page(generated.outputs)
    assert any(
        line.startswith("- `fp32:accelerate:ddp`: launched with accelerate launch") for line in page.splitlines()
    )
    assert "`accelerate:<file>` under `accelerate launch --config_file" in " ".join(page.split())


def _tensor_memory(peak_mib: float, gradients: bool = True) -> dict:
    """A run's tensor memory: 1 MiB of weights, of gradients (or none told apart) and of optimizer
    state, the rest of the peak activations."""
    mib = 2**20
    return {
        "peak_bytes": int(peak_mib * mib),
        "weights_bytes": mib,
        "gradients_bytes": mib if gradients else None,
        "optimizer_bytes": mib,
        "activations_bytes": int((peak_mib - 3) * mib),
        "how": "cpu_profiler",
        "warmup_batches": 1,
        "batches": 2,
    }


def test_tensor_memory_is_named_so_and_split_beside_the_process_peak(tmp_path):
    """A file with tensor memory gets its table (median and range over the runs; a part a mode
    cannot tell apart is "—"), the chart plots it, a card's rows show it beside the resident set,
    and a card's summary compares it; a file without (the fixture's) renders as before."""
    pytest.importorskip("matplotlib", reason="matplotlib comes with the [docs] extra")
    configs = compare.parse_configs("fp32:single,amp_bf16:single,fp32:ddp")
    runs = []
    for round_ in (1, 2):
        runs += [
            _run("fp32:single", round_=round_, tensor_memory=_tensor_memory(10 + round_)),
            _run("amp_bf16:single", round_=round_, tensor_memory=_tensor_memory(8)),
            _run("fp32:ddp", round_=round_, tensor_memory=_tensor_memory(6, gradients=False)),
        ]
    document = _document()
    document["runs"], document["summary"] = runs, compare.summarize(runs, configs)
    assert results_problems(document) == []
    results = tmp_path / "results"
    results.mkdir()
    (results / "cpu-test.json").write_text(json.dumps(document))
    generated = _render(results, tmp_path / "src")
    assert generated.problems == []
    page = _page(generated.outputs)
    assert "Peak tensor memory (MiB, torch's accounting) per process, with its split" in page
    assert (
        "| Configuration | Peak | Weights | Gradients | Optimizer state | Activations | "
        "Peak memory per process (MiB, resident set of the whole process) |"
    ) in page
    rows = _rows(page)
    assert "| `fp32:single` | 11.50 (11.00–12.00) | 1.00 | 1.00 | 1.00 | 8.50 (8.00–9.00) | 300 |" in rows
    assert "| `fp32:ddp` | 6.00 | 1.00 | — | 1.00 | 3.00 | 300 |" in rows
    assert "peak tensor memory per process (MiB, torch's accounting)" in generated.outputs[CHART]
    snippet = generated.outputs[Path("tables/results/mixed_precision.md.inc")]
    assert "| Peak tensor memory (MiB, torch's accounting) | Peak memory per process" in snippet
    (amp,) = [line for line in _rows(snippet) if line.startswith("| `amp_bf16:single`")]
    assert "| 8.00 | 300 |" in amp
    from methods_tools.summaries import _memory

    entries = {e["config"]: e for e in document["summary"]}
    # 8 MiB against fp32's median of 11.5 MiB (range 8/12 to 8/11): tensor memory, not the 300 MiB process
    assert _memory(entries["amp_bf16:single"], entries["fp32:single"], 2) == (
        "0.70x (range 0.67x–0.73x over 2 runs) (peak tensor memory)"
    )


def test_a_file_without_tensor_memory_shows_no_such_table(rendered):
    page = _page(rendered)
    assert "| Configuration | Peak | Weights |" not in page and "per process, with its split" not in page
    assert "peak memory per process (MiB)" in rendered[CHART]
    assert "Peak tensor memory" not in rendered[Path("tables/results/mixed_precision.md.inc")]


@pytest.mark.parametrize("reported", [(4, 2), (4, 4)])
def test_matched_threads_are_stated_and_checked_against_what_each_process_reported(tmp_path, reported):
    """A file of the thread-matched comparison (4 threads in all over 2 processes): the page says
    how they were split, and that the processes reported it only when every one did as stated
    (a single process 4, each DDP process 2)."""
    pytest.importorskip("matplotlib", reason="matplotlib comes with the [docs] extra")
    single, ddp = reported
    runs = [
        _run(config, round_=round_, threads_per_process=single if config.endswith("single") else ddp)
        for round_ in (1, 2)
        for config in ("fp32:single", "amp_bf16:single", "fp32:ddp")
    ]
    runs.append(_run("fp32:deepspeed:2", status="skipped", zero_stage=2, threads_per_process=None))
    document = _document(runs)
    document["settings"]["threads"] = 4
    prose = " ".join(_render_document(tmp_path, document)[Path("training_configurations.md")].split())
    stated = (
        "Threads are matched: every run had 4 torch threads in all, a single process all of them and each of the "
        "2 processes of a multi-process run 2"
    )
    assert stated in prose
    assert ("(each process's torch reported them at the end of its run)" in prose) is (reported == (4, 2))
    assert "A single process runs torch on 4 threads over the machine's 2 cores" in prose
