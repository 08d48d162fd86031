"""The benchmark modules of ``benchmarks/`` run and report well-formed rows; no timing is asserted."""

from __future__ import annotations

import json
import math
import sys
import types

import pytest
import torch

import algorithms.functional as cf
from algorithms.metadata import PACKAGE_ROOT

BENCHMARKS = PACKAGE_ROOT.parent / "benchmarks"
if str(BENCHMARKS) not in sys.path:
    sys.path.insert(0, str(BENCHMARKS))

import batch_methods  # noqa: E402

ROW_KEYS = {"what", "value", "unit", "spread", "target", "compare", "met"}


def _assert_well_formed(row: dict) -> None:
    assert set(row) == ROW_KEYS, row
    lo, hi = row["spread"]
    assert row["unit"] == "x" and row["compare"] == "<"
    assert all(math.isfinite(v) and v > 0 for v in (lo, row["value"], hi)) and lo <= row["value"] <= hi, row
    assert row["met"] == (row["value"] < row["target"]), row


@pytest.fixture(scope="module")
def batch_report() -> dict:
    return batch_methods.run(quick=True, peers=False)


def test_batch_methods_quick_run_has_a_ratio_to_its_floor_for_every_method_and_shape(batch_report):
    assert batch_report["title"] and set(batch_report) == {"title", "rows", "details"}
    rows = {row["what"]: row for row in batch_report["rows"]}
    assert len(rows) == len(batch_report["rows"]) == len(batch_methods.OURS) * len(batch_methods.SHAPES)
    for shape in batch_methods.SHAPES:
        for name, floor, target in batch_methods.OURS:
            row = rows[f"{name} / floor ({floor}), {shape}"]
            _assert_well_formed(row)
            assert row["target"] == target
    assert {
        "cutmix_batch",
        "cutmix_batch(inplace=True)",
        "mixup_batch",
        "mixup_batch(inplace=True)",
        "cutout_batch",
        "colout_batch",
        "smooth_labels",
    } <= {name for name, _, _ in batch_methods.OURS}
    json.dumps(batch_report)  # the runner writes it as it is


def test_batch_methods_quick_run_states_its_floors_and_the_peers_it_left_out(batch_report):
    details = batch_report["details"]
    assert set(details["floors"]) == {floor for _, floor, _ in batch_methods.OURS}
    assert all(details["floors"].values())
    for shape in batch_methods.SHAPES:
        assert set(details["median_ms"][shape]) == (
            set(details["floors"]) | {n for n, _, _ in batch_methods.OURS} | {n for n, _, _, _ in batch_methods.PARTS}
        )
    assert set(details["peers_missing"]) == {"torchvision", "timm", "composer"}
    assert details["threads"] == 1 and details["rounds"] == 2 and details["calls_per_round"] == 2
    assert details["processes"] == 1  # a quick run stays in this process
    assert isinstance(details["allocator"], str) and details["allocator"]


@pytest.mark.slow
def test_batch_methods_pools_the_rounds_of_fresh_processes():
    """Two spawned processes of two rounds each: the rows are the same, the details say so."""
    report = batch_methods.run(quick=True, peers=False, processes=2)
    assert len(report["rows"]) == len(batch_methods.OURS) * len(batch_methods.SHAPES)
    for row in report["rows"]:
        _assert_well_formed(row)
    assert report["details"]["processes"] == 2 and report["details"]["rounds"] == 4


def test_batch_methods_reports_each_part_beside_the_floor_of_the_method_it_belongs_to(batch_report):
    details, floor_of = batch_report["details"], {name: floor for name, floor, _ in batch_methods.OURS}
    assert set(details["part_calls"]) == {name for name, _, _, _ in batch_methods.PARTS}
    assert all(call["call"] and call["about"] for call in details["part_calls"].values())
    for shape in batch_methods.SHAPES:
        measured = details["parts"][shape]
        assert [(p["what"], p["of"]) for p in measured] == [(n, of) for n, of, _, _ in batch_methods.PARTS]
        for part in measured:
            lo, hi = part["spread"]
            assert part["floor"] == floor_of[part["of"]]
            assert all(math.isfinite(v) and v > 0 for v in (lo, part["value"], hi)) and lo <= part["value"] <= hi


