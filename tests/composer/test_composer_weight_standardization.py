"""Composer's tests of Weight Standardization (``tests/algorithms/test_weight_standardization.py``),
re-expressed with this library's imports; ``SimpleConvModel`` and ``minimal_state`` are the
stand-ins of :mod:`composer_support`."""

from __future__ import annotations

import pytest
import torch
import torch.nn.utils.parametrize as parametrize
from composer_support import SimpleConvModel, minimal_state

import algorithms.functional as cf
from algorithms import WeightStandardization
from algorithms.core import Event


def _count_parametrize(module: torch.nn.Module) -> int:
    return sum(parametrize.is_parametrized(m, "weight") for m in module.modules())


def test_ws_calculation():
    """Composer's ``test_ws_calculation``: every output filter of both convolutions has mean 0 and
    variance 1."""
    model = SimpleConvModel()
    cf.apply_weight_standardization(module=model)
    var1, mean1 = torch.var_mean(model.conv1.weight, dim=[1, 2, 3], unbiased=False)
    var2, mean2 = torch.var_mean(model.conv2.weight, dim=[1, 2, 3], unbiased=False)
    torch.testing.assert_close(var1, torch.ones_like(var1))
    torch.testing.assert_close(var2, torch.ones_like(var2))
    torch.testing.assert_close(mean1, torch.zeros_like(mean1))
    torch.testing.assert_close(mean2, torch.zeros_like(mean2))


@pytest.mark.parametrize("n_last_layers_ignore", [0, 1, 3])
def test_ws_replacement(n_last_layers_ignore: int):
    """Composer's ``test_ws_replacement``: all but the last ``n_last_layers_ignore`` of the two
    convolutions are parametrized."""
    model = SimpleConvModel()
    if n_last_layers_ignore >= 2:  # nothing is left to standardize: this library warns, naming the method
        with pytest.warns(UserWarning, match="WeightStandardization"):
            cf.apply_weight_standardization(module=model, n_last_layers_ignore=n_last_layers_ignore)
    else:
        cf.apply_weight_standardization(module=model, n_last_layers_ignore=n_last_layers_ignore)
    assert _count_parametrize(model) == max(2 - n_last_layers_ignore, 0)


@pytest.mark.parametrize("n_last_layers_ignore", [0, 1, 3])
def test_ws_algorithm(n_last_layers_ignore: int):
    """Composer's ``test_ws_algorithm``: the class at ``Event.INIT`` parametrizes the same layers."""
    state = minimal_state(SimpleConvModel())
    ws_algorithm = WeightStandardization(n_last_layers_ignore=n_last_layers_ignore)
    if n_last_layers_ignore >= 2:
        with pytest.warns(UserWarning, match="WeightStandardization"):
            ws_algorithm.apply(Event.INIT, state, None)
    else:
        ws_algorithm.apply(Event.INIT, state, None)
    assert _count_parametrize(state.model) == max(2 - n_last_layers_ignore, 0)
