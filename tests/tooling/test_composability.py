"""The composability matrix (tools/composability_matrix.py): each effect decided by its definition in
the metadata schema, each outcome by the results schema's, and the committed results file equal to
what the current code computes, cell by cell.

A sample of the matrix runs here (matrix.sample_cells): every cell of one method, the parallel
cells included (one torchrun launch per distributed mode), every pair a method's interactions name,
and a fixed dozen of the other pairs, so the suite's cost grows with the catalog, not its square;
`nox -s matrix` runs every cell.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import MappingProxyType, SimpleNamespace

import pytest
import torch
from methods_tools import matrix
from methods_tools.matrix import Batch, Cell, CellRun, Settings, decide, effects_seen
from methods_tools.results import composability_problems, discover_composability, load_composability

from algorithms.core.options import MATRIX_PARALLELS, PRECISIONS
from algorithms.metadata import load_all_metadata

RERUN = "run `nox -s matrix` and commit the results file it writes"


def _batch(n=4, size=8, *, model=None, target=None):
    loader = torch.rand(n, 3, size, size, generator=torch.Generator().manual_seed(0))
    return Batch(
        loader_input=loader,
        model_input=loader.clone() if model is None else model,
        loss_target=torch.arange(n) % 3 if target is None else target,
        loss=1.0,
    )


# --------------------------------------------------------------------------------------------- effects


def test_an_unchanged_batch_shows_no_effect():
    assert effects_seen([_batch(), _batch()]) == []


def test_changed_inputs_needs_the_loaders_shape_and_other_values():
    b = _batch()
    changed = b.loader_input.clone()
    changed[0, 0, 0, 0] += 1
    assert "changed_inputs" in effects_seen([_batch(), Batch(b.loader_input, changed, b.loss_target, 1.0)])
    # a smaller image differs from the loader's, but not at the loader's shape
    assert "changed_inputs" not in effects_seen(
        [Batch(b.loader_input, b.loader_input[:, :, :4, :4] + 1, b.loss_target, 1.0)]
    )
    # the same values in another dtype (a precision's cast) are no change the method made
    assert "changed_inputs" not in effects_seen([Batch(b.loader_input, b.loader_input.double(), b.loss_target, 1.0)])


def test_smaller_inputs_needs_a_smaller_spatial_size():
    b = _batch(size=8)
    assert effects_seen([Batch(b.loader_input, b.loader_input[:, :, :6, :], b.loss_target, 1.0)]) == ["smaller_inputs"]
    assert effects_seen([Batch(b.loader_input, b.loader_input[:, :, :6, :6], b.loss_target, 1.0)]) == ["smaller_inputs"]
    # fewer rows or fewer channels are not a smaller image
    assert "smaller_inputs" not in effects_seen([Batch(b.loader_input, b.loader_input[:2], b.loss_target, 1.0)])
    assert "smaller_inputs" not in effects_seen([Batch(b.loader_input, b.loader_input[:, :1], b.loss_target, 1.0)])
    # larger in one dim, smaller in the other: not smaller
    wider = torch.zeros(4, 3, 6, 10)
    assert "smaller_inputs" not in effects_seen([Batch(b.loader_input, wider, b.loss_target, 1.0)])


def test_fewer_examples_needs_fewer_rows():
    b = _batch(n=4)
    assert effects_seen([_batch(), Batch(b.loader_input, b.loader_input[:3], b.loss_target[:3], 1.0)]) == [
        "fewer_examples"
    ]
    assert "fewer_examples" not in effects_seen([_batch(n=4), _batch(n=2)])  # the loader's own size varies


def test_mixed_targets_needs_a_row_with_two_classes_above_its_minimum():
    one_hot = torch.eye(3)[torch.tensor([0, 1, 2, 0])]
    assert "mixed_targets" not in effects_seen([_batch(target=one_hot)])
    mixed = one_hot.clone()
    mixed[1] = torch.tensor([0.3, 0.7, 0.0])
    assert "mixed_targets" in effects_seen([_batch(target=one_hot), _batch(target=mixed)])
    # smoothing raises every entry alike: one class above the minimum, not two
    smoothed = one_hot * 0.9 + 0.1 / 3
    assert "mixed_targets" not in effects_seen([_batch(target=smoothed)])
    # a second class within the margin of the minimum is not mixed in
    barely = one_hot.clone()
    barely[0, 1] = matrix.MIXED_MARGIN / 2
    assert "mixed_targets" not in effects_seen([_batch(target=barely)])
    # class indices and targets without a class dim are never mixed
    assert "mixed_targets" not in effects_seen([_batch(target=torch.tensor([0, 1, 2, 0]))])
    assert "mixed_targets" not in effects_seen([_batch(target=torch.tensor([0.3, 0.7, 0.5, 0.5]))])
    # dense targets: classes on dim 1, one row per position
    dense = torch.zeros(2, 3, 2, 2)
    dense[:, 0] = 1
    assert "mixed_targets" not in effects_seen([_batch(n=2, target=dense)])
    dense[1, :, 1, 1] = torch.tensor([0.5, 0.5, 0.0])
    assert "mixed_targets" in effects_seen([_batch(n=2, target=dense)])


def test_smoothed_targets_needs_every_target_float_and_above_zero():
    one_hot = torch.eye(3)[torch.tensor([0, 1, 2, 0])]
    smoothed = one_hot * 0.9 + 0.1 / 3
    assert effects_seen([_batch(target=smoothed), _batch(target=smoothed)]) == ["smoothed_targets"]
    assert "smoothed_targets" not in effects_seen([_batch(target=smoothed), _batch(target=one_hot)])
    assert "smoothed_targets" not in effects_seen([_batch(target=smoothed), _batch(target=torch.tensor([1, 2, 1, 1]))])
    assert "smoothed_targets" not in effects_seen([Batch(torch.zeros(1), torch.zeros(1))])  # no target seen


def test_changed_model_needs_a_module_class_or_a_parameters_shape_dtype_or_layout_to_differ():
    """By the schema's definition, against the model the run began with (alone) or the other
    method's model alone (in a pair)."""

    def model():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten())

    def seen(after, before=None, reference=None):
        b = _batch()
        b.model_before, b.model_after = matrix.model_signature(before or model()), matrix.model_signature(after)
        return "changed_model" in effects_seen([b], reference)

    assert not seen(model())  # the same classes and parameters (values do not count)
    relu = model()
    relu[1] = torch.nn.GELU()
    assert seen(relu)  # a module changed class
    wider = model()
    wider[0] = torch.nn.Conv2d(3, 5, 3)
    assert seen(wider)  # a parameter changed shape
    assert seen(model().double())  # dtype
    assert seen(model().to(memory_format=torch.channels_last))  # layout of the 4-D weight
    assert not seen(model().to(memory_format=torch.channels_last), before=model().to(memory_format=torch.channels_last))
    other = _batch()
    other.model_after = matrix.model_signature(relu)
    assert not seen(relu, reference=[other])  # the other method alone made that change
    assert seen(wider, reference=[other])


