"""Composer's tests of Gradient Clipping (``tests/algorithms/test_gradient_clipping.py``),
re-expressed with this library's imports; ``SimpleTransformerClassifier`` and ``minimal_state``
are the stand-ins of :mod:`composer_support`. Composer's Hugging Face BERT model and its FSDP test
on two GPUs are listed in ``differences.EXCLUDED``.

Composer's private ``_get_clipped_gradient_coeff(weights, grad, threshold)`` has no counterpart
here: its cases run through the private ``_apply_agc`` on a parameter with those weights and that
gradient, which must leave ``grad * coefficient`` as the gradient.
"""

from __future__ import annotations

from unittest.mock import Mock

import pytest
import torch
from composer_support import SimpleTransformerClassifier, minimal_state
from composer_support import transformer_classifier_batch as dummy_transformer_classifier_batch
from torch import nn

import algorithms.gradient_clipping.gradient_clipping as gc_module
from algorithms import GradientClipping
from algorithms.core import Engine, Event
from algorithms.functional import apply_gradient_clipping
from algorithms.gradient_clipping.gradient_clipping import _apply_agc


def simple_model_with_grads():
    # One linear layer with no bias + softmax, so only one set of params, with gradients.
    N, hin, num_classes = 4, 2, 2
    x = torch.rand((N, hin))
    y = torch.randint(high=num_classes - 1, size=(N,))
    model = nn.Sequential(nn.Linear(hin, num_classes, bias=False), nn.Softmax(dim=1))
    loss = nn.CrossEntropyLoss()(model(x), y)
    loss.backward()
    return model


def cnn_model_with_grads():
    # A CNN with all the common parameters: bias, weight matrix, conv filters.
    class myNN(nn.Module):
        def __init__(self, n_ch, num_fmaps, h, num_classes, filter_size):
            super().__init__()
            self.conv_model = nn.Sequential(nn.Conv2d(n_ch, num_fmaps, kernel_size=filter_size), nn.ReLU())
            self.mlp = nn.Sequential(nn.Linear(num_fmaps, h), nn.ReLU(), nn.Linear(h, num_classes), nn.Softmax(dim=1))

        def forward(self, x):
            return self.mlp(torch.mean(self.conv_model(x), dim=(2, 3)))

    N, n_ch, num_fmaps, h, num_classes, filter_size = 4, 1, 2, 2, 2, 2
    x = torch.rand((N, n_ch, 8, 8))
    y = torch.randint(high=num_classes - 1, size=(N,))
    model = myNN(n_ch, num_fmaps, h, num_classes, filter_size)
    loss = nn.CrossEntropyLoss()(model(x), y)
    loss.backward()
    return model


def simple_transformer_model_with_grads():
    model = SimpleTransformerClassifier(vocab_size=100, num_classes=3)
    x, _ = dummy_transformer_classifier_batch(vocab_size=100, num_classes=3)
    o = model(x)
    y = torch.randint(high=1, size=o.shape, dtype=o.dtype)
    loss = nn.CrossEntropyLoss()(o, y)
    loss.backward()
    return model


MODELS_WITH_GRADS = [simple_model_with_grads, cnn_model_with_grads, simple_transformer_model_with_grads]


def test_gradient_clipping_functional(monkeypatch):
    """Composer's ``test_gradient_clipping_functional``: each type calls its clipping function
    once, AGC with the model's parameters and the threshold. Composer passes a ``Mock`` as the
    model; the functional form here reads which parameters have a gradient, so the model is a
    real one with gradients."""
    model = simple_model_with_grads()
    new_gc_fn = Mock()
    monkeypatch.setattr(gc_module, "_apply_agc", new_gc_fn)
    apply_gradient_clipping(model, "adaptive", 0.1, fsdp_enabled=False)
    new_gc_fn.assert_called_once()
    (params, threshold), kwargs = new_gc_fn.call_args.args, new_gc_fn.call_args.kwargs
    assert [id(p) for p in params] == [id(p) for p in model.parameters()] and threshold == 0.1 and not kwargs

    new_gc_fn = Mock()
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", new_gc_fn)
    apply_gradient_clipping(model, "norm", 0.1, fsdp_enabled=False)
    new_gc_fn.assert_called_once()

    new_gc_fn = Mock()
    monkeypatch.setattr(torch.nn.utils, "clip_grad_value_", new_gc_fn)
    apply_gradient_clipping(model, "value", 0.1, fsdp_enabled=False)
    new_gc_fn.assert_called_once()


