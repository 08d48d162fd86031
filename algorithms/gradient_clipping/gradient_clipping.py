"""Gradient clipping: bound the gradients before each optimizer step, by their total norm, by each
value, or adaptively, each unit's gradient norm relative to its weights' (AGC).

Adaptive gradient clipping: Brock, De, Smith and Simonyan, "High-Performance Large-Scale Image
Recognition Without Normalization", ICML 2021.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from ..core.algorithm import Algorithm
from ..core.event import Event
from ..core.parameters import Choice, Parameters, Real
from ..core.state import State

__all__ = ["CLIPPING_TYPES", "GradientClipping", "apply_gradient_clipping"]

CLIPPING_TYPES = ("adaptive", "norm", "value")

PARAMETERS = Parameters(
    clipping_type=Choice(
        choices=CLIPPING_TYPES, note="Clip the total norm, each value, or each unit's norm relative to its weight's."
    ),
    clipping_threshold=Real(
        low=0,
        low_open=True,
        note="The largest total norm, value, or ratio of a unit's gradient norm to its weight norm.",
    ),
)
#: The paper's floor on a unit's weight norm, so units initialised at zero can still move.
AGC_EPSILON = 1e-3


def apply_gradient_clipping(
    model: torch.nn.Module, clipping_type: str, clipping_threshold: float, fsdp_enabled: bool = False
) -> None:
    """Clip the gradients of ``model``'s parameters in place, as
    ``composer.functional.apply_gradient_clipping``.

    - ``"norm"``: scale all gradients together so their total L2 norm is at most
      ``clipping_threshold`` (``torch.nn.utils.clip_grad_norm_``).
    - ``"value"``: clamp every element to ``[-clipping_threshold, clipping_threshold]``
      (``torch.nn.utils.clip_grad_value_``).
    - ``"adaptive"`` (AGC): scale each unit's gradient ``G_u`` (a row of a weight: one output
      channel or feature; a bias or other 1-D parameter is one unit) by
      ``min(1, clipping_threshold * max(||W_u||, 1e-3) / ||G_u||)``.

    Args:
        model: the model whose ``.grad`` tensors are clipped (unscaled, and under DDP already
            averaged over the processes).
        clipping_type: ``"norm"``, ``"value"`` or ``"adaptive"``.
        clipping_threshold: the total norm, the largest value, or the ratio of gradient to weight
            norm, ``> 0``.
        fsdp_enabled: the model is sharded by FSDP: the norm is taken over every shard (FSDP's own
            ``clip_grad_norm_`` on each outermost ``FullyShardedDataParallel`` module, so a model
            with several such roots clips each root's norm, as Composer does; the sharded
            gradients' own norm under ``fully_shard``, the whole model's), values are clamped shard by shard;
            ``"adaptive"`` is refused, as in Composer.

    Example::

        >>> import torch
        >>> from algorithms.functional import apply_gradient_clipping
        >>> model = torch.nn.Linear(4, 2)
        >>> model(torch.randn(3, 4)).sum().mul(100).backward()
        >>> apply_gradient_clipping(model, "norm", 1.0, fsdp_enabled=False)
        >>> round(float(torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])), 4)
        1.0
    """
    PARAMETERS.check(clipping_type=clipping_type, clipping_threshold=clipping_threshold)
    if fsdp_enabled and clipping_type == "adaptive":
        raise ValueError(
            "clipping_type='adaptive': not with fsdp_enabled (a unit's gradient may span shards) "
            "— use 'norm' or 'value'"
        )
    params = [p for p in model.parameters() if p.grad is not None]
    if not params:
        return
    if clipping_type == "adaptive":
        _apply_agc(params, clipping_threshold)
    elif clipping_type == "value":  # element by element: exact on FSDP's shards too
        torch.nn.utils.clip_grad_value_(params, clip_value=clipping_threshold)
    elif fsdp_enabled and _fsdp1_roots(model):
        for root in _fsdp1_roots(model):
            root.clip_grad_norm_(max_norm=clipping_threshold)
    else:  # under fully_shard the gradients are DTensors, and their norm is the whole model's
        torch.nn.utils.clip_grad_norm_(params, max_norm=clipping_threshold)


def unitwise_norm(tensor: torch.Tensor) -> torch.Tensor:
    """The L2 norm of each unit of a parameter (or its gradient), broadcastable against it: over
    everything but the first dimension for 2-D and larger tensors (per output channel or row),
    over the whole tensor for 0-D and 1-D ones."""
    if tensor.ndim <= 1:
        return torch.linalg.vector_norm(tensor)
    return torch.linalg.vector_norm(tensor, dim=tuple(range(1, tensor.ndim)), keepdim=True)


def _apply_agc(parameters: Iterable[torch.Tensor], clipping_threshold: float) -> None:
    """AGC on ``parameters``, each of which has a gradient."""
    for p in parameters:
        grad = p.grad.detach()
        max_norm = unitwise_norm(p.detach()).clamp_min(AGC_EPSILON) * clipping_threshold
        grad_norm = unitwise_norm(grad)
        # min(1, max_norm / ||G||); a zero gradient stays zero (its ratio is large, clamped to 1)
        grad.mul_((max_norm / grad_norm.clamp_min(1e-6)).clamp_max(1.0))


def _fsdp1_roots(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The outermost ``FullyShardedDataParallel`` modules (FSDP's clip_grad_norm_ runs on a root)."""
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel
    except ImportError:  # pragma: no cover - torch without distributed
        return []
    roots, inside = [], set()
    for name, module in model.named_modules():
        if isinstance(module, FullyShardedDataParallel) and not any(name.startswith(p) for p in inside):
            roots.append(module)
            inside.add(name + "." if name else "")
    return roots


