"""Composer's tests of EMA (``tests/algorithms/test_ema.py``), re-expressed with this library's
imports; ``SimpleConvModel``, ``SimpleTransformerClassifier`` and ``minimal_state`` are the
stand-ins of :mod:`composer_support`. Composer's third model, a tiny Hugging Face BERT, needs
``transformers`` (see ``differences.EXCLUDED``).

Composer's algorithm test starts the average by assigning ``algorithm.ema_model =
EMAParameters(state.model)``; here ``ema_model`` is read-only, and the average starts the way the
class starts it in training: the first update event at or after ``ema_start`` copies the model.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from composer_support import SimpleConvModel, SimpleTransformerClassifier, minimal_state

import algorithms.functional as cf
from algorithms import EMA
from algorithms.core import Event, Timestamp, TimeUnit
from algorithms.core.time import Duration

MODELS = [SimpleConvModel, SimpleTransformerClassifier]


def validate_ema(model, original_model, ema_model, smoothing):
    model_params, model_buffers = dict(model.named_parameters()), dict(model.named_buffers())
    original_params, original_buffers = dict(original_model.named_parameters()), dict(original_model.named_buffers())
    ema_params, ema_buffers = dict(ema_model.named_parameters()), dict(ema_model.named_buffers())
    for name, param in model_params.items():
        new_param = original_params[name] * smoothing + (1.0 - smoothing) * param
        torch.testing.assert_close(ema_params[name].data, new_param)
    for name, buffer in model_buffers.items():
        new_buffer = (original_buffers[name] * smoothing + (1.0 - smoothing) * buffer).type(
            ema_buffers[name].data.dtype
        )
        torch.testing.assert_close(ema_buffers[name].data, new_buffer)


def validate_model(model1, model2):
    model1_params, model1_buffers = dict(model1.named_parameters()), dict(model1.named_buffers())
    model2_params, model2_buffers = dict(model2.named_parameters()), dict(model2.named_buffers())
    for name in model1_params:
        torch.testing.assert_close(model1_params[name].data, model2_params[name].data)
    for name in model1_buffers:
        torch.testing.assert_close(model1_buffers[name].data, model2_buffers[name].data)


@pytest.mark.parametrize("smoothing", [0, 0.5, 0.99, 1])
@pytest.mark.parametrize("model_cls", MODELS)
def test_ema(smoothing, model_cls):
    """Composer's ``test_ema``: ``compute_ema`` moves each tensor of the copy to
    ``smoothing * copy + (1 - smoothing) * model``."""
    model = model_cls()
    ema_model = model_cls()
    original_model = copy.deepcopy(ema_model)
    cf.compute_ema(model=model, ema_model=ema_model, smoothing=smoothing)
    validate_ema(model, original_model, ema_model, smoothing)


@pytest.mark.parametrize(
    "params",
    [
        {"half_life": "10ba", "update_interval": "1ba"},
        {"half_life": "1ep", "update_interval": "1ep"},
        {"smoothing": 0.999, "update_interval": "1ba"},
    ],
)
@pytest.mark.parametrize("model_cls", MODELS)
def test_ema_algorithm(params, model_cls):
    """Composer's ``test_ema_algorithm``: the smoothing from the half-life, one update of the
    average, the average swapped in at ``EVAL_START`` and the training weights back at ``EVAL_END``."""
    input = torch.rand((32, 5))
    if "smoothing" in params:
        smoothing, update_interval = params["smoothing"], params["update_interval"]
        algorithm = EMA(half_life=None, smoothing=smoothing, update_interval=update_interval)
    else:
        half_life, update_interval = params["half_life"], params["update_interval"]
        algorithm = EMA(half_life=half_life, update_interval=update_interval)
    state = minimal_state()
    state.model = model_cls()
    state.batch = (input, torch.Tensor())

    # Start EMA: the first update event copies the model (Composer assigns the copy)
    update_interval = Duration.parse(params["update_interval"])
    update_event = Event.BATCH_END if update_interval.unit == TimeUnit.BATCH else Event.EPOCH_END
    algorithm.apply(update_event, state, None)
    # Check if ema correctly calculated smoothing
    if "half_life" in params:
        half_life = Duration.parse(params["half_life"])
        smoothing = np.exp(-np.log(2) * (update_interval.value / half_life.value))
        np.testing.assert_allclose(np.asarray(smoothing), np.asarray(algorithm.smoothing))

    # Fake a training update by replacing state.model after ema grabbed it.
    original_model = copy.deepcopy(state.model)
    state.model = model_cls()
    training_updated_model = copy.deepcopy(state.model)
    # Do the EMA update
    state.timestamp = Timestamp()
    if update_interval.unit == TimeUnit.BATCH:
        state.timestamp.batch = int(update_interval.value)
        algorithm.apply(Event.BATCH_END, state, None)
    elif update_interval.unit == TimeUnit.EPOCH:
        state.timestamp.epoch = int(update_interval.value)
        algorithm.apply(Event.EPOCH_END, state, None)
    else:
        raise ValueError("Invalid time string for parameter half_life")
    # Check if EMA correctly computed the average.
    validate_ema(state.model, original_model, algorithm.ema_model, algorithm.smoothing)
    ema_updated_model = copy.deepcopy(algorithm.ema_model)
    # Check if the EMA model is swapped in for testing
    algorithm.apply(Event.EVAL_START, state, None)
    validate_model(state.model, ema_updated_model)
    # Check if the training model is swapped back in for training
    algorithm.apply(Event.EVAL_END, state, None)
    validate_model(state.model, training_updated_model)
