"""The batch methods against their memory floor, and against the peers that are importable.

An out-of-place batch method must at least write its output, so its floor is one write of an
output-sized tensor, read from the input where the output comes from the input:

- CutMix, MixUp, CutOut: ``x.clone()``, one copy of the batch.
- ColOut: ``x[..., :kept_rows, :kept_cols].clone()``, one copy of as many pixels as its smaller
  output holds (``int(0.85 * H)`` rows by ``int(0.85 * W)`` columns).
- Label smoothing: ``torch.full((N, K), 0.1 / K)``, one write of the smoothed float32 targets.

Each implementation is timed beside its floor in the same process, on the same tensors, in
rounds whose order alternates, so that a noisy machine slows both alike: a round's ratio is the
median call time of the implementation over the floor's median call time in that round, and
the report gives the median of the rounds' ratios with their range. The rounds run in five fresh
processes, one after another, and are pooled: where a process's memory lands changes how fast a
copy into it runs, for the floor and the method alike but not by the same factor. Everything
runs on one thread, in float32; CutMix draws with ``alpha=1.0``, MixUp with ``alpha=0.2``.

Every method runs torch's own ops. Beside them, the passes of those ops that CutMix, MixUp and
label smoothing spend their time in are timed alone, without sampling and checks, against the
same floors: where a method's ratio comes from.

Peers run when importable (``nox -s bench_peers`` installs them in an environment of their own;
the project does not depend on them): torchvision's v2 ``CutMix`` and ``MixUp``, timm's ``Mixup``
in batch mode (it mixes in place), and Composer's functional forms. Each is called as its
documentation shows, on the same batch and labels, and compared with the form of ours that does
the same job (ours in place against timm). A peer that does not import is reported with the
reason, and the run goes on.

    python benchmarks/batch_methods.py --rounds 7 --output results/bench/batch.json
    python benchmarks/batch_methods.py --device cuda   # the same ratios on a GPU
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib
import json
import multiprocessing
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from algorithms.functional import colout_batch, cutmix_batch, cutout_batch, mixup_batch, smooth_labels
from algorithms.targets import smoothed_rows

TITLE = "Batch methods against their memory floor and their peers"
SHAPES = {"256x3x32x32": (256, 3, 32, 32), "32x3x224x224": (32, 3, 224, 224)}
NUM_CLASSES = {"256x3x32x32": 10, "32x3x224x224": 1000}
CUTMIX_ALPHA, MIXUP_ALPHA, SMOOTHING, P_DROP = 1.0, 0.2, 0.1, 0.15
FLOORS = {
    "clone": "x.clone(): one copy of the batch",
    "colout floor": "x[..., :int(0.85 * H), :int(0.85 * W)].clone(): one copy of as many pixels as ColOut's output "
    "holds (p_row = p_col = 0.15)",
    "smoothing floor": "torch.full((N, K), 0.1 / K): one write of the smoothed float32 targets",
}


@dataclass(frozen=True)
class Subject:
    """One timed call: ``call`` runs it; ``prepare`` (untimed) runs before each call."""

    call: Callable[[], object]
    prepare: Callable[[], object] | None = None


# the peers' modules, by the label a missing one is reported under (benchmarks/run.py --peers reads it too)
PEER_MODULES = {
    "torchvision": "torchvision.transforms.v2",
    "timm": "timm.data.mixup",
    "composer": "composer.functional",
}
# ours: (name, floor, target ratio to the floor). The targets are what torch's ops reach at 256x3x32x32,
# where a call's fixed cost weighs most (measurements page, Performance); the peers' rows are the binding comparison.
OURS = (
    ("cutmix_batch", "clone", 3.0),
    ("cutmix_batch(inplace=True)", "clone", 2.5),
    ("mixup_batch", "clone", 3.0),
    ("mixup_batch(inplace=True)", "clone", 3.0),
    ("cutout_batch", "clone", 2.5),
    ("cutout_batch(inplace=True)", "clone", 2.0),
    ("colout_batch", "colout floor", 2.0),
    ("smooth_labels", "smoothing floor", 3.0),
)
# peers: (name, which of ours does the same job, what the call does)
PEERS = (
    (
        "torchvision v2 CutMix",
        "cutmix_batch",
        "CutMix(alpha=1.0, num_classes=K)(x, y): the mixed batch and the mixed one-hot labels (N, K)",
    ),
    (
        "torchvision v2 MixUp",
        "mixup_batch",
        "MixUp(alpha=0.2, num_classes=K)(x, y): the mixed batch and the mixed one-hot labels (N, K)",
    ),
    (
        "timm Mixup (batch, CutMix, in place)",
        "cutmix_batch(inplace=True)",
        "Mixup(mixup_alpha=0, cutmix_alpha=1.0, mode='batch', label_smoothing=0)(x, y): pastes x.flip(0)'s box "
        "into x in place and returns the mixed one-hot labels (N, K)",
    ),
    (
        "timm Mixup (batch, MixUp, in place)",
        "mixup_batch(inplace=True)",
        "Mixup(mixup_alpha=0.2, cutmix_alpha=0, mode='batch', label_smoothing=0)(x, y): mixes x with x.flip(0) in "
        "place and returns the mixed one-hot labels (N, K)",
    ),
    ("Composer cutmix_batch", "cutmix_batch", "cutmix_batch(x, y, alpha=1.0), as ours"),
    ("Composer mixup_batch", "mixup_batch", "mixup_batch(x, y, alpha=0.2), as ours"),
    ("Composer cutout_batch", "cutout_batch", "cutout_batch(x, num_holes=1, length=0.5), as ours"),
    ("Composer colout_batch", "colout_batch", "colout_batch(x, p_row=0.15, p_col=0.15), as ours"),
    ("Composer smooth_labels", "smooth_labels", "smooth_labels(logits, y, smoothing=0.1), as ours"),
)


def floors(x: torch.Tensor, num_classes: int) -> dict[str, Subject]:
    kept_h, kept_w = int((1 - P_DROP) * x.shape[-2]), int((1 - P_DROP) * x.shape[-1])
    n = x.shape[0]
    return {
        "clone": Subject(lambda: x.clone()),
        "colout floor": Subject(lambda: x[..., :kept_h, :kept_w].clone()),
        "smoothing floor": Subject(lambda: torch.full((n, num_classes), SMOOTHING / num_classes, device=x.device)),
    }


def ours(x: torch.Tensor, y: torch.Tensor, logits: torch.Tensor, generator: torch.Generator) -> dict[str, Subject]:
    work = x.clone()  # the in-place forms write into it; it is reset to the batch before each call (untimed)

    def reset() -> None:
        work.copy_(x)

    g = generator
    return {
        "cutmix_batch": Subject(lambda: cutmix_batch(x, y, alpha=CUTMIX_ALPHA, generator=g)),
        "cutmix_batch(inplace=True)": Subject(
            lambda: cutmix_batch(work, y, alpha=CUTMIX_ALPHA, generator=g, inplace=True), reset
        ),
        "mixup_batch": Subject(lambda: mixup_batch(x, y, alpha=MIXUP_ALPHA, generator=g)),
        "mixup_batch(inplace=True)": Subject(
            lambda: mixup_batch(work, y, alpha=MIXUP_ALPHA, generator=g, inplace=True), reset
        ),
        "cutout_batch": Subject(lambda: cutout_batch(x, num_holes=1, length=0.5, generator=g)),
        "cutout_batch(inplace=True)": Subject(
            lambda: cutout_batch(work, num_holes=1, length=0.5, generator=g, inplace=True), reset
        ),
        "colout_batch": Subject(lambda: colout_batch(x, p_row=P_DROP, p_col=P_DROP, generator=g)),
        "smooth_labels": Subject(lambda: smooth_labels(logits, y, smoothing=SMOOTHING)),
    }


PART_MIXING = 0.1  # MixUp's weight in the timed lerp (a draw's typical size at alpha 0.2)
# Where four forms of ours spend their time: the passes of torch's ops they run, timed beside the
# floor without sampling and checks. (name, which of ours it is part of, the call, what it is)
PARTS = (
    (
        "box copy",
        "cutmix_batch",
        "out[:, :, box].copy_(x[:, :, box])",
        "the box alone, at its place, no gather, into a batch made before (a centred box of 30 % of the pixels, "
        "CutMix's mean at alpha 1.0); out of place, ours copies the batch, then this",
    ),
    (
        "box gather and write-back",
        "cutmix_batch(inplace=True)",
        "box.copy_(box.index_select(0, perm))",
        "ours in place below 64 KiB an example: two passes over the same box (larger ones are moved one at a time)",
    ),
    (
        "gather and in-place lerp",
        "mixup_batch(inplace=True)",
        "x.lerp_(torch.index_select(x, 0, perm, out=torch.empty_like(x)), 0.1)",
        "ours in place below 64 KiB an example: two passes (larger ones are mixed one at a time)",
    ),
    (
        "gather of the smoothed rows",
        "smooth_labels",
        "rows.index_select(0, y)",
        "ours' lookup, without the checks, of the (K, K) smoothed rows made before",
    ),
)


def centred_box(height: int, width: int, area: float = 0.3) -> tuple[int, int, int, int]:
    """CutMix's ``(x1, y1, x2, y2)`` of a centred box of about ``area`` of the pixels."""
    side_h, side_w = round(height * area**0.5), round(width * area**0.5)
    top, left = (height - side_h) // 2, (width - side_w) // 2
    return top, left, top + side_h, left + side_w


