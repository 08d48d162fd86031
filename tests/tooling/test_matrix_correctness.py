"""The composability matrix's correctness checks (methods_tools.matrix): each check against a
hand-computed case, a case it must flag, and real cells through run_cell."""

from __future__ import annotations

import math
from types import MappingProxyType, SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from methods_tools import matrix
from methods_tools.matrix import (
    AVERAGE_RTOL,
    Cell,
    CellRun,
    Settings,
    check_average,
    check_loss,
    check_sam,
    decide,
    ema_reference,
    reference_loss,
    swa_reference,
)
from methods_tools.results import composability_problems

from algorithms.core.options import PRECISIONS
from algorithms.metadata import load_all_metadata


def _w(*values, dtype=torch.float32):
    return {"w": torch.tensor(values, dtype=dtype)}


# --------------------------------------------------------------------------------------------- averages


def test_ema_reference_is_the_exponential_average_from_its_start_at_its_interval():
    snapshots = [(1, False, _w(9.0)), (2, True, _w(0.0)), (3, True, _w(1.0)), (4, True, _w(2.0))]
    average, start = ema_reference(snapshots, smoothing=0.5, interval=1)
    # starts as a copy at the first event that reached ema_start, then avg <- s avg + (1 - s) w
    assert start["w"].tolist() == [0.0]
    assert average["w"].tolist() == [0.5 * (0.5 * 0.0 + 0.5 * 1.0) + 0.5 * 2.0]
    assert average["w"].dtype == torch.float64
    average, _ = ema_reference(snapshots, smoothing=0.5, interval=2)  # updates at times 2, 4 only
    assert average["w"].tolist() == [0.5 * 0.0 + 0.5 * 2.0]
    assert ema_reference(snapshots[:1], smoothing=0.5, interval=1) is None


def test_swa_reference_is_the_mean_of_every_intervalth_snapshot_from_its_start():
    snapshots = [(False, _w(100.0)), (True, _w(1.0)), (True, _w(2.0)), (True, _w(6.0))]
    mean, first = swa_reference(snapshots, interval=1)
    assert mean["w"].tolist() == [3.0] and first["w"].tolist() == [1.0]  # update_swa_average's example
    mean, _ = swa_reference(snapshots, interval=2)  # the first at swa_start, then every other one
    assert mean["w"].tolist() == [3.5]
    assert swa_reference(snapshots[:1], interval=1) is None


def _trajectory(steps=40):
    """Weights that move by one bf16 ulp (1/128 near 1) per step: exact in bf16 and fp32."""
    return [(t, True, _w(1.0 + t / 128, 1.5 - t / 256)) for t in range(steps)]


def _kept_in(dtype, snapshots, smoothing):
    """EMA as a method would hold it with its average kept in ``dtype``."""
    average = None
    for _, _, weights in snapshots:
        w = weights["w"]
        average = w.to(dtype) if average is None else (smoothing * average.float() + (1 - smoothing) * w).to(dtype)
    return {"w": average}


@pytest.mark.parametrize("precision", PRECISIONS)
def test_an_average_kept_in_fp32_passes_in_every_precision(precision):
    snapshots = _trajectory()
    reference, start = ema_reference(snapshots, 0.99, 1)
    assert check_average("EMA", _kept_in(torch.float32, snapshots, 0.99), reference, start, precision) is None


@pytest.mark.parametrize(("dtype", "precision"), [(torch.bfloat16, "bf16"), (torch.float16, "fp16")])
def test_an_ema_kept_in_half_precision_is_flagged_with_the_size_of_its_miss(dtype, precision):
    # Each update moves the average by 1 % of its distance to the weights, less than half a ulp
    # of a half-precision average, so it is rounded away: the average stalls.
    snapshots = _trajectory()
    reference, start = ema_reference(snapshots, 0.99, 1)
    line = check_average("EMA", _kept_in(dtype, snapshots, 0.99), reference, start, precision)
    assert line is not None and line.startswith("EMA's average is ")
    assert f"of the way off an fp64 EMA of the same weights ({precision}:" in line
    way = float(line.split("EMA's average is ")[1].split(" of the way")[0])
    scale = float(line.split(f"({precision}: ")[1].split(" of the weights")[0])
    # bf16 stalls for most of the way; fp16's finer ulp loses less, still 80 times the tolerance
    assert 0.01 < way <= 1.0 and scale > 50 * AVERAGE_RTOL[precision], line
    assert f"tolerance {AVERAGE_RTOL[precision]:g}" in line


def test_an_average_without_a_parameter_is_flagged():
    reference, start = ema_reference(_trajectory(3), 0.5, 1)
    assert "holds no w" in check_average("EMA", {}, reference, start, "fp32")


