"""The image operations RandAugment and AugMix share, checked against their definitions.

Each operation is written here again from its definition (PIL's, as Composer's augmentation
primitives call it), one image at a time with plain loops, and compared with the batched
tensor version. :data:`REFERENCE` and :func:`reference_magnitude` are also what the RandAugment
and AugMix tests replay their draws with.
"""

from __future__ import annotations

import math
import re
import warnings

import pytest
import torch
from pil_support import pixels, random_image
from torch.overrides import TorchFunctionMode

import algorithms.functional as cf
from algorithms._augmentations import (
    AUGMENTATION_SETS,
    OPERATIONS,
    _magnitudes,
    apply_operation,
    check_value_range,
    from_unit_range,
    resolve_augmentation_set,
    to_unit_range,
)

# -- the definitions, one image (C, H, W) of float64 values on the scale peak (255 or 1) -------


def _finish(x: torch.Tensor, peak: float) -> torch.Tensor:
    x = x.clamp(0, peak)
    return x.round() if peak == 255 else x


def _levels(x: torch.Tensor, peak: float) -> list[list[int]]:
    """Each channel's 8-bit levels, flattened."""
    q = x if peak == 255 else (x * 255).round()
    return [[int(v) for v in channel.flatten().tolist()] for channel in q]


def ref_autocontrast(x, _, peak):
    out = x.clone()
    for c in range(x.shape[0]):
        low, high = float(x[c].min()), float(x[c].max())
        if high > low:
            out[c] = (x[c] - low) * peak / (high - low)
    return _finish(out, peak)


