"""Stochastic Depth: in training, skip each residual block's branch at random, keeping its shortcut.

Huang, Sun, Liu, Sedra and Weinberger, "Deep Networks with Stochastic Depth", 2016.
"""

from __future__ import annotations

import copy
import importlib
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..core.algorithm import Algorithm
from ..core.event import Event
from ..core.parameters import Choice, Other, Parameters, Real
from ..core.state import State
from ..core.time import Duration, TimeUnit
from ..models.resnet import BasicBlock, Bottleneck
from ..surgery import Policy, Registry, recording_replacements

__all__ = [
    "StochasticBasicBlock",
    "StochasticBottleneck",
    "StochasticDepth",
    "StochasticResidual",
    "apply_stochastic_depth",
    "block_drop_rates",
    "registry",
    "stochastic_policy",
]

#: ``target_layer_name`` -> the project's block class it names; ``ResNetBottleneck`` is Composer's
#: name. The registry below also gives torchvision's and timm's classes of these two kinds.
TARGET_LAYERS: dict[str, type[nn.Module]] = {
    "BasicBlock": BasicBlock,
    "Bottleneck": Bottleneck,
    "ResNetBottleneck": Bottleneck,
}
#: ``target_layer_name`` -> the kind of block it selects in the registry.
_KINDS = {"BasicBlock": "BasicBlock", "Bottleneck": "Bottleneck", "ResNetBottleneck": "Bottleneck"}

PARAMETERS = Parameters(
    target_layer_name=Choice(
        choices=tuple(TARGET_LAYERS),
        note="The kind of residual block to make stochastic (the project's, torchvision's and timm's); "
        "ResNetBottleneck is Bottleneck.",
    ),
    stochastic_method=Choice(
        choices=("block", "sample"), note="Drop a block for the whole batch, or for each example on its own."
    ),
    drop_rate=Real(low=0, high=1, note="The drop probability of the last block."),
    drop_distribution=Choice(
        choices=("linear", "uniform"),
        note="Drop rates rising linearly with depth to drop_rate, or drop_rate for every block.",
    ),
    drop_warmup=Other(
        requires="a fraction of training in [0, 1] or a duration such as '2ep'",
        parse=lambda name, value: _drop_warmup(name, value),
        note="How long the drop rates take to rise from 0 to their full values; 0 for no warm-up.",
    ),
)
_FRACTION = Real(low=0, high=1, note="A fraction of training.")