# --------------------------------------------------------------------------------------------- loss


def test_the_reference_loss_is_the_cross_entropy_against_the_smoothed_mixed_target():
    logits = torch.tensor([[2.0, 0.0, -1.0], [0.5, 1.0, 0.0], [0.0, 0.0, 3.0]])
    target = torch.tensor([0, 1, 2])
    assert reference_loss(logits, target) == pytest.approx(float(F.cross_entropy(logits.double(), target)), 1e-12)
    # label smoothing: (1 - s) onehot + s / C, torch's own definition of label_smoothing
    smoothed = float(F.cross_entropy(logits.double(), target, label_smoothing=0.3))
    assert reference_loss(logits, target, smoothing=[0.3]) == pytest.approx(smoothed, 1e-12)
    # by hand, the first row: -(0.8 log p0 + 0.1 log p1 + 0.1 log p2)
    z = math.log(math.exp(2) + 1 + math.exp(-1))
    row = -(0.8 * (2 - z) + 0.1 * (0 - z) + 0.1 * (-1 - z))
    assert reference_loss(logits[:1], target[:1], smoothing=[0.3]) == pytest.approx(row, 1e-12)
    # mixing with partners [1, 2, 0] at 0.25 is the interpolated loss
    indices = torch.tensor([1, 2, 0])
    mixed = 0.75 * F.cross_entropy(logits.double(), target) + 0.25 * F.cross_entropy(logits.double(), target[indices])
    assert reference_loss(logits, target, mixes=[(indices, 0.25)]) == pytest.approx(float(mixed), 1e-12)


def test_the_reference_loss_takes_token_targets_with_ignored_positions():
    logits = torch.randn(2, 3, 5, generator=torch.Generator().manual_seed(0))
    labels = torch.tensor([[1, 4, -100], [0, 2, 3]])
    expected = F.cross_entropy(logits.reshape(-1, 5).double(), labels.reshape(-1), ignore_index=-100)
    assert reference_loss(logits, labels) == pytest.approx(float(expected), 1e-12)


def test_a_loss_without_the_mixing_is_flagged():
    logits = torch.tensor([[2.0, 0.0, -1.0], [0.5, 1.0, 0.0]])
    target, indices = torch.tensor([0, 1]), torch.tensor([1, 0])
    reference = reference_loss(logits, target, mixes=[(indices, 0.4)])
    assert check_loss(reference * (1 + 1e-7), reference, "fp32", ["mixup"]) is None
    unmixed = float(F.cross_entropy(logits, target))
    line = check_loss(unmixed, reference, "fp32", ["mixup"])
    assert line.startswith(f"the first batch's loss is {unmixed:.6g}, {reference:.6g} by mixup's definition (fp32: ")


# --------------------------------------------------------------------------------------------- SAM


