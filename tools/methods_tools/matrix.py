"""The composability matrix: the logic of ``tools/composability_matrix.py`` (``nox -s matrix``).

Every method (``kind: method``) of the metadata registry runs a few Trainer batches of its
domain's workload (:data:`WORKLOADS`: vision, a small model for any image size that holds every
module class a vision method changes; nlp, the reference ``transformer_tiny`` on token dict
batches), with its metadata's suggested hyperparameters:

- ``solo``: alone (fp32, one process);
- ``pair``: with every other method that shares a domain, in both orders;
- ``precision``: alone in every precision mode of ``algorithms.core.options.PRECISIONS``;
- ``parallel``: alone under every distributed mode (ddp, fsdp, and deepspeed where it can run),
  in each precision of :data:`PARALLEL_PRECISIONS` (fp32 and amp_bf16), two processes under
  torchrun: one launch per mode runs every method in both precisions in turn
  (:mod:`methods_tools.matrix_worker`).
- ``recipe``: each published recipe's whole stack (:mod:`algorithms.recipes`), fp32, one process,
  with the recipe's arguments as run small (:func:`algorithms.recipes.small_scale_hparams`, and
  :data:`RECIPE_CELL_CHANGES`); each member's effects are decided against the stack less that
  member, as a pair's are against the other method alone (:func:`recipe_references`). They are
  not in the methods' plan (``plan_cells``' default kinds), so a method added to the catalog
  needs no recipe cell.

Beside the cells, two sections (:mod:`methods_tools.matrix_loops`): ``loops``, every method alone
in the project's Trainer, an own :class:`~algorithms.core.Loop`, the Hugging Face Trainer and
Lightning; ``models``, the language-model methods on Hugging Face GPT-2, BERT and RoBERTa. ``--kinds
loops,models --merge`` runs them alone into the committed file.

Two recorder algorithms watch each run: one listed first records the model at ``INIT`` and the
loader's batch at ``AFTER_DATALOADER`` (before any method changes them), one listed last records
the model at ``INIT`` (after every method's surgery, before the Trainer wraps it), what the model
is given at ``BEFORE_FORWARD`` and the loss's target and value at ``BEFORE_BACKWARD`` (after every
method acted at ``AFTER_LOSS``). Each observable effect of the metadata schema is decided from them
by its definition (:data:`EFFECTS`).

A cell also checks that what it trained is right, not only that it ran (:data:`CHECKS`):

- ``average`` (EMA, SWA): the averaged weights the method holds at the end equal an fp64 average,
  by the method's rule, of the weights it was given at its update events (:func:`ema_reference`,
  :func:`swa_reference`, :func:`check_average`);
- ``loss`` (label smoothing, MixUp, CutMix): the first batch's loss equals the cross entropy by
  the methods' definitions, from the logits, the loader's target and the partners and weights
  the mixing methods recorded (:func:`reference_loss`, :func:`check_loss`);
- ``rho_zero`` (SAM): the cell run again with SAM(rho=0) in SAM's place, and without SAM, ends at
  the same weights (:func:`check_sam`), also with each other value of a mixing method's
  ``interpolate_loss``; the only extra training a check costs.

The cell's outcome follows the composability schema: ``runs``, ``refused`` (a ValueError or
TypeError), ``interaction`` (an effect not seen or another error, explained by a note in either
method's ``interactions``) or ``fails`` (the same without a note, or a check that missed: a wrong
result is a bug whatever the notes say). Seeds are fixed, so a rerun gives the same outcomes.

Nothing here imports torch until a cell runs.
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from algorithms.core.options import MATRIX_PARALLELS, PRECISIONS

from .files import write_atomic
from .results import COMPOSABILITY_DIR, composability_problems

__all__ = [
    "ALL_KINDS",
    "AVERAGE_RTOL",
    "CHECKS",
    "EFFECTS",
    "KINDS",
    "LOSS_RTOL",
    "OBSERVABLES",
    "PARALLEL_PRECISIONS",
    "SAM_RTOL",
    "SECTIONS",
    "WORKLOADS",
    "Batch",
    "Cell",
    "CellRun",
    "MatrixError",
    "Settings",
    "Workload",
    "cell_note",
    "check_average",
    "check_loss",
    "check_sam",
    "decide",
    "default_output_path",
    "effects_seen",
    "ema_reference",
    "merge_document",
    "matrix_environment",
    "model_signature",
    "plan_cells",
    "reference_loss",
    "run_cell",
    "run_matrix",
    "sample_cells",
    "swa_reference",
    "vision_model",
]

Progress = Callable[[str], None]

KINDS = ("solo", "pair", "precision", "parallel")
#: Cells beside those of the methods: each published recipe's stack together (:mod:`algorithms.recipes`).
RECIPE_KIND = "recipe"
CELL_KINDS = (*KINDS, RECIPE_KIND)
#: The sections beside the cells: every method in each training loop, and on real models (:mod:`.matrix_loops`).
SECTIONS = ("loops", "models")
ALL_KINDS = (*CELL_KINDS, *SECTIONS)
#: The observable effects of the metadata schema's ``observable``, in the order cells list them.
OBSERVABLES = (
    "changed_inputs",
    "smaller_inputs",
    "fewer_examples",
    "mixed_targets",
    "smoothed_targets",
    "changed_model",
    "changed_weights",
)
#: The precisions the parallel cells run in: fp32, and amp_bf16, the mixed precision that every
#: parallel mode runs on a CPU as on a GPU (DeepSpeed refuses amp_fp16: its fp16 mode scales the
#: loss itself; the pure 16-bit modes cast the whole model, which the precision cells cover in one
#: process).
PARALLEL_PRECISIONS = ("fp32", "amp_bf16")
#: Errors that mean "this combination is refused": a clear message about the arguments.
REFUSALS = ("ValueError", "TypeError")
#: How far above a row's minimum a target entry must be to count as one of the mixed classes.
MIXED_MARGIN = 1e-3


class MatrixError(ValueError):
    """Options or files that cannot be used: one line per problem."""


@dataclass(frozen=True)
class Settings:
    """What every cell trains (the results file's ``settings``).

    Six batches of eight 16-pixel images, three epochs of two, let every method act:
    ProgressiveResizing runs its first half at half size and its last batch at full size;
    SelectiveBackprop selects from half of training on, every other batch (batch 5 of 6); Layer
    Freezing freezes at the second epoch's end, so the third trains without the frozen layers;
    every batch is large enough for a mixing partner of another class.
    """

    steps: int = 6
    epochs: int = 3
    batch_size: int = 8
    image_size: int = 16
    nproc: int = 2
    seed: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


NUM_CLASSES = 10


@dataclass(frozen=True)
class Cell:
    kind: str
    methods: tuple[str, ...]
    precision: str = "fp32"
    parallel: str = "single"
    recipe: str | None = None  # a recipe cell's recipe (its methods are the recipe's members)

    @property
    def label(self) -> str:
        """``parallel cutmix ddp``, with the precision where it is not fp32 (``parallel cutmix ddp
        amp_bf16``); a recipe cell ``recipe mild``: unique in a plan (a launch's results are keyed by it)."""
        if self.recipe is not None:
            return f"{self.kind} {self.recipe}"
        parallel = f" {self.parallel}" + (f" {self.precision}" if self.precision != "fp32" else "")
        mode = {"precision": f" {self.precision}", "parallel": parallel}.get(self.kind, "")
        return f"{self.kind} {' + '.join(self.methods)}{mode}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "methods": list(self.methods),
            "precision": self.precision,
            "parallel": self.parallel,
            **({"recipe": self.recipe} if self.recipe is not None else {}),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Cell:
        return cls(data["kind"], tuple(data["methods"]), data["precision"], data["parallel"], data.get("recipe"))


# --------------------------------------------------------------------------------------------- plan


def _method_records(records: Mapping[str, Any] | None = None) -> dict[str, Any]:
    if records is None:
        from algorithms.metadata import load_all_metadata

        records = load_all_metadata()
    return {key: r for key, r in sorted(records.items()) if r.kind == "method"}


def plan_cells(
    records: Mapping[str, Any] | None = None,
    kinds: Iterable[str] = KINDS,
    parallels: Sequence[str] = MATRIX_PARALLELS,
    only: Iterable[str] = (),
    precisions: Iterable[str] = (),
) -> list[Cell]:
    """Every cell of ``kinds``, in a fixed order, from the registry's ``kind: method`` records.

    ``parallels`` are the distributed modes to run (leave deepspeed out where it cannot run), each
    in every precision of :data:`PARALLEL_PRECISIONS`; ``only``: method keys, to keep just the
    cells that hold one of them (a new method's cells: alone, in each mode, and in a pair either
    way round); ``precisions``: precision modes, to keep just the cells in one of them (a solo or
    pair cell is fp32), e.g. ``amp_bf16`` for the parallel cells in it.
    """
    methods = _method_records(records)
    kinds = set(kinds)
    cells: list[Cell] = []
    if "solo" in kinds:
        cells += [Cell("solo", (key,)) for key in methods]
    if "pair" in kinds:
        cells += [
            Cell("pair", (a, b))
            for a in methods
            for b in methods
            if a != b and set(methods[a].domains) & set(methods[b].domains)
        ]
    if "precision" in kinds:
        cells += [Cell("precision", (key,), precision=p) for key in methods for p in PRECISIONS]
    if "parallel" in kinds:
        cells += [
            Cell("parallel", (key,), precision=p, parallel=mode)
            for mode in parallels
            for p in PARALLEL_PRECISIONS
            for key in methods
        ]
    if RECIPE_KIND in kinds:
        cells += recipe_cells()
    only, precisions = set(only), set(precisions)
    return [c for c in cells if (not only or only & set(c.methods)) and (not precisions or c.precision in precisions)]


def recipe_cells() -> list[Cell]:
    """One cell per published recipe (:data:`algorithms.recipes.RECIPES`): its whole stack, in fp32,
    one process, with :data:`algorithms.recipes.SMALL_SCALE`'s changes to its members' arguments."""
    from algorithms.recipes import RECIPES

    return [Cell(RECIPE_KIND, tuple(m.key for m in r.members), recipe=r.key) for r in RECIPES.values()]


#: How many pairs without a note of their own :func:`sample_cells` keeps.
SAMPLED_PAIRS = 12


def sample_cells(
    cells: Sequence[Cell], records: Mapping[str, Any] | None = None, pairs: int = SAMPLED_PAIRS
) -> list[Cell]:
    """What the test suite reruns of the matrix: every cell of one method (alone, in each precision,
    in each parallel mode: they grow with the catalog, not its square), every pair that a method's
    ``interactions`` names (what the cards state must keep holding), and ``pairs`` of the other
    pairs, evenly spaced in plan order, so the same ones every run. ``nox -s matrix`` runs them all."""
    records = _method_records(records)

    def named(a: str, b: str) -> bool:
        return b in records[a].interactions or a in records[b].interactions

    noted = [c for c in cells if c.kind == "pair" and named(*c.methods)]
    others = [c for c in cells if c.kind == "pair" and c not in noted]
    stride = max(1, -(-len(others) // pairs)) if pairs > 0 else len(others) + 1
    kept = set(noted) | set(others[::stride][:pairs])
    return [c for c in cells if c.kind != "pair" or c in kept]


def cell_note(cell: Cell, records: Mapping[str, Any]) -> str | None:
    """The note that explains the cell: for a pair, either method's ``interactions`` entry keyed by
    the other; and for any cell, each method's ``precision=<mode>`` entry for the cell's precision
    and ``parallel=<mode>`` entry for its parallel mode (a method that does nothing in fp32, such
    as a low-precision norm, explains it once for every fp32 cell). None without one."""
    keys = []
    if cell.kind == "pair":
        a, b = cell.methods
        keys += [(a, b), (b, a)]
    for m in cell.methods:
        keys.append((m, f"precision={cell.precision}"))
        if cell.parallel != "single":
            keys.append((m, f"parallel={cell.parallel}"))
    notes = list(dict.fromkeys(records[m].interactions[k] for m, k in keys if k in records[m].interactions))
    return " ".join(notes) if notes else None


# --------------------------------------------------------------------------------------------- effects


@dataclass
class Batch:
    """What the recorders saw of one training batch (tensors, detached copies)."""

    loader_input: Any
    model_input: Any = None
    loss_target: Any = None
    loss: float | None = None
    #: The model's signature (:func:`model_signature`) when the run began, and after every
    #: method's surgery at ``Event.INIT`` (before the Trainer wraps it).
    model_before: Any = None
    model_after: Any = None
    #: On the last batch: the parameters the model evaluates with after training (at
    #: ``EVAL_START``, after every method's swap), and those of the same run without any method.
    eval_weights: Any = None
    baseline_weights: Any = None
    #: The loader's target (before any method changes it).
    loader_target: Any = None


def _baseline(b: Batch, r: Batch | None) -> tuple[Any, Any]:
    """What batch ``b`` is compared with: the reference run's model input and loss target (the cell
    without the method in question), or, without a reference, the loader's input and no target."""
    return (b.loader_input, None) if r is None else (r.model_input, r.loss_target)


def _pairs(batches: Sequence[Batch], reference: Sequence[Batch] | None) -> list[tuple[Batch, Batch | None]]:
    return list(zip(batches, reference, strict=True)) if reference is not None else [(b, None) for b in batches]


def _changed_inputs(batches: Sequence[Batch], reference: Sequence[Batch] | None = None) -> bool:
    """Some batch whose model input has the baseline's shape and differs from it."""
    for b, r in _pairs(batches, reference):
        base, _ = _baseline(b, r)
        if (
            b.model_input is not None
            and base is not None
            and b.model_input.shape == base.shape
            and not _equal(b.model_input, base)
        ):
            return True
    return False


def _equal(a: Any, b: Any) -> bool:
    """The same values (a cast that keeps every value is no change)."""
    import torch

    return bool(torch.equal(a.double(), b.double()))


def _smaller_inputs(batches: Sequence[Batch], reference: Sequence[Batch] | None = None) -> bool:
    """Some batch whose model input is smaller in space or time than the baseline's: for images
    every dim after the channels, for token ids ``(N, T)`` the sequence, no larger and one smaller."""

    def smaller(b: Batch, r: Batch | None) -> bool:
        base, _ = _baseline(b, r)
        if b.model_input is None or base is None or b.model_input.ndim < 2 or b.model_input.ndim != base.ndim:
            return False
        first = 2 if b.model_input.ndim >= 3 else 1
        seen, given = b.model_input.shape[first:], base.shape[first:]
        return all(s <= g for s, g in zip(seen, given, strict=True)) and any(
            s < g for s, g in zip(seen, given, strict=True)
        )

    return any(smaller(b, r) for b, r in _pairs(batches, reference))


def _fewer_examples(batches: Sequence[Batch], reference: Sequence[Batch] | None = None) -> bool:
    """Some batch of which the model sees fewer rows than the baseline."""
    for b, r in _pairs(batches, reference):
        base, _ = _baseline(b, r)
        if b.model_input is not None and base is not None and b.model_input.shape[0] < base.shape[0]:
            return True
    return False


def _is_mixed(t: Any) -> bool:
    """A loss-target row (float, classes on dim 1) with at least two entries above the row's
    minimum by more than :data:`MIXED_MARGIN`."""
    if t is None or not t.is_floating_point() or t.ndim < 2 or t.shape[1] < 2:
        return False
    rows = t.float().movedim(1, -1).reshape(-1, t.shape[1])
    above = rows > rows.min(dim=1, keepdim=True).values + MIXED_MARGIN
    return bool((above.sum(dim=1) >= 2).any())


def _is_smoothed(t: Any) -> bool:
    return t is not None and t.is_floating_point() and bool((t > 0).all())


def _differs(t: Any, base: Any) -> bool:
    return base is None or t.shape != base.shape or not _equal(t, base)


def _mixed_targets(batches: Sequence[Batch], reference: Sequence[Batch] | None = None) -> bool:
    """Some batch whose loss target is mixed (:func:`_is_mixed`) and differs from the baseline's."""
    for b, r in _pairs(batches, reference):
        _, base = _baseline(b, r)
        if _is_mixed(b.loss_target) and _differs(b.loss_target, base):
            return True
    return False


def _smoothed_targets(batches: Sequence[Batch], reference: Sequence[Batch] | None = None) -> bool:
    """Every loss target float with every entry above zero (at least one target seen), and some
    batch's target not the baseline's."""
    pairs = [(b, r) for b, r in _pairs(batches, reference) if b.loss_target is not None]
    return (
        bool(pairs)
        and all(_is_smoothed(b.loss_target) for b, _ in pairs)
        and any(_differs(b.loss_target, _baseline(b, r)[1]) for b, r in pairs)
    )


def model_signature(model: Any) -> tuple[tuple[Any, ...], ...]:
    """What ``changed_model`` compares: every module's class by qualified name, and every
    parameter's name, shape, dtype and (4-D) whether it is channels-last."""
    import torch

    modules = tuple(
        ("module", name, f"{type(m).__module__}.{type(m).__qualname__}") for name, m in model.named_modules()
    )
    params = tuple(
        (
            "parameter",
            name,
            tuple(p.shape),
            str(p.dtype),
            p.ndim == 4 and p.is_contiguous(memory_format=torch.channels_last) and not p.is_contiguous(),
        )
        for name, p in model.named_parameters()
    )
    return modules + params


def _changed_model(batches: Sequence[Batch], reference: Sequence[Batch] | None = None) -> bool:
    """The model after the methods' surgery differs from the baseline's: the reference run's model
    after its surgery, or, without a reference, the model the run began with."""
    for b, r in _pairs(batches, reference):
        base = b.model_before if r is None else r.model_after
        if b.model_after is not None and base is not None and b.model_after != base:
            return True
    return False


def _weights_differ(a: Any, b: Any) -> bool:
    import torch

    return a.keys() != b.keys() or any(a[k].shape != b[k].shape or not torch.equal(a[k], b[k]) for k in a)


def _changed_weights(batches: Sequence[Batch], reference: Sequence[Batch] | None = None) -> bool:
    """The parameters the model evaluates with after training differ from the baseline's: the
    reference run's, or, without a reference, those of the same run without any method."""
    if not batches:
        return False
    last = batches[-1]
    base = last.baseline_weights if reference is None else (reference[-1].eval_weights if reference else None)
    return last.eval_weights is not None and base is not None and _weights_differ(last.eval_weights, base)


#: Each observable effect's decision, by its definition in the metadata schema's ``observable``:
#: against the loader's batch for a method alone, against the other method alone (same seeds, so
#: the same draws) for a method in a pair, so each method's own effect is what is seen.
EFFECTS: Mapping[str, Callable[..., bool]] = {
    "changed_inputs": _changed_inputs,
    "smaller_inputs": _smaller_inputs,
    "fewer_examples": _fewer_examples,
    "mixed_targets": _mixed_targets,
    "smoothed_targets": _smoothed_targets,
    "changed_model": _changed_model,
    "changed_weights": _changed_weights,
}


def effects_seen(batches: Sequence[Batch], reference: Sequence[Batch] | None = None) -> list[str]:
    """The observable effects the batches show against ``reference`` (default: the loader's
    batches), in :data:`OBSERVABLES` order."""
    if reference is not None and len(reference) != len(batches):
        return []
    return [name for name in OBSERVABLES if EFFECTS[name](batches, reference)]


def nonfinite_loss(batches: Sequence[Batch]) -> str | None:
    """What was not finite ('loss nan at batch 3'), or None when every loss was finite."""
    for i, b in enumerate(batches, start=1):
        if b.loss is None:
            return f"no loss recorded at batch {i}"
        if not math.isfinite(b.loss):
            return f"loss {b.loss} at batch {i}"
    return None


# --------------------------------------------------------------------------------------------- correctness

#: How far an averaged weight may be from the fp64 average of the same trajectory, as a fraction
#: of the weights' scale (their largest magnitude), by precision. The average is kept in fp32 in
#: every precision (the half-precision modes train half weights, but their average is fp32), so
#: the only error is fp32's: about one rounding (6e-8) per update, a few dozen updates in a
#: cell. 1e-5 leaves two orders of headroom for that (and for a GPU's fused kernels), and is
#: below what an average kept in half precision loses: an update that moves a weight by less than
#: half a ulp (fp16: 2.4e-4, bf16: 2e-3 of its magnitude) is lost entirely, and EMA's updates,
#: (1 - smoothing) of the distance to the weights, are of that size. Under amp_bf16 the weights
#: themselves are fp32 (autocast computes the forward in bf16, the optimizer steps fp32), in one
#: process and in every parallel mode (each rank averages the weights its optimizer stepped), so
#: the same tolerance holds there.
AVERAGE_RTOL: Mapping[str, float] = {p: 1e-5 for p in PRECISIONS}
#: How far the first batch's loss may be from its value by the methods' definitions, relative to
#: it, by precision: the Trainer computes the loss in fp32 from the logits (``outputs.float()``)
#: in every precision and the reference in fp64 from the same logits, so the miss is fp32's
#: rounding of a log-softmax and a mean (1e-7 to 1e-6); a missing smoothing or mixing moves it by
#: a tenth or more. Under amp_bf16 (in one process or in a parallel mode) the logits are bf16
#: values, but both losses start from those same values, and autocast runs the cross entropy of
#: fp32 logits in fp32 (the same value as outside it), so the bound holds.
LOSS_RTOL: Mapping[str, float] = {p: 1e-5 for p in PRECISIONS}
#: How far SAM(rho=0)'s final weights may be from the same run's without SAM, as a fraction of the
#: weights' scale, by precision. With rho = 0 the second pass is the first computed again at the
#: same weights on the same draws, so the runs agree to the bit on a CPU; a GPU's
#: non-deterministic reductions may differ in the last bits of a gradient, which a few steps keep
#: at that size (fp32 1e-7, bf16 4e-3 of a step). A pass on the wrong loss moves them by a
#: sizeable part of a step (lr 0.05), far above.
SAM_RTOL: Mapping[str, float] = {"fp32": 1e-5, "amp_fp16": 1e-5, "amp_bf16": 1e-5, "fp16": 1e-3, "bf16": 1e-3}


def _local(t: Any) -> Any:
    """A tensor of this rank (a sharded DTensor's local shard)."""
    return t.to_local() if hasattr(t, "to_local") else t


def _fp64(weights: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _local(w).detach().double().cpu().clone() for k, w in weights.items()}


def _largest(tensors: Iterable[Any]) -> float:
    return max((float(t.abs().max()) for t in tensors if t.numel()), default=0.0)


def ema_reference(
    snapshots: Sequence[tuple[int, bool, Mapping[str, Any]]], smoothing: float, interval: int
) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """EMA's average of a trajectory, in fp64, by its definition: ``snapshots`` are ``(time,
    reached ema_start, weights)`` at each of EMA's update events in turn (the time in the update
    interval's unit). The first event that reached the start copies the weights; each later one
    whose time is a multiple of ``interval`` makes ``avg <- s * avg + (1 - s) * w``.

    Returns ``(average, start)``, the average and the copy it started from, or None where the
    average never started."""
    average: dict[str, Any] | None = None
    start: dict[str, Any] = {}
    for time_, reached, weights in snapshots:
        if average is None:
            if reached:
                average = _fp64(weights)
                start = {k: w.clone() for k, w in average.items()}
        elif time_ % interval == 0:
            for k, w in _fp64(weights).items():
                average[k] = smoothing * average[k] + (1.0 - smoothing) * w
    return None if average is None else (average, start)


def swa_reference(
    snapshots: Sequence[tuple[bool, Mapping[str, Any]]], interval: int
) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """SWA's mean of a trajectory, in fp64, by its definition: ``snapshots`` are ``(reached
    swa_start, weights)`` at each of SWA's update events in turn until it loads the mean. From the
    first event that reached the start, every ``interval``-th event (the first included) adds the
    weights to the mean: the arithmetic mean of those snapshots.

    Returns ``(mean, first snapshot)``, or None where averaging never started."""
    taken: list[dict[str, Any]] = []
    counter = None
    for reached, weights in snapshots:
        if counter is None:
            if not reached:
                continue
            counter = 0
        if counter % interval == 0:
            taken.append(_fp64(weights))
        counter += 1
    if not taken:
        return None
    mean = {k: sum(t[k] for t in taken) / len(taken) for k in taken[0]}
    return mean, taken[0]


def check_average(
    name: str, held: Mapping[str, Any], reference: Mapping[str, Any], start: Mapping[str, Any], precision: str
) -> str | None:
    """None where the average ``held`` (the parameters a method holds) is within
    :data:`AVERAGE_RTOL` of the weights' scale of the fp64 ``reference``; otherwise one line with
    the size of the miss: how far off, as a fraction of the way the reference moved from
    ``start``, and as a fraction of the weights' scale."""
    missing = sorted(set(reference) - set(held))
    if missing:
        return f"{name}'s average holds no {missing[0]} ({precision})"
    miss = _largest(_fp64({k: held[k]})[k] - reference[k] for k in reference)
    scale = _largest(reference.values())
    moved = _largest(reference[k] - start[k] for k in reference)
    rtol = AVERAGE_RTOL[precision]
    if miss <= rtol * scale:
        return None
    way = f"{miss / moved:.2g} of the way off" if moved > 0 else "off"
    return (
        f"{name}'s average is {way} an fp64 {name} of the same weights ({precision}: {miss / max(scale, 1e-30):.1e} "
        f"of the weights' scale, tolerance {rtol:g})"
    )


def reference_loss(
    logits: Any, target: Any, smoothing: Sequence[float] = (), mixes: Sequence[tuple[Any, float]] = ()
) -> float:
    """The cross entropy of ``logits`` against class indices ``target``, in fp64, by the methods'
    definitions: each label smoothing ``s`` makes the distribution ``(1 - s) * onehot + s / C``;
    each mix ``(indices, m)``, in the order the methods mixed, makes ``(1 - m) * d + m *
    d[indices]`` (MixUp's ``mixing``; CutMix's pixel fraction from the partner). Interpolating the
    losses instead is the same number (the cross entropy is linear in the target). Classes are on
    the last dim of ``logits`` where ``target`` is its shape without it (a language model's, and
    ``(N, C)``), else on dim 1; negative labels are ignored positions."""
    import torch

    logits = logits.detach().double()
    if tuple(logits.shape[:-1]) != tuple(target.shape):
        logits = logits.movedim(1, -1)
    classes = logits.shape[-1]
    kept = target >= 0
    dist = torch.nn.functional.one_hot(target.clamp(min=0).long(), classes).double() * kept.unsqueeze(-1)
    for s in smoothing:
        dist = dist * (1.0 - s) + kept.unsqueeze(-1).double() * (s / classes)
    for indices, m in mixes:
        dist = dist * (1.0 - m) + dist[indices.long()] * m
    per_position = -(dist * torch.log_softmax(logits, dim=-1)).sum(-1)
    return float(per_position[kept].sum() / kept.sum().clamp(min=1))


def check_loss(loss: float, reference: float, precision: str, names: Sequence[str]) -> str | None:
    """None where the loss the Trainer computed is within :data:`LOSS_RTOL` of ``reference``; else
    one line naming the methods whose definitions it was computed by."""
    rtol = LOSS_RTOL[precision]
    miss = abs(loss - reference) / max(abs(reference), 1e-12)
    if miss <= rtol:
        return None
    return (
        f"the first batch's loss is {loss:.6g}, {reference:.6g} by {' and '.join(names)}'s definition "
        f"({precision}: {miss:.1e} off, tolerance {rtol:g})"
    )


def check_sam(without: Mapping[str, Any], at_zero: Mapping[str, Any], precision: str, variant: str = "") -> str | None:
    """None where SAM(rho=0)'s final parameters ``at_zero`` are within :data:`SAM_RTOL` of the
    weights' scale of those of the same run without SAM; else one line with the size of the miss."""
    if without.keys() != at_zero.keys():
        return f"SAM(rho=0) ends with other parameters than the same run without SAM{variant}"
    a, b = _fp64(at_zero), _fp64(without)
    miss = _largest(a[k] - b[k] for k in b)
    scale = _largest(b.values())
    rtol = SAM_RTOL[precision]
    if miss <= rtol * scale:
        return None
    return (
        f"SAM(rho=0) ends {miss / max(scale, 1e-30):.1e} of the weights' scale from the same run without SAM"
        f"{variant} ({precision}, tolerance {rtol:g}): its second pass is not the first's loss"
    )


# --------------------------------------------------------------------------------------------- one cell


@dataclass
class CellRun:
    """What running one cell gave: the effects seen, or the error; JSON-ready (the worker sends it)."""

    seen: list[str] = field(default_factory=list)
    error_type: str | None = None
    detail: str | None = None  # "TypeName: first line", or what was not finite
    wall_s: float = 0.0
    #: The correctness checks run, as ``method.check`` (:data:`CHECKS`), and what the ones that
    #: missed found, one line each (None where every check passed).
    checks: list[str] = field(default_factory=list)
    wrong: str | None = None
    #: What the recorders saw (in-process only: the reference of the pairs; not sent by the worker).
    batches: list[Batch] = field(default_factory=list, repr=False, compare=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "seen": self.seen,
            "error_type": self.error_type,
            "detail": self.detail,
            "wall_s": self.wall_s,
            "checks": self.checks,
            "wrong": self.wrong,
        }


def _workload_domain(cell: Cell, records: Mapping[str, Any]) -> str | None:
    """The domain the cell's model and data come from: the first of :data:`WORKLOADS` that every
    method of the cell has."""
    shared = set.intersection(*(set(records[k].domains) for k in cell.methods))
    return next((d for d in WORKLOADS if d in shared), None)


@dataclass
class Workload:
    """A cell's model, its batches, and how the Trainer reads them."""

    model: Any
    batches: list[Any]
    input_key: int | str = 0
    target_key: int | str = 1
    loss_fn: Any = None


def vision_model(seed: int) -> Any:
    """The vision cells' model: small, for any image size, and holding every module class a vision
    method changes: convolutions (strided, and 64 wide), batch norm, max pooling, the reference
    ResNets' ``BasicBlock``, group norm, dropout and linear layers."""
    import torch
    from torch import nn

    from algorithms.models.resnet import BasicBlock

    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1, bias=False),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        BasicBlock(16, 32, stride=2),
        nn.MaxPool2d(2),
        BasicBlock(32, 64, stride=2),
        nn.GroupNorm(8, 64),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Dropout(0.1),
        nn.Linear(64, NUM_CLASSES),
    )


def _vision_workload(settings: Settings, rank: int) -> Workload:
    """:func:`vision_model` and seeded images of 10 classes.

    The model's weights are the same on every rank; each rank draws its own batches."""
    import torch

    model = vision_model(settings.seed)
    g = torch.Generator().manual_seed(settings.seed * 1000 + rank)
    size, n = settings.image_size, settings.batch_size
    batches = [
        (torch.rand(n, 3, size, size, generator=g), torch.randint(0, NUM_CLASSES, (n,), generator=g))
        for _ in range(settings.steps // settings.epochs)
    ]
    return Workload(model, batches)


#: The language-model cells' tokens: a small vocabulary and sequences of this length.
NLP_VOCAB = 32
NLP_LENGTH = 16


def _nlp_workload(settings: Settings, rank: int) -> Workload:
    """The reference ``transformer_tiny`` on seeded token sequences, as dict batches
    ``{"input_ids", "labels"}`` (labels: the next token), with its next-token loss."""
    import torch

    from algorithms.models import lm_loss, transformer_tiny

    torch.manual_seed(settings.seed)
    model = transformer_tiny(NLP_VOCAB)
    g = torch.Generator().manual_seed(settings.seed * 1000 + rank)
    batches = []
    for _ in range(settings.steps // settings.epochs):
        tokens = torch.randint(0, NLP_VOCAB, (settings.batch_size, NLP_LENGTH + 1), generator=g)
        batches.append({"input_ids": tokens[:, :-1], "labels": tokens[:, 1:]})
    return Workload(model, batches, "input_ids", "labels", lm_loss)


WORKLOADS: Mapping[str, Callable[[Settings, int], Workload]] = {
    "vision": _vision_workload,
    "nlp": _nlp_workload,
}


class _Loader(list):
    """The batches, with the batch size the Trainer reads for DeepSpeed's micro-batch."""

    def __init__(self, batches: Iterable[Any], batch_size: int):
        super().__init__(batches)
        self.batch_size = batch_size


def _recorders(batches: list[Batch], input_key: int | str = 0, target_key: int | str = 1) -> tuple[Any, Any]:
    """The first and the last algorithm of a cell: the model before and after the methods'
    surgery at ``INIT``, the loader's batch, and what the model and the loss saw.

    The loss and its target are read at ``BEFORE_BACKWARD``: the loss that is backpropagated,
    after every method acted at ``AFTER_LOSS`` (whatever order the Engine runs ``AFTER_*`` in)."""
    from algorithms.core import Algorithm, Event

    models: dict[str, Any] = {}

    def item(value: Any) -> Any:
        return value.detach().clone() if hasattr(value, "detach") else value

    class LoaderRecorder(Algorithm):
        def match(self, event: Any, state: Any) -> bool:
            return event in (Event.INIT, Event.AFTER_DATALOADER)

        def apply(self, event: Any, state: Any, logger: Any = None) -> None:
            if event is Event.INIT:
                models["before"] = model_signature(state.model)
                return
            batches.append(
                Batch(
                    loader_input=item(state.batch_get_item(input_key)),
                    loader_target=item(state.batch_get_item(target_key)),
                    model_before=models.get("before"),
                    model_after=models.get("after"),
                )
            )

    class ModelRecorder(Algorithm):
        def match(self, event: Any, state: Any) -> bool:
            return event in (Event.INIT, Event.BEFORE_FORWARD, Event.BEFORE_BACKWARD, Event.EVAL_START)

        def apply(self, event: Any, state: Any, logger: Any = None) -> None:
            if event is Event.INIT:
                models["after"] = model_signature(state.model)
            elif event is Event.EVAL_START:
                if batches:
                    batches[-1].eval_weights = {name: p.detach().clone() for name, p in state.model.named_parameters()}
            elif event is Event.BEFORE_FORWARD:
                batches[-1].model_input = item(state.batch_get_item(input_key))
            else:
                batches[-1].loss_target = item(state.loss_target)
                batches[-1].loss = float(state.loss.detach().float())

    return LoaderRecorder(), ModelRecorder()


def _error_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _build_methods(
    cell: Cell,
    records: Mapping[str, Any],
    workload: Workload | None = None,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[Any]:
    """The cell's methods with their suggested hyperparameters (``overrides[key]`` in their
    place), and the workload's batch keys for a method whose plumbing takes them (``input_key``,
    ``target_key``)."""
    import algorithms

    keys = {} if workload is None else {"input_key": workload.input_key, "target_key": workload.target_key}
    overrides = overrides or {}
    return [
        getattr(algorithms, records[k].class_name)(
            **{**{name: h.suggested for name, h in records[k].hyperparameters.items()}, **overrides.get(k, {})},
            **{name: value for name, value in keys.items() if name in records[k].plumbing},
        )
        for k in cell.methods
    ]


#: A recipe cell's changes beyond :data:`algorithms.recipes.SMALL_SCALE`, by member: SAM's sharp step
#: every 10 batches (Medium's) would not come round in the cell's 6, so it takes one every 3.
RECIPE_CELL_CHANGES = {"sam": {"interval": 3}}


def _recipe_methods(cell: Cell, workload: Workload) -> list[Any]:
    """A recipe cell's stack, as :func:`algorithms.recipes.small_scale_hparams` gives it with
    :data:`RECIPE_CELL_CHANGES`."""
    from algorithms.recipes import get_recipe, small_scale_hparams

    recipe = get_recipe(cell.recipe or "")
    hparams = small_scale_hparams(recipe)
    hparams = {k: {**h, **RECIPE_CELL_CHANGES.get(k, {})} for k, h in hparams.items()}
    stack = recipe.algorithms(hparams, input_key=workload.input_key, target_key=workload.target_key)
    # a reference cell (the stack less one member, :func:`recipe_references`) lists fewer methods
    return [a for m, a in zip(recipe.members, stack, strict=True) if m.key in cell.methods]


def recipe_references(cell: Cell, settings: Settings, records: Mapping[str, Any]) -> dict[str, list[Batch]]:
    """What the model and the loss see with a recipe's stack less each member, by that member: the
    reference each member's effects are decided against, as a pair's are against the other method
    alone (the same seeds, so the same draws). Against the loader's batches instead, a member that
    changes the inputs would go unseen wherever another one resizes every batch (ColOut)."""
    return {
        key: run_cell(
            replace(cell, methods=tuple(k for k in cell.methods if k != key)), settings, records, check=False
        ).batches
        for key in cell.methods
    }


def _train(
    cell: Cell, methods: Sequence[Any], workload: Workload, settings: Settings, extra: Sequence[Any] = ()
) -> list[Batch]:
    """Train the workload with ``methods`` in the cell's precision and parallel mode, then evaluate
    one batch; what the recorders saw. ``extra`` algorithms are listed after the recorders."""
    import torch

    from algorithms.core import Trainer

    batches: list[Batch] = []
    first, last = _recorders(batches, workload.input_key, workload.target_key)
    loss = {} if workload.loss_fn is None else {"loss_fn": workload.loss_fn}
    with Trainer(
        workload.model,
        _Loader(workload.batches, settings.batch_size),
        f"{settings.steps}ba",
        optimizer=lambda params: torch.optim.SGD(params, lr=0.05, momentum=0.9),
        algorithms=[first, *methods, last, *extra],
        precision=cell.precision,
        parallel=cell.parallel,
        seed=settings.seed,
        input_key=workload.input_key,
        target_key=workload.target_key,
        **loss,
    ) as trainer:
        trainer.fit()
        trainer.eval(workload.batches[:1])
    return batches


# --------------------------------------------------------------------------------------------- checks in a run


def _model_weights(state: Any) -> dict[str, Any]:
    """The parameters of the network inside whatever wraps it, as the methods see them."""
    from algorithms.core.distributed import unwrap_model

    return {n: p.detach().clone() for n, p in unwrap_model(state.model).named_parameters()}


def _tap(method: Any, before: Callable[[Any, Any], None], after: Callable[[Any, Any], None] | None = None) -> None:
    """Call ``before(event, state)`` (and ``after``) around each of ``method``'s ``apply`` calls."""
    apply = method.apply

    def tapped(event: Any, state: Any, logger: Any = None) -> None:
        before(event, state)
        apply(event, state, logger)
        if after is not None:
            after(event, state)

    method.apply = tapped


class _AverageCheck:
    """EMA's or SWA's check: the weights at each of its update events, as it sees them (before it
    acts), and at the end the average it holds, against :func:`ema_reference` or
    :func:`swa_reference` of those weights."""

    def __init__(self, key: str, method: Any):
        from algorithms.core import Event
        from algorithms.core.time import Duration, TimeUnit

        self.key, self.method, self.kind = key, method, type(method).__name__
        interval = Duration.parse(method.update_interval)
        self.unit, self.interval = interval.unit, int(interval.value)
        self.event = Event.BATCH_END if interval.unit is TimeUnit.BATCH else Event.EPOCH_END
        self.snapshots: list[tuple[Any, ...]] = []
        self.held: Mapping[str, Any] | None = None
        self._mean: Any = None
        _tap(method, self._before, self._after if self.kind == "SWA" else None)

    def _before(self, event: Any, state: Any) -> None:
        if event is not self.event:
            pass
        elif self.kind == "EMA":
            self.snapshots.append(
                (state.timestamp.get(self.unit), state.reached(self.method.ema_start), _model_weights(state))
            )
        else:
            self.snapshots.append((state.reached(self.method.swa_start), _model_weights(state)))
        if self.kind == "SWA":
            self._mean = self.method.swa_model

    def _after(self, event: Any, state: Any) -> None:
        if self._mean is not None and self.method.swa_model is None:  # the mean was loaded: what it held
            self.held = {n: p.detach().clone() for n, p in self._mean.named_parameters()}

    def verdict(self, precision: str) -> str | None:
        if self.kind == "EMA":
            reference = ema_reference(self.snapshots, self.method.smoothing, self.interval)
            try:
                held = self.method.state_dict().get("ema_weights")  # the average a checkpoint resumes
            except Exception:  # not this check's concern (a checkpoint's): the copy that holds it
                model = self.method.ema_model
                held = None if model is None else dict(model.named_parameters())
        else:
            reference = swa_reference(self.snapshots, self.interval)
            held = self.held
            if held is None and self.method.swa_model is not None:
                held = dict(self.method.swa_model.named_parameters())
        if reference is None:
            return None if held is None else f"{self.kind} holds an average but its start was never reached"
        if held is None:
            return f"{self.kind} holds no average though its start was reached ({precision})"
        return check_average(self.kind, held, *reference, precision)


def _is_mixer(method: Any) -> bool:
    return all(hasattr(method, a) for a in ("indices", "mixing", "interpolate_loss"))


def _is_smoother(method: Any) -> bool:
    return type(method).__name__ == "LabelSmoothing"


#: The observable effects on the loss's target that :func:`reference_loss` models (label smoothing,
#: mixing): a cell with another method showing one of them has no loss check. (One that reshapes
#: the first batch, fewer rows or shorter sequences, has none either: :meth:`_LossCheck.applies`.)
LOSS_EFFECTS = ("mixed_targets", "smoothed_targets")


class _LossCheck:
    """The loss check of a cell with label smoothing or mixing: on the first batch, at
    ``BEFORE_BACKWARD`` (after every method acted at ``AFTER_LOSS``), the logits, the loss and each
    mixing method's partners and weight, against :func:`reference_loss` of the loader's target."""

    def __init__(self, methods: Sequence[tuple[str, Any]]):
        self.methods = methods
        self.seen: dict[str, Any] = {}
        #: The height and width of the images each mixing method mixed (as the batch was when it
        #: acted: another method may resize them before or after it), by id.
        self.sizes: dict[int, tuple[int, ...]] = {}
        for _, m in methods:
            if _is_mixer(m):
                _tap(m, self._size_before(m))

    def _size_before(self, method: Any) -> Callable[[Any, Any], None]:
        from algorithms.core import Event

        def record(event: Any, state: Any) -> None:
            if event is Event.AFTER_DATALOADER:
                self.sizes[id(method)] = tuple(state.batch_get_item(method.input_key).shape[-2:])

        return record

    def algorithm(self) -> Any:
        from algorithms.core import Algorithm, Event

        check = self

        class LossProbe(Algorithm):
            def match(self, event: Any, state: Any) -> bool:
                # the first pass only, should a second (SAM's) run the loss's events again
                return event is Event.BEFORE_BACKWARD and state.timestamp.batch == 0 and not check.seen

            def apply(self, event: Any, state: Any, logger: Any = None) -> None:
                check.seen = {
                    "logits": state.outputs.detach().float().clone(),
                    "loss": float(state.loss.detach().float()),
                    "mixes": [(m.indices.clone(), partners_share(m)) for _, m in check.methods if _is_mixer(m)],
                }

        def partners_share(method: Any) -> float:
            """The partners' share: CutMix's box as a fraction of the image (its ``bbox``), else ``mixing``."""
            box = getattr(method, "bbox", None)
            if box is None:
                return float(method.mixing)
            x1, y1, x2, y2 = box
            height, width = check.sizes[id(method)]
            return (x2 - x1) * (y2 - y1) / (height * width)

        return LossProbe()

    def applies(self, batches: Sequence[Batch]) -> bool:
        """Whether the logits are the loader's target's shape with classes (dim 1 or last): not
        where another method reshaped the first batch (shorter token sequences, fewer rows)."""
        if not self.seen or not batches or batches[0].loader_target is None:
            return True  # the verdict says what was not recorded
        logits, target = tuple(self.seen["logits"].shape), tuple(batches[0].loader_target.shape)
        return len(logits) == len(target) + 1 and target in (logits[:-1], logits[:1] + logits[2:])

    def verdict(self, batches: Sequence[Batch], precision: str) -> str | None:
        if not self.seen or not batches:
            return "the first batch's loss was not recorded"
        target = batches[0].loader_target
        smoothing = [m.smoothing for _, m in self.methods if _is_smoother(m)]
        reference = reference_loss(self.seen["logits"], target, smoothing, self.seen["mixes"])
        return check_loss(self.seen["loss"], reference, precision, [k for k, _ in self.methods])


def _loss_methods(cell: Cell, records: Mapping[str, Any], methods: Sequence[Any]) -> list[tuple[str, Any]]:
    """The cell's label smoothing and mixing methods, by key, where every method of the cell that
    changes the loss's target is one of them (else none: the reference would not be the loss)."""
    mine = [(k, m) for k, m in zip(cell.methods, methods, strict=True) if _is_smoother(m) or _is_mixer(m)]
    others = [k for k, m in zip(cell.methods, methods, strict=True) if (k, m) not in mine]
    if any(set(LOSS_EFFECTS) & set(records[k].observable) for k in others):
        return []
    return mine


def _same_draws() -> Any:
    """An algorithm (listed after SAM) that makes SAM's second pass compute the first's loss again
    where nothing is wrong: it starts from the global generators as they were before the forward
    (the same dropout), and leaves them, and the model's buffers (batch norm's running statistics,
    which a second forward in training mode would update twice), as the first pass left them. So
    SAM(rho=0) and a run without SAM differ only if the second pass computes another loss."""
    import torch

    from algorithms.core import Algorithm, Event
    from algorithms.core.state import rng_state, set_rng_state

    saved: dict[str, Any] = {}

    def wrap(first_step: Callable[[Any], Any], model: Any) -> Callable[[Any], Any]:
        def same(closure: Callable[[], Any]) -> Any:
            after = rng_state()
            buffers = [b.detach().clone() for b in model.buffers()]

            def again() -> Any:
                set_rng_state(saved["forward"])
                try:
                    return closure()
                finally:
                    set_rng_state(after)
                    with torch.no_grad():
                        for b, held in zip(model.buffers(), buffers, strict=True):
                            b.copy_(held)

            return first_step(again)

        return same

    class SameDraws(Algorithm):
        def match(self, event: Any, state: Any) -> bool:
            return event in (Event.FIT_START, Event.BEFORE_FORWARD)

        def apply(self, event: Any, state: Any, logger: Any = None) -> None:
            if event is Event.BEFORE_FORWARD:
                saved["forward"] = rng_state()
                return
            for opt in state.optimizers:
                if hasattr(opt, "first_step") and "first_step" not in vars(opt):
                    opt.first_step = wrap(opt.first_step, state.model)

    return SameDraws()


def _sam_variants(cell: Cell, records: Mapping[str, Any]) -> list[dict[str, dict[str, Any]]]:
    """The hyperparameters the SAM check runs the cell's other methods with: the suggested ones,
    and each method's other ``interpolate_loss`` (MixUp's, CutMix's: SAM's second pass must see
    the interpolated loss as well as the mixed target)."""
    variants: list[dict[str, dict[str, Any]]] = [{}]
    for key in cell.methods:
        h = records[key].hyperparameters.get("interpolate_loss")
        if records[key].class_name != "SAM" and h is not None:
            variants.append({key: {"interpolate_loss": not h.suggested}})
    return variants


def _sam_check(cell: Cell, records: Mapping[str, Any], domain: str, settings: Settings, rank: int) -> list[str]:
    """The SAM check's misses (none where it passed): the cell run with SAM(rho=0) in SAM's place
    and without SAM, same seeds and data, in each of :func:`_sam_variants`, must end at the same
    parameters."""
    sam = [k for k in cell.methods if records[k].class_name == "SAM"]
    rest = Cell(cell.kind, tuple(k for k in cell.methods if k not in sam), cell.precision, cell.parallel)
    misses = []
    for variant in _sam_variants(cell, records):
        workload = WORKLOADS[domain](settings, rank)
        at_zero = _build_methods(cell, records, workload, {**variant, **{k: {"rho": 0.0} for k in sam}})
        at_zero_weights = _train(cell, at_zero, workload, settings, [_same_draws()])[-1].eval_weights
        # the run without SAM is the same for both orders of a pair: trained once
        key = (domain, cell.precision, cell.parallel, rest.methods, repr(sorted(variant.items())))
        if not rest.methods and not variant and (domain, cell.precision, cell.parallel) in _BASELINE_WEIGHTS:
            _WITHOUT_SAM[key] = _BASELINE_WEIGHTS[domain, cell.precision, cell.parallel]
        if key not in _WITHOUT_SAM:
            workload = WORKLOADS[domain](settings, rank)
            methods = _build_methods(rest, records, workload, variant)
            _WITHOUT_SAM[key] = _train(rest, methods, workload, settings)[-1].eval_weights
        words = "".join(f" with {k} {', '.join(f'{n}={v}' for n, v in h.items())}" for k, h in variant.items())
        miss = check_sam(_WITHOUT_SAM[key], at_zero_weights, cell.precision, words)
        if miss is not None:
            misses.append(miss)
    return misses


#: The methods whose averaged weights are checked (:class:`_AverageCheck`), by class name.
AVERAGED = ("EMA", "SWA")
#: The correctness checks, by the name a cell's ``checks`` gives them (``method.check``).
CHECKS = {
    "average": "EMA's or SWA's average equals the fp64 average of the weights it was given",
    "loss": "the first batch's loss equals the cross entropy by label smoothing's and mixing's definitions",
    "rho_zero": "SAM(rho=0) ends at the weights of the same run without SAM",
}

#: The eval weights of each workload trained without any method, by (domain, precision, parallel).
_BASELINE_WEIGHTS: dict[tuple[str, str, str], Any] = {}
#: The eval weights of a SAM cell's other methods trained without SAM (:func:`_sam_check`), by
#: domain, precision, parallel mode, methods and their hyperparameters' overrides.
_WITHOUT_SAM: dict[tuple[Any, ...], Any] = {}


def run_cell(
    cell: Cell,
    settings: Settings,
    records: Mapping[str, Any] | None = None,
    domain: str | None = None,
    check: bool = True,
) -> CellRun:
    """Train the cell in this process (under torchrun for a parallel cell), say what was seen and
    run its correctness checks (:data:`CHECKS`; not with ``check=False``, for a pair's reference).

    A cell with a method whose effect is ``changed_weights`` also trains the same workload without
    any method (once per domain, precision and parallel mode in this process), the baseline that
    effect is decided against when the cell has no reference run. ``domain`` runs a solo cell on
    that domain's workload (a pair's reference) instead of its method's first."""
    from algorithms.core.distributed import rank_and_world_size

    records = _method_records(records)
    start = time.perf_counter()
    domain = domain or _workload_domain(cell, records)
    if domain is None:
        return CellRun(
            error_type="LookupError",
            detail=f"no workload for the domains the methods share: add one to WORKLOADS in {__name__}",
        )
    rank = rank_and_world_size()[0] if cell.parallel in MATRIX_PARALLELS else 0
    try:
        workload = WORKLOADS[domain](settings, rank)
        methods = _build_methods(cell, records, workload) if cell.recipe is None else _recipe_methods(cell, workload)
        averages = [
            _AverageCheck(k, m) for k, m in zip(cell.methods, methods, strict=True) if records[k].class_name in AVERAGED
        ]
        loss = _LossCheck(_loss_methods(cell, records, methods))
        batches = _train(cell, methods, workload, settings, [loss.algorithm()] if loss.methods else [])
        if batches and any("changed_weights" in records[k].observable for k in cell.methods):
            key = (domain, cell.precision, cell.parallel)
            if key not in _BASELINE_WEIGHTS:
                _BASELINE_WEIGHTS[key] = _train(cell, [], WORKLOADS[domain](settings, rank), settings)[-1].eval_weights
            batches[-1].baseline_weights = _BASELINE_WEIGHTS[key]
    except Exception as exc:  # recorded: the outcome says whether it was a refusal
        return CellRun(error_type=type(exc).__name__, detail=_error_line(exc), wall_s=time.perf_counter() - start)
    checks: list[str] = []
    misses: list[str | None] = []
    detail = nonfinite_loss(batches)
    if detail is None and check:  # a run that went wrong already is not checked further
        try:
            for a in averages:
                checks.append(f"{a.key}.average")
                misses.append(a.verdict(cell.precision))
            if loss.methods and loss.applies(batches):
                checks += [f"{k}.loss" for k, _ in loss.methods]
                misses.append(loss.verdict(batches, cell.precision))
            # SAM's check rebuilds the cell's other methods with their suggested arguments: not a recipe's
            if cell.recipe is None and any(records[k].class_name == "SAM" for k in cell.methods):
                checks += [f"{k}.rho_zero" for k in cell.methods if records[k].class_name == "SAM"]
                misses += _sam_check(cell, records, domain, settings, rank)
        except Exception as exc:  # a check that cannot run is a check that missed
            misses.append(f"a correctness check could not run: {_error_line(exc)}")
    wrong = "; ".join(m for m in misses if m) or None
    return CellRun(
        seen=effects_seen(batches),
        detail=detail,
        wall_s=time.perf_counter() - start,
        checks=checks,
        wrong=wrong,
        batches=batches,
    )


def decide(
    cell: Cell, run: CellRun, records: Mapping[str, Any], references: Mapping[str, Sequence[Batch]] | None = None
) -> dict[str, Any]:
    """The results file's entry of a cell: its outcome by the composability schema's definitions.

    Effects are named ``method.effect``, each method's own. In a pair, method M's effects are
    decided against ``references[other]``, the other method alone (its solo run); a method alone is
    decided against the loader's batches (``run.seen``).
    """
    note = cell_note(cell, records)
    seen: list[str] = []
    missing: list[str] = []
    if run.error_type is not None:
        outcome = "refused" if run.error_type in REFUSALS else "interaction" if note else "fails"
    else:
        for key in cell.methods:
            others = [k for k in cell.methods if k != key]
            shown = run.seen
            if cell.kind == "pair" and references is not None and run.batches:
                shown = effects_seen(run.batches, references.get(others[0]))
            elif cell.kind == RECIPE_KIND and references is not None and run.batches:
                shown = effects_seen(run.batches, references.get(key))  # against the stack less this member
            for name in OBSERVABLES:
                if name in records[key].observable:
                    (seen if name in shown else missing).append(f"{key}.{name}")
        outcome = "runs" if not missing and run.detail is None else "interaction" if note else "fails"
        if run.wrong is not None:  # a wrong result is a bug: no note explains it
            outcome = "fails"
    detail = "; ".join(d for d in (run.detail, run.wrong) if d) or None
    return {
        **cell.as_dict(),
        "outcome": outcome,
        "seen": seen,
        "missing": missing,
        "detail": detail,
        "note": note,
        "checks": list(run.checks),
        "wall_s": round(run.wall_s, 3),
    }


def describe(entry: Mapping[str, Any]) -> str:
    """One progress line's tail: the outcome, and what was missing or went wrong."""
    parts = [entry["outcome"]]
    if entry["missing"]:
        parts.append(f"missing {', '.join(entry['missing'])}")
    if entry["detail"]:
        parts.append(entry["detail"])
    return f"{parts[0]} ({'; '.join(parts[1:])})" if len(parts) > 1 else parts[0]


# --------------------------------------------------------------------------------------------- parallel launches


def _launch(
    mode: str, cells: Sequence[Cell], settings: Settings, timeout_s: float, progress: Progress
) -> dict[str, Any]:
    """One torchrun launch of ``settings.nproc`` processes running ``cells`` (all of ``mode``) in
    turn: ``{"runs": {label: CellRun}, "failure": why the launch ended early, or None}``."""
    from . import compare

    with tempfile.TemporaryDirectory(prefix="matrix-") as tmp:
        spec, out = Path(tmp) / "cells.json", Path(tmp) / "runs.json"
        spec.write_text(json.dumps({"settings": settings.as_dict(), "cells": [c.as_dict() for c in cells]}))
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc_per_node={settings.nproc}",
            "-m",
            "methods_tools.matrix_worker",
            str(spec),
            str(out),
        ]
        tools = str(Path(__file__).resolve().parents[1])
        env = {
            **os.environ,
            "OMP_NUM_THREADS": "1",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(tools).parent), tools, os.environ.get("PYTHONPATH")])),
        }
        if mode == "deepspeed":
            env.setdefault("DS_ACCELERATOR", "cpu" if not _cuda() else "cuda")
        code, tail = compare.run_with_progress(command, env, timeout_s, progress)
        failure = f"the {mode} launch timed out after {timeout_s:.0f} s" if code is None else None
        done = {label: CellRun(**run) for label, run in json.loads(out.read_text()).items()} if out.exists() else {}
        if failure is None and code != 0:
            failure = f"the {mode} launch exited with status {code}: {compare.failure_line(tail)}"
        return {"runs": done, "failure": failure}


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