def parts(
    x: torch.Tensor, y: torch.Tensor, num_classes: int, bbox: tuple[int, int, int, int], perm: torch.Tensor
) -> dict[str, Subject]:
    """The passes of :data:`PARTS` on ``x`` (not modified), with CutMix's box ``bbox`` and the partners ``perm``;
    each call returns what it wrote (the in-place ones into a copy of ``x``, reset before each call)."""
    rows, cols = slice(bbox[0], bbox[2]), slice(bbox[1], bbox[3])
    out, work = torch.empty_like(x), x.clone()
    smoothed = smoothed_rows(num_classes, SMOOTHING, torch.float32).to(x.device)  # smooth_labels' own rows

    def reset() -> None:
        work.copy_(x)

    box = work[:, :, rows, cols]
    return {
        "box copy": Subject(lambda: out[:, :, rows, cols].copy_(x[:, :, rows, cols])),
        "box gather and write-back": Subject(lambda: box.copy_(box.index_select(0, perm)), reset),
        "gather and in-place lerp": Subject(
            lambda: work.lerp_(torch.index_select(work, 0, perm, out=torch.empty_like(work)), PART_MIXING), reset
        ),
        "gather of the smoothed rows": Subject(lambda: smoothed.index_select(0, y)),
    }


def peer_calls(
    x: torch.Tensor, y: torch.Tensor, logits: torch.Tensor, wanted: bool
) -> tuple[dict[str, Subject], dict[str, str]]:
    """The peers' calls that can be made here, and why each missing peer is missing."""
    calls: dict[str, Subject] = {}
    missing: dict[str, str] = {}
    if not wanted:
        return calls, {label: "not asked for (peers=False)" for label in PEER_MODULES}
    k = logits.shape[1]
    work = x.clone()

    def reset() -> None:
        work.copy_(x)

    def load(module: str, label: str) -> Any:
        try:
            return importlib.import_module(module)
        except Exception as error:  # an absent or broken install: report it and go on
            missing[label] = f"import {module} failed: {type(error).__name__}: {error}"
            return None

    if tv := load(PEER_MODULES["torchvision"], "torchvision"):
        tv_cutmix, tv_mixup = tv.CutMix(alpha=CUTMIX_ALPHA, num_classes=k), tv.MixUp(alpha=MIXUP_ALPHA, num_classes=k)
        calls["torchvision v2 CutMix"] = Subject(lambda: tv_cutmix(x, y))
        calls["torchvision v2 MixUp"] = Subject(lambda: tv_mixup(x, y))
    if timm_mixup := load(PEER_MODULES["timm"], "timm"):
        # mode="batch": one draw for the whole batch, as ours; no label smoothing. timm writes into its input.
        cut = timm_mixup.Mixup(
            mixup_alpha=0.0, cutmix_alpha=CUTMIX_ALPHA, mode="batch", label_smoothing=0.0, num_classes=k
        )
        mix = timm_mixup.Mixup(
            mixup_alpha=MIXUP_ALPHA, cutmix_alpha=0.0, mode="batch", label_smoothing=0.0, num_classes=k
        )
        calls["timm Mixup (batch, CutMix, in place)"] = Subject(lambda: cut(work, y), reset)
        calls["timm Mixup (batch, MixUp, in place)"] = Subject(lambda: mix(work, y), reset)
    if composer := load(PEER_MODULES["composer"], "composer"):
        calls["Composer cutmix_batch"] = Subject(lambda: composer.cutmix_batch(x, y, alpha=CUTMIX_ALPHA))
        calls["Composer mixup_batch"] = Subject(lambda: composer.mixup_batch(x, y, alpha=MIXUP_ALPHA))
        calls["Composer cutout_batch"] = Subject(lambda: composer.cutout_batch(x, num_holes=1, length=0.5))
        calls["Composer colout_batch"] = Subject(lambda: composer.colout_batch(x, p_row=P_DROP, p_col=P_DROP))
        calls["Composer smooth_labels"] = Subject(lambda: composer.smooth_labels(logits, y, smoothing=SMOOTHING))
    return calls, missing