def test_changed_weights_compares_the_evaluated_parameters_with_the_baseline_or_the_reference():
    def batch(weights, baseline=None):
        b = _batch()
        b.eval_weights, b.baseline_weights = weights, baseline
        return b

    w = {"w": torch.ones(2)}
    assert not effects_seen([batch(w, {"w": torch.ones(2)})])
    assert "changed_weights" in effects_seen([batch(w, {"w": torch.zeros(2)})])
    assert "changed_weights" in effects_seen([batch(w, {"v": torch.ones(2)})])  # other parameters
    assert not effects_seen([batch(w)])  # no baseline: nothing can be decided
    assert "changed_weights" not in effects_seen([batch(w, {"w": torch.zeros(2)})], [batch({"w": torch.ones(2)})])
    assert "changed_weights" in effects_seen([batch(w)], [batch({"w": torch.full((2,), 2.0)})])


def test_smaller_inputs_counts_shorter_token_sequences():
    tokens = torch.randint(0, 9, (4, 8))
    assert effects_seen([Batch(tokens, tokens[:, :4])]) == ["smaller_inputs"]
    assert effects_seen([Batch(tokens, tokens.reshape(8, 4))]) == ["smaller_inputs"]  # more, shorter rows
    assert "smaller_inputs" not in effects_seen([Batch(tokens, tokens[:2])])


def test_a_cell_evaluates_after_training_and_trains_a_baseline_for_changed_weights(monkeypatch):
    """A real cell of the vision workload: the evaluated weights are recorded, and a method whose
    effect is changed_weights is decided against the same run without it."""
    records = {k: r for k, r in load_all_metadata().items() if r.kind == "method"}
    # a method that leaves the model's modules as they are, so its weights and the baseline's match by name
    key = next(
        k for k in sorted(records) if "vision" in records[k].domains and "changed_model" not in records[k].observable
    )
    run = matrix.run_cell(Cell("solo", (key,)), Settings(steps=2, epochs=1), records)
    assert run.error_type is None and run.batches[-1].eval_weights and run.batches[-1].baseline_weights is None
    monkeypatch.setitem(
        records,
        key,
        SimpleNamespace(**{**vars(records[key]), "observable": (*records[key].observable, "changed_weights")}),
    )
    monkeypatch.setattr(matrix, "_BASELINE_WEIGHTS", {})
    run = matrix.run_cell(Cell("solo", (key,)), Settings(steps=2, epochs=1), records)
    baseline = run.batches[-1].baseline_weights
    assert baseline and baseline.keys() == run.batches[-1].eval_weights.keys()
    assert ("vision", "fp32", "single") in matrix._BASELINE_WEIGHTS


