"""Composer's tests of Channels Last (``tests/algorithms/test_channels_last.py``), re-expressed with
this library's imports; ``SimpleConvModel`` and ``minimal_state`` are the stand-ins of
:mod:`composer_support`. Composer's tests of its helper ``_infer_memory_format`` come along, as
the other tests rest on it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from composer_support import SimpleConvModel, minimal_state

import algorithms.functional as cf
from algorithms import ChannelsLast
from algorithms.core import Event


def _has_singleton_dimension(tensor: torch.Tensor) -> bool:
    return any(s == 1 for s in tensor.shape)


def _infer_memory_format(tensor: torch.Tensor) -> str:
    """The dimensions of a 4-D tensor without singleton dimensions, from the largest stride to the smallest."""
    if _has_singleton_dimension(tensor):
        raise ValueError(f"Tensor of shape {tensor.shape} has singleton dimensions, memory format cannot be inferred")
    strides = tensor.stride()
    if len(strides) != 4:
        raise ValueError(f"Tensor must be 4-dim, got shape {tensor.shape}")
    return "".join("nchw"[o] for o in reversed(np.argsort(strides)))


@pytest.fixture()
def state():
    return minimal_state(SimpleConvModel())


def test_channels_last_functional():
    """Composer's ``test_channels_last_functional``: conv1's weight goes from nchw to nhwc."""
    model = SimpleConvModel()
    conv = model.conv1
    assert _infer_memory_format(conv.weight) == "nchw"
    cf.apply_channels_last(model)
    assert _infer_memory_format(conv.weight) == "nhwc"


@pytest.mark.parametrize("device", [pytest.param("cpu"), pytest.param("gpu", marks=pytest.mark.cuda)])
def test_channels_last_algorithm(state, device: str):
    """Composer's ``test_channels_last_algorithm``: the class at ``Event.INIT``, on the CPU and a GPU."""
    if device == "gpu":
        state.model = state.model.cuda()
    assert isinstance(state.model, SimpleConvModel)
    assert _infer_memory_format(state.model.conv1.weight) == "nchw"
    ChannelsLast().apply(Event.INIT, state, None)
    assert isinstance(state.model, SimpleConvModel)
    assert _infer_memory_format(state.model.conv1.weight) == "nhwc"


@pytest.fixture(params=[True, False])
def tensor(request) -> torch.Tensor:
    tensor = torch.randn((16, 32, 32, 64))
    return tensor[::2, ::2, ::2, ::2] if request.param else tensor


def test_infer_memory_format_nhwc(tensor):
    assert _infer_memory_format(tensor.to(memory_format=torch.channels_last)) == "nhwc"


def test_infer_memory_format_nchw(tensor):
    assert _infer_memory_format(tensor.to(memory_format=torch.contiguous_format)) == "nchw"


def test_infer_memory_format_wcnh(tensor):
    tensor = tensor.to(memory_format=torch.contiguous_format).permute(2, 1, 3, 0)
    assert _infer_memory_format(tensor) == "wcnh"


def test_infer_memory_format_incorrect_ndims():
    with pytest.raises(ValueError):
        _infer_memory_format(torch.randn((16, 32, 32)))


def test_infer_memory_format_singleton():
    with pytest.raises(ValueError):
        _infer_memory_format(torch.randn((16, 32, 1, 64)))
