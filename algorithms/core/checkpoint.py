"""Checkpoints of a :class:`~algorithms.core.Trainer`: what a resumed run needs to go on exactly as
the uninterrupted run would.

A checkpoint holds the model's weights (unwrapped from DataParallel), every optimizer's and
scheduler's state, the GradScaler's, the timestamp (epochs, batches, samples, batches into the
epoch), every algorithm's :meth:`~algorithms.core.Algorithm.state_dict` (their generators
included) and the global random generators (torch's, CUDA's, Python's). It is written through a
temporary file and a rename, so a reader never sees half of one, and read with
``torch.load(weights_only=True)``: tensors and plain data, no code. A file that is not a complete
checkpoint of this format, or one made with other algorithms or another model, is refused with a
:class:`CheckpointError` before anything is changed.

Supported for ``parallel="single"`` and ``"dp"``; the distributed modes keep per-rank state
(sharded weights, each rank's generators) that one file does not hold yet.
"""

from __future__ import annotations

import os
import random
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from .distributed import unwrap_model

if TYPE_CHECKING:
    from .trainer import Trainer

__all__ = ["FORMAT", "VERSION", "CheckpointError", "read_checkpoint", "restore_checkpoint", "save_checkpoint"]

FORMAT = "methods-library-checkpoint"
VERSION = 1
SUPPORTED_PARALLELS = ("single", "dp")
KEYS = ("format", "version", "model", "optimizers", "schedulers", "scaler", "timestamp", "algorithms", "rng")
TIMESTAMP_FIELDS = ("epoch", "batch", "sample", "batch_in_epoch")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class CheckpointError(ValueError):
    """A checkpoint that cannot be written or used: one line naming the file and what to do."""


def _check_parallel(trainer: Trainer, what: str) -> None:
    if trainer.parallel not in SUPPORTED_PARALLELS:
        raise CheckpointError(
            f"{what}: checkpoints support parallel={' or '.join(map(repr, SUPPORTED_PARALLELS))} "
            f"so far, not {trainer.parallel!r} (its per-rank state is not in one file yet)"
        )