def test_each_part_writes_what_the_method_it_belongs_to_writes():
    """The timed passes are the methods' own work: the same values as the method given the same box,
    partners and weight (a part that timed something else would explain nothing)."""
    g = torch.Generator().manual_seed(3)
    x, y = torch.rand(6, 3, 10, 10, generator=g), torch.randint(0, 5, (6,), generator=g)
    bbox, perm = batch_methods.centred_box(10, 10), torch.randperm(6, generator=g)
    assert bbox == (2, 2, 7, 7)  # round(10 * sqrt(0.3)) = 5 rows and columns, centred
    x1, y1, x2, y2 = bbox

    def written(name: str) -> torch.Tensor:
        subject = batch_methods.parts(x, y, 5, bbox, perm)[name]
        if subject.prepare is not None:
            subject.prepare()
        return subject.call()

    before = x.clone()
    assert torch.equal(written("box copy"), x[:, :, x1:x2, y1:y2])
    cut = cf.cutmix_batch(x.clone(), y, bbox=bbox, indices=perm, inplace=True)[0]
    assert torch.equal(written("box gather and write-back"), cut[:, :, x1:x2, y1:y2])
    mixed = cf.mixup_batch(x.clone(), y, mixing=batch_methods.PART_MIXING, indices=perm, inplace=True)[0]
    assert torch.equal(written("gather and in-place lerp"), mixed)
    assert torch.equal(
        written("gather of the smoothed rows"),
        cf.smooth_labels(torch.zeros(6, 5), y, smoothing=batch_methods.SMOOTHING),
    )
    assert torch.equal(x, before)


MALLOC_SCRIPT = """
import ctypes, sys, torch
sys.path.insert(0, sys.argv[1])
import batch_methods
said = batch_methods.keep_freed_memory() if sys.argv[2] == "keep" else "left as it was"

class Mallinfo2(ctypes.Structure):  # glibc 2.33 and newer
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                      "fsmblks", "uordblks", "fordblks", "keepcost")]

mallinfo2 = ctypes.CDLL("libc.so.6").mallinfo2
mallinfo2.restype = Mallinfo2
output = torch.empty(32, 3, 224, 224).fill_(1.0)  # a 19 MB output, as one call of the benchmark makes
mapped = mallinfo2().hblkhd  # bytes in blocks glibc mapped on their own
del output
kept = mallinfo2().arena  # bytes of heap glibc still holds after the free
print(said)
print(mapped, kept)
"""
OUTPUT_BYTES = 32 * 3 * 224 * 224 * 4


@pytest.mark.slow  # the batch benchmark's timed loops: about 3 s
def test_the_batch_benchmark_serves_outputs_from_the_heap_and_keeps_them_when_freed():
    import subprocess

    runs = {}
    for how in ("keep", "default"):
        out = subprocess.run(
            [sys.executable, "-c", MALLOC_SCRIPT, str(BENCHMARKS), how], capture_output=True, text=True
        ).stdout.splitlines()
        if len(out) != 2:
            pytest.skip("not glibc 2.33 or newer (no mallinfo2)")
        runs[how] = (out[0], *map(int, out[1].split()))
    said, mapped, kept = runs["keep"]
    if not said.startswith("glibc mallopt"):
        pytest.skip(f"not set: {said}")
    assert mapped < OUTPUT_BYTES <= kept, runs  # from the heap, and the heap kept after the free
    assert runs["default"][1] >= OUTPUT_BYTES, runs  # by default glibc maps a block this large on its own


def test_batch_methods_restores_the_thread_count():
    threads = torch.get_num_threads()
    batch_methods.run(quick=True, peers=False, rounds=1, calls=1)
    assert torch.get_num_threads() == threads