def test_the_workloads_models_hold_what_their_domains_methods_change():
    """The vision cells' model has every module class a vision method targets; the nlp cells run
    the reference transformer on dict batches with next-token labels."""
    from algorithms.models.resnet import BasicBlock

    work = matrix.WORKLOADS["vision"](Settings(), 0)
    classes = {type(m) for m in work.model.modules()}
    for cls in (
        torch.nn.Conv2d,
        torch.nn.BatchNorm2d,
        torch.nn.MaxPool2d,
        BasicBlock,
        torch.nn.GroupNorm,
        torch.nn.Dropout,
        torch.nn.Linear,
    ):
        assert cls in classes
    assert work.model(work.batches[0][0]).shape == (Settings().batch_size, matrix.NUM_CLASSES)
    assert work.model(torch.rand(2, 3, 5, 5)).shape == (2, matrix.NUM_CLASSES)  # any image size
    nlp = matrix.WORKLOADS["nlp"](Settings(), 0)
    batch = nlp.batches[0]
    assert (nlp.input_key, nlp.target_key) == ("input_ids", "labels")
    assert torch.equal(batch["input_ids"][:, 1:], batch["labels"][:, :-1])  # labels: the next token
    with torch.no_grad():
        assert float(nlp.loss_fn(nlp.model(batch["input_ids"]), batch["labels"])) > 0


def test_in_a_pair_each_methods_effect_is_decided_against_the_other_method_alone():
    """A pair's batches against the other method's solo run (same seeds, same draws): only what
    this method changed counts, including on images the other method made smaller."""
    b = _batch(size=8)
    small = b.loader_input[:, :, :6, :6].clone()  # the other method alone: smaller images
    other_alone = [Batch(b.loader_input, small, b.loss_target, 1.0)]
    changed = small.clone()
    changed[0, 0, 0, 0] += 1
    pair = [Batch(b.loader_input, changed, b.loss_target, 1.0)]
    assert effects_seen(pair, other_alone) == ["changed_inputs"]  # against the smaller images, not the loader's
    assert effects_seen(other_alone, other_alone) == []  # the other method's own change is not this one's
    assert effects_seen(pair) == ["smaller_inputs"]  # against the loader, only the size shows
    mixed = torch.tensor([[0.7, 0.3, 0.0], [1.0, 0.0, 0.0]])
    remixed = torch.tensor([[0.6, 0.4, 0.0], [1.0, 0.0, 0.0]])
    mixed_alone = [Batch(b.loader_input, b.loader_input, mixed, 1.0)]
    assert "mixed_targets" not in effects_seen(mixed_alone, mixed_alone)  # mixed already, by the other one
    assert "mixed_targets" in effects_seen([Batch(b.loader_input, b.loader_input, remixed, 1.0)], mixed_alone)
    smoothed = mixed * 0.9 + 0.1 / 3
    assert "smoothed_targets" in effects_seen([Batch(b.loader_input, b.loader_input, smoothed, 1.0)], mixed_alone)
    assert effects_seen(pair, other_alone * 2) == []  # runs of different lengths are not compared


def test_a_pairs_effects_are_named_per_method(monkeypatch):
    b = _batch(size=8)
    changed = b.loader_input.clone()
    changed[0, 0, 0, 0] += 1
    pair = CellRun(batches=[Batch(b.loader_input, changed, b.loss_target, 1.0)])
    references = {
        "a": [Batch(b.loader_input, changed, b.loss_target, 1.0)],  # a alone made the change
        "b": [Batch(b.loader_input, b.loader_input, b.loss_target, 1.0)],
    }
    entry = decide(Cell("pair", ("b", "a")), pair, RECORDS, references)
    # a's change is seen against b alone; b's mixed targets are not seen against a alone
    assert entry["seen"] == ["a.changed_inputs"] and entry["missing"] == ["b.mixed_targets"]


def test_nonfinite_losses_are_named_with_their_batch():
    good = _batch()
    assert matrix.nonfinite_loss([good, good]) is None
    assert (
        matrix.nonfinite_loss([good, Batch(good.loader_input, good.model_input, good.loss_target, float("nan"))])
        == "loss nan at batch 2"
    )


