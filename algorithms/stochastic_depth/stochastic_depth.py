"""Stochastic Depth: in training, skip each residual block's branch at random, keeping its shortcut.

Huang, Sun, Liu, Sedra and Weinberger, "Deep Networks with Stochastic Depth", 2016.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from ..core.algorithm import Algorithm
from ..core.event import Event
from ..core.parameters import Choice, Other, Parameters, Real
from ..core.state import State
from ..core.time import Duration, TimeUnit
from ..models.resnet import BasicBlock, Bottleneck
from ..surgery import count_module_instances, recording_replacements, replace_module_classes

__all__ = [
    "StochasticBasicBlock",
    "StochasticBottleneck",
    "StochasticDepth",
    "apply_stochastic_depth",
    "block_drop_rates",
]

#: ``target_layer_name`` -> the block class it names; ``ResNetBottleneck`` is Composer's name.
TARGET_LAYERS: dict[str, type[nn.Module]] = {
    "BasicBlock": BasicBlock,
    "Bottleneck": Bottleneck,
    "ResNetBottleneck": Bottleneck,
}

PARAMETERS = Parameters(
    target_layer_name=Choice(
        choices=tuple(TARGET_LAYERS),
        note="The residual block class to make stochastic; ResNetBottleneck is Bottleneck.",
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

    Args:
        model: the model to change; blocks already made stochastic are left as they are.
        target_layer_name: the block class: ``"BasicBlock"`` or ``"Bottleneck"`` of
            :mod:`algorithms.models.resnet` (``"ResNetBottleneck"``, Composer's name, is the
            latter).
        stochastic_method: ``"block"`` or ``"sample"``.
        drop_rate: the drop probability of the last block, in ``[0, 1]``.
        drop_distribution: ``"linear"`` or ``"uniform"``.

    Returns:
        ``model``, changed; it warns (:class:`~algorithms.surgery.NoModulesReplacedWarning`) when
        it holds no such block.

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
    target = TARGET_LAYERS[target_layer_name]
    stochastic = _STOCHASTIC[target]
    count = count_module_instances(model, target) - count_module_instances(model, _StochasticResidual)
    rates = block_drop_rates(count, drop_rate, drop_distribution)
    position = iter(range(count))

    def make_stochastic(block: nn.Module, index: int) -> nn.Module | None:
        if isinstance(block, _StochasticResidual):
            return None
        return stochastic.from_block(block, rates[next(position)], stochastic_method)

    replace_module_classes(model, {target: make_stochastic}, method="StochasticDepth")
    return model


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


class _StochasticResidual(nn.Module):
    """What the stochastic blocks share: the drop decision and the scaling; a subclass gives the
    residual branch (:meth:`branch`) of the block class it derives from too."""

    drop_rate: float
    base_drop_rate: float
    stochastic_method: str
    #: A CPU ``torch.Generator`` for this block's draws; ``None`` uses torch's global generators.
    generator: torch.Generator | None

    @classmethod
    def from_block(cls, block: nn.Module, drop_rate: float, stochastic_method: str) -> _StochasticResidual:
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
        raise NotImplementedError

    def _uniform(self, shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
        if self.generator is None:
            return torch.rand(shape, device=device)
        return torch.rand(shape, generator=self.generator).to(device, non_blocking=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        keep = 1.0 - self.drop_rate
        if self.training and self.stochastic_method == "block":
            # One draw on the host (CPU) generator decides the path: no device sync.
            dropped = bool(torch.rand((), generator=self.generator) < self.drop_rate)
            if dropped:  # the shortcut only, as Composer's block: x itself, or ReLU of the projection
                return x if self.downsample is None else self.relu(self.downsample(x))
        identity = x if self.downsample is None else self.downsample(x)
        out = self.branch(x)
        if not self.training:
            out = out * keep
        elif self.stochastic_method == "sample" and self.drop_rate > 0:
            shape = (x.shape[0],) + (1,) * (x.ndim - 1)
            out = out * (self._uniform(shape, x.device) >= self.drop_rate).to(out.dtype)
        return self.relu(out + identity)

    def extra_repr(self) -> str:
        return f"drop_rate={self.drop_rate:.4g}, stochastic_method={self.stochastic_method!r}"


class StochasticBasicBlock(_StochasticResidual, BasicBlock):
    """A :class:`~algorithms.models.resnet.BasicBlock` whose branch is dropped at random in training."""

    def branch(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x)))))


class StochasticBottleneck(_StochasticResidual, Bottleneck):
    """A :class:`~algorithms.models.resnet.Bottleneck` whose branch is dropped at random in training."""

    def branch(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        return self.bn3(self.conv3(out))


_STOCHASTIC: dict[type[nn.Module], type[_StochasticResidual]] = {
    BasicBlock: StochasticBasicBlock,
    Bottleneck: StochasticBottleneck,
}


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
                    if isinstance(module, _StochasticResidual):
                        module.generator = self._blocks_generator
            return
        factor = min(self._elapsed(state) / self._warmup.value, 1.0)
        for module in state.model.modules():
            if isinstance(module, _StochasticResidual):
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
