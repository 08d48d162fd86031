"""Stochastic Depth: see :mod:`algorithms.stochastic_depth.stochastic_depth`."""

from .stochastic_depth import (
    StochasticBasicBlock,
    StochasticBottleneck,
    StochasticDepth,
    StochasticResidual,
    apply_stochastic_depth,
    block_drop_rates,
    registry,
    stochastic_policy,
)

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