# --------------------------------------------------------------------------------------------- the matrix


def deepspeed_version() -> str | None:
    """DeepSpeed's installed version, or None where it is not installed."""
    import importlib.metadata

    try:
        return importlib.metadata.version("deepspeed")
    except importlib.metadata.PackageNotFoundError:
        return None


def runnable_parallels() -> tuple[list[str], dict[str, str]]:
    """The distributed modes this machine runs, and why each other one is left out."""
    from algorithms.core.distributed import deepspeed_unavailable_reason

    skipped = {}
    reason = deepspeed_unavailable_reason()
    if reason is not None:
        skipped["deepspeed"] = reason
    return [m for m in MATRIX_PARALLELS if m not in skipped], skipped


def matrix_environment() -> dict[str, Any]:
    """The results file's ``environment``: the training comparison's, with DeepSpeed's version."""
    from . import compare

    env = compare.environment()
    keep = ("hardware", "device_type", "torch", "python", "platform", "date")
    return {**{k: env[k] for k in keep}, "deepspeed": deepspeed_version()}


def default_output_path(root: Path = COMPOSABILITY_DIR) -> Path:
    """``results/composability/<cpu|gpu>-<hardware slug>.json``, named as ``results/effects/`` is."""
    from . import compare

    env = compare.environment()
    return root / f"{compare.default_output_path(env, root).stem.removesuffix('-' + env['date'][:10])}.json"