def ref_equalize(x, _, peak):
    """PIL's ImageOps.equalize, channel by channel."""
    out = x.clone()
    for c, levels in enumerate(_levels(x, peak)):
        hist = [0] * 256
        for v in levels:
            hist[v] += 1
        used = [h for h in hist if h]
        step = (sum(used) - used[-1]) // 255
        if step == 0:
            out[c] = torch.tensor(levels, dtype=x.dtype).view(x.shape[1:])
        else:
            lut, n = [], step // 2
            for i in range(256):
                lut.append(min(n // step, 255))
                n += hist[i]
            out[c] = torch.tensor([lut[v] for v in levels], dtype=x.dtype).view(x.shape[1:])
    return out if peak == 255 else out / 255


def ref_posterize(x, bits, peak):
    mask = ~(2 ** (8 - int(bits)) - 1) & 0xFF
    out = torch.tensor([[v & mask for v in channel] for channel in _levels(x, peak)], dtype=x.dtype).view(x.shape)
    return out if peak == 255 else out / 255


def ref_solarize(x, threshold, peak):
    out = x.clone()
    for index in torch.cartesian_prod(*(torch.arange(s) for s in x.shape)).tolist():
        if float(x[tuple(index)]) * 255 / peak >= threshold:
            out[tuple(index)] = peak - x[tuple(index)]
    return out


def ref_affine(x, data, peak):
    """PIL's Image.transform(AFFINE, data, BILINEAR): output pixel (i, j) samples the input at
    (a u + b v + c, d u + e v + f), u = j + 0.5 and v = i + 0.5 measured from the top-left
    corner; a point inside the image interpolates its four nearest pixel centres (the edge ones
    repeated), one outside it is black."""
    a, b, c, d, e, f = data
    channels, height, width = x.shape
    out = torch.zeros_like(x)

    def pixel(row, col):
        return x[:, min(max(row, 0), height - 1), min(max(col, 0), width - 1)]

    for i in range(height):
        for j in range(width):
            u, v = a * (j + 0.5) + b * (i + 0.5) + c, d * (j + 0.5) + e * (i + 0.5) + f
            if not (0 <= u < width and 0 <= v < height):
                continue
            col, row = u - 0.5, v - 0.5
            c0, r0 = math.floor(col), math.floor(row)
            dx, dy = col - c0, row - r0
            top = pixel(r0, c0) * (1 - dx) + pixel(r0, c0 + 1) * dx
            bottom = pixel(r0 + 1, c0) * (1 - dx) + pixel(r0 + 1, c0 + 1) * dx
            out[:, i, j] = top * (1 - dy) + bottom * dy
    return _finish(out, peak)


def ref_rotate(x, degrees, peak):
    """PIL's rotate(degrees): counter-clockwise about the centre (w/2, h/2)."""
    theta = -math.radians(degrees)
    cos, sin = math.cos(theta), math.sin(theta)
    cx, cy = x.shape[2] / 2, x.shape[1] / 2
    return ref_affine(x, (cos, sin, cx - cos * cx - sin * cy, -sin, cos, cy + sin * cx - cos * cy), peak)


def ref_gray(x, peak):
    gray = 0.299 * x[0] + 0.587 * x[1] + 0.114 * x[2] if x.shape[0] == 3 else x.mean(dim=0)
    return gray.round() if peak == 255 else gray


def ref_blend(x, degenerate, factor, peak):
    return _finish(degenerate + factor * (x - degenerate), peak)


def ref_color(x, factor, peak):
    return ref_blend(x, ref_gray(x, peak).expand_as(x), factor, peak)


def ref_contrast(x, factor, peak):
    mean = float(ref_gray(x, peak).mean())
    return ref_blend(x, torch.full_like(x, round(mean) if peak == 255 else mean), factor, peak)


def ref_brightness(x, factor, peak):
    return ref_blend(x, torch.zeros_like(x), factor, peak)


def ref_sharpness(x, factor, peak):
    """Blend with PIL's SMOOTH filter: 1 on the eight neighbours, 5 at the centre, over 13;
    the border pixels are the image's own."""
    degenerate = x.clone()
    for i in range(1, x.shape[1] - 1):
        for j in range(1, x.shape[2] - 1):
            value = (x[:, i - 1 : i + 2, j - 1 : j + 2].sum(dim=(1, 2)) + 4 * x[:, i, j]) / 13
            degenerate[:, i, j] = value.round() if peak == 255 else value
    return ref_blend(x, degenerate, factor, peak)


REFERENCE = {
    "autocontrast": ref_autocontrast,
    "equalize": ref_equalize,
    "posterize": ref_posterize,
    "solarize": ref_solarize,
    "rotate": ref_rotate,
    "shear_x": lambda x, m, peak: ref_affine(x, (1, m, 0, 0, 1, 0), peak),
    "shear_y": lambda x, m, peak: ref_affine(x, (1, 0, 0, m, 1, 0), peak),
    "translate_x": lambda x, m, peak: ref_affine(x, (1, 0, m, 0, 1, 0), peak),
    "translate_y": lambda x, m, peak: ref_affine(x, (1, 0, 0, 0, 1, m), peak),
    "color": ref_color,
    "contrast": ref_contrast,
    "brightness": ref_brightness,
    "sharpness": ref_sharpness,
}
for _name in ("color", "contrast", "brightness", "sharpness"):
    REFERENCE[f"{_name}_original"] = REFERENCE[_name]


def reference_magnitude(name: str, severity: float, u: list[float], height: int, width: int) -> float:
    """Composer's augmentation_primitives, with its numpy draws replaced by the three uniform
    draws ``u``: ``np.random.uniform(0.1, severity)`` is ``0.1 + (severity - 0.1) * u[0]``, the
    sign test ``np.random.uniform() > 0.5`` is ``u[1] > 0.5``, and the symmetric sample's branch
    ``u[2] > 0.5``."""
    level = 0.1 + (severity - 0.1) * u[0]
    sign = -1 if u[1] > 0.5 else 1
    if name == "posterize":
        return 4 - int(level * 4 / 10)
    if name == "rotate":
        return int(level * 30 / 10) * sign
    if name == "solarize":
        return 256 - int(level * 256 / 10)
    if name in ("shear_x", "shear_y"):
        return float(level) * 0.3 / 10.0 * sign
    if name == "translate_x":
        return int(level * (width / 3) / 10) * sign
    if name == "translate_y":
        return int(level * (height / 3) / 10) * sign
    if name in ("color", "contrast", "sharpness", "brightness"):
        if u[2] > 0.5:
            factor = 1 + (severity - 1) * u[0]  # np.random.uniform(1, severity)
        else:
            factor = (1 - 0.09 * severity) + 0.09 * severity * u[0]  # np.random.uniform(1 - 0.09 severity, 1)
        return factor * 0.75 if name == "brightness" and factor > 1 else factor
    if name.endswith("_original"):
        return float(level) * 1.8 / 10 + 0.1
    return 0.0


def reference(images: torch.Tensor, name: str, magnitudes) -> torch.Tensor:
    """The definition image by image, on a float64 copy of the batch's own scale."""
    peak = 255.0 if images.dtype == torch.uint8 else 1.0
    return torch.stack(
        [REFERENCE[name](img.double(), float(m), peak) for img, m in zip(images, magnitudes, strict=True)]
    )


def _images(dtype=torch.float32, n=3, size=(3, 7, 6), seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.uint8:
        return torch.randint(0, 256, (n, *size), dtype=torch.uint8, generator=g)
    return torch.rand(n, *size, generator=g, dtype=torch.float64).to(dtype)


def _check(images, name, magnitudes, atol):
    out = apply_operation(images, name, torch.tensor(magnitudes, dtype=torch.float64))
    assert out.dtype == images.dtype and out.shape == images.shape
    torch.testing.assert_close(out.double(), reference(images, name, magnitudes), atol=atol, rtol=0)


class Float64ImageWork(TorchFunctionMode):
    """Records each torch call that makes a float64 tensor of at least ``numel`` elements (an
    image's worth): uint8, float16, bfloat16 and float32 images are worked in float32, so such a
    call is float64 work (twice the memory and, on most GPUs, far slower)."""

    def __init__(self, numel: int):
        super().__init__()
        self.numel, self.calls = numel, []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for value in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(value, torch.Tensor) and value.dtype == torch.float64 and value.numel() >= self.numel:
                self.calls.append(getattr(func, "__name__", repr(func)))
        return out


# -- each operation against its definition ----------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
@pytest.mark.parametrize(
    ("name", "magnitudes"),
    [
        ("autocontrast", [0, 0, 0]),
        ("equalize", [0, 0, 0]),
        ("posterize", [1, 4, 8]),
        ("solarize", [0, 128, 256]),
        ("rotate", [13, -29, 7]),
        ("shear_x", [0.21, -0.3, 0.05]),
        ("shear_y", [-0.17, 0.29, 0.0]),
        ("translate_x", [2, -1, 0]),
        ("translate_y", [-3, 2, 1]),
        ("color", [0.0, 0.4, 1.9]),
        ("contrast", [0.3, 1.0, 1.6]),
        ("brightness", [0.2, 0.9, 1.4]),
        ("sharpness", [0.1, 1.0, 1.8]),
    ],
)
def test_each_operation_matches_its_definition_image_by_image(dtype, name, magnitudes):
    """Each image of the batch gets its own magnitude. uint8 results agree exactly, as PIL's
    levels do (the gray of color and contrast and the smoothed image of sharpness are whole levels
    before the blend), or, for the resampling operations and autocontrast's stretch, within one
    level, where a value was rounded from a float computed in another order."""
    if dtype == torch.uint8:
        near = ("rotate", "shear_x", "shear_y", "translate_x", "translate_y", "autocontrast")
        _check(_images(dtype), name, magnitudes, atol=1 if name in near else 0)
    else:
        _check(_images(dtype), name, magnitudes, atol=1e-5)


def test_solarize_inverts_exactly_the_pixels_at_or_above_the_threshold():
    image = torch.tensor([[[0, 99, 100, 101, 255]]], dtype=torch.uint8)
    assert apply_operation(image, "solarize", 100).tolist() == [[[0, 99, 155, 154, 0]]]
    assert torch.equal(apply_operation(image, "solarize", 256), image)  # Composer's severity-0 threshold
    assert torch.equal(apply_operation(image, "solarize", 0), 255 - image)


def test_posterize_keeps_the_top_bits():
    image = torch.tensor([[[0b10110111, 0b01101001, 0b11111111, 0b00000111]]], dtype=torch.uint8)
    assert apply_operation(image, "posterize", 3).tolist() == [[[0b10100000, 0b01100000, 0b11100000, 0]]]
    assert torch.equal(apply_operation(image, "posterize", 8), image)
    assert not apply_operation(image, "posterize", 0).any()


def test_equalize_makes_the_cumulative_histogram_near_uniform():
    """A skewed 256 x 256 image (the larger of two uniform draws: mostly bright, density 2x):
    after equalization the fraction of pixels at or below each level is close to level / 255,
    as equalization's definition says. Within 0.01: no level holds more than 0.8% of the pixels,
    and PIL's integer step (pixels // 255) is off by under 0.4% at this size."""
    g = torch.Generator().manual_seed(0)
    image = (torch.rand(2, 1, 256, 256, generator=g).amax(dim=0) * 255).round().to(torch.uint8)
    out = apply_operation(image, "equalize").double()
    for level in range(16, 255, 16):
        assert abs(float((out <= level).double().mean()) - level / 255) < 0.01, level
    assert float((image.double() <= 64).double().mean()) < 0.1  # the input was far from uniform


def test_equalize_keeps_pils_integer_lut_on_an_image_of_over_two_to_the_23_pixels():
    """PIL's ``lut[i] = (step // 2 + pixels below i) // step`` is integer arithmetic, exact at any
    size. A 2910 x 2910 image (8,468,100 pixels): 315 pixels at level 2 (the top), so step is
    33207, odd; 8,417,974 at level 0, so level 1 maps to (16603 + 8417974) // 33207 = 253, one
    short of 254 * 33207 = 8434578 (a numerator past 2 ** 23, where a float32 half rounds up to it)."""
    top, dark = 315, 8_417_974
    pixels = 2910 * 2910
    image = torch.cat(
        [
            torch.zeros(dark, dtype=torch.uint8),
            torch.ones(pixels - top - dark, dtype=torch.uint8),
            torch.full((top,), 2, dtype=torch.uint8),
        ]
    ).view(1, 2910, 2910)
    step = (pixels - top) // 255
    assert step == 33207 and (step // 2 + dark) // step == 253 and 254 * step == step // 2 + dark + 1 > 2**23
    out = apply_operation(image, "equalize").view(-1)
    assert [int(out[0]), int(out[dark]), int(out[-1])] == [0, 253, 255]


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
@pytest.mark.parametrize("size", [(16, 16), (16, 20), (40, 40)])
def test_equalize_matches_pils_definition_where_its_step_is_not_zero(dtype, size):
    """Images of 256 pixels or more, so that PIL's step (pixels less the count of the top level,
    over 255) is 1 (16 x 16, 16 x 20) or several (40 x 40), and each channel of each image has
    its own histogram: one skewed to the dark end, one to the bright, one flat."""
    u = torch.rand(2, 3, *size, generator=torch.Generator().manual_seed(1))
    levels = u ** torch.tensor([3.0, 0.3, 1.0]).view(1, 3, 1, 1) * 255
    levels[1] *= 0.8  # the second image stops short of the top levels
    images = levels.round().to(torch.uint8)
    images = images if dtype == torch.uint8 else (images.double() / 255).to(dtype)
    _check(images, "equalize", [0, 0], atol=0 if dtype == torch.uint8 else 1e-6)


@pytest.mark.parametrize("size", [(1, 1), (2, 5), (5, 2), (3, 5), (5, 3), (3, 3)])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float64])
def test_sharpness_of_small_images_smooths_only_the_inner_pixels(size, dtype):
    """PIL's smoothing keeps the border pixels: an image of one or two rows or columns has no
    inner pixel and stays as it is at every factor; one of three has one inner row or column."""
    images = _images(dtype, n=2, size=(3, *size), seed=2)
    _check(images, "sharpness", [0.0, 0.6], atol=0 if dtype == torch.uint8 else 1e-12)
    if min(size) <= 2:
        assert torch.equal(apply_operation(images, "sharpness", 0.0), images)


@pytest.mark.parametrize(
    ("name", "pixels"), [("translate_x", -0.5), ("translate_x", 0.5), ("translate_y", -0.5), ("translate_y", 0.5)]
)
def test_a_sample_point_on_the_top_or_left_edge_is_inside_and_on_the_bottom_or_right_edge_outside(name, pixels):
    """PIL's test is 0 <= u < width: shifted by half a pixel, the first column (or row) samples
    the edge u = 0 and takes the edge pixel; the last samples u = width and is black. (Sides of
    powers of two, where the normalized sample points are exact in floating point.)"""
    image = torch.arange(1, 33, dtype=torch.float64).view(1, 1, 4, 8) / 32
    out = apply_operation(image, name, pixels)
    torch.testing.assert_close(out, reference(image, name, [pixels]))
    edge = out[..., 0] if name == "translate_x" else out[..., 0, :]
    far = out[..., -1] if name == "translate_x" else out[..., -1, :]
    assert (edge > 0).all() if pixels < 0 else not far.any()


def test_equalize_and_autocontrast_keep_a_constant_channel():
    image = torch.stack([torch.full((4, 4), 77), torch.arange(16).view(4, 4) * 3]).to(torch.uint8)
    for name in ("equalize", "autocontrast"):
        out = apply_operation(image, name)
        assert torch.equal(out[0], image[0])
    stretched = apply_operation(image, "autocontrast")[1]
    assert stretched.min() == 0 and stretched.max() == 255


def test_autocontrast_stretches_each_channel_to_the_full_range():
    image = torch.tensor([[[0.2, 0.3], [0.4, 0.6]], [[0.5, 0.5], [0.5, 0.9]]])
    out = apply_operation(image, "autocontrast")
    torch.testing.assert_close(out, torch.tensor([[[0.0, 0.25], [0.5, 1.0]], [[0.0, 0.0], [0.0, 1.0]]]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_rotating_a_square_image_by_90_degrees_is_rot90(dtype):
    """Counter-clockwise, as PIL; exact up to the interpolation's rounding (the sample points fall
    on pixel centres)."""
    image = _images(dtype, n=2, size=(3, 6, 6))
    torch.testing.assert_close(
        apply_operation(image, "rotate", 90), torch.rot90(image, 1, dims=(-2, -1)), atol=1e-5, rtol=0
    )
    torch.testing.assert_close(
        apply_operation(image, "rotate", -90), torch.rot90(image, -1, dims=(-2, -1)), atol=1e-5, rtol=0
    )
    torch.testing.assert_close(apply_operation(image, "rotate", 180), image.flip(-1, -2), atol=1e-5, rtol=0)


def test_translate_shifts_by_the_stated_pixels_and_fills_with_black():
    image = torch.arange(1, 13, dtype=torch.uint8).view(1, 3, 4)
    left = apply_operation(image, "translate_x", 1)  # samples x + 1: the image moves left
    assert left.tolist() == [[[2, 3, 4, 0], [6, 7, 8, 0], [10, 11, 12, 0]]]
    down = apply_operation(image, "translate_y", -2)  # samples y - 2: the image moves down
    assert down.tolist() == [[[0, 0, 0, 0], [0, 0, 0, 0], [1, 2, 3, 4]]]
    assert not apply_operation(image, "translate_x", 4).any()
    assert torch.equal(apply_operation(image, "translate_x"), image)  # the default magnitude, 0, moves nothing


def test_shear_x_moves_each_row_by_its_height():
    """shear_x(s) samples (x + s y, y), y measured from the top edge: with s = 0.5, row i (centre
    i + 0.5) moves left by (i + 0.5) / 2 pixels; past the right edge it is black, and a point
    within the last half pixel takes the edge pixel."""
    image = torch.tensor([[[0.0, 2.0, 4.0, 6.0]] * 3]) / 6
    expected = torch.tensor([[[0.5, 2.5, 4.5, 6.0], [1.5, 3.5, 5.5, 0.0], [2.5, 4.5, 6.0, 0.0]]]) / 6
    torch.testing.assert_close(apply_operation(image, "shear_x", 0.5), expected)
    torch.testing.assert_close(apply_operation(image.transpose(1, 2), "shear_y", 0.5), expected.transpose(1, 2))


@pytest.mark.parametrize("name", ["color", "contrast", "brightness", "sharpness"])
def test_enhancements_are_blends_with_their_degenerate_image(name):
    """Factor 1 is the image itself and factor 0 the degenerate image: gray (color), the mean
    gray (contrast), black (brightness), the smoothed image (sharpness)."""
    image = _images(torch.float64, n=2, size=(3, 5, 5), seed=3)
    torch.testing.assert_close(apply_operation(image, name, 1.0), image)
    degenerate = apply_operation(image, name, 0.0)
    x = image[0]
    gray = 0.299 * x[0] + 0.587 * x[1] + 0.114 * x[2]
    expected = {
        "color": gray.expand_as(x),
        "contrast": torch.full_like(x, float(gray.mean())),
        "brightness": torch.zeros_like(x),
    }
    if name == "sharpness":
        smooth = x.clone()
        window_sums = torch.nn.functional.avg_pool2d(x[None], 3, stride=1)[0] * 9
        smooth[:, 1:-1, 1:-1] = (window_sums + 4 * x[:, 1:-1, 1:-1]) / 13
        expected[name] = smooth
    torch.testing.assert_close(degenerate[0], expected[name])
    half = apply_operation(image, name, 0.5)
    torch.testing.assert_close(half, ((image + degenerate) / 2).clamp(0, 1))


def test_color_of_a_one_channel_image_is_the_image():
    image = _images(torch.float32, n=2, size=(1, 5, 4))
    torch.testing.assert_close(apply_operation(image, "color", 0.0), image)


@pytest.mark.parametrize("name", OPERATIONS)
def test_the_magnitudes_are_composers_mapping_of_the_draws_even_at_one_half(name):
    """Composer flips a geometric operation and takes the upper branch of its symmetric factor
    when its uniform draw is above 0.5, not at 0.5."""
    columns = [(0.0, 0.5, 0.5), (1.0, 0.5, 0.5), (0.3, 0.51, 0.49), (0.7, 0.49, 0.51), (0.5, 1.0, 0.0)]
    u = torch.tensor(columns, dtype=torch.float64).T
    for severity in (0.0, 3.0, 10.0):
        expected = [reference_magnitude(name, severity, list(c), 20, 31) for c in columns]
        torch.testing.assert_close(
            _magnitudes(name, severity, u, 20, 31), torch.tensor(expected, dtype=torch.float64), rtol=0, atol=1e-12
        )


# -- dtypes, shapes, batches ------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float16, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("name", OPERATIONS)
def test_every_operation_keeps_shape_and_dtype_and_leaves_its_input_alone(dtype, name):
    batch = _images(dtype, n=2, size=(3, 6, 5))
    before = batch.clone()
    magnitude = {
        "posterize": 3,
        "solarize": 128,
        "rotate": 20,
        "shear_x": 0.2,
        "shear_y": 0.2,
        "translate_x": 2,
        "translate_y": 2,
    }.get(name, 1.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning of torch's (such as align_corners' default) reaches a training run
        out = apply_operation(batch, name, magnitude)
    assert out.shape == batch.shape and out.dtype == dtype and torch.equal(batch, before)
    single = apply_operation(batch[0], name, magnitude)
    assert single.shape == batch.shape[1:] and single.dtype == dtype
    assert torch.equal(single, out[0])


def test_channels_last_is_kept_and_a_strided_batch_comes_back_contiguous():
    batch = _images(torch.float32, n=2, size=(3, 6, 6)).contiguous(memory_format=torch.channels_last)
    assert apply_operation(batch, "rotate", 10).is_contiguous(memory_format=torch.channels_last)
    strided = _images(torch.uint8, n=2, size=(3, 6, 12))[..., ::2]  # neither layout: made contiguous, as a copy is
    assert apply_operation(strided, "rotate", 10).is_contiguous()


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("name", OPERATIONS)
def test_images_below_float64_are_worked_in_float32(dtype, name):
    """uint8, float16, bfloat16 and float32 batches make no image-sized float64 tensor."""
    batch = _images(dtype, n=2, size=(3, 6, 5))
    with Float64ImageWork(3 * 6 * 5) as work:
        apply_operation(batch, name, 1.0)
    assert work.calls == []


def test_a_float64_batch_is_worked_in_float64_with_its_magnitudes():
    """Brightness 0.1 of a float64 image is 0.1 * x to the last bit: neither the image nor the
    factor passes through float32 (0.1 is not a float32 number)."""
    image = _images(torch.float64, n=2, size=(3, 5, 5))
    assert torch.equal(apply_operation(image, "brightness", 0.1), image * 0.1)
    assert torch.equal(
        apply_operation(image, "brightness", torch.tensor([0.1, 0.3], dtype=torch.float64)),
        image * torch.tensor([0.1, 0.3], dtype=torch.float64).view(2, 1, 1, 1),
    )


@pytest.mark.parametrize(("name", "along"), [("translate_x", -1), ("translate_y", -2)])
def test_a_float64_batch_is_resampled_at_its_float64_sample_points(name, along):
    """A translation by 0.1 pixel samples each pixel's centre shifted by 0.1 (PIL's BILINEAR
    transform): 0.9 of the pixel and 0.1 of its neighbour, the last one the edge pixel itself
    (its point is still inside). For a float64 image that is exact to float64's rounding: the
    shift is not made a float32 number (0.1 + 1.5e-9) on the way."""
    image = _images(torch.float64, n=2, size=(3, 5, 6), seed=4)
    neighbour = torch.cat([image.narrow(along, 1, image.shape[along] - 1), image.narrow(along, -1, 1)], dim=along)
    torch.testing.assert_close(apply_operation(image, name, 0.1), 0.9 * image + 0.1 * neighbour, rtol=0, atol=1e-13)


# -- the sets and the checks -------------------------------------------------------------------


def test_the_sets_are_composers():
    geometric_and_histogram = [
        "autocontrast",
        "equalize",
        "posterize",
        "rotate",
        "solarize",
        "shear_x",
        "shear_y",
        "translate_x",
        "translate_y",
    ]
    assert list(AUGMENTATION_SETS["safe"]) == geometric_and_histogram
    assert list(AUGMENTATION_SETS["all"]) == geometric_and_histogram + ["color", "contrast", "brightness", "sharpness"]
    assert list(AUGMENTATION_SETS["original"]) == geometric_and_histogram + [
        "color_original",
        "contrast_original",
        "brightness_original",
        "sharpness_original",
    ]
    assert resolve_augmentation_set(["rotate", "equalize"]) == ("rotate", "equalize")


#: The operation names as the refusals list them.
NAMES = (
    "autocontrast, equalize, posterize, rotate, solarize, shear_x, shear_y, translate_x, translate_y, color, "
    "contrast, brightness, sharpness, color_original, contrast_original, brightness_original, sharpness_original"
)
#: What a refused augmentation set is told it must be.
ALLOWED_SETS = f"a set name ('all', 'safe', 'original') or a non-empty sequence of operation names from {NAMES}"


def exactly(message: str) -> str:
    """A ``match`` pattern for the whole of ``message``."""
    return f"^{re.escape(message)}$"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("everything", f"augmentation_set='everything': must be {ALLOWED_SETS}"),
        ([], f"augmentation_set=[]: must be {ALLOWED_SETS}"),
        (
            ["rotate", "blur"],
            f"augmentation_set=['rotate', 'blur']: 'blur' is not an operation; must be {ALLOWED_SETS}",
        ),
        (3, f"augmentation_set=3: must be {ALLOWED_SETS}"),
    ],
)
def test_a_bad_augmentation_set_is_refused(value, message):
    with pytest.raises(ValueError, match=exactly(message)):
        resolve_augmentation_set(value)


@pytest.mark.parametrize(
    ("img", "name", "message"),
    [
        (torch.rand(4, 4), "rotate", "img: needs an image (C, H, W) or a batch (N, C, H, W), got (4, 4)"),
        (
            torch.zeros(3, 4, 4, dtype=torch.long),
            "rotate",
            "img: needs uint8 images in [0, 255] or floating point images in [0, 1], got torch.int64",
        ),
        (torch.rand(3, 4, 4), "blur", f"name='blur': must be one of {NAMES}"),
    ],
)
def test_bad_images_are_refused(img, name, message):
    with pytest.raises(ValueError, match=exactly(message)):
        apply_operation(img, name, 1)


@pytest.mark.parametrize("img", [[[[0.5]]], "image"])
def test_an_image_neither_tensor_nor_pil_image_is_a_type_error(img):
    with pytest.raises(
        TypeError, match=exactly(f"img: needs a torch.Tensor or a PIL.Image.Image, got {type(img).__name__}")
    ):
        apply_operation(img, "rotate", 1)


@pytest.mark.parametrize("name", OPERATIONS)
@pytest.mark.parametrize("mode", ["RGB", "L"])
def test_a_pil_image_takes_each_operation_as_uint8_and_comes_back_in_its_mode(name, mode):
    """As Composer's ``augmentation_primitives``, which take PIL images."""
    img = random_image(mode, height=9, width=7, seed=2)
    magnitude = 0.5 if name in ("color", "contrast", "brightness", "sharpness") else 3
    out = apply_operation(img, name, magnitude)
    expected = apply_operation(pixels(img), name, magnitude)
    assert type(out) is type(img) and (out.mode, out.size) == (img.mode, img.size)
    assert torch.equal(pixels(out), expected)


# -- the classes' value range -----------------------------------------------------------------


def test_the_unit_range_of_each_image_is_its_own_min_to_max_and_maps_back():
    """A batch (N, C, H, W) image by image, a single image (C, H, W) as a whole; spans above and
    below 1, and a constant image."""
    g = torch.Generator().manual_seed(0)
    images = torch.randn(4, 2, 4, 4, generator=g) * torch.tensor([1.0, 3.0, 0.0, 0.01]).view(4, 1, 1, 1)
    unit, low, span = to_unit_range(images, None)
    for x, u in zip(images, unit, strict=True):
        if x.max() > x.min():
            torch.testing.assert_close(u, (x - x.min()) / (x.max() - x.min()))
        else:
            assert not u.any()  # a constant image maps to 0 and back to itself
    torch.testing.assert_close(from_unit_range(unit, low, span, images), images)
    single = images[1]
    unit, low, span = to_unit_range(single, None)
    torch.testing.assert_close(unit, (single - single.min()) / (single.max() - single.min()))
    torch.testing.assert_close(from_unit_range(unit, low, span, single), single)


@pytest.mark.parametrize(
    ("dtype", "work"),
    [
        (torch.float16, torch.float32),
        (torch.bfloat16, torch.float32),
        (torch.float32, torch.float32),
        (torch.float64, torch.float64),
    ],
)
@pytest.mark.parametrize("value_range", [None, (-0.1, 0.7)])
def test_the_unit_range_is_float32_for_half_precision_and_maps_back_to_the_images_dtype(dtype, work, value_range):
    """float16 and bfloat16 are mapped in float32, float64 in float64 to the last bit (the range's
    ends included: 0.1 is not a float32 number); mapped back, the images have their own dtype."""
    images = torch.rand(2, 3, 4, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64) - 0.2
    images = images.to(dtype)
    unit, low, span = to_unit_range(images, value_range)
    assert unit.dtype == work
    if value_range is not None and dtype == torch.float64:
        assert torch.equal(unit, ((images - -0.1) / (0.7 - -0.1)).clamp(0, 1))
    back = from_unit_range(unit, low, span, images)
    assert back.dtype == dtype
    if value_range is None and dtype in (torch.float16, torch.bfloat16):
        assert torch.equal(back, images)  # to float32 and back: within float32's rounding, so exact in half precision
    elif value_range is None:
        torch.testing.assert_close(back, images, rtol=0, atol=4 * torch.finfo(dtype).eps)


def test_a_given_value_range_maps_linearly_and_clips():
    images = torch.tensor([[[[-2.0, -1.0, 0.0, 1.0, 3.0]]]])
    unit, low, span = to_unit_range(images, (-1.0, 1.0))
    assert unit.tolist() == [[[[0.0, 0.0, 0.5, 1.0, 1.0]]]]
    assert from_unit_range(unit, low, span, images).tolist() == [[[[-1.0, -1.0, 0.0, 1.0, 1.0]]]]


@pytest.mark.parametrize("value", [(1.0, 1.0), (0, float("inf")), (2, 1), "0,1", (0, 1, 2), (True, 2)])
def test_a_bad_value_range_is_refused(value):
    with pytest.raises(
        ValueError,
        match=exactly(
            f"value_range={value!r}: must be None (each image's own min..max) "
            "or a pair (low, high) of finite numbers with low < high"
        ),
    ):
        check_value_range(value)


# -- agreement with PIL, where it is installed ------------------------------------------------


def test_the_operations_agree_with_pil_within_one_level():
    """PIL is what Composer's operations call; uint8 results agree within one level (PIL
    truncates some intermediate values where these round)."""
    Image = pytest.importorskip("PIL.Image")
    from PIL import ImageEnhance, ImageOps

    g = torch.Generator().manual_seed(0)
    rows, cols = torch.meshgrid(torch.arange(9), torch.arange(11), indexing="ij")
    smooth = torch.stack([rows * 25, cols * 20, (rows + cols) * 12]).clamp(0, 255).to(torch.uint8)
    noisy = torch.randint(0, 256, (3, 9, 11), dtype=torch.uint8, generator=g)
    pil = {
        name: Image.fromarray(image.permute(1, 2, 0).numpy()) for name, image in (("smooth", smooth), ("noisy", noisy))
    }
    cases = [
        ("noisy", "autocontrast", 0, ImageOps.autocontrast),
        ("noisy", "equalize", 0, ImageOps.equalize),
        ("noisy", "posterize", 2, lambda im: ImageOps.posterize(im, 2)),
        ("noisy", "solarize", 90, lambda im: ImageOps.solarize(im, 90)),
        ("smooth", "rotate", 17, lambda im: im.rotate(17, resample=Image.BILINEAR)),
        (
            "smooth",
            "shear_x",
            -0.23,
            lambda im: im.transform(im.size, Image.AFFINE, (1, -0.23, 0, 0, 1, 0), resample=Image.BILINEAR),
        ),
        (
            "smooth",
            "translate_y",
            3,
            lambda im: im.transform(im.size, Image.AFFINE, (1, 0, 0, 0, 1, 3), resample=Image.BILINEAR),
        ),
        ("noisy", "color", 0.4, lambda im: ImageEnhance.Color(im).enhance(0.4)),
        ("noisy", "contrast", 1.6, lambda im: ImageEnhance.Contrast(im).enhance(1.6)),
        ("noisy", "brightness", 0.7, lambda im: ImageEnhance.Brightness(im).enhance(0.7)),
        ("noisy", "sharpness", 1.8, lambda im: ImageEnhance.Sharpness(im).enhance(1.8)),
    ]
    for which, name, magnitude, operation in cases:
        ours = apply_operation({"smooth": smooth, "noisy": noisy}[which], name, magnitude).int()
        theirs = torch.from_numpy(__import__("numpy").asarray(operation(pil[which])).copy()).permute(2, 0, 1).int()
        assert (ours - theirs).abs().max() <= 1, name


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float16, torch.float32])
def test_on_cuda_every_operation_stays_on_the_device_and_agrees_with_the_cpu(dtype):
    batch = _images(dtype, n=3, size=(3, 8, 8))
    for name in OPERATIONS:
        magnitudes = torch.tensor([0.5, 1.5, 3.0], dtype=torch.float64)
        out = apply_operation(batch.cuda(), name, magnitudes)
        assert out.device.type == "cuda" and out.dtype == dtype
        torch.testing.assert_close(
            out.cpu().double(),
            apply_operation(batch, name, magnitudes).double(),
            atol=1 if dtype == torch.uint8 else 2e-3,
            rtol=0,
        )


