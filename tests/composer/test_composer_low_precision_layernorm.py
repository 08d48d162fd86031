"""Composer's tests of Low Precision LayerNorm (``tests/algorithms/test_low_precision_layernorm.py``),
re-expressed with this library's imports; ``SimpleTransformerClassifier`` is the stand-in of
:mod:`composer_support`, and the State is built with the Trainer's precision name ``"amp_fp16"``.
Composer runs them on a GPU only (its ``device('gpu')``); they run here on the CPU and, where there
is one, on CUDA. Its tiny Hugging Face BERT case needs ``transformers`` (see
``differences.EXCLUDED``)."""

from __future__ import annotations

import pytest
from composer_support import SimpleTransformerClassifier
from torch.nn import LayerNorm

import algorithms.functional as cf
from algorithms import LowPrecisionLayerNorm
from algorithms.core import Event, State
from algorithms.core.time import Duration
from algorithms.low_precision_layernorm import LPLayerNorm

DEVICES = [pytest.param("cpu"), pytest.param("gpu", marks=pytest.mark.cuda)]


def assert_is_lpln_instance(model):
    """No plain LayerNorm is left in the model, and at least one LPLayerNorm is there."""
    for module in model.modules():
        if isinstance(module, LayerNorm):
            assert isinstance(module, LPLayerNorm)
    assert any(isinstance(module, LPLayerNorm) for module in model.modules())


def _state(device: str) -> State:
    model = SimpleTransformerClassifier()
    # Remove biases and weights from some LayerNorms to test LPLN robustness
    model.module[0].net[1].layers[0].norm1.bias = None
    model.module[0].net[1].layers[0].norm2.weight = None
    model.module[0].net[1].layers[0].norm2.bias = None
    state = State(model=model, max_duration=Duration.parse("1ep"), precision="amp_fp16", seed=0)
    if device == "gpu":
        state.model = state.model.cuda()
    return state


@pytest.mark.parametrize("device", DEVICES)
def test_low_precision_layernorm_functional(device: str):
    state = _state(device)
    cf.apply_low_precision_layernorm(state.model, state.precision, state.optimizers)
    assert_is_lpln_instance(state.model)


@pytest.mark.parametrize("device", DEVICES)
def test_low_precision_layernorm_algorithm(device: str):
    state = _state(device)
    LowPrecisionLayerNorm().apply(Event.INIT, state, None)
    assert_is_lpln_instance(state.model)
