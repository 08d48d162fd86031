"""Everything the training loop knows, shared with the algorithms."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from .time import Duration, Timestamp, TimeUnit

if TYPE_CHECKING:
    from .algorithm import Algorithm

#: The timestamp's counters a checkpoint keeps.
TIMESTAMP_FIELDS = ("epoch", "batch", "sample", "batch_in_epoch", "token")

__all__ = ["State", "batch_get_item", "batch_set_item", "loader_generators", "rng_state", "set_rng_state"]


def batch_get_item(batch: Any, key: int | str) -> Any:
    """``batch[key]`` for tuple, list and mapping batches."""
    try:
        return batch[key]
    except (KeyError, IndexError, TypeError) as exc:
        raise KeyError(f"batch has no item {key!r} ({_describe(batch)})") from exc


def _describe(batch: Any) -> str:
    if isinstance(batch, Mapping):
        return f"a {type(batch).__name__} with keys {list(batch)}"
    if isinstance(batch, (list, tuple)):
        return f"a {type(batch).__name__} of {len(batch)} items"
    return f"batch type {type(batch).__name__}"


def batch_set_item(batch: Any, key: int | str, value: Any) -> Any:
    """A batch equal to ``batch`` with ``batch[key] = value``; tuples are rebuilt, not mutated."""
    if isinstance(batch, tuple):
        items = list(batch)
        items[key] = value
        return type(batch)(*items) if hasattr(batch, "_fields") else tuple(items)
    if isinstance(batch, (list, dict)):
        batch = batch.copy()
        batch[key] = value
        return batch
    if isinstance(batch, Mapping):
        return {**batch, key: value}
    raise TypeError(f"cannot set item {key!r} on a batch of type {type(batch).__name__}")


def loader_generators(loader: Any) -> list[torch.Generator]:
    """The generators a data loader draws its order and its workers' seeds from, where it has its
    own: the loader's ``generator`` and its sampler's (or its batch sampler's sampler's), each once."""
    found: list[torch.Generator] = []
    batch_sampler = getattr(loader, "batch_sampler", None)
    for owner in (loader, getattr(loader, "sampler", None), getattr(batch_sampler, "sampler", None)):
        generator = getattr(owner, "generator", None)
        if isinstance(generator, torch.Generator) and all(generator is not g for g in found):
            found.append(generator)
    return found


def rng_state(loader: Any = None) -> dict[str, Any]:
    """The generators' states: torch's, CUDA's (None without CUDA), Python's, and the data loader's
    own (:func:`loader_generators`, in order)."""
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        "python": random.getstate(),
        "loader": [g.get_state() for g in loader_generators(loader)],
    }


def set_rng_state(rng: Mapping[str, Any], loader: Any = None) -> None:
    """Put back what :func:`rng_state` returned (read from a file, where tuples came back as lists);
    the loader's generators where the state holds as many as ``loader`` has."""
    torch.set_rng_state(rng["torch"])
    if rng["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    version, internal, gauss = rng["python"]
    random.setstate((version, tuple(internal), gauss))
    generators, saved = loader_generators(loader), rng.get("loader") or []
    if len(generators) == len(saved):
        for generator, state in zip(generators, saved, strict=True):
            generator.set_state(state)


def _optimizer_state(optimizer: torch.optim.Optimizer, named: Sequence[tuple[str, Any]]) -> dict[str, Any]:
    """``optimizer.state_dict()`` with ``parameter_names``: the names of each group's parameters
    (left out where the optimizer holds a tensor ``named`` does not have)."""
    names = {id(p): name for name, p in named}
    saved = optimizer.state_dict()
    if all(id(p) in names for group in optimizer.param_groups for p in group["params"]):
        saved["parameter_names"] = [[names[id(p)] for p in group["params"]] for group in optimizer.param_groups]
    return saved


def saved_parameter_names(saved: Mapping[str, Any] | None) -> list[list[str]] | None:
    """The names of the parameters each group of a saved optimizer held (:meth:`State.state_dict`'s
    ``parameter_names``, or a full state dict's groups keyed by name), or None where it names none."""
    if saved is None:
        return None
    if "parameter_names" in saved:
        return saved["parameter_names"]
    groups = [group.get("params", []) for group in saved.get("param_groups", ())]
    if groups and all(isinstance(name, str) for members in groups for name in members):
        return groups
    return None


@dataclass
class State:
    """Training state. Algorithms read and change it; the :class:`Trainer` owns it."""

    model: torch.nn.Module
    max_duration: Duration
    optimizers: Sequence[torch.optim.Optimizer] = ()
    schedulers: Sequence[Any] = ()
    loss_fn: Callable[..., torch.Tensor] | None = None
    precision: str = "fp32"
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    rank: int = 0
    world_size: int = 1
    seed: int | None = None
    dataloader_len: int | None = None
    #: The Trainer's training batches (SWA's batch-norm pass reads them again at its end).
    train_dataloader: Any = None
    timestamp: Timestamp = field(default_factory=Timestamp)
    batch: Any = None
    outputs: Any = None
    loss: torch.Tensor | None = None
    #: The parts of the latest batch's loss where ``loss_fn`` returned a dict or a tuple (each
    #: detached, reduced to its mean, by key or position); empty for a plain tensor.
    loss_parts: dict[str, torch.Tensor] = field(default_factory=dict)
    #: The target the Trainer's loss was computed on, as the algorithms left it at ``BEFORE_LOSS``.
    loss_target: Any = None
    #: While a batch is trained in microbatches (``Trainer(microbatch_size=...)``,
    #: :meth:`Loop.accumulate <algorithms.core.Loop.accumulate>`): the rows of the whole batch that
    #: ``batch`` holds, from ``BEFORE_FORWARD`` to ``AFTER_BACKWARD`` of each microbatch; None
    #: otherwise (``batch`` is the whole batch).
    microbatch_rows: slice | None = None
    #: The algorithms the engine runs, in order (the :class:`~algorithms.core.Engine` keeps it).
    algorithms: Sequence[Algorithm] = ()
    #: The loss scaler of ``amp_fp16`` (disabled in the other precisions), or None outside a Trainer.
    scaler: torch.amp.GradScaler | None = None
    #: The global generators' states as the current epoch's loader was started (``iter(loader)``
    #: draws its shuffling and worker seeds from them), kept so a resumed run starts its loader alike.
    epoch_rng: dict[str, Any] | None = None
    #: The generators a loaded checkpoint holds, put back by :meth:`restore_rng` just before the
    #: first batch the resumed run trains (after its loader was started and has skipped the batches
    #: trained already), not when the checkpoint is loaded.
    pending_rng: dict[str, Any] | None = None

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs to go on exactly as this one would: the model's weights
        (unwrapped from DataParallel or DDP), every optimizer's and scheduler's state, the
        GradScaler's (None where it is disabled), the timestamp, every algorithm's state (their
        generators included), and the global random generators (torch's, CUDA's, Python's, and
        ``epoch``: those the current epoch's loader started from).

        The model's weights are its whole ``state_dict()`` (``model_form`` ``"full"``), or for a
        ``peft`` model its adapter's alone (``model_form`` ``"peft_adapter"``, with the adapter's
        configuration as ``adapter_config``): see :mod:`algorithms.core.adapters`.

        Each optimizer's entry is its ``state_dict()`` and ``parameter_names``: the names, in the
        unwrapped model, of the parameters each of its groups holds, group by group (absent where
        it holds tensors the model does not name, as DeepSpeed's flat partitions). A method that
        takes parameters out of the groups (Layer Freezing) changes them, and the optimizer's state
        only loads into groups of the same sizes, so :meth:`load_state_dict` puts them back first."""
        from .adapters import adapter_config, model_form, model_state_dict  # not at import: methods stay light
        from .distributed import unwrap_model

        enabled = self.scaler is not None and self.scaler.is_enabled()
        named = list(unwrap_model(self.model).named_parameters())
        return {
            "model": model_state_dict(self.model),
            "model_form": model_form(self.model),
            "adapter_config": adapter_config(self.model),
            "optimizers": [_optimizer_state(opt, named) for opt in self.optimizers],
            "schedulers": [s.state_dict() for s in self.schedulers],
            "scaler": self.scaler.state_dict() if enabled else None,
            "timestamp": {name: getattr(self.timestamp, name) for name in TIMESTAMP_FIELDS},
            "algorithms": [{"name": a.name, "state": a.state_dict()} for a in self.algorithms],
            "rng": {**rng_state(self.train_dataloader), "epoch": self.epoch_rng},
        }

    def load_state_dict(self, state_dict: Mapping[str, Any], weights: bool = True) -> None:
        """Put back what :meth:`state_dict` returned (checked beforehand: see
        :func:`algorithms.core.checkpoint.check_compatible`), the optimizers' parameter groups
        (:meth:`load_parameter_groups`) before their state; with ``weights=False`` all but the
        model's weights and the optimizers (a strategy that shards them loads those itself). Weights of
        the other form (a whole model's for a ``peft`` model, an adapter's for another model, or another
        adapter configuration) are refused with a ValueError of one line before anything changes."""
        from .adapters import load_model_state_dict, model_form_problem

        if weights:
            problem = model_form_problem(state_dict, self.model)
            if problem is not None:
                raise ValueError(f"State.load_state_dict: the state {problem}")
            load_model_state_dict(self.model, state_dict["model"])
            self.load_parameter_groups(state_dict)
            for opt, saved in zip(self.optimizers, state_dict["optimizers"], strict=True):
                opt.load_state_dict({key: value for key, value in saved.items() if key != "parameter_names"})
        for scheduler, saved in zip(self.schedulers, state_dict["schedulers"], strict=True):
            scheduler.load_state_dict(saved)
        if state_dict["scaler"] is not None and self.scaler is not None:
            self.scaler.load_state_dict(state_dict["scaler"])
        for algo, saved in zip(self.algorithms, state_dict["algorithms"], strict=True):
            algo.load_state_dict(saved["state"])
        for name in TIMESTAMP_FIELDS:
            setattr(self.timestamp, name, int(state_dict["timestamp"][name]))
        rng = state_dict["rng"]
        self.epoch_rng = rng.get("epoch")
        self.pending_rng = {key: rng.get(key) for key in ("torch", "cuda", "python", "loader")}

    def load_parameter_groups(self, state_dict: Mapping[str, Any]) -> None:
        """Make each optimizer's parameter groups hold the parameters its saved entry names, in
        order: ``parameter_names`` (:meth:`state_dict`), or the names a full state dict keyed by
        name lists (FSDP's); an entry naming none leaves the groups as they are. The groups'
        settings (learning rate and the rest) are the optimizer state's to load."""
        from .distributed import unwrap_model

        params = dict(unwrap_model(self.model).named_parameters())
        for opt, saved in zip(self.optimizers, state_dict["optimizers"], strict=True):
            names = saved_parameter_names(saved)
            if names is None:
                continue
            for group, members in zip(opt.param_groups, names, strict=True):
                group["params"] = [params[name] for name in members]

    def restore_rng(self) -> None:
        """Put back the global generators of the checkpoint loaded last (nothing without one)."""
        if self.pending_rng is not None:
            set_rng_state(self.pending_rng, self.train_dataloader)
            self.pending_rng = None

    @property
    def optimizer(self) -> torch.optim.Optimizer | None:
        return self.optimizers[0] if self.optimizers else None

    @property
    def scheduler(self) -> Any:
        return self.schedulers[0] if self.schedulers else None

    def batch_get_item(self, key: int | str) -> Any:
        return batch_get_item(self.batch, key)

    def batch_set_item(self, key: int | str, value: Any) -> None:
        self.batch = batch_set_item(self.batch, key, value)

    def max_batches(self) -> int | None:
        """The total number of batches the run will take, where it can be known."""
        unit, value = self.max_duration.unit, int(self.max_duration.value)
        if unit is TimeUnit.BATCH:
            return value
        if unit is TimeUnit.EPOCH and self.dataloader_len is not None:
            return value * self.dataloader_len
        return None

    def progress(self) -> float:
        """Fraction of ``max_duration`` done, in [0, 1]."""
        unit, total = self.max_duration.unit, self.max_duration.value
        if unit is TimeUnit.DURATION:
            raise ValueError("max_duration cannot itself be a fraction of the run")
        if total == 0:
            return 1.0
        if unit is TimeUnit.EPOCH and self.dataloader_len:
            done = self.timestamp.epoch + self.timestamp.batch_in_epoch / self.dataloader_len
            return min(done / total, 1.0)
        return min(self.timestamp.get(unit) / total, 1.0)

    def reached(self, duration: str | Duration) -> bool:
        """Whether training has reached ``duration`` (e.g. ``"2ep"`` or ``"0.5dur"``)."""
        duration = Duration.parse(duration)
        if duration.unit is TimeUnit.DURATION:
            return self.progress() >= duration.value
        return self.timestamp.get(duration.unit) >= duration.value