def _steps(second_pass_mixed: bool, steps=4):
    """A linear model trained on MixUp's interpolated loss, each step's gradient from a second
    pass (SAM with rho=0) on that loss, or on the unmixed loss."""
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(8, 5, generator=g), torch.randint(0, 3, (8,), generator=g)
    indices, m = torch.randperm(8, generator=g), 0.3
    model = torch.nn.Linear(5, 3)
    with torch.no_grad():
        model.weight.copy_(torch.randn(3, 5, generator=g))
        model.bias.zero_()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    mixed_x = (1 - m) * x + m * x[indices]
    for _ in range(steps):
        out = model(mixed_x)
        loss = (1 - m) * F.cross_entropy(out, y) + m * F.cross_entropy(out, y[indices])
        if not second_pass_mixed:
            loss = F.cross_entropy(out, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return dict(model.named_parameters())


def test_sam_at_rho_zero_passes_when_its_second_pass_is_the_first_and_is_flagged_on_the_unmixed_loss():
    plain = _steps(second_pass_mixed=True)
    assert check_sam(plain, _steps(second_pass_mixed=True), "fp32") is None
    line = check_sam(plain, _steps(second_pass_mixed=False), "fp32", " with mixup interpolate_loss=True")
    assert (
        line.startswith("SAM(rho=0) ends ") and "from the same run without SAM with mixup interpolate_loss=True" in line
    )
    assert "(fp32, tolerance 1e-05)" in line


# --------------------------------------------------------------------------------------------- outcome

RECORDS = MappingProxyType(
    {
        "a": SimpleNamespace(observable=("changed_weights",), interactions={"b": "A and B interact."}),
        "b": SimpleNamespace(observable=(), interactions={}),
    }
)


def test_a_check_that_missed_fails_the_cell_whatever_its_note_says():
    cell = Cell("pair", ("a", "b"))
    run = CellRun(seen=["changed_weights"], checks=["a.average"], wrong="EMA's average is 0.6 of the way off")
    entry = decide(cell, run, RECORDS)
    assert entry["outcome"] == "fails" and entry["note"] == "A and B interact."
    assert entry["detail"] == "EMA's average is 0.6 of the way off" and entry["checks"] == ["a.average"]
    passed = decide(cell, CellRun(seen=["changed_weights"], checks=["a.average"]), RECORDS)
    assert passed["outcome"] == "runs" and passed["detail"] is None
    both = decide(cell, CellRun(detail="loss nan at batch 2", wrong="SAM(rho=0) ends 1e-2"), RECORDS)
    assert both["detail"] == "loss nan at batch 2; SAM(rho=0) ends 1e-2"


def test_the_checks_travel_from_the_worker_and_match_the_schema():
    run = CellRun(seen=[], checks=["ema.average"], wrong="EMA's average is 0.6 of the way off", wall_s=0.5)
    assert CellRun(**run.to_json()) == run
    entry = decide(Cell("solo", ("a",)), run, RECORDS)
    entry["methods"], entry["checks"] = ["ema"], ["ema.average", "sam.rho_zero", "label_smoothing.loss"]
    document = matrix.build_document(matrix.matrix_environment(), Settings(), ["test"], 1.0, [entry])
    assert composability_problems(document) == []
    entry["checks"] = ["ema.other"]
    assert composability_problems(document)


# --------------------------------------------------------------------------------------------- real cells


@pytest.fixture(scope="module")
def records():
    return {k: r for k, r in load_all_metadata().items() if r.kind == "method"}


def _entry(cell, records):
    return decide(cell, matrix.run_cell(cell, Settings(), records), records)


@pytest.mark.parametrize(
    ("cell", "checks"),
    [
        (Cell("solo", ("ema",)), ["ema.average"]),
        (Cell("solo", ("swa",)), ["swa.average"]),
        (Cell("solo", ("label_smoothing",)), ["label_smoothing.loss"]),
        (Cell("pair", ("cutmix", "label_smoothing")), ["cutmix.loss", "label_smoothing.loss"]),
        (Cell("pair", ("sam", "label_smoothing")), ["label_smoothing.loss", "sam.rho_zero"]),
        (Cell("precision", ("ema",), precision="amp_bf16"), ["ema.average"]),
        # CutMix's box is a fraction of the images it mixed, not of the batch resized after it
        (Cell("pair", ("cutmix", "progressive_resizing")), ["cutmix.loss"]),
        # shorter token sequences than the loader's: no reference to compute, so no loss check
        (Cell("pair", ("label_smoothing", "seq_length_warmup")), []),
    ],
    ids=lambda v: v.label if isinstance(v, Cell) else None,
)
def test_known_correct_cells_pass_their_checks(records, cell, checks):
    entry = _entry(cell, records)
    assert entry["outcome"] == "runs", entry
    assert entry["checks"] == checks and entry["detail"] is None


def _suggesting(records, key, **values):
    """``records`` with ``key``'s suggested hyperparameters replaced by ``values``."""
    record = records[key]
    hyperparameters = {
        **record.hyperparameters,
        **{
            name: SimpleNamespace(**{**vars(record.hyperparameters[name]), "suggested": v})
            for name, v in values.items()
        },
    }
    return {**records, key: SimpleNamespace(**{**vars(record), "hyperparameters": hyperparameters})}


def test_sam_with_mixup_interpolating_the_loss_steps_on_the_mixed_loss(records):
    records = _suggesting(records, "mixup", interpolate_loss=True)
    entry = _entry(Cell("pair", ("sam", "mixup")), records)
    assert entry["checks"] == ["mixup.loss", "sam.rho_zero"]
    assert entry["detail"] is None  # no check missed
    # interpolating the loss, MixUp leaves the targets unmixed: the effect the matrix looks for by default
    assert entry["missing"] == ["mixup.mixed_targets"]


def test_ema_in_bf16_averages_in_fp32(records):
    entry = _entry(Cell("precision", ("ema",), precision="bf16"), records)
    assert entry["checks"] == ["ema.average"]
    assert entry["outcome"] == "runs", entry["detail"]


@pytest.mark.parametrize(
    "precision",
    [
        "fp32",
        "amp_bf16",
        "bf16",
    ],
)
def test_swa_averaging_several_snapshots_holds_their_mean(records, precision):
    # The suggested update_interval (5ba) takes one snapshot in the matrix's 6 batches, a copy;
    # every batch from the middle on averages four.
    records = _suggesting(records, "swa", update_interval="1ba", swa_start="0.5dur")
    entry = _entry(Cell("precision", ("swa",), precision=precision), records)
    assert entry["checks"] == ["swa.average"]
    assert entry["outcome"] == "runs", entry["detail"]
