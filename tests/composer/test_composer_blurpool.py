"""Composer's tests of BlurPool (``tests/algorithms/test_blurpool.py`` and
``tests/algorithms/test_blurpool_layers.py``; its older ``test_blurpool_algorithm.py`` became the
first), re-expressed with this library's imports. ``ConvModel`` and ``minimal_state`` are the
stand-ins of :mod:`composer_support`; Composer's ``NoEffectWarning`` is
:class:`~algorithms.surgery.NoModulesReplacedWarning` here, and the two counts Composer logs with
``log_hyperparameters`` are the class's one ``modules_replaced`` counter."""

from __future__ import annotations

import itertools

import pytest
import torch
from composer_support import ConvModel, counted, minimal_state

import algorithms.functional as cf
from algorithms import BlurPool
from algorithms.blurpool.blurpool import BlurConv2d, BlurMaxPool2d, blur_2d
from algorithms.core import Event
from algorithms.surgery import NoModulesReplacedWarning


def _tensor_in(tensor: torch.Tensor, tensors) -> bool:
    return any(tensor is t for t in tensors)


@pytest.fixture
def state():
    return minimal_state(ConvModel())


@pytest.fixture(
    params=[
        # replace_conv, replace_pool, blur_first
        (True, True, True),
        (True, True, False),
        (True, False, True),
        (True, False, False),
        (False, True, True),
        (False, True, False),
    ],
)
def blurpool_instance(request) -> BlurPool:
    replace_conv, replace_pool, blur_first = request.param
    return BlurPool(replace_convs=replace_conv, replace_maxpools=replace_pool, blur_first=blur_first)


def test_blurconv(state, blurpool_instance):
    """Composer's ``test_blurconv``: conv1 (32 input channels, stride 2) becomes a BlurConv2d."""
    blurpool_instance.apply(Event.INIT, state, None)
    assert isinstance(state.model, ConvModel)
    expected = BlurConv2d if blurpool_instance.replace_convs else torch.nn.Conv2d
    assert type(state.model.conv1) is expected


def test_maybe_replace_strided_conv_stride(state, blurpool_instance):
    """Composer's: conv3, of stride 1, is not replaced."""
    blurpool_instance.apply(Event.INIT, state, None)
    assert isinstance(state.model, ConvModel)
    assert type(state.model.conv3) is torch.nn.Conv2d


def test_maybe_replace_strided_conv_channels(state, blurpool_instance):
    """Composer's: conv2, with 8 < 16 input channels, is not replaced."""
    blurpool_instance.apply(Event.INIT, state, None)
    assert isinstance(state.model, ConvModel)
    assert type(state.model.conv2) is torch.nn.Conv2d


def test_blurconv_weights_preserved(state, blurpool_instance):
    """Composer's ``test_blurconv_weights_preserved``: the convolution keeps its weights."""
    original_weights = state.model.conv1.weight.clone()
    blurpool_instance.apply(Event.INIT, state, None)
    if isinstance(state.model.conv1, BlurConv2d):
        new_weights = state.model.conv1.conv.weight
    elif isinstance(state.model.conv1, torch.nn.Conv2d):
        new_weights = state.model.conv1.weight
    else:
        raise TypeError(f"Layer type {type(state.model.conv1)} not expected.")
    assert torch.allclose(original_weights, new_weights)


def test_blurpool(state, blurpool_instance):
    """Composer's ``test_blurpool``: the max-pool becomes a BlurMaxPool2d."""
    blurpool_instance.apply(Event.INIT, state, None)
    assert isinstance(state.model, ConvModel)
    expected = BlurMaxPool2d if blurpool_instance.replace_maxpools else torch.nn.MaxPool2d
    assert type(state.model.pool1) is expected


def test_blurpool_wrong_event(state, blurpool_instance):
    assert blurpool_instance.match(Event.BATCH_START, state) is False


def test_blurpool_correct_event(state, blurpool_instance):
    assert blurpool_instance.match(Event.INIT, state) is True


def test_blurpool_algorithm_logging(state, blurpool_instance):
    """Composer's ``test_blurpool_algorithm_logging``: one max-pool and one convolution counted,
    each where it is replaced."""
    activity = counted(blurpool_instance, state)
    expected = (1 if blurpool_instance.replace_maxpools else 0) + (1 if blurpool_instance.replace_convs else 0)
    assert activity == {"modules_replaced": expected}