def build_document(
    env: Mapping[str, Any],
    settings: Settings,
    commands: Sequence[str],
    wall_s: float,
    cells: Sequence[Mapping[str, Any]],
    sections: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """The validated results document (a bug here raises: an invalid file is never written);
    ``sections``: the ``loops`` and ``models`` sections (:mod:`.matrix_loops`), by name."""
    document = {
        "$schema": "../../algorithms/composability.schema.json",
        "schema_version": 1,
        "environment": dict(env),
        "settings": settings.as_dict(),
        "commands": list(commands),
        "wall_s": round(wall_s, 1),
        "cells": list(cells),
        **{name: dict(sections[name]) for name in SECTIONS if sections and name in sections},
    }
    problems = composability_problems(document)
    if problems:
        raise RuntimeError("the composability matrix does not match its schema:\n" + "\n".join(problems))
    return document


def run_cells(
    cells: Sequence[Cell],
    settings: Settings,
    *,
    records: Mapping[str, Any] | None = None,
    timeout_s: float = 900.0,
    progress: Progress = lambda line: None,
) -> list[dict[str, Any]]:
    """Every cell's entry, in the order given: the in-process cells here, the parallel ones in one
    torchrun launch per mode. A launch that ends early fails its remaining cells with its reason."""
    records = _method_records(records)
    total = len(cells)
    entries: dict[int, dict[str, Any]] = {}

    def report(i: int, cell: Cell, entry: dict[str, Any]) -> None:
        entries[i] = entry
        progress(f"[{len(entries)}/{total}] {cell.label}: {describe(entry)} ({entry['wall_s']:.1f} s)")

    references: dict[tuple[str, str | None], list[Batch]] = {}

    def reference(key: str, domain: str | None) -> list[Batch]:
        """What the model and the loss see with ``key`` alone on ``domain``'s workload (its solo
        run there, run once): a pair's reference is on the pair's workload."""
        if (key, domain) not in references:
            references[key, domain] = run_cell(Cell("solo", (key,)), settings, records, domain, check=False).batches
        return references[key, domain]

    for i, cell in enumerate(cells):
        if cell.parallel in MATRIX_PARALLELS:
            continue
        run = run_cell(cell, settings, records)
        if cell.kind == "solo":
            references[cell.methods[0], _workload_domain(cell, records)] = run.batches
        refs = None
        if cell.kind == "pair":
            domain = _workload_domain(cell, records)
            refs = {key: reference(key, domain) for key in cell.methods}
        elif cell.kind == RECIPE_KIND:
            refs = recipe_references(cell, settings, records)
        report(i, cell, decide(cell, run, records, refs))
    for mode in dict.fromkeys(c.parallel for c in cells if c.parallel in MATRIX_PARALLELS):
        mine = [(i, c) for i, c in enumerate(cells) if c.parallel == mode]
        progress(f"{mode}: one launch of {settings.nproc} processes for {len(mine)} cells")
        launch = _launch(mode, [c for _, c in mine], settings, timeout_s, progress)
        for i, cell in mine:
            run = launch["runs"].get(cell.label)
            if run is None:
                run = CellRun(error_type="LaunchError", detail=launch["failure"] or "the launch wrote no result")
            report(i, cell, decide(cell, run, records))
    return [entries[i] for i in range(total)]


def run_sections(
    names: Iterable[str],
    settings: Settings,
    command: str = "",
    progress: Progress = lambda line: None,
    only: Iterable[str] = (),
) -> dict[str, dict[str, Any]]:
    """The ``loops`` and ``models`` sections of ``names`` (:mod:`.matrix_loops`), each run in turn
    (only the cells of the methods ``only`` names, where it names any)."""
    from . import compare
    from .matrix_loops import run_section

    records = _method_records()
    sections = {}
    for name in (n for n in SECTIONS if n in names):
        progress(f"{name}: the section's cells")
        section = run_section(name, settings, records, progress, only=only)
        sections[name] = {"command": command, "date": compare.environment()["date"], **section}
    return sections


def merge_document(
    old: Mapping[str, Any],
    kinds: Sequence[str],
    cells: Sequence[Mapping[str, Any]],
    sections: Mapping[str, Any],
    only: Iterable[str] = (),
    records: Mapping[str, Any] | None = None,
    precisions: Iterable[str] = (),
) -> dict[str, Any]:
    """``old`` with the cells of ``kinds`` and the sections just run in place of its own: the
    cells of the other kinds, the other sections and the environment and settings are kept.

    With ``only`` (method keys), just the cells that hold one of those methods are replaced, in
    the cells of ``kinds`` and in the sections run; with ``precisions``, just the cells in one of
    those precisions. Every other cell is kept, and the cells are put in plan order
    (:func:`plan_cells`; a section's, :mod:`.matrix_loops`'), each section's ``wall_s`` counting
    its new cells in place of those they replace."""
    only = set(only)
    if not only and not precisions:
        kept = [c for c in old["cells"] if c["kind"] not in kinds]
        merged = [*kept, *cells]
        order = {k: i for i, k in enumerate(CELL_KINDS)}
        merged.sort(key=lambda c: order.get(c["kind"], len(order)))  # stable: each kind's plan order
        return {**old, "cells": merged, **sections}
    from .composability_pages import cell_key
    from .matrix_loops import plan_loop_cells, plan_model_cells

    records = _method_records(records)
    kept = [c for c in old["cells"] if not _replaced(c, kinds, only, precisions)]
    plan = {cell_key(c.as_dict()): i for i, c in enumerate(plan_cells(records))}
    merged = sorted([*kept, *cells], key=lambda c: plan.get(cell_key(c), len(plan)))
    plans = {
        "loops": ([(c.loop, c.method) for c in plan_loop_cells(records)], "loop"),
        "models": ([(c.model, c.method) for c in plan_model_cells(records)], "model"),
    }
    new_sections = {}
    for name, section in sections.items():
        before = old.get(name, {"cells": [], "wall_s": 0.0})
        where = plans[name][1]
        place = {key: i for i, key in enumerate(plans[name][0])}
        stays = [c for c in before["cells"] if only and c["method"] not in only]
        wall = before["wall_s"] - sum(c["wall_s"] for c in before["cells"] if not only or c["method"] in only)
        new_sections[name] = {
            **section,
            "wall_s": round(max(wall, 0.0) + sum(c["wall_s"] for c in section["cells"]), 1),
            "cells": sorted([*stays, *section["cells"]], key=lambda c: place.get((c[where], c["method"]), len(place))),
        }
    return {**old, "cells": merged, **new_sections}


def _replaced(cell: Mapping[str, Any], kinds: Iterable[str], only: Iterable[str], precisions: Iterable[str]) -> bool:
    """Whether a run of ``kinds`` cut to ``only``'s methods and ``precisions`` (each: all where
    empty) replaces the committed ``cell``."""
    only, precisions = set(only), set(precisions)
    return (
        cell["kind"] in kinds
        and (not only or bool(only & set(cell["methods"])))
        and (not precisions or cell["precision"] in precisions)
    )


def run_matrix(
    out: Path,
    *,
    kinds: Sequence[str] = ALL_KINDS,
    force: bool = False,
    merge: bool = False,
    command: str = "",
    settings: Settings = Settings(),
    timeout_s: float = 900.0,
    progress: Progress = lambda line: None,
    only: Sequence[str] = (),
    precisions: Sequence[str] = (),
) -> dict[str, Any]:
    """Plan, run and write the matrix to ``out`` (atomically, never over a file without ``force``).

    ``kinds`` are cell kinds (:data:`KINDS`) and sections (:data:`SECTIONS`); with ``merge`` only
    those are run and put into the existing file ``out`` in place of its own (:func:`merge_document`);
    ``only`` (method keys) runs just the cells that hold one of them, ``precisions`` just the cells
    in one of them."""
    if merge and not out.exists():
        raise MatrixError(f"{out}: no results file to merge into — run the whole matrix first, or drop --merge")
    if out.exists() and not force and not merge:
        raise MatrixError(f"{out}: exists — pass --force to overwrite it, or choose --out")
    start = time.perf_counter()
    env = matrix_environment()
    parallels, skipped = runnable_parallels()
    for mode, reason in skipped.items():
        if "parallel" in kinds:
            progress(f"{mode}: not run here ({reason})")
    cell_kinds = [k for k in CELL_KINDS if k in kinds]
    cells = plan_cells(kinds=cell_kinds, parallels=parallels, only=only, precisions=precisions)
    progress(f"{len(cells)} cells: {', '.join(f'{sum(c.kind == k for c in cells)} {k}' for k in cell_kinds)}")
    entries = run_cells(cells, settings, timeout_s=timeout_s, progress=progress)
    sections = run_sections(kinds, settings, command, progress, only=only)
    if merge:
        from .results import load_composability

        old = load_composability(out)
        merged = merge_document(old, cell_kinds, entries, sections, only=only, precisions=precisions)
        # the file's commands are the cells'; a section carries its own command
        commands = [*old["commands"], *([command] if command and cell_kinds else [])]
        # the whole matrix's time, with the new cells' in place of those they replace
        replaced = sum(c["wall_s"] for c in old["cells"] if _replaced(c, cell_kinds, only, precisions))
        wall_s = max(old["wall_s"] - replaced, 0.0) + sum(c["wall_s"] for c in entries)
        document = build_document(
            old["environment"] if not cell_kinds else env,
            Settings(**old["settings"]),
            commands,
            old["wall_s"] if not cell_kinds else wall_s,
            merged["cells"],
            {name: merged[name] for name in SECTIONS if name in merged},
        )
        write_atomic(out, json.dumps(document, indent=2) + "\n", force=True)
        return document
    document = build_document(
        env, settings, [command] if command else [], time.perf_counter() - start, entries, sections
    )
    write_atomic(out, json.dumps(document, indent=2) + "\n", force=force)
    return document


# --------------------------------------------------------------------------------------------- command


def _parser(doc: str) -> Any:
    import argparse

    p = argparse.ArgumentParser(prog="tools/composability_matrix.py", description=doc.split("\n\n")[0])
    p.add_argument(
        "--out",
        type=Path,
        help="results file (default: results/composability/<cpu|gpu>-<hardware>.json; a subset of --kinds needs --out)",
    )
    p.add_argument("--force", action="store_true", help="overwrite --out")
    p.add_argument(
        "--kinds",
        default=",".join(ALL_KINDS),
        help=f"comma-separated cells and sections to run (default {','.join(ALL_KINDS)})",
    )
    p.add_argument(
        "--merge",
        action="store_true",
        help="run only --kinds and put them into the existing results file (--out or the default) in place of its own",
    )
    p.add_argument(
        "--only",
        help="comma-separated method keys: run only the cells that hold one of them (a new method's: alone, in "
        "each mode, in pairs either way round, in each loop and model); with --merge, in place of the file's own",
    )
    p.add_argument(
        "--precisions",
        help="comma-separated precision modes: run only the cells in one of them (solo and pair cells are fp32; "
        "e.g. --kinds parallel --precisions amp_bf16); with --merge, in place of the file's own",
    )
    p.add_argument("--timeout", type=float, default=900.0, help="seconds allowed per torchrun launch (default 900)")
    return p


def check_args(args: Any) -> tuple[list[str], list[str]]:
    """One line per bad option, and the kinds to run."""
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    merge = getattr(args, "merge", False)
    problems = [f"--kinds: {k!r} — use some of {', '.join(ALL_KINDS)}" for k in kinds if k not in ALL_KINDS]
    if not kinds:
        problems.append(f"--kinds: empty — name at least one of {', '.join(ALL_KINDS)}")
    elif not problems and set(kinds) != set(ALL_KINDS) and args.out is None and not merge:
        problems.append(
            "--kinds: a subset of the matrix never writes the default results file — give --out, or --merge"
        )
    if not args.timeout > 0:
        problems.append(f"--timeout: {args.timeout} — must be positive")
    only = _only(args)
    if getattr(args, "only", None) is not None:
        methods = sorted(_method_records())
        if not only:
            problems.append("--only: empty — name at least one method, e.g. --only cutmix")
        problems += [
            f"--only: {k!r} is not a method — use some of {', '.join(methods)}" for k in only if k not in methods
        ]
        if only and not merge and args.out is None:
            problems.append(
                "--only: a subset of the matrix never writes the default results file — give --out, or --merge"
            )
    precisions = _precisions(args)
    if getattr(args, "precisions", None) is not None:
        if not precisions:
            problems.append("--precisions: empty — name at least one precision, e.g. --precisions amp_bf16")
        problems += [
            f"--precisions: {p!r} is not a precision mode — use some of {', '.join(PRECISIONS)}"
            for p in precisions
            if p not in PRECISIONS
        ]
        sections = [k for k in kinds if k in SECTIONS]
        if sections:
            problems.append(
                f"--precisions: the {' and '.join(sections)} section(s) are not cut by precision — leave them out of "
                "--kinds (e.g. --kinds parallel)"
            )
        if precisions and not merge and args.out is None:
            problems.append(
                "--precisions: a subset of the matrix never writes the default results file — give --out, or --merge"
            )
    if merge and args.out is not None and not args.out.exists():
        problems.append(f"{args.out}: no results file to merge into — run the whole matrix first, or drop --merge")
    if args.out is not None and args.out.exists() and not args.force and not merge:
        problems.append(f"{args.out}: exists — pass --force to overwrite it, or choose --out")
    return problems, [k for k in ALL_KINDS if k in kinds]


def _only(args: Any) -> list[str]:
    return _listed(getattr(args, "only", None))


def _precisions(args: Any) -> list[str]:
    return _listed(getattr(args, "precisions", None))


def _listed(value: str | None) -> list[str]:
    return [k.strip() for k in (value or "").split(",") if k.strip()]


def main(argv: Sequence[str] | None = None, doc: str = __doc__) -> int:
    """``tools/composability_matrix.py``: bad options are one line each, exit 1, nothing written; a
    ``fails`` cell is one line each at the end and exit 1 (the file is written, to be read)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser(doc).parse_args(argv)
    problems, kinds = check_args(args)
    out = args.out
    if not problems and out is None:
        out = default_output_path()
        if out.exists() and not args.force and not args.merge:
            problems.append(f"{out}: exists — pass --force to overwrite it, or choose --out")
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 1
    command = " ".join(["python tools/composability_matrix.py", *argv])
    try:
        document = run_matrix(
            out,
            kinds=kinds,
            force=args.force,
            merge=args.merge,
            command=command,
            timeout_s=args.timeout,
            progress=lambda line: print(line, file=sys.stderr, flush=True),
            only=_only(args),
            precisions=_precisions(args),
        )
    except MatrixError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    counts = {o: sum(c["outcome"] == o for c in document["cells"]) for o in ("runs", "refused", "interaction", "fails")}
    print(
        f"{out}: {len(document['cells'])} cells in {document['wall_s']:.0f} s: "
        + ", ".join(f"{n} {o}" for o, n in counts.items())
    )
    for name in SECTIONS:
        if name in document and name in kinds:
            found = document[name]["cells"]
            outcomes = ("acted", "inactive", "refused", "failed", "not_run")
            tally = ", ".join(f"{sum(c['outcome'] == o for c in found)} {o}" for o in outcomes)
            print(f"{name}: {len(found)} cells in {document[name]['wall_s']:.0f} s: {tally}")
    failed = [c for c in document["cells"] if c["outcome"] == "fails" and c["kind"] in kinds]
    for c in failed:
        print(
            f"fails: {Cell.from_dict(c).label}: {describe(c)} — fix it, or, unless a correctness check "
            "missed, explain it with a note in the metadata's interactions",
            file=sys.stderr,
        )
    broken = [
        (n, c) for n in SECTIONS if n in kinds for c in document.get(n, {}).get("cells", ()) if c["outcome"] == "failed"
    ]
    for name, c in broken:
        where = c.get("loop") or c.get("model")
        print(
            f"failed: {name} {c['method']} in {where}: {c['detail']} — fix it, or refuse it with one line",
            file=sys.stderr,
        )
    return 1 if failed or broken else 0
