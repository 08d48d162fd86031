"""Composer's tests of Squeeze-and-Excitation (``tests/algorithms/test_squeeze_excite.py``),
re-expressed with this library's imports; ``SimpleConvModel`` and ``minimal_state`` are the
stand-ins of :mod:`composer_support`, and the count Composer logs with ``log_hyperparameters`` is
the class's ``modules_replaced`` counter here."""

from __future__ import annotations

import pytest
import torch
from composer_support import SimpleConvModel, counted, minimal_state

import algorithms.functional as cf
from algorithms import SqueezeExcite
from algorithms.core import Event
from algorithms.squeeze_excite.squeeze_excite import SqueezeExciteConv2d
from algorithms.surgery import count_module_instances


@pytest.fixture
def state():
    """SE tests require a conv model."""
    return minimal_state(SimpleConvModel(num_channels=32))


def test_se_functional():
    """Composer's ``test_se_functional``: every convolution gets a block."""
    model = SimpleConvModel()
    num_conv_layers = count_module_instances(model, torch.nn.Conv2d)
    cf.apply_squeeze_excite(model, latent_channels=64, min_channels=3)
    assert num_conv_layers == count_module_instances(model, SqueezeExciteConv2d)


def test_se_algorithm(state):
    """Composer's ``test_se_algorithm``: the class at ``Event.INIT`` does the same."""
    num_conv_layers = count_module_instances(state.model, torch.nn.Conv2d)
    SqueezeExcite(latent_channels=64, min_channels=3).apply(event=Event.INIT, state=state, logger=None)
    assert num_conv_layers == count_module_instances(state.model, SqueezeExciteConv2d)


def test_se_logging(state):
    """Composer's ``test_se_logging``: the count logged is the number of convolutions."""
    activity = counted(SqueezeExcite(latent_channels=64, min_channels=3), state)
    conv_count = count_module_instances(state.model, torch.nn.Conv2d)
    assert activity == {"modules_replaced": conv_count}


def test_se_forward_shape(state):
    """Composer's ``test_se_forward_shape``: the output's shape is kept."""
    batch = (torch.Tensor(8, 32, 64, 64), None)  # NCHW
    output = state.model.forward(batch[0])
    cf.apply_squeeze_excite(state.model, latent_channels=32, min_channels=3)
    new_output = state.model.forward(batch[0])
    assert output.size() == new_output.size()