def apply_stochastic_depth(
    model: nn.Module,
    target_layer_name: str,
    stochastic_method: str = "block",
    drop_rate: float = 0.2,
    drop_distribution: str = "linear",
) -> nn.Module:
    """Make every ``target_layer_name`` block of ``model`` stochastic, in place, as
    ``composer.functional.apply_stochastic_depth``.

    Block ``l`` of ``L`` (counted from the input, ``l = 1 .. L``) drops its residual branch with
    probability ``drop_rate * l / L`` (``"linear"``, the paper's rule) or ``drop_rate``
    (``"uniform"``); see :func:`block_drop_rates`. In training, ``"block"`` drops the whole
    branch of a block for the batch (the block returns its shortcut only) and ``"sample"`` drops
    it for each example on its own; in evaluation the branch is scaled by its survival
    probability ``1 - drop rate``, so each block outputs what it does in training on average.

    The replacement keeps the block's submodules (the same parameter tensors, so optimizers need
    no update) and its qualified names, so state dicts load either way.

    The blocks it knows are in :data:`registry`: the ``BasicBlock`` and ``Bottleneck`` classes of
    :mod:`algorithms.models.resnet`, of ``torchvision.models.resnet`` and of
    ``timm.models.resnet`` (torchvision and timm are imported only when the model holds their
    blocks). A block class of your own is registered with
    ``registry.register(YourBlock, stochastic_policy(YourStochasticBlock, "BasicBlock"))``; see
    :func:`stochastic_policy`.

    Args:
        model: the model to change; blocks already made stochastic are left as they are.
        target_layer_name: the kind of block: ``"BasicBlock"`` or ``"Bottleneck"`` (the
            project's, torchvision's, timm's, or a class registered under that kind;
            ``"ResNetBottleneck"``, Composer's name, is the latter).
        stochastic_method: ``"block"`` or ``"sample"``.
        drop_rate: the drop probability of the last block, in ``[0, 1]``.
        drop_distribution: ``"linear"`` or ``"uniform"``.

    Returns:
        ``model``, changed; it warns (:class:`~algorithms.surgery.NoModulesReplacedWarning`) when
        it holds no such block, naming the classes it knows and how to register one.

    Example::

        >>> import torch
        >>> import algorithms.functional as cf
        >>> from algorithms.models import resnet20
        >>> model = cf.apply_stochastic_depth(resnet20(), "BasicBlock", drop_rate=0.2)
        >>> [round(b.drop_rate, 4) for b in model.layer3]
        [0.1556, 0.1778, 0.2]
    """
    PARAMETERS.check(
        target_layer_name=target_layer_name,
        stochastic_method=stochastic_method,
        drop_rate=drop_rate,
        drop_distribution=drop_distribution,
    )
    kind = _KINDS[target_layer_name]
    policies = registry.policies(model)
    # Rates are given in walk order (top-down, as model.modules()) to the blocks not yet stochastic.
    count = sum(
        getattr(policies.get(type(m)), "target_layer_name", None) == kind and not isinstance(m, StochasticResidual)
        for m in list(model.modules())[1:]
    )
    call = _Call(kind, iter(block_drop_rates(count, drop_rate, drop_distribution)), stochastic_method)
    token = _CALL.set(call)
    try:
        registry.apply(model)
    finally:
        _CALL.reset(token)
    return model


@dataclass
class _Call:
    """The settings of one :func:`apply_stochastic_depth` call, which its policies read."""

    kind: str
    rates: Iterator[float]
    stochastic_method: str


_CALL: ContextVar[_Call | None] = ContextVar("stochastic_depth_call", default=None)


class _StochasticPolicy:
    """A registry policy: inside :func:`apply_stochastic_depth`, a block of ``target_layer_name``'s
    kind becomes ``stochastic_class.from_block(block, its rate, the method)``; others stay."""

    def __init__(self, target_layer_name: str, stochastic_class: type | None = None, where: str | None = None):
        self.target_layer_name = _KINDS[target_layer_name]
        self._class, self._where = stochastic_class, where

    def stochastic_class(self) -> type[StochasticResidual]:
        """The stochastic class, imported from its module on first use when given by its path."""
        if self._class is None:
            module, _, name = self._where.rpartition(".")
            self._class = getattr(importlib.import_module(module, __package__), name)
        return self._class

    def __call__(self, block: nn.Module, index: int) -> nn.Module | None:
        call = _CALL.get()
        if call is None:
            raise RuntimeError("a Stochastic Depth policy runs inside apply_stochastic_depth, which gives the rates")
        if isinstance(block, StochasticResidual) or call.kind != self.target_layer_name:
            return None
        return self.stochastic_class().from_block(block, next(call.rates), call.stochastic_method)


def stochastic_policy(stochastic_class: type[StochasticResidual], target_layer_name: str) -> Policy:
    """The policy that registers a block class of your own with :data:`registry`:
    :func:`apply_stochastic_depth` with ``target_layer_name`` (``"BasicBlock"`` or ``"Bottleneck"``)
    then turns each such block into ``stochastic_class``, which derives from
    :class:`StochasticResidual` and the block's class and says what the block's residual branch is
    (:meth:`~StochasticResidual.branch`) and, where they differ from torchvision's
    ``downsample``/``relu``, its shortcut and final activation.

    Example::

        >>> from torch import nn
        >>> import algorithms.functional as cf
        >>> from algorithms.stochastic_depth import StochasticResidual, registry, stochastic_policy
        >>> class Block(nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.conv, self.relu, self.downsample = nn.Conv2d(4, 4, 3, padding=1), nn.ReLU(), None
        ...     def forward(self, x):
        ...         return self.relu(self.conv(x) + x)
        >>> class StochasticBlock(StochasticResidual, Block):
        ...     def branch(self, x):
        ...         return self.conv(x)
        >>> registry.register(Block, stochastic_policy(StochasticBlock, "BasicBlock"))
        >>> model = cf.apply_stochastic_depth(nn.Sequential(Block(), Block()), "BasicBlock", drop_rate=0.5)
        >>> [type(b).__name__ for b in model], [b.drop_rate for b in model]
        (['StochasticBlock', 'StochasticBlock'], [0.25, 0.5])
    """
    PARAMETERS.check(target_layer_name=target_layer_name)
    if not (isinstance(stochastic_class, type) and issubclass(stochastic_class, StochasticResidual)):
        raise ValueError(f"stochastic_class={stochastic_class!r}: must be a subclass of StochasticResidual")
    return _StochasticPolicy(target_layer_name, stochastic_class)


