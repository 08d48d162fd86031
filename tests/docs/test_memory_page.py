"""The memory page ("Memory: what fits, and what it costs"): its generated tables hold the ZeRO
paper's and Korthikanti et al.'s figures, a measured column, and the calculator's answers; its
code prints what the page says it prints."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

from docs_support import DOCS_SOURCE
from methods_tools import memory_page, pages
from methods_tools.memory_page import (
    ACTIVATIONS,
    CONFIGURATIONS,
    MEASURED_AS,
    NOT_MEASURED,
    NOT_MEASURED_WHY,
    PARTS,
    render_memory,
)

TABLE = PARTS / "configurations.md.inc"
ACTIVATION_TABLE = PARTS / "activations.md.inc"
EXAMPLES = PARTS / "examples.md.inc"


def rendered(metadata: Path | None, tmp_path: Path) -> dict[Path, str]:
    generated = pages.generate(
        tmp_path / "src", metadata_root=metadata, results_root=tmp_path / "none", generators=(render_memory,)
    )
    assert generated.problems == []
    return dict(generated.outputs)


def rows(text: str) -> dict[str, list[str]]:
    """The table's rows by their configuration's label (a card link's text where it has one)."""
    out = {}
    for line in text.splitlines():
        if not line.startswith("| ") or line.startswith("| Configuration") or line.startswith("| Memory"):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        label = re.sub(r"^\{doc\}`(.*?) </method_cards/[\w]+>`$", r"\1", cells[0])
        out[label.replace("\\", "")] = cells
    return out


def test_the_table_has_a_row_per_configuration_with_the_papers_bytes(synthetic_metadata, tmp_path):
    table = rows(rendered(synthetic_metadata, tmp_path)[TABLE])
    assert list(table) == [c.label for c in CONFIGURATIONS]
    # (weights + gradients + optimizer state, on each device, at N = 8, in host memory)
    shown = {label: (cells[1], cells[2].strip("*"), cells[3], cells[4]) for label, cells in table.items()}
    # the ZeRO paper's Figure 1: 2 + 2 + K, then K, the gradients and the weights over N_d (N = 8)
    assert shown["Mixed precision, fp32 master weights, Adam"] == ("2 + 2 + 12", "16", "16", "0")
    assert shown["ZeRO-1, mixed precision"] == ("2 + 2 + 12/N", "4 + 12/N", "5.5", "0")  # 4 + 12/8
    assert shown["ZeRO-2, mixed precision"] == ("2 + 2/N + 12/N", "2 + 14/N", "3.75", "0")  # 2 + 14/8
    assert shown["ZeRO-3, mixed precision"] == ("2/N + 2/N + 12/N", "16/N", "2", "0")
    # ZeRO-Offload at stage 2: the 16-bit weights stay; the host keeps (2 + 12)/N
    assert shown["ZeRO-2, optimizer offload"] == ("2 + 0 + 0", "2", "2", "14/N")
    # fp32: 4 + 4 and Adam's two moments (8) or SGD's momentum (4)
    assert shown["fp32, Adam"][:2] == ("4 + 4 + 8", "16")
    assert shown["fp32, SGD with momentum"][:2] == ("4 + 4 + 4", "12")
    # autocast: fp32 weights (and their 16-bit copies), gradients and AdamW state
    assert shown["AMP (autocast), AdamW"] == ("(4 + 2) + 4 + 8", "18", "18", "0")
    assert shown["FSDP, AMP"] == ("(4/N + 2/N) + 4/N + 8/N", "18/N", "2.25", "0")
    # LoRA with f = 0.01 in the N = 8 column: 4 + 2 + (4 + 8) × 0.01
    assert shown["LoRA, AMP"] == ("(4 + 2) + 4f + 8f", "6 + 12f", "6.12", "0")


def test_the_activations_table_is_korthikantis(synthetic_metadata, tmp_path):
    table = rows(rendered(synthetic_metadata, tmp_path)[ACTIVATION_TABLE])
    assert list(table) == [c.label for c in ACTIVATIONS]
    per_layer = {label: cells[1] for label, cells in table.items()}
    # section 4: sbh(34 + 5as/h) in 16 bits; 2sbh kept per layer with full recomputation;
    # 34sbh with the attention scores recomputed (their selective recomputation)
    assert per_layer["16-bit: AMP, mixed or half precision"] == "sbh·(34 + 5·as/h)"
    assert per_layer["16-bit, attention scores recomputed (FlashAttention)"] == "34·sbh"
    assert per_layer["16-bit, activation checkpointing"].startswith("2·sbh, and one layer's sbh·(34 + 5·as/h)")
    # fp32: the 16 values of s·b·h and 2 of a·s²·b at 4 bytes, the two 1-byte masks unchanged
    assert per_layer["fp32"] == "sbh·(66 + 9·as/h)"


PARAMETERS = 1000  # the model of the results file below: 1,000 parameters and 20 buffer values


def _run(config: str, world: int, weights: int, gradients: int | None, optimizer: int) -> dict:
    """A successful run of ``config`` whose process held these tensor bytes at its peak."""
    precision, parallel = config.split(":")[:2]
    return {
        "config": config,
        "precision": precision,
        "parallel": parallel,
        "zero_stage": int(config.split(":")[2][0]) if parallel == "deepspeed" else None,
        "world_size": world,
        "round": 1,
        "status": "ok",
        "reason": None,
        "note": None,
        "wall_s": 2.0,
        "epoch_s": [1.0, 1.0],
        "samples": 64,
        "throughput": 32.0,
        "peak_memory_bytes": 2**28,
        "memory_kind": "cpu_peak_rss",
        "peak_memory_per_device_bytes": [2**28] * world,
        "cuda_max_reserved_bytes": None,
        "model_memory_bytes": weights,
        "parameters": PARAMETERS,
        "tensor_memory": {
            "peak_bytes": weights + (gradients or 0) + optimizer + 5000,
            "weights_bytes": weights,
            "gradients_bytes": gradients,
            "optimizer_bytes": optimizer,
            "activations_bytes": 5000,
            "how": "cpu_profiler",
            "warmup_batches": 1,
            "batches": 2,
        },
        "threads_per_process": 2 // world,
        "gpu_utilization": None,
        "gpu_utilization_reason": "no GPU",
        "accuracy": 0.5,
        "loss": 1.0,
    }


def _results(tmp_path: Path) -> Path:
    """A comparison's file: fp32 in one process (4,080 + 4,000 + 4,000 bytes: 12.08 a parameter,
    the accounting's 12) and ZeRO-2 on 2 processes holding whole gradients (4,080 + 4,000 + 2,000:
    10.08, where the accounting's 4 + 4/2 + 4/2 is 8)."""
    from methods_tools import compare

    runs = [_run("fp32:single", 1, 4080, 4000, 4000), _run("fp32:deepspeed:2", 2, 4080, 4000, 2000)]
    configs = compare.parse_configs("fp32:single,fp32:deepspeed:2")
    document = {
        "schema_version": 2,
        "environment": {
            "hardware": "Test CPU, 2 cores",
            "device_type": "cpu",
            "device_name": "Test CPU",
            "device_count": 1,
            "cpu_model": "Test CPU",
            "cpu_count": 2,
            "torch": "2.13.0",
            "cuda": None,
            "python": "3.11",
            "platform": "Linux",
            "date": "2026-12-07T10:00:00Z",
            "load_average": [0.5, 0.5, 0.5],
            "torch_threads": 2,
            "load_average_end": [0.5, 0.5, 0.5],
        },
        "settings": {
            "model": "resnet20",
            "data": "digits",
            "image_size": 8,
            "epochs": 2,
            "batch_size": 32,
            "max_batches": 1,
            "nproc": 2,
            "seed": 0,
            "lr": 0.05,
            "repeats": 1,
            "threads": 2,
            "command": "python tools/compare_training.py",
        },
        "runs": runs,
        "summary": compare.summarize(runs, configs),
    }
    results = tmp_path / "results"
    results.mkdir()
    (results / "cpu-test-2026-12-07.json").write_text(json.dumps(document))
    return results


def _generate(metadata: Path, tmp_path: Path, results: Path) -> pages.Generated:
    return pages.generate(tmp_path / "src", metadata_root=metadata, results_root=results, generators=(render_memory,))


def test_every_row_has_a_measured_column_that_shows_a_measurement_where_there_is_one(
    synthetic_metadata, tmp_path, monkeypatch
):
    """Without a results file the rows the comparison measures say "not measured yet", the rest
    why they are not measured; with one, a row shows its bytes per parameter beside the accounting
    of the configuration that was measured, and a ratio outside the band must give its reason."""
    for part in (TABLE, ACTIVATION_TABLE):
        table = rows(rendered(synthetic_metadata, tmp_path)[part])
        for key, cells in zip(
            [c.key for c in (CONFIGURATIONS if part == TABLE else ACTIVATIONS)], table.values(), strict=True
        ):
            assert cells[-1] == (NOT_MEASURED if key in MEASURED_AS else NOT_MEASURED_WHY[key])
    results = _results(tmp_path)
    monkeypatch.delitem(memory_page.OUTSIDE_BAND, "zero2")
    generated = _generate(synthetic_metadata, tmp_path, results)
    assert generated.problems == [
        "tools/methods_tools/memory_page.py: zero2: measured 1.26x the accounting (cpu-test-2026-12-07.json), "
        "outside the ±10% band — say why in OUTSIDE_BAND in methods_tools/memory_page.py, or fix the accounting"
    ]


def test_a_ratio_outside_the_band_shows_its_reason_and_a_reason_inside_it_is_refused(
    synthetic_metadata, tmp_path, monkeypatch
):
    results = _results(tmp_path)
    monkeypatch.setitem(memory_page.BAND_NOTES, "one bucket", "every gradient fits one bucket")
    monkeypatch.setitem(memory_page.OUTSIDE_BAND, "zero2", ("one bucket",))
    outputs = _generate(synthetic_metadata, tmp_path, results).outputs
    table = rows(outputs[TABLE])
    assert table["fp32, SGD with momentum"][-1] == "fp32:single: 12.1 B, 1.01x the accounting's 12"
    assert table["ZeRO-2, mixed precision"][-1] == (
        "fp32:deepspeed:2: 10.1 B, 1.26x the accounting's 8; outside ±10%: one bucket (below)"
    )
    assert table["ZeRO-1, mixed precision"][-1] == NOT_MEASURED  # its configuration is not in the file
    prose = " ".join(outputs[TABLE].split())
    assert "Measured with `tools/compare_training.py` on Test CPU, 2 cores, 2026-12-07" in prose
    assert "(results file `results/cpu-test-2026-12-07.json`)" in prose
    assert "Outside the band, on this model: - **one bucket:** every gradient fits one bucket." in prose
    assert "whole gradients" not in prose  # a note no measured row gives is not shown
    monkeypatch.setitem(memory_page.OUTSIDE_BAND, "fp32_sgd", ("one bucket",))
    assert _generate(synthetic_metadata, tmp_path, results).problems[0] == (
        "tools/methods_tools/memory_page.py: fp32_sgd: measured 1.01x the accounting, inside the ±10% band, yet "
        "OUTSIDE_BAND gives a reason — delete it from methods_tools/memory_page.py (cpu-test-2026-12-07.json)"
    )


def test_cards_are_linked_only_where_the_metadata_has_them(synthetic_metadata, tmp_path):
    synthetic = rendered(synthetic_metadata, tmp_path)[TABLE]
    assert "{doc}" not in synthetic  # the synthetic metadata has none of these cards
    real = rendered(None, tmp_path)[TABLE]
    assert "{doc}`FSDP, AMP </method_cards/fsdp>`" in real
    real += rendered(None, tmp_path)[ACTIVATION_TABLE]
    keys = {c.card for c in CONFIGURATIONS + ACTIVATIONS if c.card}
    for key in keys:
        linked = f"</method_cards/{key}>`" in real
        assert linked == (DOCS_SOURCE / "method_cards" / f"{key}.md").exists(), key


def test_the_worked_examples_are_the_calculators_answers(synthetic_metadata, tmp_path):
    text = rendered(synthetic_metadata, tmp_path)[EXAMPLES]
    gpt2 = text.split("### ")[1]
    # GPT-2 small, AMP, AdamW, one device: 124,439,808 × 18 bytes = 2.24 GB of model states;
    # activations, s = 1024, b = 16, h = 768, a = 12, 12 layers:
    # (12,582,912 × 34 + 5 × 12 × 1024² × 16) × 12 = 17.21 GB; 19.45 GB in all
    assert "| One device | 2.2 GB | none | 19.5 GB, ✗ too big |" in gpt2
    # a ZeRO stage over one device holds what one device holds: not a row of its own
    assert "| ZeRO-1 |" not in gpt2 and "| ZeRO-2 |" not in gpt2
    assert gpt2.count("**The calculator's first choice:**") == 1
    assert len(re.findall(r"^### ", text, flags=re.M)) == len(memory_page.EXAMPLES)


def test_the_pages_code_prints_what_the_page_says():
    page = (DOCS_SOURCE / "memory.md").read_text(encoding="utf-8")
    (code,) = re.findall(r"```python\n(.*?)```", page, flags=re.S)
    printed = re.search(r"^# (.*)$", code, flags=re.M).group(1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "memory.md", "exec"), {})
    assert out.getvalue().strip() == printed


def test_the_page_includes_its_generated_parts():
    page = (DOCS_SOURCE / "memory.md").read_text(encoding="utf-8")
    included = set(re.findall(r"^```\{include\} (tables/memory/\S+)$", page, flags=re.M))
    assert included == {p.as_posix() for p in (TABLE, ACTIVATION_TABLE, EXAMPLES)}