def keep_freed_memory() -> str:
    """Have glibc's malloc serve every block from its heap and keep what is freed there for reuse, as
    a training loop's steady state does, and say what was set.

    Each call allocates its output (19 MB at 32x3x224x224). By default glibc maps such a block
    afresh (``mmap``) or serves it from the heap, by a threshold it moves as blocks are freed, and
    gives the heap's top back to the system past another: whether a call's output is new pages (a
    page fault per 4 KiB, which can cost more than the copy) then depended on what the calls before
    it allocated, and a ratio to the floor swung from 1x to 4x between rounds. Both thresholds at
    1 GiB make the floor and every implementation alike reuse memory kept from earlier calls (the
    kernel may still reclaim pages left idle). Elsewhere (not glibc) nothing is set.
    """
    import ctypes
    import ctypes.util

    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, GIB = -1, -3, 1 << 30
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return "not set (no glibc mallopt): freed memory is kept or returned as the system's allocator decides"
    if mallopt(M_MMAP_THRESHOLD, GIB) != 1 or mallopt(M_TRIM_THRESHOLD, GIB) != 1:
        return "not set (mallopt refused): freed memory is kept or returned as glibc decides"
    return "glibc mallopt M_MMAP_THRESHOLD = M_TRIM_THRESHOLD = 1 GiB: every output from the heap, freed ones reused"


