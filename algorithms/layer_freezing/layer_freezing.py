"""Layer freezing: stop training the earliest layers progressively during the last part of
training, which saves their backward and optimizer work.

After FreezeOut (Brock, Lim, Ritchie and Weston, 2017) and Freeze Training (Raghu, Gilmer,
Yosinski and Sohl-Dickstein, SVCCA, 2017), with Composer's linear schedule.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from ..core.algorithm import Algorithm
from ..core.event import Event
from ..core.parameters import Parameters, Real
from ..core.state import State

__all__ = ["LayerFreezing", "freeze_layers"]

PARAMETERS = Parameters(
    freeze_start=Real(low=0, high=1, high_open=True, note="The fraction of training before freezing begins."),
    freeze_level=Real(low=0, high=1, note="The fraction of the layers frozen by the end of training."),
)
#: The functional form's own argument.
_PROGRESS = Real(low=0, high=1, note="The fraction of training done.")

log = logging.getLogger(__name__)


def freeze_layers(
    model: torch.nn.Module,
    optimizers: torch.optim.Optimizer | Sequence[torch.optim.Optimizer] | None,
    current_duration: float,
    freeze_start: float = 0.5,
    freeze_level: float = 1.0,
) -> tuple[int, float]:
    """Freeze the earliest layers of ``model`` in place, as ``composer.functional.freeze_layers``.

    The layers are the modules without children that hold parameters, in definition order
    (depth first). The fraction to freeze is :func:`freeze_schedule`: 0 until ``freeze_start``,
    then linear up to ``freeze_level`` at the end of training. The first
    ``int(fraction * (layers - 1))`` layers are frozen (the last layer, the classifier, never is):
    their parameters get ``requires_grad=False`` and no gradient, and leave every optimizer's
    parameter groups and state, so neither momentum nor weight decay moves them. Freezing only
    grows: a layer frozen earlier stays frozen.

    Args:
        model: the model being trained.
        optimizers: the optimizer or optimizers training it, or ``None``.
        current_duration: the fraction of training done, in ``[0, 1]``.
        freeze_start: the fraction of training before freezing begins, in ``[0, 1)``.
        freeze_level: the fraction of the layers frozen at the end of training, in ``[0, 1]``.

    Returns:
        ``(freeze_depth, freeze_percentage)``: how many layers the schedule freezes now, and the
        scheduled fraction of the layers.

    Example::

        >>> import torch
        >>> from algorithms.functional import freeze_layers
        >>> model = torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(5)])
        >>> opt = torch.optim.SGD(model.parameters(), lr=0.1)
        >>> freeze_layers(model, opt, current_duration=0.75, freeze_start=0.5, freeze_level=1.0)
        (2, 0.5)
        >>> [p.requires_grad for p in model[1].parameters()], len(opt.param_groups[0]["params"])
        ([False, False], 6)
    """
    fraction = freeze_schedule(current_duration, freeze_start, freeze_level)
    layers = _layers(model)
    depth = int(fraction * (len(layers) - 1)) if layers else 0
    if optimizers is None:
        optimizers = ()
    elif isinstance(optimizers, torch.optim.Optimizer):
        optimizers = (optimizers,)
    _freeze(layers[:depth], optimizers)
    log.info(
        "layer freezing (freeze_start=%s, freeze_level=%s): %d of %d layers frozen (%.1f %% scheduled)",
        freeze_start,
        freeze_level,
        depth,
        len(layers),
        100 * fraction,
    )
    return depth, fraction


def freeze_schedule(current_duration: float, freeze_start: float = 0.5, freeze_level: float = 1.0) -> float:
    """The fraction of the layers to freeze at ``current_duration``: 0 up to ``freeze_start``, then
    ``freeze_level * (current_duration - freeze_start) / (1 - freeze_start)``."""
    PARAMETERS.check(freeze_start=freeze_start, freeze_level=freeze_level)
    _PROGRESS.check("current_duration", current_duration)
    if current_duration <= freeze_start:
        return 0.0
    return freeze_level * (current_duration - freeze_start) / (1.0 - freeze_start)


def _layers(module: torch.nn.Module) -> list[torch.nn.Module]:
    """The modules without children that hold parameters, depth first in definition order."""
    children = list(module.children())
    if not children:
        return [module] if any(True for _ in module.parameters(recurse=False)) else []
    return [layer for child in children for layer in _layers(child)]


def _freeze(layers: Sequence[torch.nn.Module], optimizers: Sequence[torch.optim.Optimizer]) -> None:
    """Take ``layers``' parameters out of ``optimizers`` (groups and state), and stop their gradients."""
    frozen = [p for layer in layers for p in layer.parameters()]
    _remove_from_optimizers(frozen, optimizers)
    for p in frozen:
        p.requires_grad_(False)
        p.grad = None