# --------------------------------------------------------------------------------------------- plan and outcomes


def _record(domains=("vision",), observable=("changed_inputs",), interactions=None, kind="method"):
    return SimpleNamespace(
        kind=kind,
        domains=tuple(domains),
        observable=tuple(observable),
        interactions=MappingProxyType(dict(interactions or {})),
    )


RECORDS = {
    "a": _record(
        observable=("changed_inputs",),
        interactions={"b": "A and B: a note.", "precision=fp16": "A in fp16.", "parallel=ddp": "A under DDP."},
    ),
    "b": _record(domains=("vision", "nlp"), observable=("mixed_targets",), interactions={"a": "B and A: a note."}),
    "c": _record(domains=("nlp",), observable=("smoothed_targets",)),
    "practice": _record(kind="best_practice"),
}


def test_the_plan_covers_every_method_and_every_ordered_pair_that_shares_a_domain():
    cells = matrix.plan_cells(RECORDS, parallels=("ddp", "fsdp"))
    by_kind = {k: [c for c in cells if c.kind == k] for k in matrix.KINDS}
    assert [c.methods for c in by_kind["solo"]] == [("a",), ("b",), ("c",)]
    assert [c.methods for c in by_kind["pair"]] == [("a", "b"), ("b", "a"), ("b", "c"), ("c", "b")]
    assert [(c.methods, c.precision) for c in by_kind["precision"]] == [((m,), p) for m in "abc" for p in PRECISIONS]
    # each parallel mode in fp32 and in amp_bf16: one launch per mode runs both
    assert [(c.methods, c.parallel, c.precision) for c in by_kind["parallel"]] == [
        ((m,), p, precision) for p in ("ddp", "fsdp") for precision in ("fp32", "amp_bf16") for m in "abc"
    ]
    assert len({c.label for c in cells}) == len(cells)  # a launch's results are keyed by the label
    assert [c.kind for c in matrix.plan_cells(RECORDS, kinds=("pair",))] == ["pair"] * 4


def test_only_plans_the_cells_that_hold_one_of_the_named_methods():
    cells = matrix.plan_cells(RECORDS, parallels=("ddp", "fsdp"), only=["c"])
    assert [(c.kind, c.methods) for c in cells] == [
        ("solo", ("c",)),
        ("pair", ("b", "c")),
        ("pair", ("c", "b")),
        *[("precision", ("c",))] * len(PRECISIONS),
        *[("parallel", ("c",))] * 4,
    ]
    assert matrix.plan_cells(RECORDS, parallels=("ddp",), only=["a", "c"]) == [
        c for c in matrix.plan_cells(RECORDS, parallels=("ddp",)) if {"a", "c"} & set(c.methods)
    ]


def test_precisions_plans_only_the_cells_in_those_precisions():
    cells = matrix.plan_cells(RECORDS, kinds=("parallel",), parallels=("ddp", "fsdp"), precisions=["amp_bf16"])
    assert [(c.methods, c.parallel, c.precision) for c in cells] == [
        ((m,), p, "amp_bf16") for p in ("ddp", "fsdp") for m in "abc"
    ]
    assert [c.label for c in cells[:1]] == ["parallel a ddp amp_bf16"]
    # solo and pair cells are fp32: none is in amp_bf16
    assert matrix.plan_cells(RECORDS, kinds=("solo", "pair"), precisions=["amp_bf16"]) == []
    assert [c.precision for c in matrix.plan_cells(RECORDS, kinds=("precision",), precisions=["amp_bf16"])] == [
        "amp_bf16"
    ] * 3


def test_precisions_merges_just_the_cells_in_them_and_keeps_every_fp32_cell():
    """The parallel cells added in amp_bf16 to a matrix that ran them in fp32 only: they go in at
    their places, every other cell (the fp32 parallel cells included) stays as it was, and the
    matrix's time counts them."""
    plan = matrix.plan_cells(RECORDS, parallels=("ddp",))
    bf16 = [c for c in plan if c.kind == "parallel" and c.precision == "amp_bf16"]
    old = {"cells": [_entry(c, "interaction") for c in plan if c not in bf16], "wall_s": 100.0}
    new_cells = [_entry(c, wall_s=2.0) for c in bf16]
    merged = matrix.merge_document(old, ["parallel"], new_cells, {}, records=RECORDS, precisions=["amp_bf16"])
    assert [(c["kind"], tuple(c["methods"]), c["precision"], c["parallel"]) for c in merged["cells"]] == [
        (c.kind, c.methods, c.precision, c.parallel) for c in plan
    ]
    assert [c for c in merged["cells"] if c["precision"] != "amp_bf16" or c["kind"] != "parallel"] == old["cells"]
    assert matrix._replaced(new_cells[0], ["parallel"], [], ["amp_bf16"])
    assert not matrix._replaced(old["cells"][-1], ["parallel"], [], ["amp_bf16"])  # ddp in fp32