def median_call(subject: Subject, calls: int, synchronize: Callable[[], None]) -> float:
    times = []
    for _ in range(calls):
        if subject.prepare is not None:
            subject.prepare()
        synchronize()
        start = time.perf_counter()
        subject.call()
        synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def time_rounds(
    subjects: dict[str, Subject], rounds: int, calls: int, synchronize: Callable[[], None], log: Callable[[str], None]
) -> dict[str, list[float]]:
    """Each subject's median call time in each round; the order alternates from round to round."""
    for subject in subjects.values():  # warm-up: first-call allocations, imports and caches
        for _ in range(2):
            if subject.prepare is not None:
                subject.prepare()
            subject.call()
    per_round: dict[str, list[float]] = {name: [] for name in subjects}
    for r in range(rounds):
        for name in list(subjects) if r % 2 == 0 else list(reversed(subjects)):
            per_round[name].append(median_call(subjects[name], calls, synchronize))
        log(f"  round {r + 1}/{rounds}")
    return per_round


def round_ratios(numerators: list[float], denominators: list[float]) -> dict[str, Any]:
    """The median of the rounds' ratios (``value``) and their range (``spread``)."""
    ratios = [a / b for a, b in zip(numerators, denominators, strict=True)]
    return {"value": statistics.median(ratios), "spread": [min(ratios), max(ratios)]}