def test_batch_methods_compares_ours_with_each_peer_found_and_reports_the_others(monkeypatch):
    """A peer module that imports is timed beside ours (a row of ours / peer, target 1.0); one that
    does not is reported with the error, and the run goes on."""
    composer = types.ModuleType("composer")
    functional = types.ModuleType("composer.functional")
    functional.cutmix_batch = lambda x, y, alpha: (x.clone(), y, 0.5, (0, 0, 1, 1))
    functional.mixup_batch = lambda x, y, alpha: (x.clone(), y, 0.5)
    functional.cutout_batch = lambda x, num_holes, length: x.clone()
    functional.colout_batch = lambda x, p_row, p_col: x.clone()
    functional.smooth_labels = lambda logits, y, smoothing: logits.clone()
    composer.functional = functional
    monkeypatch.setitem(sys.modules, "composer", composer)
    monkeypatch.setitem(sys.modules, "composer.functional", functional)
    monkeypatch.setitem(sys.modules, "timm", None)  # import timm raises ImportError
    report = batch_methods.run(quick=True, rounds=1, calls=1)
    peer_rows = {row["what"]: row for row in report["rows"] if row["what"].startswith("ours ")}
    for shape in batch_methods.SHAPES:
        for method in ("cutmix_batch", "mixup_batch", "cutout_batch", "colout_batch", "smooth_labels"):
            row = peer_rows.pop(f"ours {method} / Composer {method}, {shape}")
            _assert_well_formed(row)
            assert row["target"] == 1.0
    assert not peer_rows  # no row for a peer that did not import
    assert "timm" in report["details"]["peers_missing"] and "composer" not in report["details"]["peers_missing"]
    assert "import timm.data.mixup failed" in report["details"]["peers_missing"]["timm"]


def test_batch_methods_writes_its_report_only_when_asked_and_never_over_a_file(monkeypatch, tmp_path, capsys):
    report = {
        "title": "T",
        "details": {"median_ms": {}, "peer_calls": {}, "peers_missing": {"timm": "why"}},
        "rows": [
            {"what": "a", "value": 1.5, "unit": "x", "spread": [1.0, 2.0], "target": 2.0, "compare": "<", "met": True}
        ],
    }
    monkeypatch.setattr(batch_methods, "run", lambda **kwargs: report)
    assert batch_methods.main(["--quick"]) == 0
    assert list(tmp_path.iterdir()) == []
    out = capsys.readouterr().out
    assert "1.50x" in out and "target < 2.0x: met" in out and "peer timm not run: why" in out
    path = tmp_path / "bench.json"
    assert batch_methods.main(["--quick", "--output", str(path)]) == 0
    written = json.loads(path.read_text())
    assert written["rows"] == report["rows"] and written["environment"]["torch"] == torch.__version__
    with pytest.raises(SystemExit) as exit_info:
        batch_methods.main(["--quick", "--output", str(path)])
    assert exit_info.value.code == 2 and "pass --force" in capsys.readouterr().err
    report["rows"][0].update(value=2.5, met=False)
    assert batch_methods.main(["--quick", "--output", str(path), "--force"]) == 1  # a missed target: status 1
    assert json.loads(path.read_text())["rows"][0]["value"] == 2.5


@pytest.mark.slow  # fresh interpreters importing torch, several times: about 5 s
def test_import_time_reports_the_librarys_own_milliseconds_after_torch():
    """Two fresh interpreters per repeat: torch alone, and torch then the library; the row is the
    library's part of the second (no timing asserted, only that the figures are well formed)."""
    import import_time

    section = import_time.run(quick=True)
    (row,) = section["rows"]
    assert set(row) == ROW_KEYS and row["unit"] == "ms" and row["target"] == import_time.TARGET_MS
    lo, hi = row["spread"]
    assert 0 < lo <= row["value"] <= hi and row["met"] == (row["value"] < row["target"])
    assert section["details"]["repeats"] == import_time.QUICK_REPEATS
    for name in ("torch ms", "torch + algorithms ms"):
        low, high = section["details"][name]["range"]
        assert 0 < low <= section["details"][name]["median"] <= high