# -- PIL images in the per-image forms, as Composer's augmix_image and randaugment_image take them --

IMAGE_FORMS = {"augmix_image": {"width": 3}, "randaugment_image": {"depth": 3}}


@pytest.mark.parametrize("form", sorted(IMAGE_FORMS))
@pytest.mark.parametrize("mode", ["RGB", "L", "RGBA"])
def test_a_pil_image_is_augmented_as_uint8_and_given_back_in_its_mode(form, mode):
    augment = getattr(cf, form)
    img = random_image(mode, height=9, width=7, seed=6)
    out = augment(img, severity=9, **IMAGE_FORMS[form], generator=torch.Generator().manual_seed(4))
    expected = augment(pixels(img), severity=9, **IMAGE_FORMS[form], generator=torch.Generator().manual_seed(4))
    assert type(out) is type(img) and (out.mode, out.size) == (img.mode, img.size)
    assert torch.equal(pixels(out), expected)


@pytest.mark.parametrize("form", sorted(IMAGE_FORMS))
@pytest.mark.parametrize("mode", ["P", "I", "F", "1"])
def test_a_pil_image_not_of_8_bit_levels_is_refused(form, mode):
    message = (
        f"img: needs a PIL image of 8-bit levels (mode L, RGB, RGBA, ...), got mode {mode!r}; "
        "convert it first, e.g. img.convert('RGB')"
    )
    with pytest.raises(ValueError, match=exactly(message)):
        getattr(cf, form)(random_image(mode))


@pytest.mark.parametrize("form", sorted(IMAGE_FORMS))
@pytest.mark.parametrize("img", [[[[0.5]]], "image", None])
def test_an_input_neither_tensor_nor_pil_image_is_a_type_error(form, img):
    with pytest.raises(
        TypeError, match=exactly(f"img: needs a torch.Tensor or a PIL.Image.Image, got {type(img).__name__}")
    ):
        getattr(cf, form)(img)