def ratio_row(what: str, numerators: list[float], denominators: list[float], target: float) -> dict[str, Any]:
    measured = round_ratios(numerators, denominators)
    return {
        "what": what,
        "value": measured["value"],
        "unit": "x",
        "spread": measured["spread"],
        "target": target,
        "compare": "<",
        "met": measured["value"] < target,
    }


def measure(
    shape_name: str, peers: bool, device: str, rounds: int, calls: int, log: Callable[[str], None] = lambda line: None
) -> tuple[dict[str, list[float]], dict[str, str]]:
    """Each subject's median call time per round at one shape, and why each missing peer is missing."""
    dev, shape = torch.device(device), SHAPES[shape_name]
    synchronize = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(shape, generator=gen).to(dev)
    y = torch.randint(0, NUM_CLASSES[shape_name], (shape[0],), generator=gen).to(dev)
    logits = torch.randn(shape[0], NUM_CLASSES[shape_name], generator=gen).to(dev)
    subjects = {
        **floors(x, NUM_CLASSES[shape_name]),
        **ours(x, y, logits, gen),
        **parts(
            x, y, NUM_CLASSES[shape_name], centred_box(*shape[-2:]), torch.randperm(shape[0], generator=gen).to(dev)
        ),
    }
    found, missing = peer_calls(x, y, logits, peers)
    subjects.update(found)
    return time_rounds(subjects, rounds, calls, synchronize, log), missing


def _measure_in_this_process(
    shape_name: str, peers: bool, device: str, rounds: int, calls: int
) -> tuple[dict[str, list[float]], dict[str, str]]:
    """:func:`measure` in a process of its own (spawned): one thread, freed memory kept, as in run()."""
    torch.set_num_threads(1)
    if torch.device(device).type == "cpu":
        keep_freed_memory()
    return measure(shape_name, peers, device, rounds, calls)


def run(
    quick: bool = False,
    peers: bool = True,
    device: str = "cpu",
    rounds: int | None = None,
    calls: int | None = None,
    processes: int | None = None,
    log: Callable[[str], None] = lambda line: None,
) -> dict[str, Any]:
    """Time ours, the floors and the peers on both shapes; rows of ratios beside their targets.

    ``quick``: two rounds of two calls, a smoke run whose numbers mean little. ``processes``: the
    rounds are run in that many fresh processes, one after another, and pooled (default 5, 1 when
    quick; 1 runs them here). Where a process's memory lands decides how fast a copy into it runs:
    on a quiet machine CutMix's ratio at 32x3x224x224 was 1.54x, 1.96x and 2.16x in three processes
    minutes apart, each steady over its own rounds, so rounds from one process measure its luck.
    """
    rounds = rounds or (2 if quick else 7)
    calls = calls or (2 if quick else 21)
    processes = processes or (1 if quick else 5)
    dev = torch.device(device)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    allocator = keep_freed_memory() if dev.type == "cpu" else "the CUDA caching allocator"
    try:
        rows: list[dict[str, Any]] = []
        details: dict[str, Any] = {
            "device": str(dev),
            "threads": 1,
            "dtype": "float32",
            "rounds": rounds * processes,
            "processes": processes,
            "calls_per_round": calls,
            "allocator": allocator,
            "cutmix_alpha": CUTMIX_ALPHA,
            "mixup_alpha": MIXUP_ALPHA,
            "smoothing": SMOOTHING,
            "colout_p": P_DROP,
            "floors": FLOORS,
            "peer_calls": {name: call for name, _, call in PEERS},
            "median_ms": {},
            "part_calls": {name: {"call": call, "about": about} for name, _, call, about in PARTS},
            "parts": {},
            "peers_missing": {},
        }
        peer_rows: list[dict[str, Any]] = []
        for shape_name in SHAPES:
            log(f"{shape_name}:")
            times: dict[str, list[float]] = {}
            for process in range(processes):
                if processes == 1:
                    measured, missing = measure(shape_name, peers, device, rounds, calls, log)
                else:
                    context = multiprocessing.get_context("spawn")
                    with concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
                        measured, missing = pool.submit(
                            _measure_in_this_process, shape_name, peers, device, rounds, calls
                        ).result()
                    log(f"  process {process + 1}/{processes}: {rounds} rounds")
                for name, per_round in measured.items():
                    times.setdefault(name, []).extend(per_round)
                details["peers_missing"].update(missing)
            details["median_ms"][shape_name] = {name: 1e3 * statistics.median(t) for name, t in times.items()}
            for name, floor, target in OURS:
                rows.append(ratio_row(f"{name} / floor ({floor}), {shape_name}", times[name], times[floor], target))
            floor_of = {name: floor for name, floor, _ in OURS}
            for name, mine, _, _ in PARTS:
                details["parts"].setdefault(shape_name, []).append(
                    {
                        "what": name,
                        "of": mine,
                        "floor": floor_of[mine],
                        **round_ratios(times[name], times[floor_of[mine]]),
                    }
                )
            for name, mine, _ in PEERS:
                if name in times:
                    peer_rows.append(ratio_row(f"ours {mine} / {name}, {shape_name}", times[mine], times[name], 1.0))
        return {"title": TITLE, "rows": rows + peer_rows, "details": details}
    finally:
        torch.set_num_threads(threads)