def test_precisions_runs_and_merges_into_the_file_in_place(tmp_path, monkeypatch):
    """run_matrix with --precisions and --merge: only the cells in the named precision run, and the
    file's time is its old time with theirs added (none replaced)."""
    plan = matrix.plan_cells(RECORDS, parallels=("ddp",))
    bf16 = [c for c in plan if c.kind == "parallel" and c.precision == "amp_bf16"]
    ran = []

    def fake_run_cells(cells, settings, **kwargs):
        ran.extend(cells)
        return [_entry(c, wall_s=2.0) for c in cells]

    methods = {k: r for k, r in RECORDS.items() if r.kind == "method"}
    monkeypatch.setattr(matrix, "_method_records", lambda records=None: methods)
    monkeypatch.setattr(matrix, "runnable_parallels", lambda: (["ddp"], {}))
    monkeypatch.setattr(matrix, "run_cells", fake_run_cells)
    monkeypatch.setattr(matrix, "build_document", _unchecked_document)
    out = tmp_path / "m.json"
    old = {"environment": {}, "settings": Settings().as_dict(), "commands": ["first"], "wall_s": 100.0,
           "cells": [_entry(c) for c in plan if c not in bf16]}  # fmt: skip
    out.write_text(json.dumps(old))
    monkeypatch.setattr("methods_tools.results.load_composability", lambda path: json.loads(Path(path).read_text()))
    document = matrix.run_matrix(
        out, kinds=["parallel"], merge=True, command="second", precisions=["amp_bf16"], timeout_s=1.0
    )
    assert ran == bf16
    assert len(document["cells"]) == len(plan) and document["commands"] == ["first", "second"]
    assert document["wall_s"] == 100.0 + 2.0 * len(bf16)


def _unchecked_document(env, settings, commands, wall_s, cells, sections=None):
    return {"environment": env, "settings": settings.as_dict(), "commands": list(commands), "wall_s": wall_s,
            "cells": list(cells)}  # fmt: skip


def _entry(cell, outcome="runs", wall_s=1.0):
    return {**cell.as_dict(), "outcome": outcome, "seen": [], "missing": [], "detail": None, "note": None,
            "checks": [], "wall_s": wall_s}  # fmt: skip


def _adapter(where, key, method, wall_s=1.0):
    cell = {where: key, "method": method, "precision": "fp32", "outcome": "acted", "activity": {"n": 1}}
    return {**cell, **({"workload": "vision"} if where == "loop" else {}), "detail": None, "wall_s": wall_s}


def test_only_merges_the_named_methods_cells_in_plan_order_and_keeps_every_other_one():
    """A method added to a committed matrix (c): its cells go in at their places, a stale cell of
    it is replaced, nothing else changes, and the times count the new cells for the old."""
    plan = matrix.plan_cells(RECORDS, parallels=("ddp",))
    others = [c for c in plan if "c" not in c.methods]
    stale = Cell("solo", ("c",))
    old = {
        "cells": [_entry(c) for c in others] + [_entry(stale, "fails", wall_s=5.0)],
        "wall_s": 100.0,
        "loops": {**_section_of([_adapter("loop", "trainer", m) for m in "abc"]), "wall_s": 10.0},
    }
    new_cells = [_entry(c, wall_s=2.0) for c in plan if "c" in c.methods]
    new_loops = _section_of([_adapter("loop", loop, "c", wall_s=0.75) for loop in ("trainer", "loop")])
    merged = matrix.merge_document(old, matrix.KINDS, new_cells, {"loops": new_loops}, only=["c"], records=RECORDS)
    assert [(c["kind"], tuple(c["methods"]), c["precision"], c["parallel"]) for c in merged["cells"]] == [
        (c.kind, c.methods, c.precision, c.parallel) for c in plan
    ]
    assert [c for c in merged["cells"] if "c" not in c["methods"]] == old["cells"][:-1]
    assert all(c["outcome"] == "runs" for c in merged["cells"])  # the stale failure is gone
    assert [(c["loop"], c["method"]) for c in merged["loops"]["cells"]] == [
        ("trainer", "a"), ("trainer", "b"), ("trainer", "c"), ("loop", "c"),
    ]  # fmt: skip
    assert merged["loops"]["wall_s"] == 10.0 - 1.0 + 2 * 0.75
    assert merged["wall_s"] == old["wall_s"]  # the whole document's time is run_matrix's to set


