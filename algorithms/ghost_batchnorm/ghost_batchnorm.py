"""Ghost BatchNorm: batch normalization over small "ghost" batches of a large training batch.

Hoffer, Hubara and Soudry, "Train longer, generalize better: closing the generalization gap in
large batch training of neural networks", 2017.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..core.algorithm import Algorithm
from ..core.event import Event
from ..core.parameters import Integer, Parameters
from ..core.state import State
from ..surgery import recording_replacements, replace_module_classes

__all__ = [
    "GhostBatchNorm",
    "GhostBatchNorm1d",
    "GhostBatchNorm2d",
    "GhostBatchNorm3d",
    "apply_ghost_batchnorm",
]

PARAMETERS = Parameters(ghost_batch_size=Integer(low=1, note="The most examples a ghost batch holds."))


def apply_ghost_batchnorm(
    model: nn.Module,
    ghost_batch_size: int = 32,
    optimizers: torch.optim.Optimizer | Iterable[torch.optim.Optimizer] | None = None,
) -> int:
    """Replace every ``BatchNorm1d/2d/3d`` of ``model`` with a ghost batch norm, in place, as
    ``composer.functional.apply_ghost_batchnorm``.

    In training, a replacement splits its batch (dim 0) into the fewest chunks of at most
    ``ghost_batch_size`` examples, sizes as equal as possible, and normalizes each chunk with its
    own mean and variance; a batch of ``ghost_batch_size`` or fewer is one chunk, exactly batch
    norm. In eval it is the original batch norm, running statistics and all. The replacement
    keeps the original's weight, bias and running-statistics tensors themselves, so an optimizer
    keeps its state for them.

    Args:
        model: the model to change, in place.
        ghost_batch_size: the most examples a ghost batch holds, ``>= 1``.
        optimizers: optimizers already built over ``model.parameters()``; they go on holding the
            same weight and bias tensors.

    Returns:
        How many batch norms were replaced (a warning says so when none was).

    Example::

        >>> import torch
        >>> import algorithms.functional as cf
        >>> model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8))
        >>> cf.apply_ghost_batchnorm(model, ghost_batch_size=16), type(model[1]).__name__
        (1, 'GhostBatchNorm2d')
    """
    PARAMETERS.check(ghost_batch_size=ghost_batch_size)

    def ghost(bn: nn.Module, index: int) -> nn.Module | None:
        # Exact classes only: a subclass (a ghost batch norm already, or someone's own batch norm
        # with a forward of its own) is left as it is.
        cls = _GHOST.get(type(bn))
        return None if cls is None else cls.from_batchnorm(bn, ghost_batch_size)

    policies = dict.fromkeys(_GHOST, ghost)
    return len(replace_module_classes(model, policies, optimizers=optimizers, method="GhostBatchNorm"))


class _GhostBatchNormMixin:
    """The forward shared by the three ghost batch norms; the rest is torch's ``_BatchNorm``."""

    ghost_batch_size: int

    @classmethod
    def from_batchnorm(cls, bn: nn.modules.batchnorm._BatchNorm, ghost_batch_size: int) -> nn.Module:
        """A ghost batch norm that holds ``bn``'s own parameter and buffer tensors."""
        ghost = cls(
            bn.num_features,
            eps=bn.eps,
            momentum=bn.momentum,
            affine=bn.affine,
            track_running_stats=bn.track_running_stats,
            device="meta",
        )
        for name in ("weight", "bias"):
            setattr(ghost, name, getattr(bn, name))
        for name in ("running_mean", "running_var", "num_batches_tracked"):
            setattr(ghost, name, getattr(bn, name))
        ghost.ghost_batch_size = ghost_batch_size
        return ghost.train(bn.training)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        n = input.shape[0]
        if not self.training or n <= self.ghost_batch_size:
            return super().forward(input)  # eval, or one chunk: the original batch norm, exactly
        self._check_input_dim(input)
        chunks = input.tensor_split(math.ceil(n / self.ghost_batch_size))
        if not self.track_running_stats:
            return torch.cat([F.batch_norm(c, None, None, self.weight, self.bias, True, 0.0, self.eps) for c in chunks])
        # Each chunk's mean and unbiased variance land in its own row (momentum 1 writes the
        # statistic itself), so the kernel that normalizes also measures, in one pass.
        means = self.running_mean.new_zeros(len(chunks), self.num_features)
        variances = self.running_var.new_zeros(len(chunks), self.num_features)
        out = torch.cat(
            [
                F.batch_norm(c, means[i], variances[i], self.weight, self.bias, True, 1.0, self.eps)
                for i, c in enumerate(chunks)
            ]
        )
        with torch.no_grad():
            # One step of the running averages with the chunks' mean statistics, where torch's
            # batch norm takes the whole batch's; the factor stays a tensor (no host sync), 1/t
            # taken in the statistics' dtype (an integer's reciprocal would be float32).
            self.num_batches_tracked.add_(1)
            factor = (
                self.momentum
                if self.momentum is not None
                else self.num_batches_tracked.to(self.running_mean.dtype).reciprocal()
            )
            self.running_mean.lerp_(means.mean(dim=0), factor)
            self.running_var.lerp_(variances.mean(dim=0), factor)
        return out

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, ghost_batch_size={self.ghost_batch_size}"


