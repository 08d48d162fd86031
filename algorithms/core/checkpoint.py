"""Checkpoint files: what :meth:`State.state_dict() <algorithms.core.State.state_dict>` returns,
with the run's setup, written atomically, read back safely, and checked before it is used.

A local file is written through a temporary file in the target's folder and a rename, so a reader
never sees half of one, and read with ``torch.load(weights_only=True)``: tensors and plain data, no
code. A file that is not a complete checkpoint of this format and version (:func:`read_checkpoint`),
or one made with another setup (precision, parallel mode, number of processes), algorithms,
optimizers, parameter groups, schedulers or model (:func:`check_compatible`), is refused with a
:class:`CheckpointError` of one line naming the file, before anything is changed.

**Remote paths.** A ``str`` path with a URL scheme of two characters or more (``s3://``, ``gs://``,
``memory://``, any ``<scheme>://``; ``C://`` stays a Windows drive) is written and read through
`fsspec <https://filesystem-spec.readthedocs.io>`_ (``pip install 'methods-library[fsspec]'``, and
the filesystem's own package, e.g. ``s3fs``); without fsspec it is refused with one line before
anything is written. It is written under a hidden temporary name beside the target and then moved
(``fs.mv``) onto it, and an existing object is replaced only with ``overwrite``, as a local file. fsspec
promises no atomic rename: on the local and memory filesystems the move is a rename; on object
stores (S3, GCS, Azure) an object appears only once its upload or server-side copy is complete, so
a reader never sees half of one there either, but the move is a copy then a delete (the temporary
object may be left behind by a crash between the two); other backends give what their ``mv`` gives.
Any other path (a :class:`~pathlib.Path`, or a ``str`` without a scheme) is a local file and is
never altered: the functions return the path they were given.

**Distributed runs.** A checkpoint of a run of several processes holds, once, what is the same on
every rank (rank 0's): the weights, optimizers, schedulers, scaler, timestamp and every algorithm's
state but its random generator; and under ``ranks``, one entry a rank, what differs by rank: each
algorithm's generator (:data:`RANK_ALGORITHM_KEYS`) and the global generators (``rng``, with
``rng["epoch"]``). An algorithm's other state must therefore be the same on every rank (EMA's and
SWA's averages are, since DDP keeps the weights equal), or be rank 0's to go on with; state that
differs by rank belongs under the generator's key or in a per-rank key added to
:data:`RANK_ALGORITHM_KEYS`. :func:`split_ranks` and :func:`rank_view` make and read that layout.

The Trainer writes and resumes through these (``Trainer.save_checkpoint``, ``Trainer(load_path=)``),
by its parallel mode's strategy (:mod:`algorithms.core.strategies`); this module knows the state,
not the Trainer.
"""

from __future__ import annotations

import os
import re
import tempfile
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from .adapters import model_form_problem, model_state_dict
from .distributed import unwrap_model
from .state import saved_parameter_names

if TYPE_CHECKING:
    from .state import State

__all__ = [
    "FORMAT",
    "KEYS",
    "RANK_ALGORITHM_KEYS",
    "VERSION",
    "CheckpointError",
    "check_compatible",
    "is_url",
    "rank_view",
    "setup_of",
    "read_checkpoint",
    "split_ranks",
    "write_checkpoint",
]

FORMAT = "methods-library-checkpoint"
#: 2: the run's setup, the names of the parameters in each optimizer's groups, and a distributed
#: run's rank-identical state once.
VERSION = 2
#: What a checkpoint holds: its format and version, the run's ``setup`` (precision, parallel mode,
#: number of processes), and the keys of ``State.state_dict()`` (a distributed run's file holds
#: ``ranks`` in place of ``rng``). ``State.state_dict()``'s ``model_form`` and ``adapter_config`` are
#: not required: a file without them holds a whole model (:mod:`algorithms.core.adapters`).
KEYS = (
    "format",
    "version",
    "setup",
    "model",
    "optimizers",
    "schedulers",
    "scaler",
    "timestamp",
    "algorithms",
    "rng",
)
#: The keys of an algorithm's state that differ by rank, kept per rank in a distributed run's file.
RANK_ALGORITHM_KEYS = ("generator",)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
#: A URL's scheme: two characters or more, so a Windows drive (``C:/``, ``C://``) stays a local path.
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+)://")
EXTRA = "pip install 'methods-library[fsspec]'"


class CheckpointError(ValueError):
    """A checkpoint that cannot be written or used: one line naming the file and what to do."""