def _section_of(cells):
    return {"versions": {}, "command": "test", "date": "2026-12-07T00:00:00Z", "wall_s": 1.0, "cells": cells}


def test_each_cell_takes_the_note_that_names_it():
    assert matrix.cell_note(Cell("pair", ("a", "b")), RECORDS) == "A and B: a note. B and A: a note."
    assert matrix.cell_note(Cell("pair", ("b", "c")), RECORDS) is None
    assert matrix.cell_note(Cell("precision", ("a",), precision="fp16"), RECORDS) == "A in fp16."
    assert matrix.cell_note(Cell("precision", ("a",), precision="bf16"), RECORDS) is None
    assert matrix.cell_note(Cell("parallel", ("a",), parallel="ddp"), RECORDS) == "A under DDP."
    assert matrix.cell_note(Cell("solo", ("a",)), RECORDS) is None
    # a precision's note explains every cell at that precision: alone, in a pair, in parallel
    fp32 = {
        **RECORDS,
        "a": SimpleNamespace(
            **{
                **vars(RECORDS["a"]),
                "interactions": {**RECORDS["a"].interactions, "precision=fp32": "A does nothing in fp32."},
            }
        ),
    }
    assert matrix.cell_note(Cell("solo", ("a",)), fp32) == "A does nothing in fp32."
    assert matrix.cell_note(Cell("pair", ("c", "a")), fp32) == "A does nothing in fp32."
    assert matrix.cell_note(Cell("parallel", ("a",), parallel="ddp"), fp32) == "A does nothing in fp32. A under DDP."
    assert matrix.cell_note(Cell("precision", ("a",), precision="fp16"), fp32) == "A in fp16."


@pytest.mark.parametrize(
    ("cell", "run", "outcome", "missing"),
    [
        (Cell("pair", ("b", "c")), CellRun(seen=["mixed_targets", "smoothed_targets"]), "runs", []),
        (Cell("pair", ("b", "c")), CellRun(seen=["changed_inputs", "mixed_targets"]), "fails", ["c.smoothed_targets"]),
        (Cell("pair", ("a", "b")), CellRun(seen=["mixed_targets"]), "interaction", ["a.changed_inputs"]),
        (
            Cell("pair", ("b", "c")),
            CellRun(seen=["mixed_targets", "smoothed_targets"], detail="loss nan at batch 2"),
            "fails",
            [],
        ),
        (Cell("pair", ("b", "c")), CellRun(error_type="ValueError", detail="ValueError: list it first"), "refused", []),
        (Cell("pair", ("b", "c")), CellRun(error_type="TypeError", detail="TypeError: not callable"), "refused", []),
        (Cell("pair", ("b", "c")), CellRun(error_type="RuntimeError", detail="RuntimeError: boom"), "fails", []),
        (Cell("pair", ("a", "b")), CellRun(error_type="RuntimeError", detail="RuntimeError: boom"), "interaction", []),
        (Cell("precision", ("a",), precision="fp16"), CellRun(seen=[]), "interaction", ["a.changed_inputs"]),
        (Cell("precision", ("a",), precision="bf16"), CellRun(seen=[]), "fails", ["a.changed_inputs"]),
    ],
)
def test_outcomes_follow_the_schemas_definitions(cell, run, outcome, missing):
    entry = decide(cell, run, RECORDS)
    assert entry["outcome"] == outcome
    assert entry["missing"] == missing
    assert entry["detail"] == run.detail
    assert entry["note"] == matrix.cell_note(cell, RECORDS)


def test_a_launch_that_ends_early_fails_each_of_its_cells_with_the_reason(monkeypatch):
    first = Cell("parallel", ("a",), parallel="ddp")
    second = Cell("parallel", ("b",), parallel="ddp")
    reason = "the ddp launch exited with status 1: RuntimeError: Connection reset by peer"
    monkeypatch.setattr(
        matrix,
        "_launch",
        lambda mode, cells, settings, timeout_s, progress: {
            "runs": {first.label: CellRun(seen=["changed_inputs"], wall_s=1.0)},
            "failure": reason,
        },
    )
    entries = matrix.run_cells([first, second], Settings(), records=RECORDS)
    assert [e["outcome"] for e in entries] == ["runs", "fails"]
    assert entries[0]["seen"] == ["a.changed_inputs"] and entries[1]["detail"] == reason


