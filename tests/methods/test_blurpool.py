"""BlurPool's own semantics, checked against its definition (Zhang, 2019) and Composer's tests.

The filter is the binomial ``[1, 2, 1]^T [1, 2, 1] / 16``, applied to each channel on its own
with the border reflected; a strided convolution becomes blur-then-convolve (or convolve at
stride 1, then a strided blur), a max-pool becomes a dense max, a blur and the subsampling. The
tests every method passes (it trains in the Trainer, its functional and class defaults agree)
already run from the metadata registry.
"""

from __future__ import annotations

import copy
import itertools
import re

import pytest
import torch
import torch.nn.functional as F
from trainer_support import Observed

import algorithms.functional as cf
from algorithms import BlurPool
from algorithms.blurpool.blurpool import BlurConv2d, BlurMaxPool2d, blur_2d, blur_filter
from algorithms.core import Event, State, Trainer
from algorithms.core.time import Duration
from algorithms.models import resnet18, resnet20
from algorithms.surgery import NoModulesReplacedWarning


class ConvModel(torch.nn.Module):
    """Composer's test model: a strided convolution with 32 input channels, a strided one with 8,
    an unstrided one, a max-pool and two linear layers."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(32, 8, 3, stride=2, padding=1, bias=False)
        self.conv2 = torch.nn.Conv2d(8, 32, 3, stride=2, padding=1, bias=False)  # too few input channels
        self.conv3 = torch.nn.Conv2d(32, 64, 3, stride=1, padding=1, bias=False)  # not strided
        self.pool1 = torch.nn.MaxPool2d(kernel_size=2, stride=2, padding=1)
        self.pool2 = torch.nn.AdaptiveAvgPool2d(1)
        self.flatten = torch.nn.Flatten()
        self.linear1 = torch.nn.Linear(64, 48)
        self.linear2 = torch.nn.Linear(48, 10)

    def forward(self, x):
        x = self.pool1(self.conv3(self.conv2(self.conv1(x))))
        return self.linear2(self.linear1(self.flatten(self.pool2(x))))


def _reference_blur(x: torch.Tensor, stride: int = 1) -> torch.Tensor:
    """The definition pixel by pixel: reflect the border by one pixel, weight the 3 x 3
    neighbourhood by outer([1, 2, 1], [1, 2, 1]) / 16, keep every stride-th pixel."""
    n, c, h, w = x.shape
    weights = [[1, 2, 1], [2, 4, 2], [1, 2, 1]]
    padded = F.pad(x, (1, 1, 1, 1), mode="reflect")
    out = torch.zeros_like(x)
    for i in range(h):
        for j in range(w):
            out[:, :, i, j] = sum(weights[a][b] * padded[:, :, i + a, j + b] for a in range(3) for b in range(3)) / 16
    return out[:, :, ::stride, ::stride]


def _reference_correlate(x: torch.Tensor, filter: torch.Tensor) -> torch.Tensor:
    """Any odd (kh, kw) filter, pixel by pixel: reflect the border by kh // 2 rows and kw // 2
    columns, then weight each neighbourhood by the filter (a cross-correlation)."""
    kh, kw = filter.shape
    padded = F.pad(x, (kw // 2, kw // 2, kh // 2, kh // 2), mode="reflect")
    out = torch.zeros_like(x)
    for i in range(x.shape[-2]):
        for j in range(x.shape[-1]):
            out[:, :, i, j] = (padded[:, :, i : i + kh, j : j + kw] * filter).sum(dim=(-2, -1))
    return out


# -- the filter and blur_2d ---------------------------------------------------------------------


def test_the_filter_is_the_outer_product_of_the_binomial_row_and_sums_to_one():
    row = torch.tensor([1.0, 2.0, 1.0]) / 4
    assert torch.equal(blur_filter(), torch.outer(row, row))
    assert blur_filter().sum() == 1
    assert blur_filter(torch.float64).dtype == torch.float64


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("size", [(5, 5), (4, 7), (8, 8)])
def test_blur_2d_matches_the_definition(stride, size):
    x = torch.randn(2, 3, *size, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    out = blur_2d(x, stride=stride)
    assert out.shape == (2, 3, -(-size[0] // stride), -(-size[1] // stride))
    torch.testing.assert_close(out, _reference_blur(x, stride), rtol=0, atol=1e-12)


def test_blurring_a_constant_image_leaves_it_constant():
    for shape in ((1, 2, 6, 6), (1, 2, 1, 5), (1, 1, 1, 1)):
        x = torch.full(shape, 3.5)
        assert torch.allclose(blur_2d(x), x, rtol=0, atol=1e-6)
        assert torch.allclose(blur_2d(x, stride=2), x[:, :, ::2, ::2], rtol=0, atol=1e-6)
    # A 5 x 5 filter cannot reflect a side of 2 pixels (or fewer) by 2: that side is replicated.
    box = torch.ones(5, 5) / 25
    for shape in ((1, 2, 2, 2), (1, 2, 2, 6), (1, 2, 6, 2), (1, 1, 3, 3)):
        x = torch.full(shape, 3.5)
        assert torch.allclose(blur_2d(x, filter=box), x, rtol=0, atol=1e-6)


@pytest.mark.parametrize("shape", [(5, 5), (3, 5), (5, 3), (1, 3), (5, 1)])
def test_blur_2d_with_any_odd_filter_matches_the_definition(shape):
    """The border is reflected by half the filter's height and width, whatever its size."""
    g = torch.Generator().manual_seed(4)
    x = torch.randn(2, 3, 6, 7, generator=g, dtype=torch.float64)
    filter = torch.rand(*shape, generator=g, dtype=torch.float64)
    torch.testing.assert_close(blur_2d(x, filter=filter), _reference_correlate(x, filter), rtol=0, atol=1e-12)


