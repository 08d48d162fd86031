"""The composability matrix's loops and models sections (methods_tools/matrix_loops.py) and their
rendering (methods_tools/loops_pages.py): each cell's outcome by its definition (acted from the
method log, refused with the reason before the first batch or by the library's own refusal, failed
with the error's first line, not run with why), the results file's sections valid and merged into
it, and the Composability page's tables and the cards' "Works in" lines rendered from a small fake
results file.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from methods_tools import matrix, matrix_loops
from methods_tools.composability_pages import SNIPPETS
from methods_tools.docsgen import Site, jinja_environment, sorted_methods
from methods_tools.loops_pages import LOOPS_INCLUDE, render_loops, section_view
from methods_tools.matrix import Settings
from methods_tools.matrix_loops import LoopCell, ModelCell, settle
from methods_tools.pages import DOCS_SOURCE, TEMPLATE_DIR
from methods_tools.results import composability_problems

from algorithms import LabelSmoothing
from algorithms.core import Trainer
from algorithms.metadata import load_all_metadata


def _records():
    return {k: r for k, r in load_all_metadata().items() if r.kind == "method"}


def _train_one_batch(probe, method=None, **options):
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 3))
    batches = [(torch.randn(4, 3, 2, 2), torch.randint(0, 3, (4,)))]
    trainer = Trainer(model, batches, "1ba", algorithms=[probe, method or LabelSmoothing(0.1)], seed=0, **options)
    trainer.fit()
    return trainer.method_log


# --------------------------------------------------------------------------------------------- outcomes


def test_a_method_that_acted_is_recorded_with_its_counters_from_the_method_log():
    entry = settle(_train_one_batch, "LabelSmoothing")
    assert entry["outcome"] == "acted" and entry["activity"] == {"batches_smoothed": 1} and entry["detail"] is None


def test_a_method_that_did_nothing_is_inactive_with_its_own_warning():
    from algorithms import LowPrecisionLayerNorm

    entry = settle(lambda probe: _train_one_batch(probe, LowPrecisionLayerNorm()), "LowPrecisionLayerNorm")
    assert entry["outcome"] == "inactive"
    assert entry["detail"].startswith("LowPrecisionLayerNorm: precision='fp32' runs no autocast")


def test_an_error_before_the_first_batch_is_a_refusal_with_its_reason():
    def refuse(probe):
        raise ValueError("SAM under this loop: why\nmore lines")

    assert settle(refuse, "SAM") == {
        "outcome": "refused",
        "activity": {},
        "detail": "ValueError: SAM under this loop: why",
        "wall_s": pytest.approx(0, abs=1),
    }


def test_an_adapter_that_raises_fails_the_cell_with_the_errors_first_line():
    def broken(probe):
        raise RuntimeError("the adapter broke\ntraceback text")

    entry = settle(broken, "CutMix")
    assert (entry["outcome"], entry["detail"]) == ("failed", "RuntimeError: the adapter broke")


def test_a_value_error_during_training_fails_unless_the_library_raised_it():
    def torch_error(probe):  # raised by torch at the first batch: a bug, not a refusal
        return _train_one_batch(
            probe, loss_fn=lambda logits, target: torch.nn.functional.cross_entropy(logits, target[:1])
        )

    entry = settle(torch_error, "LabelSmoothing")
    assert entry["outcome"] == "failed" and entry["detail"].startswith("ValueError: Expected input batch_size")

    from algorithms import SeqLengthWarmup

    def refused_at_its_batch(probe):  # the method's own one-line refusal of a batch it cannot cut
        return _train_one_batch(probe, SeqLengthWarmup())

    entry = settle(refused_at_its_batch, "SeqLengthWarmup")
    assert entry["outcome"] == "refused"


def test_a_loop_cell_records_the_adapters_refusal_and_the_loop_it_ran_in(monkeypatch):
    pytest.importorskip("transformers")
    pytest.importorskip("lightning")
    records = _records()
    for loop, reason in (("hf_trainer", "SAM under MethodsTrainer"), ("lightning", "SAM under Lightning")):
        entry = matrix_loops.run_loop_cell(LoopCell(loop, "sam"), Settings(), records)
        assert entry["outcome"] == "refused" and entry["detail"].startswith(f"ValueError: {reason}")
        assert (entry["loop"], entry["method"], entry["workload"], entry["precision"]) == (
            loop,
            "sam",
            "vision",
            "fp32",
        )


def test_a_cell_whose_runner_raises_fails_and_a_missing_framework_is_not_run(monkeypatch):
    records = _records()

    def broken(*args):
        raise RuntimeError("boom")

    monkeypatch.setitem(matrix_loops.RUNNERS, "loop", broken)
    entry = matrix_loops.run_loop_cell(LoopCell("loop", "cutmix"), Settings(), records)
    assert (entry["outcome"], entry["detail"]) == ("failed", "RuntimeError: boom")
    monkeypatch.setattr(matrix_loops.importlib.util, "find_spec", lambda name: None)
    entry = matrix_loops.run_loop_cell(LoopCell("lightning", "cutmix"), Settings(), records)
    assert entry["outcome"] == "not_run" and entry["detail"].startswith("lightning is not installed")
    entry = matrix_loops.run_model_cell(ModelCell("torchvision_timm", "blurpool"), Settings(), records)
    assert (entry["outcome"], entry["detail"]) == ("not_run", matrix_loops.TESTED_ELSEWHERE)


def test_the_plans_cover_every_method_in_every_loop_and_the_language_methods_on_every_model():
    records = _records()
    loops = matrix_loops.plan_loop_cells(records)
    assert len(loops) == len(records) * len(matrix_loops.LOOPS)
    models = matrix_loops.plan_model_cells(records)
    nlp = [k for k, r in records.items() if "nlp" in r.domains]
    assert {(c.model, c.method) for c in models if c.model in matrix_loops.MODELS} == {
        (m, k) for m in matrix_loops.MODELS for k in nlp
    }
    assert {c.method for c in models if c.model == "torchvision_timm"} == set(matrix_loops.VISION_MODEL_METHODS)


# --------------------------------------------------------------------------------------------- the results file


def _section(cells):
    return {
        "versions": {"torch": "2.13.0"},
        "command": "test",
        "date": "2026-12-07T00:00:00Z",
        "wall_s": 1.0,
        "cells": cells,
    }


def _loop_cell(loop, method, outcome="acted", detail=None):
    return {
        "loop": loop,
        "method": method,
        "workload": "vision",
        "precision": "fp32",
        "outcome": outcome,
        "activity": {"batches_mixed": 6} if outcome == "acted" else {},
        "detail": detail,
        "wall_s": 0.1,
    }


def _document():
    cell = {
        "kind": "solo",
        "methods": ["cutmix"],
        "precision": "fp32",
        "parallel": "single",
        "outcome": "runs",
        "seen": [],
        "missing": [],
        "detail": None,
        "note": None,
        "wall_s": 0.1,
    }
    loops = [_loop_cell(loop, "cutmix") for loop in ("trainer", "loop", "lightning")]
    loops.append(_loop_cell("hf_trainer", "cutmix", "refused", "ValueError: not <b>here</b>"))
    models = [
        {
            "model": "gpt2",
            "method": "alibi",
            "precision": "fp32",
            "outcome": "acted",
            "activity": {"n": 1},
            "detail": None,
            "wall_s": 0.1,
        },
        {
            "model": "roberta",
            "method": "alibi",
            "precision": "fp32",
            "outcome": "failed",
            "activity": {},
            "detail": "RuntimeError: broke",
            "wall_s": 0.1,
        },
    ]
    return {
        "$schema": "x",
        "schema_version": 1,
        "environment": {
            "hardware": "Test CPU",
            "device_type": "cpu",
            "torch": "2.13.0",
            "deepspeed": None,
            "python": "3.11",
            "platform": "linux",
            "date": "2026-12-07T00:00:00Z",
        },
        "settings": Settings().as_dict(),
        "commands": ["test"],
        "wall_s": 1.0,
        "cells": [cell],
        "loops": _section(loops),
        "models": _section(models),
    }


def test_the_sections_match_the_schema_and_a_bad_cell_is_named():
    document = _document()
    assert composability_problems(document) == []
    bad = copy.deepcopy(document)
    bad["loops"]["cells"][0]["outcome"] = "ran"
    assert composability_problems(bad)
    both = copy.deepcopy(document)
    both["loops"]["cells"][0]["model"] = "gpt2"  # a cell is a loop's or a model's, not both
    assert composability_problems(both)


def test_merging_replaces_only_the_kinds_and_sections_run():
    old = _document()
    new_loops = _section([_loop_cell("trainer", "cutmix", "failed", "RuntimeError: x")])
    merged = matrix.merge_document(old, [], [], {"loops": new_loops})
    assert merged["cells"] == old["cells"] and merged["models"] == old["models"] and merged["loops"] == new_loops


def test_merge_runs_only_the_sections_into_the_existing_file(tmp_path, monkeypatch, capsys):
    out = tmp_path / "m.json"
    document = _document()
    del document["loops"]
    out.write_text(json.dumps(document))

    def fake_section(name, settings, records, progress, only=()):
        return {"versions": {}, "wall_s": 0.5, "cells": [_loop_cell("trainer", "cutmix")]}

    monkeypatch.setattr(matrix_loops, "run_section", fake_section)
    assert matrix.main(["--kinds", "loops", "--merge", "--out", str(out)]) == 0
    written = json.loads(out.read_text())
    assert written["cells"] == document["cells"] and written["models"] == document["models"]
    assert written["loops"]["cells"] == [_loop_cell("trainer", "cutmix")]
    assert written["commands"] == document["commands"]  # the cells' command; the section has its own
    assert written["loops"]["command"] == f"python tools/composability_matrix.py --kinds loops --merge --out {out}"
    assert "loops: 1 cells" in capsys.readouterr().out
    assert matrix.main(["--kinds", "loops", "--merge", "--out", str(tmp_path / "none.json")]) == 1
    assert "no results file to merge into" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------- rendering


@pytest.fixture
def site(tmp_path):
    records = load_all_metadata()
    s = Site(
        source_dir=DOCS_SOURCE,
        out_dir=tmp_path,
        env=jinja_environment(TEMPLATE_DIR),
        methods=sorted_methods(records),
        results=[],
        matrices=[(Path("test-cpu.json"), _document())],
    )
    for r in s.methods:
        if r.kind == "method":
            s.rendered[SNIPPETS / f"{r.key}.md.inc"] = f"the {r.key} snippet\n"
    return s


def test_the_page_shows_each_loop_and_model_with_notes_for_what_did_not_act(site):
    page = render_loops(site)[LOOPS_INCLUDE]
    assert "| Method | Trainer | own Loop | HF Trainer | Lightning |" in page
    assert "| CutMix | ✓ | ✓ | ⊘ refused (loops note 1) | ✓ |" in page
    assert "1. CutMix in HF Trainer: `ValueError: not <b>here</b>`." in page
    assert "| Method | GPT-2 (causal LM) | RoBERTa (sequence classification) |" in page
    assert "| ALiBi | ✓ | ✗ failed (models note 1) |" in page
    assert "Cells: 3 of 4 acted, 1 ⊘ refused" in page


def test_each_card_says_where_it_works_from_the_results_file(site):
    outputs = render_loops(site)
    cutmix = outputs[SNIPPETS / "cutmix.md.inc"]
    assert cutmix.startswith("the cutmix snippet\n")
    assert (
        "**Works in** (Test CPU, 2026-12-07): Trainer ✓, own Loop ✓, HF Trainer ⊘ refused (ValueError: not "
        "\\<b\\>here\\</b\\>), Lightning ✓." in cutmix  # the reason escaped: Markdown text, not HTML
    )
    alibi = outputs[SNIPPETS / "alibi.md.inc"]
    assert "has no loops cells in the results file of Test CPU, 2026-12-07" in alibi
    assert (
        "**On real models** (Test CPU, 2026-12-07): GPT-2 (causal LM) ✓, "
        "RoBERTa (sequence classification) ✗ failed (RuntimeError: broke)." in alibi
    )
    mixup = outputs[SNIPPETS / "mixup.md.inc"]
    assert "On real models" not in mixup


def test_section_view_counts_each_outcome():
    records = load_all_metadata()
    methods = [r for r in sorted_methods(records) if r.kind == "method"]
    view = section_view("loops", "f.json", _document()["loops"], methods)
    assert view.counts == {"acted": 3, "inactive": 0, "refused": 1, "failed": 0, "not_run": 0}
    assert [name for _, name, _ in view.rows] == ["CutMix"]


def test_a_namespace_record_is_enough_for_the_precision():
    assert matrix_loops.method_precision(SimpleNamespace(raw={"workload": {"precision": "amp_bf16"}})) == "amp_bf16"
    assert matrix_loops.method_precision(SimpleNamespace(raw={})) == "fp32"
