"""Activation checkpointing: a block keeps only its inputs for the backward pass, which runs the
block's forward again to get the rest.

Chen, Xu, Zhang and Guestrin, "Training Deep Nets with Sublinear Memory Cost", 2016.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from ..core.algorithm import Algorithm
from ..core.event import Event
from ..core.parameters import Integer, Parameters
from ..core.state import State
from ..models.resnet import BasicBlock, Bottleneck
from ..models.transformer import TransformerBlock
from ..surgery import Registry, preserves_parameters, recording_replacements

__all__ = [
    "ActivationCheckpointing",
    "CheckpointedBlock",
    "apply_activation_checkpointing",
    "checkpoint_block",
    "checkpointed_class",
    "registry",
]

PARAMETERS = Parameters(
    every_n_blocks=Integer(
        low=1,
        note="Checkpoint the first block of each class and every n-th one after it; 1 checkpoints every block.",
    ),
)


class CheckpointedBlock(nn.Module):
    """What a checkpointed block adds to its own class: its forward runs under
    ``torch.utils.checkpoint.checkpoint(..., use_reentrant=False)``, so autograd keeps the block's
    inputs and none of the tensors its layers save for the backward pass; the backward pass runs the
    block's forward once more to make them. The output and the gradients are those of the block
    itself:

    - torch's random state (CPU, and the devices of the inputs) is restored for the recomputation
      (``preserve_rng_state``), so dropout drops the same units; a ``torch.Generator`` that a module
      of the block holds as an attribute (Gyro Dropout's layers in the Trainer, Stochastic Depth's
      blocks in a distributed run) is set back the same way, and left where the forward pass left it;
    - a norm layer's running statistics (batch norm in training) are updated by the forward pass
      only: the recomputation's update is undone, so they are the block's own.

    A module whose forward changes other state of its own (a counter of its calls) sees the
    recomputation as a second call. Under ``torch.no_grad()`` (evaluation, a scoring pass) nothing
    is saved for a backward pass, and the block runs as it is.

    Why a subclass and not a wrapper: a checkpointed block is an instance of
    ``checkpointed_class(type(block))``, which derives from the block's class, and holds the
    block's own submodules, parameters and buffers under the same names. Its state dict, its
    ``named_parameters`` and ``named_modules`` are the block's, so a checkpoint saved with it loads
    into the model without it and back, optimizers keep the same tensors, and code that looks for
    the block's class (a wrap policy, ``isinstance``) still finds it. torch's ``checkpoint_wrapper``
    puts the block inside a ``CheckpointWrapper`` under ``_checkpoint_wrapped_module``: hooks strip
    that name from the state dict and ``named_parameters``, but module paths and
    ``named_buffers`` keep it. Patching the instance's ``forward`` would keep the names too, but
    the change would not show in the model's classes or its ``repr``.
    """

    #: ``(the block's class, the mixin)`` this class was made from by :func:`checkpointed_class`.
    _checkpointed_from: tuple[type[nn.Module], type[CheckpointedBlock]]

    @classmethod
    def from_block(cls, block: nn.Module) -> CheckpointedBlock:
        """An instance of this class holding ``block``'s own attributes, submodules, parameters and
        buffers (their registries copied, so changing one module leaves the other)."""
        new = cls.__new__(cls)
        new.__dict__.update({k: v.copy() if isinstance(v, (dict, set)) else v for k, v in vars(block).items()})
        return new

    def checkpoint_arguments(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple, dict]:
        """The arguments the checkpointed forward is called with (a subclass drops what a second
        forward must not see, such as a Hugging Face cache); by default those it was given."""
        return args, kwargs

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled():
            return super().forward(*args, **kwargs)
        args, kwargs = self.checkpoint_arguments(args, kwargs)
        return checkpoint(
            super().forward,
            *args,
            use_reentrant=False,
            preserve_rng_state=True,
            context_fn=functools.partial(_contexts, self),
            **kwargs,
        )

    def __reduce_ex__(self, protocol: Any) -> Any:
        # A class made at run time cannot be pickled by its name: pickle (torch.save(model),
        # copy.deepcopy) rebuilds it from the block's class instead.
        made_from = getattr(type(self), "_checkpointed_from", None)
        if made_from is None or type(self) is not checkpointed_class(*made_from):  # a subclass (FSDP's)
            return super().__reduce_ex__(protocol)
        return (_new_checkpointed, made_from, self.__getstate__())


def checkpointed_class(cls: type[nn.Module], mixin: type[CheckpointedBlock] = CheckpointedBlock) -> type:
    """The checkpointed class of block class ``cls``: ``Checkpointed<Name>``, deriving from
    ``mixin`` (:class:`CheckpointedBlock`, or a subclass of it) and ``cls``; made once per class."""
    return _make_checkpointed_class(cls, mixin)


@functools.cache
def _make_checkpointed_class(cls: type[nn.Module], mixin: type[CheckpointedBlock]) -> type:
    name = f"Checkpointed{cls.__name__}"
    made = type(name, (mixin, cls), {"__module__": __name__, "__qualname__": name, "__doc__": cls.__doc__})
    made._checkpointed_from = (cls, mixin)
    return made


def _new_checkpointed(cls: type[nn.Module], mixin: type[CheckpointedBlock]) -> CheckpointedBlock:
    made = checkpointed_class(cls, mixin)
    return made.__new__(made)


def _held_generators(block: nn.Module) -> list[torch.Generator]:
    """The ``torch.Generator`` objects the block's modules hold as attributes, each once."""
    found: dict[int, torch.Generator] = {}
    for module in block.modules():
        for value in vars(module).values():
            if isinstance(value, torch.Generator):
                found.setdefault(id(value), value)
    return list(found.values())