def block_drop_rates(num_blocks: int, drop_rate: float, drop_distribution: str) -> list[float]:
    """The drop probability of each of ``num_blocks`` blocks, first to last: ``drop_rate * l / L``
    for block ``l`` of ``L`` (``"linear"``), or ``drop_rate`` for every block (``"uniform"``)."""
    if drop_distribution == "linear":
        return [drop_rate * (i + 1) / num_blocks for i in range(num_blocks)]
    return [float(drop_rate)] * num_blocks


def _drop_warmup(name: str, drop_warmup: float | str) -> Duration:
    if isinstance(drop_warmup, (int, float)):
        if not _FRACTION.accepts(drop_warmup):
            raise ValueError(f"{name}={drop_warmup!r}: must be {PARAMETERS['drop_warmup'].requirement()}")
        return Duration(float(drop_warmup), TimeUnit.DURATION)
    try:
        return Duration.parse(drop_warmup)
    except ValueError as error:
        raise ValueError(f"{name}={drop_warmup!r}: {error}") from None


class StochasticResidual(nn.Module):
    """What the stochastic blocks share: the drop decision and the scaling. A subclass derives from
    a block class too and says what that block computes: its residual branch (:meth:`branch`), its
    shortcut (:meth:`shortcut`, by default ``downsample`` where the block has one) and its final
    activation (:meth:`activate`, by default ``relu``); the block's output is
    ``activate(branch(x) + shortcut(x))``."""

    drop_rate: float
    base_drop_rate: float
    stochastic_method: str
    #: A CPU ``torch.Generator`` for this block's draws; ``None`` uses torch's global generators.
    generator: torch.Generator | None

    @classmethod
    def from_block(cls, block: nn.Module, drop_rate: float, stochastic_method: str) -> StochasticResidual:
        """A stochastic block holding ``block``'s own submodules, parameters and buffers."""
        new = cls.__new__(cls)
        # The block's attributes and the same children under the same names (parameters shared,
        # state dict keys unchanged); its registries are copied, so changing one leaves the other.
        new.__dict__.update({k: copy.copy(v) if isinstance(v, (dict, set)) else v for k, v in vars(block).items()})
        new.drop_rate = new.base_drop_rate = float(drop_rate)
        new.stochastic_method = stochastic_method
        new.generator = None
        return new

    def branch(self, x: torch.Tensor) -> torch.Tensor:  # pragma: no cover - every subclass defines it
        """The residual branch: what the block adds to its shortcut before the final activation."""
        raise NotImplementedError

    def shortcut(self, x: torch.Tensor) -> torch.Tensor:
        """The shortcut: ``x`` itself, or the block's projection ``downsample(x)``."""
        return x if self.downsample is None else self.downsample(x)

    def activate(self, x: torch.Tensor) -> torch.Tensor:
        """The block's final activation, applied to the sum."""
        return self.relu(x)

    def _uniform(self, shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
        if self.generator is None:
            return torch.rand(shape, device=device)
        return torch.rand(shape, generator=self.generator).to(device, non_blocking=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        keep = 1.0 - self.drop_rate
        if self.training and self.stochastic_method == "block":
            # One draw on the host (CPU) generator decides the path: no device sync.
            dropped = bool(torch.rand((), generator=self.generator) < self.drop_rate)
            if dropped:  # the shortcut only, as Composer's block: x itself, or the activated projection
                identity = self.shortcut(x)
                return x if identity is x else self.activate(identity)
        identity = self.shortcut(x)
        out = self.branch(x)
        if not self.training:
            out = out * keep
        elif self.stochastic_method == "sample" and self.drop_rate > 0:
            shape = (x.shape[0],) + (1,) * (x.ndim - 1)
            out = out * (self._uniform(shape, x.device) >= self.drop_rate).to(out.dtype)
        return self.activate(out + identity)

    def extra_repr(self) -> str:
        return f"drop_rate={self.drop_rate:.4g}, stochastic_method={self.stochastic_method!r}"


class StochasticBasicBlock(StochasticResidual, BasicBlock):
    """A :class:`~algorithms.models.resnet.BasicBlock` whose branch is dropped at random in training."""

    def branch(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x)))))