def test_a_filter_in_another_dtype_is_cast_to_the_inputs():
    x = torch.randn(2, 3, 6, 6, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    out = blur_2d(x, filter=blur_filter(torch.float32))
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, _reference_blur(x), rtol=0, atol=1e-12)


@pytest.mark.parametrize(("n", "c", "size"), list(itertools.product([2], [2], [(3, 3), (3, 7), (4, 4)])))
def test_blur_2d_keeps_the_shape_and_does_not_raise_the_spread(n, c, size):
    """Composer's blur_2d tests: the shape is kept and the standard deviation does not grow."""
    x = torch.randn(n, c, *size, generator=torch.Generator().manual_seed(1))
    out = blur_2d(x)
    assert out.shape == x.shape and torch.std(out) <= torch.std(x)


def test_blur_2d_takes_a_custom_filter():
    x = torch.randn(1, 2, 5, 5)
    identity = torch.zeros(3, 3)
    identity[1, 1] = 1
    assert torch.equal(blur_2d(x, filter=identity), x)
    assert torch.equal(blur_2d(x, filter=identity[None, None].repeat(2, 1, 1, 1)), x)


@pytest.mark.parametrize(
    ("filter_shape", "message"),
    [
        ((2, 2), "filter: needs odd height and width, got 2 x 2"),
        ((3, 2), "filter: needs odd height and width, got 3 x 2"),
        ((2, 3), "filter: needs odd height and width, got 2 x 3"),
        ((3, 1, 3, 3), "filter: needs shape (kh, kw), (1, 1, kh, kw) or (2, 1, kh, kw), got (3, 1, 3, 3)"),
        ((1, 2, 3, 3), "filter: needs shape (kh, kw), (1, 1, kh, kw) or (2, 1, kh, kw), got (1, 2, 3, 3)"),
        ((2, 1, 3), "filter: needs shape (kh, kw), (1, 1, kh, kw) or (2, 1, kh, kw), got (2, 1, 3)"),
    ],
)
def test_blur_2d_refuses_a_bad_filter(filter_shape, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        blur_2d(torch.randn(1, 2, 5, 5), filter=torch.ones(filter_shape))


def test_blur_2d_refuses_an_input_that_is_not_a_batch():
    message = "input: blur_2d needs a batch (N, C, H, W), got shape (2, 5, 5)"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        blur_2d(torch.randn(2, 5, 5))


def test_blurring_before_subsampling_removes_the_aliasing_of_a_one_pixel_shift():
    """The paper's point: stride-2 subsampling of stripes one pixel wide gives all ones or all
    zeros depending on a one-pixel shift; blurred first, both shifts give one half inside."""
    stripes = (torch.arange(8) % 2).float().expand(1, 1, 8, 8).contiguous()
    shifted = torch.roll(stripes, 1, dims=-1)
    plain = stripes[..., ::2, ::2], shifted[..., ::2, ::2]
    assert torch.equal(plain[0], torch.zeros(1, 1, 4, 4)) and torch.equal(plain[1], torch.ones(1, 1, 4, 4))
    blurred = blur_2d(stripes, stride=2), blur_2d(shifted, stride=2)
    inside = (..., slice(None), slice(1, None))  # away from the reflected left border
    assert torch.allclose(blurred[0][inside], torch.full_like(blurred[0][inside], 0.5))
    assert torch.allclose(blurred[1][inside], torch.full_like(blurred[1][inside], 0.5))


# -- the modules --------------------------------------------------------------------------------


def _pool_args():
    return list(itertools.product([(3, 3), (3, 7), (4, 4)], [1, 2], [(1, 1), (1, 3), (3, 3)]))


@pytest.mark.parametrize(("size", "stride", "kernel_size"), _pool_args())
def test_blur_max_pool_has_the_shape_of_max_pool(size, stride, kernel_size):
    x = torch.randn(2, 2, *size)
    args = dict(kernel_size=kernel_size, stride=stride, dilation=1)
    assert BlurMaxPool2d(**args)(x).shape == torch.nn.MaxPool2d(**args)(x).shape


@pytest.mark.parametrize("ceil_mode", [False, True])
@pytest.mark.parametrize(
    ("kernel_size", "stride", "padding", "dilation"),
    [
        (2, 2, 0, 1),
        (3, 2, 0, 1),
        (3, 2, 1, 1),
        (2, 3, 1, 1),
        (1, 3, 0, 1),
        (3, 3, 1, 2),
        ((3, 2), (2, 3), (1, 0), (1, 2)),
    ],
)
def test_blur_max_pool_has_max_pools_shape_in_either_ceil_mode(kernel_size, stride, padding, dilation, ceil_mode):
    """For every size from 5 to 12 pixels, as torch.nn.MaxPool2d gives it (in ceil mode one more
    row or column where a last window is cut by the edge, at 8 x 8 with a window of 3 at stride 2, say)."""
    args = dict(kernel_size=kernel_size, stride=stride, padding=padding, dilation=dilation, ceil_mode=ceil_mode)
    for height, width in itertools.product(range(5, 13), [5, 8, 11]):
        x = torch.randn(1, 2, height, width)
        assert BlurMaxPool2d(**args)(x).shape == torch.nn.MaxPool2d(**args)(x).shape, (height, width)


def _dense_max_of_cut_windows(x: torch.Tensor, kernel: int, padding: int, rows: int, cols: int) -> torch.Tensor:
    """The maximum over each stride-1 window ``[i - padding, i - padding + kernel)`` (and alike for
    columns) of the pixels it holds inside the image, for ``rows`` x ``cols`` window positions."""
    out = torch.empty(*x.shape[:2], rows, cols, dtype=x.dtype)
    for i in range(rows):
        for j in range(cols):
            top, left = max(i - padding, 0), max(j - padding, 0)
            window = x[:, :, top : i - padding + kernel, left : j - padding + kernel]
            out[:, :, i, j] = window.amax(dim=(-2, -1))
    return out


@pytest.mark.parametrize(("size", "kernel", "padding", "expected"), [(8, 3, 0, 4), (9, 2, 0, 5), (8, 2, 1, 5)])
def test_in_ceil_mode_the_last_row_and_column_blur_the_maximum_of_the_cut_window(size, kernel, padding, expected):
    """At stride 2: the dense maxima of every window that starts inside the image or its left
    padding, the partial last one included, blurred and subsampled, as torch.nn.MaxPool2d(ceil_mode=True)
    keeps that window (8 x 8 with a window of 3 gives 4 x 4, not the 3 x 3 of the full windows alone)."""
    x = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    pool = torch.nn.MaxPool2d(kernel, stride=2, padding=padding, ceil_mode=True)
    assert pool(x).shape[-2:] == (expected, expected)
    dense = _dense_max_of_cut_windows(x, kernel, padding, 2 * expected - 1, 2 * expected - 1)
    out = BlurMaxPool2d.from_maxpool2d(pool).double()(x)
    torch.testing.assert_close(out, _reference_blur(dense, stride=2), rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    ("kernel_size", "stride", "padding", "dilation"),
    [(3, 2, 1, 1), (2, None, 0, 1), (3, 2, 1, 2), (3, (1, 2), (1, 0), (2, 1))],
)
def test_blur_max_pool_is_a_dense_max_then_a_strided_blur(kernel_size, stride, padding, dilation):
    """The max over the window (with its padding and dilation) at stride 1, then the blur
    subsampled by the stride, which is the window's size when none is given."""
    x = torch.randn(2, 3, 9, 9, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    pool = torch.nn.MaxPool2d(kernel_size, stride=stride, padding=padding, dilation=dilation)
    blurred = BlurMaxPool2d.from_maxpool2d(pool).double()
    dense = F.max_pool2d(x, kernel_size, stride=1, padding=padding, dilation=dilation)
    step = pool.stride if isinstance(pool.stride, tuple) else (pool.stride, pool.stride)
    expected = _reference_blur(dense)[:, :, :: step[0], :: step[1]]
    torch.testing.assert_close(blurred(x), expected, rtol=0, atol=1e-12)
    direct = BlurMaxPool2d(kernel_size, stride=stride, padding=padding, dilation=dilation).double()
    torch.testing.assert_close(direct(x), expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    "pool",
    [
        torch.nn.MaxPool2d(3),
        torch.nn.MaxPool2d(2, stride=2, padding=1),
        torch.nn.MaxPool2d(3, stride=(2, 1), padding=1, dilation=2, ceil_mode=True),
    ],
    ids=["defaults", "padded", "every-setting"],
)
def test_blur_max_pool_keeps_the_window_of_the_max_pool(pool):
    """from_maxpool2d keeps the window, stride, padding, dilation and ceil mode: the repr says so,
    as the pool's does."""
    assert repr(BlurMaxPool2d.from_maxpool2d(pool)) == "Blur" + repr(pool)


def test_blur_max_pool_defaults_are_those_of_max_pool():
    """The stride is the window, no padding, dilation 1, no ceil mode."""
    assert repr(BlurMaxPool2d(3)) == "Blur" + repr(torch.nn.MaxPool2d(3))


@pytest.mark.parametrize("blur_first", [True, False])
@pytest.mark.parametrize(("size", "stride", "kernel_size"), _pool_args())
def test_blur_conv_has_the_shape_of_the_convolution(size, stride, kernel_size, blur_first):
    x = torch.randn(2, 2, *size)
    args = dict(kernel_size=kernel_size, stride=stride, dilation=1, in_channels=2, out_channels=3)
    conv = torch.nn.Conv2d(**args)
    assert BlurConv2d.from_conv2d(conv, blur_first=blur_first)(x).shape == conv(x).shape


def _blur_conv_reference(conv: torch.nn.Conv2d, x: torch.Tensor, blur_first: bool) -> torch.Tensor:
    """``conv(blur(x))``, or the same convolution at stride 1 followed by the blur subsampled by
    its stride."""
    if blur_first:
        return conv(_reference_blur(x))
    dense = copy.deepcopy(conv)
    dense.stride = (1, 1)
    return _reference_blur(dense(x))[:, :, :: conv.stride[0], :: conv.stride[1]]


@pytest.mark.parametrize("blur_first", [True, False])
@pytest.mark.parametrize(
    "settings",
    [
        dict(stride=2, padding=1),
        dict(stride=2, padding=2, dilation=2),
        dict(stride=(2, 1), padding=1, groups=2),
        dict(stride=2, padding=1, bias=False),
        dict(stride=2, padding=1, padding_mode="circular"),
    ],
    ids=["plain", "dilated", "grouped", "no-bias", "circular"],
)
def test_blur_conv_is_blur_then_conv_or_conv_then_strided_blur(blur_first, settings):
    """from_conv2d keeps every setting of the convolution: its padding (and padding mode),
    dilation, groups and bias, or the lack of one."""
    g = torch.Generator().manual_seed(3)
    conv = torch.nn.Conv2d(4, 6, 3, **settings).double()
    x = torch.randn(2, 4, 9, 9, generator=g, dtype=torch.float64)
    blur = BlurConv2d.from_conv2d(conv, blur_first=blur_first).double()
    assert (blur.conv.bias is None) == (conv.bias is None)
    torch.testing.assert_close(blur(x), _blur_conv_reference(conv, x, blur_first), rtol=0, atol=1e-12)


@pytest.mark.parametrize("blur_first", [True, False])
def test_blur_conv_defaults_are_those_of_a_stride_2_convolution(blur_first):
    """BlurConv2d(c_in, c_out, k) takes torch.nn.Conv2d's defaults (no padding, dilation 1, one
    group, a bias, zero padding) with a stride of 2, and blurs first unless told otherwise."""
    blur = BlurConv2d(4, 6, 3) if blur_first else BlurConv2d(4, 6, 3, blur_first=False)
    reference = torch.nn.Conv2d(4, 6, 3, stride=2 if blur_first else 1)
    assert blur.blur_first is blur_first and repr(blur.conv) == repr(reference)
    assert blur.conv.padding_mode == "zeros"
    assert BlurConv2d.from_conv2d(torch.nn.Conv2d(4, 6, 3, stride=2)).blur_first is True
    if not blur_first:
        reference = torch.nn.Conv2d(4, 6, 3, stride=2)
    reference.load_state_dict(blur.conv.state_dict())
    x = torch.randn(2, 4, 9, 9)
    torch.testing.assert_close(blur(x), _blur_conv_reference(reference, x, blur_first), rtol=1e-5, atol=1e-6)


def test_blur_conv_copies_the_weights_and_bias_of_the_original():
    """Composer's: the parameters match the original's, are trainable, and are new tensors."""
    conv = torch.nn.Conv2d(16, 32, 3, stride=1, bias=True)
    blur = BlurConv2d.from_conv2d(conv)
    assert torch.equal(blur.conv.weight, conv.weight) and torch.equal(blur.conv.bias, conv.bias)
    assert blur.conv.weight.requires_grad and blur.conv.bias.requires_grad
    assert blur.conv.weight is not conv.weight
    assert "blur_filter" not in blur.state_dict()  # a constant, not state


def test_the_filters_are_not_saved_in_the_state_dict():
    """The modules' filters are constants: a blurred model's state dict holds its parameters and
    batch-norm statistics and nothing else."""
    model = cf.apply_blurpool(resnet18())
    assert type(model.maxpool) is BlurMaxPool2d
    assert [k for k in model.state_dict() if "blur" in k] == []
    assert "blur_filter" not in BlurMaxPool2d(2).state_dict()


# -- apply_blurpool -----------------------------------------------------------------------------


def _strided_convs(model, min_channels=16):
    return [
        n
        for n, m in model.named_modules()
        if isinstance(m, torch.nn.Conv2d) and max(m.stride) > 1 and m.in_channels >= min_channels
    ]


@pytest.mark.parametrize("min_channels", [0, 16, 17, 32, 33])
def test_on_resnet20_it_replaces_exactly_the_strided_convolutions_with_enough_channels(min_channels):
    model = resnet20()
    expected = _strided_convs(model, min_channels)
    before = copy.deepcopy(model)
    if not expected:
        with pytest.warns(NoModulesReplacedWarning, match="BlurPool"):
            cf.apply_blurpool(model, min_channels=min_channels)
        return
    assert cf.apply_blurpool(model, min_channels=min_channels) is model
    replaced = [n for n, m in model.named_modules() if isinstance(m, BlurConv2d)]
    assert replaced == expected
    if min_channels <= 16:
        assert replaced == ["layer2.0.conv1", "layer2.0.downsample.0", "layer3.0.conv1", "layer3.0.downsample.0"]
    for name in replaced:
        assert torch.equal(model.get_submodule(name).conv.weight, before.get_submodule(name).weight)


def test_by_default_it_blurs_first_and_convolutions_of_16_channels_are_blurred():
    """The defaults, Composer's: blur before the convolution, and min_channels=16."""
    g = torch.Generator().manual_seed(6)
    model = torch.nn.Sequential(torch.nn.Conv2d(16, 8, 3, stride=2, padding=1), torch.nn.MaxPool2d(2)).double()
    conv = copy.deepcopy(model[0])
    cf.apply_blurpool(model)
    assert type(model[0]) is BlurConv2d and model[0].blur_first is True
    x = torch.randn(2, 16, 8, 8, generator=g, dtype=torch.float64)
    torch.testing.assert_close(model[0](x), conv(_reference_blur(x)), rtol=0, atol=1e-12)


@pytest.mark.parametrize("blur_first", [True, False])
def test_blur_first_decides_the_order_of_each_replaced_convolution(blur_first):
    model = ConvModel().double()
    conv = copy.deepcopy(model.conv1)
    cf.apply_blurpool(model, blur_first=blur_first)
    assert model.conv1.blur_first is blur_first
    x = torch.randn(2, 32, 8, 8, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    torch.testing.assert_close(model.conv1(x), _blur_conv_reference(conv, x, blur_first), rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    "layers", [[], [torch.nn.Conv2d(16, 16, 3, padding=1, bias=False)]], ids=["no-tensors", "one-tensor"]
)
def test_a_model_with_few_or_no_tensors_gets_its_max_pool_blurred(layers):
    model = torch.nn.Sequential(*copy.deepcopy(layers), torch.nn.MaxPool2d(2))
    cf.apply_blurpool(model)
    assert type(model[-1]) is BlurMaxPool2d
    assert model(torch.randn(1, 16, 8, 8)).shape == (1, 16, 4, 4)


def test_on_resnet18_the_max_pool_is_replaced_too():
    model = resnet18()
    strided = _strided_convs(model)
    cf.apply_blurpool(model)
    assert type(model.maxpool) is BlurMaxPool2d
    assert sorted(n for n, m in model.named_modules() if isinstance(m, BlurConv2d)) == sorted(strided)
    assert model(torch.randn(1, 3, 64, 64)).shape == (1, 1000)


@pytest.mark.parametrize(
    ("replace_convs", "replace_maxpools", "blur_first"),
    [
        (True, True, True),
        (True, True, False),
        (True, False, True),
        (True, False, False),
        (False, True, True),
        (False, True, False),
    ],
)
def test_composers_conv_model(replace_convs, replace_maxpools, blur_first):
    """Composer's tests on its ConvModel: conv1 is replaced (32 input channels, stride 2), conv2
    (8 input channels) and conv3 (stride 1) are not, pool1 is replaced by the flag, conv1's
    weights are kept, and the output shape is unchanged."""
    model = ConvModel()
    weight = model.conv1.weight.detach().clone()
    x = torch.randn(2, 32, 16, 16)
    shape = model(x).shape
    cf.apply_blurpool(model, replace_convs=replace_convs, replace_maxpools=replace_maxpools, blur_first=blur_first)
    assert type(model.conv1) is (BlurConv2d if replace_convs else torch.nn.Conv2d)
    assert type(model.conv2) is torch.nn.Conv2d and type(model.conv3) is torch.nn.Conv2d
    assert type(model.pool1) is (BlurMaxPool2d if replace_maxpools else torch.nn.MaxPool2d)
    conv1 = model.conv1.conv if replace_convs else model.conv1
    assert torch.equal(conv1.weight, weight)
    assert model(x).shape == shape


def test_applying_it_twice_blurs_once():
    model = resnet20()
    cf.apply_blurpool(model)
    once = repr(model)
    with pytest.warns(NoModulesReplacedWarning):
        cf.apply_blurpool(model)
    assert repr(model) == once


def test_an_optimizer_built_before_holds_the_new_parameters_and_none_of_the_old():
    model = ConvModel()
    old = model.conv1.weight
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    cf.apply_blurpool(model, optimizers=optimizer)
    held = [p for group in optimizer.param_groups for p in group["params"]]
    assert all(p is not old for p in held)
    assert any(p is model.conv1.conv.weight for p in held)
    assert {id(p) for p in held} == {id(p) for p in model.parameters()}
    before = model.conv1.conv.weight.detach().clone()
    model(torch.randn(2, 32, 8, 8)).sum().backward()
    optimizer.step()
    assert not torch.equal(model.conv1.conv.weight, before)


@pytest.mark.slow
def test_forward_and_backward_after_surgery_and_dtype_and_device_are_kept():
    model = resnet18().double()
    cf.apply_blurpool(model)
    for module in (model.maxpool, model.layer2[0].conv1):
        assert module.blur_filter.dtype == torch.float64
    x = torch.randn(2, 3, 32, 32, dtype=torch.float64, requires_grad=True)
    out = model(x)
    assert out.dtype == torch.float64
    out.sum().backward()
    assert x.grad is not None and model.layer2[0].conv1.conv.weight.grad is not None


def test_channels_last_inputs_and_weights_work():
    model = resnet20().to(memory_format=torch.channels_last)
    cf.apply_blurpool(model)
    x = torch.randn(2, 3, 16, 16).contiguous(memory_format=torch.channels_last)
    reference = copy.deepcopy(model).to(memory_format=torch.contiguous_format)
    torch.testing.assert_close(model(x), reference(x.contiguous()), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"min_channels": -1}, "min_channels=-1: must be an integer in [0, inf)"),
        ({"min_channels": 1.5}, "min_channels=1.5: must be an integer in [0, inf)"),
        ({"min_channels": True}, "min_channels=True: must be an integer in [0, inf)"),
        ({"blur_first": 1}, "blur_first=1: must be True or False"),
        ({"replace_convs": "yes"}, "replace_convs='yes': must be True or False"),
        ({"replace_maxpools": None}, "replace_maxpools=None: must be True or False"),
        (
            {"replace_convs": False, "replace_maxpools": False},
            "replace_convs=False, replace_maxpools=False: BlurPool would replace nothing; set one of them",
        ),
    ],
)
def test_bad_hyperparameters_fail_with_a_clear_error(kwargs, message):
    match = f"^{re.escape(message)}$"
    with pytest.raises(ValueError, match=match):
        BlurPool(**kwargs)
    model = resnet20()
    before = repr(model)
    with pytest.raises(ValueError, match=match):
        cf.apply_blurpool(model, **kwargs)
    assert repr(model) == before


