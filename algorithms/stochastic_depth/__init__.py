"""Stochastic Depth: see :mod:`algorithms.stochastic_depth.stochastic_depth`."""

from .stochastic_depth import (
    StochasticBasicBlock,
    StochasticBottleneck,
    StochasticDepth,
    apply_stochastic_depth,
    block_drop_rates,
)

__all__ = [
    "StochasticBasicBlock",
    "StochasticBottleneck",
    "StochasticDepth",
    "apply_stochastic_depth",
    "block_drop_rates",
]
