"""Composer's tests of Low Precision GroupNorm (``tests/algorithms/test_low_precision_groupnorm.py``),
re-expressed with this library's imports; ``SimpleConvModel`` is the stand-in of
:mod:`composer_support`, and the State is built with the Trainer's precision name ``"amp_fp16"``."""

from __future__ import annotations

import pytest
from composer_support import SimpleConvModel
from torch.nn import GroupNorm

import algorithms.functional as cf
from algorithms import LowPrecisionGroupNorm
from algorithms.core import Event, State
from algorithms.core.time import Duration
from algorithms.low_precision_groupnorm import LPGroupNorm


def assert_is_lpgn_instance(model):
    """No plain GroupNorm is left in the model, and at least one LPGroupNorm is there."""
    for module in model.modules():
        if isinstance(module, GroupNorm):
            assert isinstance(module, LPGroupNorm)
    assert any(isinstance(module, LPGroupNorm) for module in model.modules())


def _state(affine: bool) -> State:
    model = SimpleConvModel(norm="group", norm_affine=affine)
    return State(model=model, max_duration=Duration.parse("1ep"), precision="amp_fp16", seed=0)


@pytest.mark.parametrize("affine", [True, False])
def test_low_precision_groupnorm_functional(affine):
    state = _state(affine)
    cf.apply_low_precision_groupnorm(state.model, state.precision, state.optimizers)
    assert_is_lpgn_instance(state.model)


@pytest.mark.parametrize("affine", [True, False])
def test_low_precision_groupnorm_algorithm(affine):
    state = _state(affine)
    LowPrecisionGroupNorm().apply(Event.INIT, state, None)
    assert_is_lpgn_instance(state.model)
