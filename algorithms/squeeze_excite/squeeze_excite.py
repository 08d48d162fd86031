"""Squeeze-and-Excitation: after a convolution, rescale each channel by a gate computed from the whole image.

Hu, Shen, Albanie, Sun and Wu, "Squeeze-and-Excitation Networks", 2018.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from ..core.algorithm import Algorithm
from ..core.event import Event
from ..core.parameters import FractionOrCount, Integer, Parameters
from ..core.state import State
from ..surgery import recording_replacements, replace_module_classes

__all__ = ["SqueezeExcite", "SqueezeExcite2d", "SqueezeExciteConv2d", "apply_squeeze_excite"]

PARAMETERS = Parameters(
    latent_channels=FractionOrCount(
        of="the convolution's output channels",
        note="The width of each block's hidden layer: a count, or a fraction of the convolution's output channels.",
    ),
    min_channels=Integer(
        low=0, note="Only convolutions with at least this many input and output channels get a block."
    ),
)


def apply_squeeze_excite(
    model: nn.Module,
    latent_channels: float = 64,
    min_channels: int = 128,
    optimizers: torch.optim.Optimizer | Iterable[torch.optim.Optimizer] | None = None,
) -> int:
    """Follow every ``Conv2d`` of ``model`` with ``min(in_channels, out_channels) >= min_channels``
    by a squeeze-and-excitation block, in place, as ``composer.functional.apply_squeeze_excite``.

    Each such convolution is replaced by a :class:`SqueezeExciteConv2d` holding the convolution
    itself and a new :class:`SqueezeExcite2d` over its output channels.

    Args:
        model: the model to change, in place.
        latent_channels: the width of the block's hidden layer: a whole number ``>= 1`` of
            channels, or a fraction in ``(0, 1)`` of the convolution's output channels (at least
            one channel).
        min_channels: only convolutions with at least this many input and output channels get a
            block, ``>= 0``.
        optimizers: optimizers already built over ``model.parameters()``; the blocks' parameters
            join the parameter group of their convolution's.

    Returns:
        How many convolutions got a block (a warning says so when none did).

    Example::

        >>> import torch
        >>> import algorithms.functional as cf
        >>> model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Conv2d(8, 8, 3))
        >>> cf.apply_squeeze_excite(model, latent_channels=0.5, min_channels=8), model[2].se.latent_channels
        (1, 4)
    """
    PARAMETERS.check(latent_channels=latent_channels, min_channels=min_channels)

    def excite(conv: nn.Conv2d, index: int) -> nn.Module | None:
        if getattr(conv, "_squeeze_excited", False) or min(conv.in_channels, conv.out_channels) < min_channels:
            return None
        return SqueezeExciteConv2d(conv, latent_channels)

    return len(replace_module_classes(model, {nn.Conv2d: excite}, optimizers=optimizers, method="SqueezeExcite"))


class SqueezeExcite2d(nn.Module):
    """A squeeze-and-excitation block: ``x * sigmoid(W2 relu(W1 mean(x)))`` per example and channel,
    the mean over the spatial positions, ``W1`` and ``W2`` without bias (as in Composer).

    Args:
        num_features: the channels of its input.
        latent_channels: the width of the hidden layer: channels ``>= 1``, or a fraction in
            ``(0, 1)`` of ``num_features`` (at least one channel).
    """

    def __init__(self, num_features: int, latent_channels: float = 0.125):
        super().__init__()
        PARAMETERS.check(latent_channels=latent_channels)
        self.latent_channels = (
            int(latent_channels) if latent_channels >= 1 else max(1, int(latent_channels * num_features))
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Linear(num_features, self.latent_channels, bias=False)
        self.relu = nn.ReLU()
        self.fc2 = nn.Linear(self.latent_channels, num_features, bias=False)
        self.gate = nn.Sigmoid()

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        n, c = input.shape[:2]
        squeezed = self.pool(input).reshape(n, c)
        return input * self.gate(self.fc2(self.relu(self.fc1(squeezed)))).reshape(n, c, 1, 1)


class SqueezeExciteConv2d(nn.Module):
    """A convolution followed by a :class:`SqueezeExcite2d` over its output channels.

    Args:
        conv: the convolution, kept as it is (its parameters stay the same tensors).
        latent_channels: the block's hidden width, as in :class:`SqueezeExcite2d`.
    """

    def __init__(self, conv: nn.Conv2d, latent_channels: float = 0.125):
        super().__init__()
        self.conv = conv
        conv._squeeze_excited = True  # applying the surgery again leaves it alone
        self.se = SqueezeExcite2d(conv.out_channels, latent_channels)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return self.se(self.conv(input))


class SqueezeExcite(Algorithm):
    """Squeeze-and-Excitation in the Trainer: at ``Event.INIT``, :func:`apply_squeeze_excite` adds
    the blocks, and the Trainer's optimizer (if already built) gets their parameters.

    Args:
        latent_channels: the width of each block's hidden layer: channels ``>= 1``, or a fraction
            in ``(0, 1)`` of the convolution's output channels.
        min_channels: only convolutions with at least this many input and output channels get a
            block, ``>= 0``.

    It counts ``modules_replaced``, the convolutions it gave a squeeze-excite block; none means it did not act.

    Example::

        >>> import torch
        >>> from algorithms import SqueezeExcite
        >>> from algorithms.core import Trainer
        >>> model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Conv2d(8, 8, 1),
        ...                             torch.nn.Flatten(), torch.nn.Linear(8 * 2 * 2, 10))
        >>> batches = [(torch.randn(4, 3, 4, 4), torch.randint(0, 10, (4,)))]
        >>> Trainer(model, batches, "1ep", algorithms=[SqueezeExcite(latent_channels=0.5, min_channels=8)],
        ...         seed=0).fit()
    """

    activity = {"modules_replaced": "convolutions given a squeeze-excite block"}

    def __init__(self, latent_channels: float = 64, min_channels: int = 128):
        PARAMETERS.check(latent_channels=latent_channels, min_channels=min_channels)
        self.latent_channels = latent_channels
        self.min_channels = min_channels

    def match(self, event: Event, state: State) -> bool:
        return event is Event.INIT

    def apply(self, event: Event, state: State, logger: Any | None = None) -> None:
        with recording_replacements() as replaced:
            apply_squeeze_excite(state.model, self.latent_channels, self.min_channels, optimizers=state.optimizers)
        self.report(logger, "modules_replaced", len(replaced))