def format_report(report: dict[str, Any]) -> str:
    lines = [report["title"], ""]
    for row in report["rows"]:
        lo, hi = row["spread"]
        lines.append(
            f"  {row['what']:<78} {row['value']:6.2f}x  [{lo:.2f} .. {hi:.2f}]  "
            f"target {row['compare']} {row['target']:.1f}x: {'met' if row['met'] else 'MISSED'}"
        )
    details = report["details"]
    lines.append("")
    for shape_name, medians in details["median_ms"].items():
        lines.append(f"floors at {shape_name}: " + ", ".join(f"{name} {medians[name]:.3f} ms" for name in FLOORS))
    for name, definition in FLOORS.items():
        lines.append(f"  {name}: {definition}")
    for shape_name, measured in details.get("parts", {}).items():
        lines.append(
            f"the passes of torch's ops in ours at {shape_name}, no sampling or checks, / their floor: "
            + ", ".join(f"{part['what']} ({part['of']}) {part['value']:.2f}x" for part in measured)
        )
    for name, call in details.get("part_calls", {}).items():
        lines.append(f"  {name}: {call['call']}: {call['about']}")
    if "allocator" in details:
        lines.append(f"allocator: {details['allocator']}")
    timed = {name for medians in details["median_ms"].values() for name in medians}
    for name, call in details["peer_calls"].items():
        if name in timed:
            lines.append(f"peer {name}: {call}")
    for label, why in details["peers_missing"].items():
        lines.append(f"peer {label} not run: {why}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="rounds per process")
    parser.add_argument(
        "--processes",
        type=int,
        default=5,
        help="fresh processes the rounds run in, one after another, pooled (1: this one)",
    )
    parser.add_argument("--calls", type=int, default=21, help="calls per implementation per round")
    parser.add_argument("--quick", action="store_true", help="two rounds of two calls: checks that it runs")
    parser.add_argument("--no-peers", action="store_true", help="time ours and the floors only")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument("--output", type=Path, help="also write the report (JSON, with the machine) here")
    parser.add_argument("--force", action="store_true", help="overwrite --output if it exists")
    args = parser.parse_args(argv)
    if args.output and args.output.exists() and not args.force:
        parser.error(f"{args.output}: exists; pass --force to overwrite it")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: torch.cuda.is_available() is False")
    report = run(
        quick=args.quick,
        peers=not args.no_peers,
        device=args.device,
        rounds=None if args.quick else args.rounds,
        calls=None if args.quick else args.calls,
        processes=None if args.quick else args.processes,
        log=lambda line: print(line, file=sys.stderr, flush=True),
    )
    print(format_report(report))
    if args.output:
        from methods_tools.compare import environment
        from methods_tools.files import write_atomic

        write_atomic(
            args.output, json.dumps({**report, "environment": environment()}, indent=1) + "\n", force=args.force
        )
    return 0 if all(row["met"] for row in report["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
