"""Weight Standardization: every convolution computes with its filters standardized to mean 0 and variance 1.

Qiao, Wang, Liu, Shen and Yuille, "Micro-Batch Training with Batch-Channel Normalization and
Weight Standardization", 2019.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.utils.parametrize as parametrize
from torch import nn

from ..core.algorithm import Algorithm, warn_from_callers_line
from ..core.event import Event
from ..core.parameters import Integer, Parameters
from ..core.state import State
from ..surgery import count_module_instances, recording_replacements, replace_module_classes

__all__ = [
    "EPS",
    "WeightStandardization",
    "WeightStandardizer",
    "apply_weight_standardization",
    "standardize_weight",
]

PARAMETERS = Parameters(
    n_last_layers_ignore=Integer(low=0, note="How many convolutions at the end of the forward to leave as they are.")
)

#: Added to each filter's variance before the square root, as in Composer.
EPS = 1e-10

_CONVS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)


def apply_weight_standardization(module: nn.Module, n_last_layers_ignore: int = 0) -> int:
    """Standardize the weight of every ``Conv1d/2d/3d`` of ``module`` but the last
    ``n_last_layers_ignore``, in place, as ``composer.functional.apply_weight_standardization``.

    Each convolution's ``weight`` becomes a parametrization (``torch.nn.utils.parametrize``) of
    the trained tensor ``W``: per output filter ``o``,
    ``(W[o] - mean(W[o])) / sqrt(var(W[o]) + EPS)``, the mean and (biased) variance over the
    filter's input channels and kernel positions. The trained tensor is the original parameter
    itself (now ``parametrizations.weight.original``), so optimizers built before keep it.

    "Last" is in the order the forward calls the convolutions, read from a ``torch.fx`` trace of
    ``module``; a module that cannot be traced falls back, with a warning, to the order it
    defines them in.

    Args:
        module: the model to change, in place.
        n_last_layers_ignore: how many convolutions at the end of the forward to leave as they
            are, ``>= 0``.

    Returns:
        How many convolutions were standardized (a warning says so when none was).

    Example::

        >>> import torch
        >>> import algorithms.functional as cf
        >>> model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 1))
        >>> cf.apply_weight_standardization(model, n_last_layers_ignore=1)
        1
        >>> var, mean = torch.var_mean(model[0].weight, dim=(1, 2, 3), correction=0)
        >>> bool(mean.abs().max() < 1e-6), bool((var - 1).abs().max() < 1e-5)
        (True, True)
    """
    PARAMETERS.check(n_last_layers_ignore=n_last_layers_ignore)
    ignored = _ignore_rule(module, n_last_layers_ignore)
    position = itertools.count()

    def standardized(conv: nn.Module, index: int) -> nn.Module | None:
        at = next(position)  # across the three classes, in the helper's walk order
        if _standardized(conv) or ignored(conv, at):
            return None
        # The helper replaces a module with what its policy returns (the module itself counts as
        # kept), so the parametrization goes on a copy that shares every parameter and buffer
        # tensor of the original (the memo makes deepcopy reuse them); registering it swaps the
        # copy's class for torch's ParametrizedConv2d (or 1d, 3d).
        new = copy.deepcopy(conv, memo={id(t): t for t in itertools.chain(conv.parameters(), conv.buffers())})
        parametrize.register_parametrization(new, "weight", WeightStandardizer())
        return new

    return len(replace_module_classes(module, dict.fromkeys(_CONVS, standardized), method="WeightStandardization"))


def _standardized(conv: nn.Module) -> bool:
    return parametrize.is_parametrized(conv, "weight") and any(
        isinstance(p, WeightStandardizer) for p in conv.parametrizations.weight
    )


def _ignore_rule(module: nn.Module, n: int) -> Callable[[nn.Module, int], bool]:
    """Whether a convolution (at a position of the helper's walk) is one of the last ``n`` the
    forward calls, read from an fx trace; where the module cannot be traced, one of the last ``n``
    the walk meets."""
    if n == 0:
        return lambda conv, at: False
    try:
        graph = torch.fx.symbolic_trace(module).graph
    except Exception:  # noqa: BLE001 - whatever stops the trace, fall back to the definition order
        warn_from_callers_line(
            f"WeightStandardization: the model could not be traced with torch.fx, so "
            f"n_last_layers_ignore={n} leaves the last {n} convolutions in the order the model "
            "defines them, which may not be the order its forward calls them"
        )
        first = count_module_instances(module, _CONVS) - n
        return lambda conv, at: at >= first
    called: list[nn.Module] = []
    for node in graph.nodes:
        if node.op == "call_module":
            conv = module.get_submodule(node.target)
            if isinstance(conv, _CONVS) and all(conv is not seen for seen in called):
                called.append(conv)
    last = {id(conv) for conv in called[-n:]}
    return lambda conv, at: id(conv) in last


def standardize_weight(weight: torch.Tensor) -> torch.Tensor:
    """Each output filter ``weight[o]`` minus its mean, over the square root of its biased
    variance plus :data:`EPS`; half-precision weights are standardized in float32 and cast back."""
    w = weight.float() if weight.dtype in (torch.float16, torch.bfloat16) else weight
    var, mean = torch.var_mean(w, dim=tuple(range(1, w.ndim)), keepdim=True, correction=0)
    return ((w - mean) / torch.sqrt(var + EPS)).to(weight.dtype)


class WeightStandardizer(nn.Module):
    """The parametrization :func:`apply_weight_standardization` registers: :func:`standardize_weight`."""

    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        return standardize_weight(weight)


class WeightStandardization(Algorithm):
    """Weight Standardization in the Trainer: at ``Event.INIT``, :func:`apply_weight_standardization`
    parametrizes the model's convolutions; the trained tensors stay the same parameters, so the
    Trainer's optimizer (if already built) trains them.

    Args:
        n_last_layers_ignore: how many convolutions at the end of the forward to leave as they
            are, ``>= 0``.

    It counts ``modules_replaced``, the convolutions it gave standardized weights; none means it did not act.

    Example::

        >>> import torch
        >>> from algorithms import WeightStandardization
        >>> from algorithms.core import Trainer
        >>> model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.GroupNorm(2, 8), torch.nn.Flatten(),
        ...                             torch.nn.Linear(8 * 2 * 2, 10))
        >>> batches = [(torch.randn(4, 3, 4, 4), torch.randint(0, 10, (4,)))]
        >>> Trainer(model, batches, "1ep", algorithms=[WeightStandardization()], seed=0).fit()
    """

    activity = {"modules_replaced": "convolutions given standardized weights"}

    def __init__(self, n_last_layers_ignore: int = 0):
        PARAMETERS.check(n_last_layers_ignore=n_last_layers_ignore)
        self.n_last_layers_ignore = n_last_layers_ignore

    def match(self, event: Event, state: State) -> bool:
        return event is Event.INIT

    def apply(self, event: Event, state: State, logger: Any | None = None) -> None:
        with recording_replacements() as replaced:
            apply_weight_standardization(state.model, n_last_layers_ignore=self.n_last_layers_ignore)
        self.report(logger, "modules_replaced", len(replaced))