def save_checkpoint(trainer: Trainer, path: str | Path, overwrite: bool = False) -> Path:
    """Write ``trainer``'s checkpoint to ``path`` atomically; an existing file only with ``overwrite``."""
    path = Path(path)
    _check_parallel(trainer, f"save_checkpoint({str(path)!r})")
    if path.exists() and not overwrite:
        raise CheckpointError(f"{path}: exists — pass overwrite=True to replace it, or choose another path")
    state = trainer.state
    ts = state.timestamp
    checkpoint = {
        "format": FORMAT,
        "version": VERSION,
        "model": unwrap_model(state.model).state_dict(),
        "optimizers": [opt.state_dict() for opt in state.optimizers],
        "schedulers": [s.state_dict() for s in state.schedulers],
        "scaler": trainer.scaler.state_dict() if trainer.scaler.is_enabled() else None,
        "timestamp": {name: getattr(ts, name) for name in TIMESTAMP_FIELDS},
        "algorithms": [{"name": a.name, "state": a.state_dict()} for a in trainer.engine.algorithms],
        "rng": {
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
            "python": random.getstate(),
        },
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            torch.save(checkpoint, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """The checkpoint at ``path``, checked to be a complete one of this format."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint file — check load_path")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # truncated, not a torch file, or holding code
        text = _ANSI.sub("", str(exc)).strip()  # torch's weights-only refusal has terminal bold in it
        first = text.splitlines()[0].strip() if text else type(exc).__name__
        raise CheckpointError(
            f"{path}: not a readable checkpoint ({type(exc).__name__}: {first}) — it may be "
            "truncated or another program's file; use one written by "
            "Trainer.save_checkpoint"
        ) from None
    if not isinstance(checkpoint, Mapping) or checkpoint.get("format") != FORMAT:
        raise CheckpointError(
            f"{path}: not a Methods Library checkpoint (no format {FORMAT!r}) — use one written "
            "by Trainer.save_checkpoint"
        )
    if checkpoint.get("version") != VERSION:
        raise CheckpointError(
            f"{path}: checkpoint version {checkpoint.get('version')!r}, this library reads version {VERSION}"
        )
    missing = [key for key in KEYS if key not in checkpoint]
    if missing:
        raise CheckpointError(f"{path}: incomplete checkpoint, missing {', '.join(missing)} — write it again")
    return dict(checkpoint)


def _check_compatible(checkpoint: Mapping[str, Any], trainer: Trainer, path: Path) -> None:
    """Refuse a checkpoint of other algorithms, optimizers, schedulers or model, before any change."""
    state = trainer.state
    saved = [a["name"] for a in checkpoint["algorithms"]]
    here = [a.name for a in trainer.engine.algorithms]
    if saved != here:
        raise CheckpointError(
            f"{path}: saved with algorithms [{', '.join(saved)}], this Trainer has "
            f"[{', '.join(here)}] — resume with the same algorithms in the same order"
        )
    for algo, entry in zip(trainer.engine.algorithms, checkpoint["algorithms"], strict=True):
        unknown = sorted(set(entry["state"]) - algo._state_keys())
        if unknown:
            raise CheckpointError(
                f"{path}: {algo.name}'s saved state has key(s) {', '.join(unknown)} that this "
                f"{algo.name} does not keep — resume with the same version of the method"
            )
    for what, saved_n, here_n in (
        ("optimizer", len(checkpoint["optimizers"]), len(state.optimizers)),
        ("scheduler", len(checkpoint["schedulers"]), len(state.schedulers)),
    ):
        if saved_n != here_n:
            raise CheckpointError(
                f"{path}: saved with {saved_n} {what}(s), this Trainer has {here_n} — resume with the same {what}s"
            )
    model_keys = set(unwrap_model(state.model).state_dict())
    if set(checkpoint["model"]) != model_keys:
        extra = sorted(set(checkpoint["model"]) - model_keys)[:3]
        lacking = sorted(model_keys - set(checkpoint["model"]))[:3]
        raise CheckpointError(
            f"{path}: the model's parameters differ (in the file only: {extra or 'none'}; "
            f"in this model only: {lacking or 'none'}) — resume the same model"
        )
    if (checkpoint["scaler"] is None) == trainer.scaler.is_enabled():
        raise CheckpointError(
            f"{path}: saved {'without' if checkpoint['scaler'] is None else 'with'} a GradScaler, "
            f"this Trainer's precision {state.precision!r} "
            f"{'uses' if trainer.scaler.is_enabled() else 'does not use'} one — resume in the "
            "same precision"
        )


def restore_checkpoint(trainer: Trainer, path: str | Path) -> None:
    """Put the checkpoint at ``path`` into ``trainer``; nothing changes unless all of it fits."""
    path = Path(path)
    _check_parallel(trainer, f"load_path={str(path)!r}")
    checkpoint = read_checkpoint(path)
    _check_compatible(checkpoint, trainer, path)
    state = trainer.state
    unwrap_model(state.model).load_state_dict(checkpoint["model"])
    for opt, saved in zip(state.optimizers, checkpoint["optimizers"], strict=True):
        opt.load_state_dict(saved)
    for scheduler, saved in zip(state.schedulers, checkpoint["schedulers"], strict=True):
        scheduler.load_state_dict(saved)
    if checkpoint["scaler"] is not None:
        trainer.scaler.load_state_dict(checkpoint["scaler"])
    for algo, saved in zip(trainer.engine.algorithms, checkpoint["algorithms"], strict=True):
        algo.load_state_dict(saved["state"])
    for name in TIMESTAMP_FIELDS:
        setattr(state.timestamp, name, int(checkpoint["timestamp"][name]))
    rng = checkpoint["rng"]
    torch.set_rng_state(rng["torch"])
    if rng["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    random.setstate(_python_state(rng["python"]))


def _python_state(saved: Any) -> tuple:
    """``random.getstate()`` comes back from the file with lists where it had tuples."""
    version, internal, gauss = saved
    return version, tuple(internal), gauss