def test_a_pairs_reference_runs_on_the_pairs_workload(monkeypatch):
    """A method of two domains ("b": vision and nlp) runs alone on vision, but its reference in a
    pair with an nlp method is its solo run on the nlp workload."""
    calls = []

    def fake_run_cell(cell, settings, records=None, domain=None, check=True):
        calls.append((cell.kind, cell.methods, domain or matrix._workload_domain(cell, records), check))
        return CellRun(seen=[], batches=[])

    monkeypatch.setattr(matrix, "run_cell", fake_run_cell)
    matrix.run_cells([Cell("solo", ("b",)), Cell("pair", ("b", "c"))], Settings(), records=RECORDS)
    assert calls == [  # a reference is not checked: the cells are
        ("solo", ("b",), "vision", True),
        ("pair", ("b", "c"), "nlp", True),
        ("solo", ("b",), "nlp", False),
        ("solo", ("c",), "nlp", False),
    ]


def test_methods_get_the_workloads_batch_keys_where_their_plumbing_takes_them():
    records = load_all_metadata()
    nlp = matrix.WORKLOADS["nlp"](Settings(), 0)
    [smoothing] = matrix._build_methods(Cell("solo", ("label_smoothing",)), records, nlp)
    assert smoothing.target_key == "labels"


# --------------------------------------------------------------------------------------------- command line


def test_bad_options_are_one_line_each_and_write_nothing(tmp_path, capsys):
    assert matrix.main(["--kinds", "solo,pairs", "--out", str(tmp_path / "m.json")]) == 1
    assert (
        capsys.readouterr().err.strip()
        == "--kinds: 'pairs' — use some of solo, pair, precision, parallel, recipe, loops, models"
    )
    assert matrix.main(["--kinds", "solo"]) == 1
    assert "give --out" in capsys.readouterr().err
    existing = tmp_path / "existing.json"
    existing.write_text("{}")
    assert matrix.main(["--kinds", "solo", "--out", str(existing)]) == 1
    assert capsys.readouterr().err.strip() == f"{existing}: exists — pass --force to overwrite it, or choose --out"
    assert existing.read_text() == "{}"
    assert not (tmp_path / "m.json").exists()
    assert matrix.main(["--only", "cutmix,nonsense", "--out", str(tmp_path / "m.json")]) == 1
    assert capsys.readouterr().err.strip().startswith("--only: 'nonsense' is not a method — use some of ")
    assert matrix.main(["--only", "cutmix"]) == 1
    assert capsys.readouterr().err.strip() == (
        "--only: a subset of the matrix never writes the default results file — give --out, or --merge"
    )
    assert matrix.main(["--only", " , ", "--out", str(tmp_path / "m.json")]) == 1
    assert capsys.readouterr().err.strip() == "--only: empty — name at least one method, e.g. --only cutmix"
    assert matrix.main(["--kinds", "parallel", "--precisions", "amp_bf16,bf17", "--out", str(tmp_path / "m.json")]) == 1
    assert capsys.readouterr().err.strip() == (
        f"--precisions: 'bf17' is not a precision mode — use some of {', '.join(PRECISIONS)}"
    )
    assert matrix.main(["--precisions", "amp_bf16", "--merge", "--out", str(existing)]) == 1
    assert capsys.readouterr().err.strip() == (
        "--precisions: the loops and models section(s) are not cut by precision — leave them out of --kinds "
        "(e.g. --kinds parallel)"
    )
    assert matrix.main(["--kinds", "parallel", "--precisions", "amp_bf16"]) == 1
    assert "--precisions: a subset of the matrix never writes the default results file" in capsys.readouterr().err
    assert not (tmp_path / "m.json").exists() and existing.read_text() == "{}"


def test_a_subset_writes_a_valid_file_with_progress_lines(tmp_path, capsys):
    out = tmp_path / "solo.json"
    assert matrix.main(["--kinds", "solo", "--out", str(out)]) == 0
    document = load_composability(out)
    methods = [k for k, r in load_all_metadata().items() if r.kind == "method"]
    assert [c["methods"] for c in document["cells"]] == [[k] for k in sorted(methods)]
    assert document["commands"] == [f"python tools/composability_matrix.py --kinds solo --out {out}"]
    assert document["settings"] == Settings().as_dict()
    err = capsys.readouterr().err
    assert all(f"solo {k}: " in err for k in methods)


# --------------------------------------------------------------------------------------------- the committed matrix


def _committed() -> tuple[Path, dict]:
    kind = "cuda" if torch.cuda.is_available() else "cpu"
    files = [(p, load_composability(p)) for p in discover_composability()]
    mine = [(p, d) for p, d in files if d["environment"]["device_type"] == kind]
    if not mine:
        pytest.fail(f"no results/composability/ file for device type {kind}: {RERUN}")
    default = matrix.default_output_path()
    return next(((p, d) for p, d in mine if p == default), max(mine, key=lambda pd: pd[1]["environment"]["date"]))