class StochasticBottleneck(StochasticResidual, Bottleneck):
    """A :class:`~algorithms.models.resnet.Bottleneck` whose branch is dropped at random in training."""

    def branch(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        return self.bn3(self.conv3(out))


#: The name the figure generator and older code import.
_StochasticResidual = StochasticResidual

#: The residual blocks Stochastic Depth knows; register a block class of your own here with
#: :func:`stochastic_policy`. torchvision's and timm's stochastic classes live in modules of their
#: own, imported only when a model holds those libraries' blocks.
registry = Registry("apply_stochastic_depth", "algorithms.stochastic_depth.registry")
registry.register(BasicBlock, _StochasticPolicy("BasicBlock", StochasticBasicBlock))
registry.register(Bottleneck, _StochasticPolicy("Bottleneck", StochasticBottleneck))
for _library, _module in (("torchvision", "torchvision.models.resnet"), ("timm", "timm.models.resnet")):
    for _kind in ("BasicBlock", "Bottleneck"):
        registry.register(
            f"{_module}.{_kind}", _StochasticPolicy(_kind, where=f"._{_library}.Stochastic{_library.title()}{_kind}")
        )
del _library, _module, _kind


class StochasticDepth(Algorithm):
    """Stochastic Depth as a training-loop algorithm: at ``Event.INIT``,
    :func:`apply_stochastic_depth` makes the model's blocks stochastic; with ``drop_warmup``, at
    every ``Event.BATCH_START`` each block's drop rate rises linearly from 0 to its full value
    over that part of training.

    The drops are drawn inside the blocks' forward from torch's global generator, which the
    Trainer seeds, except in a distributed run in ``"block"`` mode: a dropped block skips its
    branch's collectives (FSDP's all-gathers, ZeRO's gradient reductions), so every rank must drop
    the same blocks, and the blocks then draw from one generator of their own, seeded alike on
    every rank (from the Trainer's seed, or a seed rank 0 draws and sends). Its state is in
    :meth:`state_dict` (kept once, as it is the same on every rank), so a resumed run drops what
    the uninterrupted one would. ``"sample"`` mode runs every branch and draws per rank.

    Args:
        target_layer_name: the block class, ``"BasicBlock"`` or ``"Bottleneck"``
            (``"ResNetBottleneck"``, Composer's name, is the latter).
        stochastic_method: ``"block"`` or ``"sample"``.
        drop_rate: the drop probability of the last block, in ``[0, 1]``.
        drop_distribution: ``"linear"`` or ``"uniform"``.
        drop_warmup: how long the drop rates take to rise from 0 to their full values: a
            fraction of training in ``[0, 1]`` or a duration such as ``"2ep"``; 0 for no warm-up.

    It counts ``modules_replaced``, the blocks it made stochastic; none, or ``drop_rate=0`` (no
    block is ever dropped), means it did not act.

    Example::

        >>> import torch
        >>> from algorithms import StochasticDepth
        >>> from algorithms.core import Trainer
        >>> from algorithms.models import resnet20
        >>> batches = [(torch.randn(4, 3, 16, 16), torch.randint(0, 10, (4,)))]
        >>> Trainer(resnet20(), batches, "1ep", algorithms=[StochasticDepth("BasicBlock")], seed=0).fit()
    """

    activity = {"modules_replaced": "blocks made stochastic"}

    def __init__(
        self,
        target_layer_name: str,
        stochastic_method: str = "block",
        drop_rate: float = 0.2,
        drop_distribution: str = "linear",
        drop_warmup: float | str = 0.0,
    ):
        PARAMETERS.check(
            target_layer_name=target_layer_name,
            stochastic_method=stochastic_method,
            drop_rate=drop_rate,
            drop_distribution=drop_distribution,
            drop_warmup=drop_warmup,
        )
        self._warmup = _drop_warmup("drop_warmup", drop_warmup)
        self.target_layer_name = target_layer_name
        self.stochastic_method = stochastic_method
        self.drop_rate = drop_rate
        self.drop_distribution = drop_distribution
        self.drop_warmup = drop_warmup

    @property
    def unused_parameters(self) -> bool:
        """A dropped block's branch gets no gradient in that step ("block" mode), so DDP must look
        for unused parameters; "sample" mode multiplies every branch, so none is unused."""
        return self.stochastic_method == "block"

    def reset(self) -> None:
        super().reset()
        self._blocks_generator: torch.Generator | None = None

    def match(self, event: Event, state: State) -> bool:
        return event is Event.INIT or (event is Event.BATCH_START and self._warmup.value > 0)

    def apply(self, event: Event, state: State, logger: Any | None = None) -> None:
        if event is Event.INIT:
            with recording_replacements() as replaced:
                apply_stochastic_depth(
                    state.model, self.target_layer_name, self.stochastic_method, self.drop_rate, self.drop_distribution
                )
            self.report(logger, "modules_replaced", len(replaced))
            if state.world_size > 1 and self.stochastic_method == "block":
                self._blocks_generator = torch.Generator().manual_seed(_rank_shared_seed(state))
                for module in state.model.modules():
                    if isinstance(module, StochasticResidual):
                        module.generator = self._blocks_generator
            return
        factor = min(self._elapsed(state) / self._warmup.value, 1.0)
        for module in state.model.modules():
            if isinstance(module, StochasticResidual):
                module.drop_rate = factor * module.base_drop_rate

    def state_dict(self) -> dict[str, Any]:
        """The base's state and ``blocks_generator``: the state of the generator the blocks share in
        a distributed run in ``"block"`` mode (None otherwise)."""
        gen = getattr(self, "_blocks_generator", None)
        return {**super().state_dict(), "blocks_generator": None if gen is None else gen.get_state()}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        super().load_state_dict(state_dict)
        saved, gen = state_dict.get("blocks_generator"), getattr(self, "_blocks_generator", None)
        if saved is not None and gen is not None:
            gen.set_state(saved)

    def _state_keys(self) -> set[str]:
        return super()._state_keys() | {"blocks_generator"}

    def acted(self, activity: Mapping[str, int]) -> bool:
        """Blocks with a drop rate of 0 are never dropped."""
        return self.drop_rate > 0 and super().acted(activity)

    def _elapsed(self, state: State) -> float:
        """Training done so far, in the warm-up's unit (a fraction of the run, or epochs, ...)."""
        if self._warmup.unit is TimeUnit.DURATION:
            return state.progress()
        if self._warmup.unit is TimeUnit.EPOCH and state.dataloader_len:
            return state.timestamp.epoch + state.timestamp.batch_in_epoch / state.dataloader_len
        return float(state.timestamp.get(self._warmup.unit))


def _rank_shared_seed(state: State) -> int:
    """A seed every rank agrees on: from the Trainer's seed, or drawn by rank 0 and broadcast."""
    if state.seed is not None:
        return (state.seed * 1_000_003 + 0x5D) % 2**63
    import torch.distributed as dist

    drawn = torch.randint(0, 2**62, (1,), device=state.device)
    if dist.is_available() and dist.is_initialized():
        dist.broadcast(drawn, src=0)
    return int(drawn.item())
