"""Checkpoint files: what :meth:`State.state_dict() <algorithms.core.State.state_dict>` returns,
written atomically, read back safely, and checked before it is used.

A file is written through a temporary file in the target's folder and a rename, so a reader never
sees half of one, and read with ``torch.load(weights_only=True)``: tensors and plain data, no code.
A file that is not a complete checkpoint of this format (:func:`read_checkpoint`), or one made with
other algorithms, optimizers, schedulers, model or precision (:func:`check_compatible`), is refused
with a :class:`CheckpointError` of one line naming the file, before anything is changed.

The Trainer writes and resumes through these (``Trainer.save_checkpoint``, ``Trainer(load_path=)``);
this module knows the state, not the Trainer.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from .distributed import unwrap_model

if TYPE_CHECKING:
    from .state import State

__all__ = ["FORMAT", "KEYS", "VERSION", "CheckpointError", "check_compatible", "read_checkpoint", "write_checkpoint"]

FORMAT = "methods-library-checkpoint"
VERSION = 1
#: What a checkpoint holds: its format and version, and the keys of ``State.state_dict()``.
KEYS = ("format", "version", "model", "optimizers", "schedulers", "scaler", "timestamp", "algorithms", "rng")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class CheckpointError(ValueError):
    """A checkpoint that cannot be written or used: one line naming the file and what to do."""


def write_checkpoint(path: str | Path, state_dict: Mapping[str, Any], overwrite: bool = False) -> Path:
    """Write ``state_dict`` (a ``State.state_dict()``) to ``path`` atomically, as a checkpoint of
    this format; an existing file is replaced only with ``overwrite``. Returns the path."""
    path = Path(path)
    if path.exists() and not overwrite:
        raise CheckpointError(f"{path}: exists — pass overwrite=True to replace it, or choose another path")
    checkpoint = {"format": FORMAT, "version": VERSION, **state_dict}
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


def read_checkpoint(path: str | Path, weights_only: bool = True, keys: tuple[str, ...] = KEYS) -> dict[str, Any]:
    """The checkpoint at ``path``, checked to be a complete one of this format. ``weights_only=False``
    only for a file another library wrote beside ours (DeepSpeed's model states, whose config
    objects torch's safe loader refuses), inside a folder this format names, whose ``keys`` differ."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint file — check load_path")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=weights_only)
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
    missing = [key for key in keys if key not in checkpoint]
    if missing:
        raise CheckpointError(f"{path}: incomplete checkpoint, missing {', '.join(missing)} — write it again")
    return dict(checkpoint)


def check_compatible(saved: Mapping[str, Any], state: State, path: str | Path) -> None:
    """Refuse ``saved`` (read from ``path``) unless it fits ``state``: the same algorithms in the
    same order, each keeping no state its class does not, as many optimizers and schedulers, the
    same model parameters, and a GradScaler where the state's precision uses one."""
    saved_names = [a["name"] for a in saved["algorithms"]]
    here = [a.name for a in state.algorithms]
    if saved_names != here:
        raise CheckpointError(
            f"{path}: saved with algorithms [{', '.join(saved_names)}], this Trainer has "
            f"[{', '.join(here)}] — resume with the same algorithms in the same order"
        )
    for algo, entry in zip(state.algorithms, saved["algorithms"], strict=True):
        unknown = sorted(set(entry["state"]) - algo._state_keys())
        if unknown:
            raise CheckpointError(
                f"{path}: {algo.name}'s saved state has key(s) {', '.join(unknown)} that this "
                f"{algo.name} does not keep — resume with the same version of the method"
            )
    for what, saved_n, here_n in (
        ("optimizer", len(saved["optimizers"]), len(state.optimizers)),
        ("scheduler", len(saved["schedulers"]), len(state.schedulers)),
    ):
        if saved_n != here_n:
            raise CheckpointError(
                f"{path}: saved with {saved_n} {what}(s), this Trainer has {here_n} — resume with the same {what}s"
            )
    model_keys = set(unwrap_model(state.model).state_dict())
    if set(saved["model"]) != model_keys:
        extra = sorted(set(saved["model"]) - model_keys)[:3]
        lacking = sorted(model_keys - set(saved["model"]))[:3]
        raise CheckpointError(
            f"{path}: the model's parameters differ (in the file only: {extra or 'none'}; "
            f"in this model only: {lacking or 'none'}) — resume the same model"
        )
    scaled = state.scaler is not None and state.scaler.is_enabled()
    if (saved["scaler"] is None) == scaled:
        raise CheckpointError(
            f"{path}: saved {'without' if saved['scaler'] is None else 'with'} a GradScaler, "
            f"this Trainer's precision {state.precision!r} "
            f"{'uses' if scaled else 'does not use'} one — resume in the "
            "same precision"
        )