def test_a_model_without_strided_convolutions_or_max_pools_warns():
    """Composer's: a linear model, and a stride-1 convolution with min_channels above its channels.
    The warning names the method and what it looked for."""
    message = "BlurPool: no module of the model matched (MaxPool2d, Conv2d); the model is unchanged"
    with pytest.warns(NoModulesReplacedWarning, match=f"^{re.escape(message)}$"):
        cf.apply_blurpool(torch.nn.Linear(16, 32))
    with pytest.warns(NoModulesReplacedWarning, match=f"^{re.escape(message)}$"):
        cf.apply_blurpool(torch.nn.Sequential(torch.nn.Conv2d(32, 64, 3, stride=1)), min_channels=64)


# -- the class in the Trainer --------------------------------------------------------------------


def test_it_matches_only_init():
    from algorithms.core import Event

    algo = BlurPool()
    assert [e for e in Event if algo.match(e, None)] == [Event.INIT]


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"replace_convs": False},
        {"replace_maxpools": False},
        {"blur_first": False},
        {"min_channels": 0},
        {"min_channels": 33},
    ],
)
def test_at_init_it_blurs_what_its_arguments_say(kwargs):
    """On Composer's ConvModel: conv1 (32 input channels, stride 2) and conv2 (8, stride 2) are
    blurred when they have min_channels (default 16) or more, pool1 unless replace_maxpools is
    False, each convolution first unless blur_first is False."""
    model = ConvModel()
    BlurPool(**kwargs).apply(Event.INIT, State(model=model, max_duration=Duration.parse("1ep")), None)
    min_channels = kwargs.get("min_channels", 16) if kwargs.get("replace_convs", True) else 1000
    for name, channels in (("conv1", 32), ("conv2", 8)):
        module = getattr(model, name)
        assert type(module) is (BlurConv2d if channels >= min_channels else torch.nn.Conv2d), name
        if type(module) is BlurConv2d:
            assert module.blur_first is kwargs.get("blur_first", True)
    assert type(model.conv3) is torch.nn.Conv2d
    assert type(model.pool1) is (BlurMaxPool2d if kwargs.get("replace_maxpools", True) else torch.nn.MaxPool2d)