class GhostBatchNorm1d(_GhostBatchNormMixin, nn.BatchNorm1d):
    """:class:`torch.nn.BatchNorm1d` over ghost batches in training; see :func:`apply_ghost_batchnorm`."""


class GhostBatchNorm2d(_GhostBatchNormMixin, nn.BatchNorm2d):
    """:class:`torch.nn.BatchNorm2d` over ghost batches in training; see :func:`apply_ghost_batchnorm`."""


class GhostBatchNorm3d(_GhostBatchNormMixin, nn.BatchNorm3d):
    """:class:`torch.nn.BatchNorm3d` over ghost batches in training; see :func:`apply_ghost_batchnorm`."""


_GHOST = {nn.BatchNorm1d: GhostBatchNorm1d, nn.BatchNorm2d: GhostBatchNorm2d, nn.BatchNorm3d: GhostBatchNorm3d}


class GhostBatchNorm(Algorithm):
    """Ghost batch normalization in the Trainer: at ``Event.INIT``, :func:`apply_ghost_batchnorm`
    replaces the model's batch norms, and the Trainer's optimizer (if already built) keeps them.

    Args:
        ghost_batch_size: the most examples a ghost batch holds, ``>= 1``.

    It counts ``modules_replaced``, the batch norms it replaced; none means it did not act.

    Example::

        >>> import torch
        >>> from algorithms import GhostBatchNorm
        >>> from algorithms.core import Trainer
        >>> model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8),
        ...                             torch.nn.Flatten(), torch.nn.Linear(8 * 2 * 2, 10))
        >>> batches = [(torch.randn(16, 3, 4, 4), torch.randint(0, 10, (16,)))]
        >>> Trainer(model, batches, "1ep", algorithms=[GhostBatchNorm(ghost_batch_size=4)], seed=0).fit()
    """

    activity = {"modules_replaced": "batch norms replaced by ghost batch norms"}

    def __init__(self, ghost_batch_size: int = 32):
        PARAMETERS.check(ghost_batch_size=ghost_batch_size)
        self.ghost_batch_size = ghost_batch_size

    def match(self, event: Event, state: State) -> bool:
        return event is Event.INIT

    def apply(self, event: Event, state: State, logger: Any | None = None) -> None:
        with recording_replacements() as replaced:
            apply_ghost_batchnorm(state.model, self.ghost_batch_size, optimizers=state.optimizers)
        self.report(logger, "modules_replaced", len(replaced))