def is_url(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a URL (a ``str`` with a scheme, ``s3://...``) that fsspec writes and reads."""
    return isinstance(path, str) and _SCHEME.match(path) is not None


def _filesystem(url: str) -> tuple[Any, str]:
    """fsspec's filesystem for ``url`` and the path on it; refused in one line without fsspec or the
    filesystem's package."""
    try:
        import fsspec
    except ImportError:
        raise CheckpointError(
            f"{url}: a URL checkpoint is written and read by fsspec, not installed — {EXTRA}"
        ) from None
    try:
        return fsspec.core.url_to_fs(url)
    except (ImportError, ValueError) as exc:  # an unknown protocol, or its package (s3fs, gcsfs) missing
        raise CheckpointError(
            f"{url}: fsspec cannot open {_SCHEME.match(url).group(1)}:// ({_first_line(exc)}) — install the "
            "filesystem's package (s3fs for s3://, gcsfs for gs://, adlfs for az://) or check the URL"
        ) from None


def _first_line(exc: BaseException) -> str:
    text = _ANSI.sub("", str(exc)).strip()  # torch's weights-only refusal has terminal bold in it
    return text.splitlines()[0].strip() if text else type(exc).__name__


def write_checkpoint(
    path: str | os.PathLike[str], state_dict: Mapping[str, Any], overwrite: bool = False
) -> str | os.PathLike[str]:
    """Write ``state_dict`` (a ``State.state_dict()`` with the run's ``setup``, or a distributed
    run's :func:`split_ranks` layout) to ``path`` as a checkpoint of this format, atomically (a URL:
    as its fsspec filesystem allows, see the module's docstring); an existing file is replaced only
    with ``overwrite``. Returns ``path`` as given."""
    checkpoint = {"format": FORMAT, "version": VERSION, **state_dict}
    if is_url(path):
        _write_url(str(path), checkpoint, overwrite)
        return path
    target = Path(path)
    if target.exists() and not overwrite:
        raise CheckpointError(f"{path}: exists — pass overwrite=True to replace it, or choose another path")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            torch.save(checkpoint, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _write_url(url: str, checkpoint: Mapping[str, Any], overwrite: bool) -> None:
    fs, target = _filesystem(url)
    if fs.exists(target) and not overwrite:
        raise CheckpointError(f"{url}: exists — pass overwrite=True to replace it, or choose another path")
    folder, _, name = target.rstrip("/").rpartition("/")
    tmp = f"{folder}/.{name}.{uuid.uuid4().hex}.tmp" if folder else f".{name}.{uuid.uuid4().hex}.tmp"
    if folder:
        fs.makedirs(folder, exist_ok=True)
    try:
        with fs.open(tmp, "wb") as handle:
            torch.save(checkpoint, handle)
        fs.mv(tmp, target)
    except BaseException:
        try:
            if fs.exists(tmp):
                fs.rm(tmp)
        except Exception:  # noqa: S110 - the write's own error is the one to raise
            pass
        raise


def read_checkpoint(
    path: str | os.PathLike[str], weights_only: bool = True, keys: tuple[str, ...] = KEYS
) -> dict[str, Any]:
    """The checkpoint at ``path`` (a local file, or a URL read through ``fsspec.open``), checked to be
    a complete one of this format and version. ``weights_only=False`` only for a file another
    library wrote beside ours (DeepSpeed's model states, whose config objects torch's safe loader
    refuses), inside a folder this format names, whose ``keys`` differ."""
    if is_url(path):
        fs, target = _filesystem(str(path))
        if not fs.isfile(target):
            raise CheckpointError(f"{path}: no such checkpoint file — check load_path")
    elif not Path(path).is_file():
        raise CheckpointError(f"{path}: no such checkpoint file — check load_path")
    try:
        if is_url(path):
            import fsspec

            with fsspec.open(str(path), "rb") as handle:
                checkpoint = torch.load(handle, map_location="cpu", weights_only=weights_only)
        else:
            checkpoint = torch.load(path, map_location="cpu", weights_only=weights_only)
    except Exception as exc:  # truncated, not a torch file, or holding code
        raise CheckpointError(
            f"{path}: not a readable checkpoint ({type(exc).__name__}: {_first_line(exc)}) — it may be "
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
            f"{path}: checkpoint version {checkpoint.get('version')!r}, this library reads version {VERSION} — "
            "write the checkpoint again with this version's Trainer.save_checkpoint"
        )
    needed = [key for key in keys if not (key == "rng" and "ranks" in checkpoint)]  # per rank there
    missing = [key for key in needed if key not in checkpoint]
    if missing:
        raise CheckpointError(f"{path}: incomplete checkpoint, missing {', '.join(missing)} — write it again")
    return dict(checkpoint)


def split_ranks(state_dict: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(shared, own)``: ``state_dict`` (a rank's ``State.state_dict()``) without what differs by
    rank, and what does: each algorithm's :data:`RANK_ALGORITHM_KEYS` (its generator) and the global
    generators (``rng``). A distributed checkpoint holds rank 0's ``shared`` once and every rank's
    ``own`` under ``ranks``; :func:`rank_view` puts them together again."""
    own = {
        "algorithms": [
            {key: value for key, value in a["state"].items() if key in RANK_ALGORITHM_KEYS}
            for a in state_dict["algorithms"]
        ],
        "rng": state_dict["rng"],
    }
    shared = {key: value for key, value in state_dict.items() if key != "rng"}
    shared["algorithms"] = [
        {"name": a["name"], "state": {k: v for k, v in a["state"].items() if k not in RANK_ALGORITHM_KEYS}}
        for a in state_dict["algorithms"]
    ]
    return shared, own


def rank_view(saved: Mapping[str, Any], rank: int) -> dict[str, Any]:
    """What ``rank`` loads of the checkpoint ``saved``: a ``State.state_dict()``, with its own
    algorithms' generators and global generators put in the shared state (a one-process file as it
    is). The number of processes is checked beforehand (:func:`check_compatible`)."""
    ranks = saved.get("ranks")
    if ranks is None:
        return dict(saved)
    own = ranks[rank]
    algorithms = [
        {"name": a["name"], "state": {**a["state"], **mine}}
        for a, mine in zip(saved["algorithms"], own["algorithms"], strict=True)
    ]
    return {**{k: v for k, v in saved.items() if k != "ranks"}, "algorithms": algorithms, "rng": own["rng"]}


def setup_of(state: State, parallel: str) -> dict[str, Any]:
    """The run's setup a checkpoint records and a resumed run must share: its precision, parallel
    mode and number of processes."""
    return {"precision": state.precision, "parallel": parallel, "world_size": state.world_size}


def check_compatible(saved: Mapping[str, Any], state: State, path: str | os.PathLike[str], parallel: str) -> None:
    """Refuse ``saved`` (the checkpoint read from ``path``) unless it fits ``state`` run in the
    parallel mode ``parallel``, before anything is loaded: the same number of processes, parallel
    mode and precision, the same algorithms in the same order, each keeping no state its class does
    not, as many optimizers (each with as many parameter groups) and schedulers, weights of the same
    form (a ``peft`` model's adapter, of the same configuration, or a whole model: see
    :mod:`algorithms.core.adapters`) with the same names, and a GradScaler where the state's
    precision uses one. Each refusal is one line:
    the file, what was saved, what this run has, and what to do."""
    setup, here = saved["setup"], setup_of(state, parallel)
    if setup["world_size"] != here["world_size"]:
        raise CheckpointError(
            f"{path}: saved by {setup['world_size']} process(es), this run has {here['world_size']} — resume with "
            "as many (each rank goes on with its own generators)"
        )
    if setup["parallel"] != here["parallel"]:
        raise CheckpointError(
            f"{path}: saved with parallel={setup['parallel']!r}, this Trainer has parallel={parallel!r} — resume "
            "in the same parallel mode"
        )
    if setup["precision"] != here["precision"]:
        raise CheckpointError(
            f"{path}: saved with precision={setup['precision']!r}, this Trainer has precision={state.precision!r} "
            "— resume in the same precision"
        )
    saved = rank_view(saved, state.rank)
    saved_names = [a["name"] for a in saved["algorithms"]]
    names = [a.name for a in state.algorithms]
    if saved_names != names:
        raise CheckpointError(
            f"{path}: saved with algorithms [{', '.join(saved_names)}], this Trainer has "
            f"[{', '.join(names)}] — resume with the same algorithms in the same order"
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
    problem = model_form_problem(saved, state.model)
    if problem is not None:
        raise CheckpointError(f"{path}: {problem}")
    model_keys = set(model_state_dict(state.model))
    if set(saved["model"]) != model_keys:
        extra = sorted(set(saved["model"]) - model_keys)[:3]
        lacking = sorted(model_keys - set(saved["model"]))[:3]
        raise CheckpointError(
            f"{path}: the model's parameters differ (in the file only: {extra or 'none'}; "
            f"in this model only: {lacking or 'none'}) — resume the same model"
        )
    parameters = {name for name, _ in unwrap_model(state.model).named_parameters()}
    for i, (opt, entry) in enumerate(zip(state.optimizers, saved["optimizers"], strict=True)):
        if entry is None:  # DeepSpeed's: in its own files
            continue
        if len(entry["param_groups"]) != len(opt.param_groups):
            raise CheckpointError(
                f"{path}: optimizer {i} was saved with {len(entry['param_groups'])} parameter group(s), this "
                f"Trainer's has {len(opt.param_groups)} — resume with the same optimizers"
            )
        unnamed = sorted({n for members in saved_parameter_names(entry) or () for n in members} - parameters)
        if unnamed:
            raise CheckpointError(
                f"{path}: optimizer {i}'s parameter groups hold {unnamed[:3]}, not parameters of this model — "
                "resume the same model"
            )
    scaled = state.scaler is not None and state.scaler.is_enabled()
    if (saved["scaler"] is None) == scaled:
        raise CheckpointError(
            f"{path}: saved {'without' if saved['scaler'] is None else 'with'} a GradScaler, "
            f"this Trainer's precision {state.precision!r} "
            f"{'uses' if scaled else 'does not use'} one — resume in the "
            "same precision"
        )