def test_in_the_trainer_the_model_trained_is_blurred_and_the_optimizer_holds_it():
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(4, 3, 16, 16, generator=g), torch.randint(0, 10, (4,), generator=g)) for _ in range(3)]
    model = resnet20()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    seen = Observed()
    trainer = Trainer(model, batches, "3ba", optimizer=optimizer, algorithms=[BlurPool(), seen], seed=0, device="cpu")
    start = trainer.state.model.layer2[0].conv1.conv.weight.detach().clone()
    trainer.fit()
    trained = trainer.state.model
    assert type(trained.layer2[0].conv1) is BlurConv2d and type(trained.layer3[0].downsample[0]) is BlurConv2d
    blurred = sum(type(m) in (BlurConv2d, BlurMaxPool2d) for m in trained.modules())
    assert trainer.method_log.records["BlurPool"]["activity"] == {"modules_replaced": blurred}
    assert {id(p) for g in optimizer.param_groups for p in g["params"]} == {id(p) for p in trained.parameters()}
    assert not torch.equal(trained.layer2[0].conv1.conv.weight, start)  # the new parameters are trained
    assert len(seen.losses) == 3 and all(torch.isfinite(loss) for loss in seen.losses)


@pytest.mark.cuda
def test_on_cuda_the_replacements_live_on_the_model_device():
    model = resnet18().cuda()
    cf.apply_blurpool(model)
    assert model.maxpool.blur_filter.is_cuda and model.layer2[0].conv1.blur_filter.is_cuda
    assert model(torch.randn(2, 3, 64, 64, device="cuda")).is_cuda