@pytest.mark.parametrize("clipping_type", [("adaptive",), ("norm",), ("value",)])
@pytest.mark.parametrize("model_with_grads", MODELS_WITH_GRADS)
def test_gradient_clipping_algorithm(monkeypatch, clipping_type, model_with_grads):
    """Composer's ``test_gradient_clipping_algorithm``: the Engine at ``Event.AFTER_TRAIN_BATCH``
    calls ``apply_gradient_clipping`` once. (Composer's parametrization passes each type in a
    1-tuple, which its constructor does not check.)"""
    model = model_with_grads()
    apply_gc_fn = Mock()
    monkeypatch.setattr(gc_module, "apply_gradient_clipping", apply_gc_fn)
    state = minimal_state(model)
    engine = Engine(state, [GradientClipping(clipping_type=clipping_type, clipping_threshold=0.01)])
    engine.run_event(Event.AFTER_TRAIN_BATCH)
    apply_gc_fn.assert_called_once()


@pytest.mark.parametrize("model_with_grads", MODELS_WITH_GRADS)
def test_apply_agc(model_with_grads):
    """Composer's ``test_apply_agc``: AGC on the model runs; Composer computes the expected first
    gradient but asserts nothing about it, and neither does this."""
    model = model_with_grads()
    weights = next(model.parameters())
    expected_clipped_grad = _clipped(weights.detach(), weights.grad, 0.01)
    _apply_agc(model.parameters(), 0.01)
    current_grad = next(model.parameters()).grad
    torch.equal(current_grad, expected_clipped_grad)


@pytest.mark.parametrize("model_with_grads", MODELS_WITH_GRADS)
def test_apply_agc_does_not_error(model_with_grads):
    """This test is just to ensure that no errors are raised."""
    _apply_agc(model_with_grads().parameters(), 0.01)


def _clipped(weights: torch.Tensor, grad: torch.Tensor, clipping_threshold: float) -> torch.Tensor:
    """``grad * _get_clipped_gradient_coeff(weights, grad, clipping_threshold)``, through ``_apply_agc``."""
    param = nn.Parameter(weights.clone())
    param.grad = grad.clone()
    _apply_agc([param], clipping_threshold)
    return param.grad


def test_get_clipped_gradients_1D():
    weights = torch.Tensor([3.0, 4.0])
    grad = torch.Tensor([7.0, 24.0])
    expected = torch.Tensor([0.7, 2.4])
    assert torch.equal(_clipped(weights, grad, 0.5), expected)


@pytest.mark.parametrize(
    "weights,grad,expected",
    [
        (torch.Tensor([0.0, 0.0]), torch.Tensor([1.0, 1.0]), torch.Tensor([0.0, 0.0])),
        (torch.Tensor([1.0, 1.0]), torch.Tensor([0.0, 0.0]), torch.Tensor([0.0, 0.0])),
        (torch.Tensor([0.0, 0.0]), torch.Tensor([0.0, 0.0]), torch.Tensor([0.0, 0.0])),
    ],
)
def test_get_clipped_gradients_1D_with_zeros(weights: torch.Tensor, grad: torch.Tensor, expected: torch.Tensor):
    assert torch.equal(_clipped(weights, grad, 1e-4), expected)


def test_get_clipped_gradients_2D():
    weights = torch.Tensor([[3.0, 4.0], [9.0, 40.0]])
    grad = torch.Tensor([[7.0, 24.0], [5.0, 12.0]])
    expected = torch.Tensor([[0.7, 2.4], [5.0, 12.0]])
    assert torch.equal(_clipped(weights, grad, 0.5), expected)


def test_get_clipped_gradients_3D():
    weights = torch.Tensor([[[3.0, 8.0], [2.0, 2.0]], [[1.0, 3.0], [3.0, 9.0]]])
    grad = torch.Tensor([[[1.0, 1.0], [3.0, 5.0]], [[1.0, 1.0], [1.0, 1.0]]])
    expected = torch.Tensor([[[0.5000, 0.5000], [1.5000, 2.5000]], [[1.0000, 1.0000], [1.0000, 1.0000]]])
    assert torch.equal(_clipped(weights, grad, 1 / 3.0), expected)


def test_get_clipped_gradients_4D():
    weights = torch.Tensor([[[[3.0], [8.0]], [[2.0], [2.0]]], [[[1.0], [3.0]], [[3.0], [9.0]]]])
    grad = torch.Tensor([[[[1.0], [1.0]], [[3.0], [5.0]]], [[[1.0], [1.0]], [[1.0], [1.0]]]])
    expected = torch.Tensor([[[[0.5], [0.5]], [[1.5], [2.5]]], [[[1.0], [1.0]], [[1.0], [1.0]]]])
    assert torch.equal(_clipped(weights, grad, 1 / 3.0), expected)