def _running_stats(block: nn.Module) -> list[torch.Tensor]:
    from torch.nn.modules.batchnorm import _NormBase

    stats = []
    for module in block.modules():
        if isinstance(module, _NormBase) and module.track_running_stats:
            stats += [t for t in (module.running_mean, module.running_var, module.num_batches_tracked) if t is not None]
    return stats


class _Recomputation:
    """The context the recomputation runs in: the block's generators as they were when its forward
    began, and, on leaving, the generators and the norm layers' running statistics as they were
    before it. Reusable (a second backward through a kept graph recomputes again)."""

    def __init__(self, block: nn.Module, generators: list[torch.Generator], states: list[torch.Tensor]):
        self.block, self.generators, self.states = block, generators, states
        self.saved: list[tuple[list[torch.Tensor], list[tuple[torch.Tensor, torch.Tensor]]]] = []

    def __enter__(self) -> None:
        now = [g.get_state() for g in self.generators]
        with torch.no_grad():
            stats = [(t, t.clone()) for t in _running_stats(self.block)]
        self.saved.append((now, stats))
        for generator, state in zip(self.generators, self.states, strict=True):
            generator.set_state(state)

    def __exit__(self, *exc: Any) -> None:
        now, stats = self.saved.pop()
        for generator, state in zip(self.generators, now, strict=True):
            generator.set_state(state)
        with torch.no_grad():
            for tensor, before in stats:
                tensor.copy_(before)


def _contexts(block: nn.Module) -> tuple[Any, _Recomputation]:
    """``context_fn`` of :func:`torch.utils.checkpoint.checkpoint`, called as the forward begins:
    nothing around the forward, :class:`_Recomputation` around the recomputation."""
    generators = _held_generators(block)
    return contextlib.nullcontext(), _Recomputation(block, generators, [g.get_state() for g in generators])


@preserves_parameters  # the block's own parameters and submodules, the same function: a frozen block is fine
def checkpoint_block(block: nn.Module, index: int, every_n_blocks: int = 1) -> nn.Module | None:
    """The policy of :data:`registry`: ``block`` as an instance of ``checkpointed_class(type(block))``
    (:class:`CheckpointedBlock`), or ``None`` (keep it) where ``index`` (which block of its class
    this is, from 0, in the order the model holds them) is not a multiple of ``every_n_blocks`` or
    the block is checkpointed already. Register a block class of your own with it:
    ``registry.register(YourBlock, checkpoint_block)``.
    """
    if isinstance(block, CheckpointedBlock) or index % every_n_blocks:
        return None
    return checkpointed_class(type(block)).from_block(block)


@preserves_parameters
def _from_transformers(block: nn.Module, index: int, every_n_blocks: int = 1) -> nn.Module | None:
    """:func:`checkpoint_block` for a Hugging Face layer, whose checkpointed class drops the cache
    (:mod:`algorithms.activation_checkpointing._transformers`, imported when a model first holds one)."""
    from ._transformers import CheckpointedLayer

    if isinstance(block, CheckpointedBlock) or index % every_n_blocks:
        return None
    return checkpointed_class(type(block), CheckpointedLayer).from_block(block)


#: The blocks :func:`apply_activation_checkpointing` checkpoints, each with its policy, called as
#: ``policy(module, index, every_n_blocks=...)``: the project's ResNet blocks and transformer block,
#: torchvision's and timm's ResNet blocks, and Hugging Face GPT-2's, BERT's and RoBERTa's layers
#: (those libraries are imported only where a model holds their classes). Register your own block
#: class with ``registry.register(YourBlock, checkpoint_block)``.
registry = Registry("apply_activation_checkpointing", "algorithms.activation_checkpointing.registry")
for _block in (BasicBlock, Bottleneck, TransformerBlock):
    registry.register(_block, checkpoint_block)
for _path in (
    "torchvision.models.resnet.BasicBlock",
    "torchvision.models.resnet.Bottleneck",
    "timm.models.resnet.BasicBlock",
    "timm.models.resnet.Bottleneck",
):
    registry.register(_path, checkpoint_block)