def _remove_from_optimizers(params: list[torch.Tensor], optimizers: Sequence[torch.optim.Optimizer]) -> None:
    gone = {id(p) for p in params}
    for opt in optimizers:
        for group in opt.param_groups:
            group["params"] = [p for p in group["params"] if id(p) not in gone]
        for p in params:
            opt.state.pop(p, None)


class LayerFreezing(Algorithm):
    """Layer freezing in the Trainer: at the end of every epoch (``Event.EPOCH_END``) it calls
    :func:`freeze_layers` with the fraction of training done, so from ``freeze_start`` on the
    earliest layers stop training, a growing share of them each epoch.

    Args:
        freeze_start: the fraction of training before freezing begins, in ``[0, 1)``.
        freeze_level: the fraction of the layers frozen at the end of training, in ``[0, 1]``.

    It counts ``layers_frozen``: the layers it froze while training remained. Layers frozen at the
    end of the last epoch change nothing that was trained and are not counted, so in a one-epoch
    run it does not act; none means it did not act.

    Its state (:meth:`state_dict`) is ``frozen_layers``: how many of the earliest layers it has
    frozen. A run resumed from a checkpoint freezes them again at ``Event.FIT_START`` (their
    ``requires_grad`` and gradients); the optimizers' parameter groups, which it shrank, are the
    checkpoint's to put back (``State.load_state_dict``), before their state is loaded.

    Example::

        >>> import torch
        >>> from algorithms import LayerFreezing
        >>> from algorithms.core import Trainer
        >>> model = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
        >>> batches = [(torch.randn(8, 5), torch.randint(0, 3, (8,)))]
        >>> Trainer(model, batches, "4ep", algorithms=[LayerFreezing(freeze_start=0.25)]).fit()
        >>> model[0].weight.requires_grad
        False
    """

    #: Frozen layers get no gradient, so under DDP the Trainer must look for unused parameters.
    unused_parameters = True

    activity = {"layers_frozen": "layers frozen while training remained"}
    #: How many of the earliest layers it has frozen, and whether a loaded state still has to
    #: freeze them in this run's model.
    _frozen_layers = 0
    _refreeze = False

    def __init__(self, freeze_start: float = 0.5, freeze_level: float = 1.0):
        PARAMETERS.check(freeze_start=freeze_start, freeze_level=freeze_level)
        self.freeze_start = freeze_start
        self.freeze_level = freeze_level

    def match(self, event: Event, state: State) -> bool:
        return event is Event.EPOCH_END or (self._refreeze and event is Event.FIT_START)

    def apply(self, event: Event, state: State, logger: Any | None = None) -> None:
        if event is Event.FIT_START:  # resumed: the layers the checkpoint's run had frozen
            _freeze(_layers(state.model)[: self._frozen_layers], state.optimizers)
            self._refreeze = False
            return
        progress = state.progress()
        trainable = [any(p.requires_grad for p in layer.parameters()) for layer in _layers(state.model)]
        depth, _ = freeze_layers(state.model, state.optimizers, progress, self.freeze_start, self.freeze_level)
        self._frozen_layers = max(self._frozen_layers, depth)
        if progress < 1:
            self.report(logger, "layers_frozen", sum(trainable[:depth]))

    def reset(self) -> None:
        super().reset()
        self._frozen_layers, self._refreeze = 0, False

    def state_dict(self) -> dict[str, Any]:
        """The base's state and ``frozen_layers``: how many of the earliest layers are frozen."""
        return {**super().state_dict(), "frozen_layers": self._frozen_layers}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self._frozen_layers = int(state_dict.get("frozen_layers", 0))
        self._refreeze = self._frozen_layers > 0

    def _state_keys(self) -> set[str]:
        return super()._state_keys() | {"frozen_layers"}