def test_blurpool_noeffectwarning():
    model = torch.nn.Linear(in_features=16, out_features=32)
    with pytest.warns(NoModulesReplacedWarning):
        cf.apply_blurpool(model)


def test_blurpool_min_channels():
    model = torch.nn.Conv2d(in_channels=32, out_channels=64, stride=1, kernel_size=(3, 3))
    with pytest.warns(NoModulesReplacedWarning):
        cf.apply_blurpool(model, min_channels=64)


def test_blurconv2d_optimizer_params_updated():
    """Composer's: the optimizer drops the original convolution's weight and holds the new one."""
    model = ConvModel()
    original_layer = model.conv1
    assert original_layer.stride == (2, 2)  # fail fast if test model changes
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    cf.apply_blurpool(model, optimizers=optimizer)
    new_layer = model.conv1
    param_list = optimizer.param_groups[0]["params"]
    assert not _tensor_in(original_layer.weight, param_list)
    new_conv_layer = new_layer.conv
    assert isinstance(new_conv_layer, torch.nn.Conv2d)
    assert new_conv_layer.weight is not original_layer.weight
    assert _tensor_in(new_conv_layer.weight, param_list)


# tests/algorithms/test_blurpool_layers.py


def generate_pool_args():
    n_vals = [2]
    c_vals = [2]
    size_vals = [(3, 3), (3, 7), (4, 4)]
    strides = [1, 2]
    filter_size_vals = [(1, 1), (1, 3), (3, 3)]
    return list(itertools.product(n_vals, c_vals, size_vals, strides, filter_size_vals))


@pytest.mark.parametrize("pool_args", generate_pool_args())
def test_blurmaxpool_shapes(pool_args):
    n, c, sz, stride, kernel_size = pool_args
    X = torch.randn(n, c, sz[0], sz[1])
    layer_args = {"kernel_size": kernel_size, "stride": stride, "dilation": 1}
    assert BlurMaxPool2d(**layer_args)(X).shape == torch.nn.MaxPool2d(**layer_args)(X).shape


@pytest.mark.parametrize("blur_first", [True, False])
@pytest.mark.parametrize("pool_args", generate_pool_args())
def test_blurconv2d_shapes(pool_args, blur_first):
    n, c, sz, stride, kernel_size = pool_args
    X = torch.randn(n, c, sz[0], sz[1])
    layer_args = {"kernel_size": kernel_size, "stride": stride, "dilation": 1, "in_channels": c, "out_channels": c + 1}
    assert BlurConv2d(**layer_args, blur_first=blur_first)(X).shape == torch.nn.Conv2d(**layer_args)(X).shape


@pytest.mark.parametrize("pool_args", generate_pool_args())
def test_blur2d_shapes(pool_args):
    n, c, sz, _, _ = pool_args
    X = torch.randn(n, c, sz[0], sz[1])
    assert blur_2d(X).shape == X.shape


def test_default_2d_filter():
    """Composer's: the filter is outer([1, 2, 1], [1, 2, 1]) / 16, shaped (1, 1, 3, 3). Composer
    reads it from its private ``_default_2d_filter()``; here it is the layers' ``blur_filter``
    buffer, the tensor they convolve with."""

    def reference_filter():
        filt = torch.FloatTensor([1, 2, 1])
        filt = torch.outer(filt, filt)
        filt *= 1.0 / filt.sum()
        return filt.view(1, 1, *filt.shape)

    torch.testing.assert_close(BlurMaxPool2d(kernel_size=2).blur_filter, reference_filter())


@pytest.mark.parametrize("pool_args", generate_pool_args())
def test_blur2d_std(pool_args):
    n, c, sz, _, _ = pool_args
    X = torch.randn(n, c, sz[0], sz[1])
    assert torch.std(blur_2d(X)) <= torch.std(X)


def test_blurpool_blurconv2d_params_match_original_params():
    conv2d = torch.nn.Conv2d(16, 32, 3, stride=1, bias=True)
    blurconv = BlurConv2d.from_conv2d(conv2d)
    torch.testing.assert_close(blurconv.conv.weight, conv2d.weight)
    torch.testing.assert_close(blurconv.conv.bias, conv2d.bias)
    assert blurconv.conv.weight.requires_grad
    assert blurconv.conv.bias is not None
    assert blurconv.conv.bias.requires_grad