for _path in (
    "gpt2.modeling_gpt2.GPT2Block",
    "bert.modeling_bert.BertLayer",
    "roberta.modeling_roberta.RobertaLayer",
):
    registry.register(f"transformers.models.{_path}", _from_transformers)
del _block, _path


def _refuse_sharded(model: nn.Module) -> None:
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # pragma: no cover - torch without distributed
        return
    if any(isinstance(m, FSDPModule) for m in model.modules()):
        raise ValueError(
            "model: is already sharded with fully_shard; apply activation checkpointing before sharding it "
            "(the Trainer does it at Event.INIT)"
        )


def apply_activation_checkpointing(model: nn.Module, every_n_blocks: int = 1) -> nn.Module:
    """Checkpoint the repeated blocks of ``model``, in place: each block :data:`registry` knows runs
    its forward under ``torch.utils.checkpoint.checkpoint(..., use_reentrant=False)``
    (:class:`CheckpointedBlock`), so the backward pass recomputes the activations inside it
    instead of keeping them. The loss, the gradients and the running statistics are those of the
    model without it; the memory kept for the backward pass falls from every activation inside
    the blocks to their inputs, for one more forward pass of each block in the backward pass.

    The blocks it knows: ``BasicBlock``, ``Bottleneck`` and ``TransformerBlock`` of
    :mod:`algorithms.models`, ``BasicBlock`` and ``Bottleneck`` of ``torchvision.models.resnet``
    and ``timm.models.resnet``, and Hugging Face transformers' ``GPT2Block``, ``BertLayer`` and
    ``RobertaLayer`` (which are given no cache while checkpointed, as Hugging Face's own gradient
    checkpointing does). A block class of your own: ``registry.register(YourBlock, checkpoint_block)``.

    Apply it before the model is wrapped or sharded (DDP, ``fully_shard``), as the Trainer does at
    ``Event.INIT``: FSDP2 then shards the layers inside the checkpointed blocks, and gathers their
    weights again for the recomputation.

    Args:
        model: the model to change; blocks already checkpointed are left as they are.
        every_n_blocks: checkpoint the first block of each class and every ``every_n_blocks``-th
            one after it (in the order the model holds them); 1 checkpoints every block.

    Returns:
        ``model``, changed; it warns (:class:`~algorithms.surgery.NoModulesReplacedWarning`) when
        it holds no such block, naming the classes it knows and how to register one.

    Raises:
        TypeError: ``model`` is not a ``torch.nn.Module``.
        ValueError: ``every_n_blocks`` is not an integer of at least 1, or ``model`` is already
            wrapped (DataParallel, DDP) or sharded (FSDP).

    Example::

        >>> import torch
        >>> import algorithms.functional as cf
        >>> from algorithms.models import resnet20
        >>> model = cf.apply_activation_checkpointing(resnet20())
        >>> type(model.layer1[0]).__name__, sorted(model.state_dict()) == sorted(resnet20().state_dict())
        ('CheckpointedBasicBlock', True)
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model: must be a torch.nn.Module, got {type(model).__name__}")
    PARAMETERS.check(every_n_blocks=every_n_blocks)
    _refuse_sharded(model)
    registry.apply(model, every_n_blocks=every_n_blocks)
    return model


class ActivationCheckpointing(Algorithm):
    """Activation checkpointing as a training-loop algorithm: at ``Event.INIT``, before the Trainer
    wraps or shards the model, :func:`apply_activation_checkpointing` checkpoints its blocks.

    Args:
        every_n_blocks: checkpoint the first block of each class and every ``every_n_blocks``-th
            one after it; 1 checkpoints every block.

    It counts ``blocks_checkpointed``; none means it did not act.

    Example::

        >>> import torch
        >>> from algorithms import ActivationCheckpointing
        >>> from algorithms.core import Trainer
        >>> from algorithms.models import resnet20
        >>> batches = [(torch.randn(4, 3, 16, 16), torch.randint(0, 10, (4,)))]
        >>> trainer = Trainer(resnet20(), batches, "1ep", algorithms=[ActivationCheckpointing()], seed=0)
        >>> trainer.fit()
        >>> trainer.method_log.records["ActivationCheckpointing"]["activity"]
        {'blocks_checkpointed': 9}
    """

    activity = {"blocks_checkpointed": "blocks whose activations are recomputed in the backward pass"}

    def __init__(self, every_n_blocks: int = 1):
        PARAMETERS.check(every_n_blocks=every_n_blocks)
        self.every_n_blocks = every_n_blocks

    def match(self, event: Event, state: State) -> bool:
        return event is Event.INIT

    def apply(self, event: Event, state: State, logger: Any | None = None) -> None:
        with recording_replacements() as replaced:
            apply_activation_checkpointing(state.model, self.every_n_blocks)
        self.report(logger, "blocks_checkpointed", len(replaced))
