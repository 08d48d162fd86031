"""Composer's tests of Gated Linear Units (``tests/algorithms/test_gated_linear_units.py``),
re-expressed with this library's imports.

Composer's policy matches Hugging Face BERT's feed-forward modules and puts a
``BERTGatedFFOutput`` (the gated block, then BERT's residual and post-norm) in their place; this
library's matches the feed-forward block of its reference transformer,
:class:`~algorithms.models.transformer.FeedForward`, and puts a
:class:`~algorithms.gated_linear_units.GLUFeedForward` (the gated block alone; the residual and the
norm stay in the transformer block) in its place, as its card says. So Composer's tiny BERT is
``transformer_tiny`` here, and the check of the block's output is the gated part of Composer's
formula. ``SimpleTransformerClassifier`` is the stand-in of :mod:`composer_support`, which Composer
expects to fail, as here.
"""

from __future__ import annotations

import pytest
import torch
from composer_support import SimpleTransformerClassifier
from torch.nn.functional import gelu, relu

import algorithms.functional as cf
from algorithms import GatedLinearUnits
from algorithms.core import Event, State
from algorithms.core.time import Duration
from algorithms.gated_linear_units import GLUFeedForward
from algorithms.models import transformer_tiny
from algorithms.models.transformer import FeedForward


@pytest.mark.parametrize("batch_size", [1])
@pytest.mark.parametrize("seq_length", [128, 512])
@pytest.mark.parametrize("d_embed", [768])
@pytest.mark.parametrize("d_ff", [3072])
@pytest.mark.parametrize("dropout_rate", [0.0])
@pytest.mark.parametrize("act_fn", [relu, gelu])
def test_glu_outputs(batch_size, seq_length, d_embed, d_ff, dropout_rate, act_fn):
    """Composer's ``test_glu_outputs``: the block computes ``wo(act(x Wg) * (x Wn)) + bo`` from its
    own weights. (Composer compares ``hidden_states[1:]``, empty with a batch of one, so its
    comparison holds for any output; here the whole batch is compared.)"""
    gated_ff = GLUFeedForward(
        d_model=d_embed,
        d_hidden=d_ff,
        act=act_fn,
        dropout=dropout_rate,
        gated_layer_bias=False,
        non_gated_layer_bias=False,
    )
    hidden_states = torch.rand(batch_size, seq_length, d_embed)
    model_output = gated_ff(hidden_states)

    manual_output = torch.matmul(hidden_states, gated_ff.gate.weight.transpose(0, 1))
    manual_output = act_fn(manual_output)
    manual_output = manual_output * torch.matmul(hidden_states, gated_ff.up.weight.transpose(0, 1))
    manual_output = torch.matmul(manual_output, gated_ff.down.weight.transpose(0, 1)) + gated_ff.down.bias
    # float32's own tolerance: the block's addmm and the matmul-then-add here round differently (on
    # an AMD EPYC by up to 4e-8 on outputs near 0.2), past allclose's default atol of 1e-8
    torch.testing.assert_close(model_output, manual_output)


def assert_is_glu_instance(model):
    """No original feed-forward block is left in the model, and at least one gated block is there."""
    for module in model.modules():
        assert not isinstance(module, FeedForward), "A FeedForward should not be found in the model after surgery."
    assert any(isinstance(module, GLUFeedForward) for module in model.modules()), "No GLUFeedForward in the model."


MODELS = [
    lambda: transformer_tiny(vocab_size=50),
    pytest.param(
        SimpleTransformerClassifier,
        marks=pytest.mark.xfail(reason="Gated Linear Units does not support models without its FeedForward blocks"),
    ),
]


@pytest.mark.parametrize("model", MODELS)
def test_gated_linear_units_functional(model):
    state = State(model=model(), max_duration=Duration.parse("1ep"), seed=0)
    cf.apply_gated_linear_units(state.model, state.optimizers)
    assert_is_glu_instance(state.model)


@pytest.mark.parametrize("model", MODELS)
def test_gated_linear_units_algorithm(model):
    state = State(model=model(), max_duration=Duration.parse("1ep"), seed=0)
    GatedLinearUnits().apply(Event.INIT, state, None)
    assert_is_glu_instance(state.model)