def test_the_sample_keeps_every_single_method_cell_every_noted_pair_and_a_fixed_dozen_others():
    records = load_all_metadata()
    plan = matrix.plan_cells(records)
    sample = matrix.sample_cells(plan, records)
    assert sample == matrix.sample_cells(plan, records)  # the same cells every run, in plan order
    assert [c for c in sample if c.kind != "pair"] == [c for c in plan if c.kind != "pair"]
    pairs = [c for c in plan if c.kind == "pair"]
    noted = [
        c
        for c in pairs
        if records[c.methods[0]].interactions.get(c.methods[1]) or records[c.methods[1]].interactions.get(c.methods[0])
    ]
    assert noted and set(noted) <= set(sample)
    others = [c for c in sample if c.kind == "pair" and c not in noted]
    assert len(others) == matrix.SAMPLED_PAIRS < len(pairs) - len(noted)
    assert len({c.methods[0] for c in others}) > 1  # spread over the plan, not one method's pairs


@pytest.fixture(scope="module")
def computed() -> list[dict]:
    parallels, _ = matrix.runnable_parallels()
    return matrix.run_cells(matrix.sample_cells(matrix.plan_cells(parallels=parallels)), Settings())


@pytest.mark.slow
def test_the_committed_matrix_is_the_current_codes(computed):
    path, document = _committed()
    assert document["settings"] == Settings().as_dict(), f"{path}: other settings than the code's — {RERUN}"

    def key(cell):
        return (cell["kind"], tuple(cell["methods"]), cell["precision"], cell["parallel"])

    committed = {key(c): c for c in document["cells"]}
    here = {key(c): c for c in computed}
    # the methods' cells and the recipes' (which the methods' default plan leaves out)
    planned = {
        key(c.as_dict()) for c in matrix.plan_cells(kinds=matrix.CELL_KINDS, parallels=matrix.runnable_parallels()[0])
    }
    runnable = set(matrix.runnable_parallels()[0]) | {"single"}
    problems = [
        f"{Cell.from_dict(c).label}: computed here, not in {path}" for k, c in here.items() if k not in committed
    ]
    problems += [
        f"{Cell.from_dict(c).label}: in {path}, not in the current matrix"
        for k, c in committed.items()
        if k not in planned and c["parallel"] in runnable
    ]
    for k, cell in here.items():
        old = committed.get(k)
        for name in ("outcome", "seen", "missing"):
            if old is not None and old[name] != cell[name]:
                problems.append(f"{Cell.from_dict(cell).label}: {name} {cell[name]!r} here, {old[name]!r} in {path}")
    assert not problems, "\n".join([*problems, RERUN])


@pytest.mark.slow
def test_no_cell_of_the_matrix_fails(computed):
    failed = [f"{Cell.from_dict(c).label}: {matrix.describe(c)}" for c in computed if c["outcome"] == "fails"]
    assert not failed, "\n".join(
        [
            *failed,
            "fix the bug, or explain the interaction with a note in the metadata's "
            "interactions (then rerun `nox -s matrix`)",
        ]
    )


@pytest.mark.slow
def test_every_method_acts_alone_and_every_distributed_mode_runs(computed):
    # The settings let every method act (a solo cell that does not run would hide every pair's
    # finding), and the parallel cells ran, each in its launch. The one exception is a method whose
    # own metadata says it does nothing at fp32 by design (the low-precision norms): its fp32 cell
    # is that interaction, and it must act in a precision cell instead.
    records = load_all_metadata()
    solo = [c for c in computed if c["kind"] == "solo"]
    assert solo
    idle = {}
    for c in solo:
        if c["outcome"] != "runs":
            (key,) = c["methods"]
            idle[key] = c
            assert c["outcome"] == "interaction" and c["note"] == records[key].interactions.get("precision=fp32"), c
    for key in idle:
        acting = [
            c["precision"]
            for c in computed
            if c["kind"] == "precision" and c["methods"] == [key] and c["outcome"] == "runs"
        ]
        assert acting, f"{key} acts in no precision cell"
    parallels, skipped = matrix.runnable_parallels()
    assert set(parallels) | set(skipped) == set(MATRIX_PARALLELS)
    assert {c["parallel"] for c in computed if c["kind"] == "parallel"} == set(parallels)


@pytest.mark.slow
def test_the_computed_document_matches_the_schema(computed):
    document = matrix.build_document(matrix.matrix_environment(), Settings(), ["test"], 1.0, computed)
    assert composability_problems(json.loads(json.dumps(document))) == []