def is_fsdp(model: torch.nn.Module) -> bool:
    """Whether FSDP shards ``model`` (``fully_shard`` or ``FullyShardedDataParallel``)."""
    try:
        from torch.distributed.fsdp import FSDPModule, FullyShardedDataParallel
    except ImportError:  # pragma: no cover
        return False
    return any(isinstance(m, (FSDPModule, FullyShardedDataParallel)) for m in model.modules())


class GradientClipping(Algorithm):
    """Gradient clipping in the Trainer: at ``Event.BEFORE_OPTIMIZER_STEP``, where the Trainer has
    unscaled the gradients (``amp_fp16``) and DDP has averaged them, it calls
    :func:`apply_gradient_clipping` on the model, with ``fsdp_enabled`` where FSDP shards it.

    Args:
        clipping_type: ``"norm"``, ``"value"`` or ``"adaptive"``.
        clipping_threshold: the total norm, the largest value, or the largest ratio of a unit's
            gradient norm to its weight norm, ``> 0``.

    It counts ``steps_clipped``, the optimizer steps whose gradients went through the clipping;
    none means it did not act. Whether a gradient was over the threshold is not counted: that
    would make the host wait for the device at every step.

    Example::

        >>> import torch
        >>> from algorithms import GradientClipping
        >>> from algorithms.core import Trainer
        >>> batches = [(torch.randn(8, 5), torch.randint(0, 3, (8,)))]
        >>> Trainer(torch.nn.Linear(5, 3), batches, "1ep",
        ...         algorithms=[GradientClipping("norm", 1.0)]).fit()
    """

    activity = {"steps_clipped": "optimizer steps whose gradients went through the clipping"}

    def __init__(self, clipping_type: str, clipping_threshold: float):
        PARAMETERS.check(clipping_type=clipping_type, clipping_threshold=clipping_threshold)
        self.clipping_type = clipping_type
        self.clipping_threshold = clipping_threshold

    def match(self, event: Event, state: State) -> bool:
        return event is Event.BEFORE_OPTIMIZER_STEP

    def apply(self, event: Event, state: State, logger: Any | None = None) -> None:
        apply_gradient_clipping(
            state.model, self.clipping_type, self.clipping_threshold, fsdp_enabled=is_fsdp(state.model)
        )
        if any(p.grad is not None for p in state.model.parameters()):
            self.report(logger, "steps_clipped")
