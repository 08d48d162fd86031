"""Progressive Resizing's own semantics, checked against its definition.

``resize_batch`` makes images of ``int(s * H)`` by ``int(s * W)`` pixels: ``mode="resize"`` is
nearest-neighbour interpolation (output pixel ``(i, j)`` is input pixel ``(floor(i / s),
floor(j / s))``, PyTorch's ``F.interpolate(..., mode="nearest")``); ``mode="crop"`` is one window
``input[..., t:t + h, l:l + w]`` for the whole batch, with ``t`` and ``l`` uniform over every place
it fits. The class's schedule (Composer's): the scale is ``s0`` until the delay ``d``, then
``s0 + (1 - s0) * (p - d) / (1 - f - d)`` until ``1 - f``, then 1; the width is that scale times the
width, rounded to a multiple of ``size_increment``, and the height is scaled by the same factor.
Composer's own tests of ``resize_batch`` and ``ProgressiveResizing`` are repeated here after a
change of import (the ``composer_`` tests). The tests every method passes (it trains in the
Trainer, it keeps the caller's tensors, its functional and class defaults agree) already run from
the metadata registry.
"""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from trainer_support import Observed, no_host_sync, replayed_generator

import algorithms.functional as cf
from algorithms import CutOut, ProgressiveResizing
from algorithms.core import Event, State, Trainer
from algorithms.core.time import Duration
from algorithms.progressive_resizing.progressive_resizing import scheduled_scale


def _schedule_scale(progress, initial_scale=0.5, delay=0.5, finetune=0.2):
    """The scale the schedule gives, from its formula (Composer's, with the ramp of zero length
    that delay + finetune = 1 makes treated as a step)."""
    if progress < delay:
        ramp = 0.0
    elif progress >= 1 - finetune:
        ramp = 1.0
    else:
        ramp = (progress - delay) / (1 - finetune - delay)
    return initial_scale + (1 - initial_scale) * ramp


def _schedule_width(progress, width, initial_scale=0.5, delay=0.5, finetune=0.2, increment=4):
    """The width the schedule gives: its scale times the width, rounded to a multiple of the increment."""
    scale = _schedule_scale(progress, initial_scale, delay, finetune)
    return max(round(width * scale / increment) * increment, increment)


def exactly(message: str) -> str:
    """A ``match`` pattern for the whole of ``message``."""
    return f"^{re.escape(message)}$"


def _state(progress_batches, total_batches, seed=0, device="cpu"):
    state = State(
        model=torch.nn.Identity(),
        max_duration=Duration.parse(f"{total_batches}ba"),
        seed=seed,
        device=torch.device(device),
    )
    state.timestamp.batch = progress_batches
    return state


def _find_window(big, small):
    """Every (t, l) with ``big[..., t:t + h, l:l + w] == small``."""
    h, w = small.shape[-2:]
    return [
        (t, left)
        for t in range(big.shape[-2] - h + 1)
        for left in range(big.shape[-1] - w + 1)
        if torch.equal(big[..., t : t + h, left : left + w], small)
    ]


def _distinct(n, c, h, w, dtype=torch.float32):
    """A batch whose every pixel value is different, so a window has one place only."""
    return torch.randperm(n * c * h * w, generator=torch.Generator().manual_seed(0)).reshape(n, c, h, w).to(dtype)


# -- Composer's tests of resize_batch and ProgressiveResizing, after a change of import --------


@pytest.fixture
def X():
    torch.manual_seed(0)
    return torch.randn(16, 8, 32, 32)


@pytest.mark.parametrize("mode", ["resize", "crop"])
def test_composer_resize_noop(X, mode):
    y = torch.randn(16, 8, 32, 32)
    Xc, yc = cf.resize_batch(X, y, 1.0, mode, resize_targets=False)
    assert Xc is X and yc is y


def test_composer_without_target(X):
    for scale in (1.0, 0.5):
        Xc, yc = cf.resize_batch(X, None, scale, "crop", resize_targets=False)
        assert yc is None and Xc.shape == (16, 8, int(32 * scale), int(32 * scale))


@pytest.mark.parametrize(("width", "height"), [(31, 31), (32, 32), (32, 16)])
@pytest.mark.parametrize("mode", ["resize", "crop"])
@pytest.mark.parametrize("scale_factor", [0.5, 0.75, 1])
def test_composer_resize_batch_shape(width, height, mode, scale_factor):
    X, y = torch.randn(16, 8, height, width), torch.randn(16, 8, height, width)
    Xc, _ = cf.resize_batch(X, y, scale_factor, mode, resize_targets=False)
    assert Xc.shape == (16, 8, int(scale_factor * height), int(scale_factor * width))
    _, yc = cf.resize_batch(X, y, scale_factor, mode, resize_targets=True)
    assert yc.shape == (16, 8, int(scale_factor * height), int(scale_factor * width))


@pytest.mark.parametrize("scale_factor", [0.5, 0.75, 1])
def test_composer_resize_outputs_crop(X, scale_factor):
    xc, yc = cf.resize_batch(X, X, scale_factor, "crop", resize_targets=True)
    assert torch.equal(xc, yc)


@pytest.mark.parametrize("mode", ["resize", "crop"])
@pytest.mark.parametrize("scale_factor", [0.5, 0.75, 1])
def test_composer_resize_outputs_different_shape(X, mode, scale_factor):
    y = torch.randn(16, 8, 16, 16)
    _, yc = cf.resize_batch(X, y, scale_factor, mode, resize_targets=True)
    assert yc.shape == (16, 8, int(scale_factor * 16), int(scale_factor * 16))


@pytest.mark.parametrize(
    "args",
    [("foo", 0.5, 0.2, 0.2, 8), ("crop", 1.2, 0.2, 0.2, 8), ("crop", 0.5, 1.2, 0.2, 8), ("resize", 0.5, 0.6, 0.5, 8)],
)
def test_composer_invalid_hparams(args):
    with pytest.raises(ValueError):
        ProgressiveResizing(*args, False)


@pytest.mark.parametrize("mode", ["resize", "crop"])
def test_composer_match(mode):
    algorithm = ProgressiveResizing(mode, 0.5, 0.2, 0.2, 8, False)
    state = _state(0, 10)
    assert algorithm.match(Event.AFTER_DATALOADER, state) and not algorithm.match(Event.INIT, state)


@pytest.mark.parametrize("mode", ["resize", "crop"])
@pytest.mark.parametrize("epoch_frac", [0.0, 0.6, 0.8, 1.0])
def test_composer_apply(X, mode, epoch_frac):
    """Composer's test_apply: initial_scale 0.5, finetune 0.2, delay 0.2, size_increment 8, at a
    fraction of max_duration in epochs."""
    algorithm = ProgressiveResizing(mode, 0.5, 0.2, 0.2, 8, False)
    state = State(model=torch.nn.Identity(), max_duration=Duration.parse("10ep"), seed=0)
    state.timestamp.epoch = int(epoch_frac * 10)
    if epoch_frac >= 0.2:
        elapsed = min((epoch_frac - 0.2) / (1 - 0.2 - 0.2), 1.0)
    else:
        elapsed = 0.0
    scale = 0.5 + 0.5 * elapsed
    pinned = round(32 * scale / 8) * 8
    state.batch = (X, torch.zeros(16))
    algorithm.apply(Event.AFTER_DATALOADER, state)
    assert state.batch[0].shape == (16, 8, pinned, pinned)


# -- resize_batch against its definition --------------------------------------------------------


@pytest.mark.parametrize("scale_factor", [0.5, 0.75, 0.3, 1 / 3, 0.9])
@pytest.mark.parametrize(("height", "width"), [(32, 32), (31, 24), (17, 40)])
def test_resize_is_nearest_neighbour_interpolation(scale_factor, height, width):
    images = torch.rand(3, 2, height, width, generator=torch.Generator().manual_seed(0))
    out, _ = cf.resize_batch(images, None, scale_factor, mode="resize")
    expected = F.interpolate(images, scale_factor=scale_factor, mode="nearest", recompute_scale_factor=False)
    assert out.shape == (3, 2, int(scale_factor * height), int(scale_factor * width))
    assert torch.equal(out, expected)


@pytest.mark.parametrize("k", [2, 4])
def test_resize_by_one_kth_keeps_every_kth_pixel(k):
    """Nearest neighbour at 1/k: output pixel (i, j) is input pixel (k i, k j)."""
    images = _distinct(2, 3, 16, 24)
    out, _ = cf.resize_batch(images, None, 1 / k)
    assert torch.equal(out, images[..., ::k, ::k])


def test_crop_is_one_window_of_the_batch_at_the_drawn_corner():
    images = _distinct(4, 3, 20, 16)
    for seed in range(5):
        out, _ = cf.resize_batch(images, None, 0.6, mode="crop", generator=torch.Generator().manual_seed(seed))
        h, w = int(0.6 * 20), int(0.6 * 16)
        assert out.shape == (4, 3, h, w)
        g = torch.Generator().manual_seed(seed)  # the corner, replayed: top then left, uniform where it fits
        top = int(torch.randint(0, 20 - h + 1, (1,), generator=g))
        left = int(torch.randint(0, 16 - w + 1, (1,), generator=g))
        assert _find_window(images, out) == [(top, left)]
        assert torch.equal(out, images[..., top : top + h, left : left + w])


def test_every_window_position_is_drawn_the_last_included():
    """20 rows, windows of 16: five places for the top; 300 seeded draws miss one with
    probability below 5 * (4/5)**300 < 1e-28, so the test cannot flake."""
    images = _distinct(1, 1, 20, 20)
    tops = set()
    for seed in range(300):
        out, _ = cf.resize_batch(images, None, 0.8, mode="crop", generator=torch.Generator().manual_seed(seed))
        [(top, _)] = _find_window(images, out)
        tops.add(top)
    assert tops == {0, 1, 2, 3, 4}


def test_the_functional_form_repeats_under_a_seed():
    images = torch.rand(4, 3, 32, 32)
    a, _ = cf.resize_batch(images, None, 0.5, "crop", generator=torch.Generator().manual_seed(3))
    b, _ = cf.resize_batch(images, None, 0.5, "crop", generator=torch.Generator().manual_seed(3))
    assert torch.equal(a, b)


@pytest.mark.parametrize("mode", ["resize", "crop"])
@pytest.mark.parametrize("scale_factor", [1, 1.0, 1.5])
def test_scale_factor_1_or_more_returns_the_batch_unchanged(mode, scale_factor):
    images, masks = torch.rand(2, 3, 8, 8), torch.randint(0, 5, (2, 8, 8))
    before = images.clone(), masks.clone()
    out, target = cf.resize_batch(images, masks, scale_factor, mode, resize_targets=True)
    assert out is images and target is masks
    assert torch.equal(out, before[0]) and torch.equal(target, before[1])


@pytest.mark.parametrize("mode", ["resize", "crop"])
def test_class_targets_are_left_as_they_are(mode):
    labels = torch.tensor([3, 1])
    out, target = cf.resize_batch(torch.rand(2, 3, 8, 8), labels, 0.5, mode)
    assert target is labels and torch.equal(target, torch.tensor([3, 1])) and out.shape == (2, 3, 4, 4)


def test_masks_are_resized_by_nearest_neighbour_with_their_values_exact():
    """An int64 mask (N, H, W) keeps its dtype and values, even ones float32 cannot hold."""
    images = _distinct(2, 3, 16, 16)
    masks = torch.randint(0, 7, (2, 16, 16), generator=torch.Generator().manual_seed(1)) + 2**40
    out, target = cf.resize_batch(images, masks, 0.5, resize_targets=True)
    assert target.dtype == torch.int64 and torch.equal(target, masks[:, ::2, ::2])
    assert torch.equal(out, images[..., ::2, ::2])
    for scale in (0.75, 0.3):  # the same pixels as the images' nearest neighbours
        rows = torch.arange(16.0).view(1, 1, 16, 1).expand(1, 1, 16, 16)
        cols = torch.arange(16.0).view(1, 1, 1, 16).expand(1, 1, 16, 16)
        source_rows = F.interpolate(rows, scale_factor=scale, mode="nearest", recompute_scale_factor=False)[0, 0].long()
        source_cols = F.interpolate(cols, scale_factor=scale, mode="nearest", recompute_scale_factor=False)[0, 0].long()
        _, target = cf.resize_batch(images, masks, scale, resize_targets=True)
        assert torch.equal(target, masks[:, source_rows, source_cols])


def test_dense_targets_of_every_layout_follow_the_images():
    images = _distinct(2, 3, 16, 16)
    soft = torch.rand(2, 5, 16, 16)
    bool_masks = torch.rand(2, 16, 16) > 0.5
    _, target = cf.resize_batch(images, soft, 0.5, resize_targets=True)
    assert torch.equal(target, soft[..., ::2, ::2])
    _, target = cf.resize_batch(images, bool_masks, 0.25, resize_targets=True)
    assert target.dtype == torch.bool and torch.equal(target, bool_masks[..., ::4, ::4])


def test_a_cropped_mask_is_the_same_window_and_a_smaller_mask_the_same_region():
    images = _distinct(2, 3, 32, 32)
    masks = torch.randint(0, 9, (2, 32, 32), generator=torch.Generator().manual_seed(2))
    half = torch.randint(0, 9, (2, 16, 16), generator=torch.Generator().manual_seed(3))
    for seed in range(4):
        out, target = cf.resize_batch(
            images, masks, 0.5, "crop", resize_targets=True, generator=torch.Generator().manual_seed(seed)
        )
        [(top, left)] = _find_window(images, out)
        assert torch.equal(target, masks[:, top : top + 16, left : left + 16])
        _, small = cf.resize_batch(
            images, half, 0.5, "crop", resize_targets=True, generator=torch.Generator().manual_seed(seed)
        )
        assert torch.equal(small, half[:, top // 2 : top // 2 + 8, left // 2 : left // 2 + 8])


def test_a_larger_non_square_mask_is_cropped_at_the_scaled_corner_kept_inside_it():
    """Images of 10 x 12 and masks of 20 x 24 at 0.55: windows of 5 x 6 and 11 x 13. The mask's
    corner is the images' corner scaled to its size, (2 t, 2 l), moved back inside the mask
    where that would overrun it (t = 5 gives 10 > 20 - 11)."""
    images = _distinct(2, 3, 10, 12)
    masks = torch.arange(2 * 20 * 24).view(2, 20, 24)
    corners = set()
    for seed in range(60):
        out, target = cf.resize_batch(
            images, masks, 0.55, "crop", resize_targets=True, generator=torch.Generator().manual_seed(seed)
        )
        [(top, left)] = _find_window(images, out)
        corners.add((top, left))
        mask_top, mask_left = min(2 * top, 20 - 11), min(2 * left, 24 - 13)
        assert torch.equal(target, masks[:, mask_top : mask_top + 11, mask_left : mask_left + 13]), (top, left)
    assert {top for top, _ in corners} >= {0, 5} and {left for _, left in corners} >= {0, 6}


@pytest.mark.parametrize("mode", ["resize", "crop"])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float16, torch.bfloat16, torch.float64, torch.int32])
def test_dtype_and_memory_format_are_kept_and_the_input_is_not_modified(mode, dtype):
    images = (torch.rand(2, 3, 16, 16) * 200).to(dtype).contiguous(memory_format=torch.channels_last)
    before = images.clone()
    out, _ = cf.resize_batch(images, None, 0.5, mode, generator=torch.Generator().manual_seed(0))
    assert out.dtype == dtype and out.shape == (2, 3, 8, 8)
    assert out.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(images, before)
    if mode == "resize":
        assert torch.equal(out, images[..., ::2, ::2])
    else:
        assert len(_find_window(images, out)) >= 1
        assert out.data_ptr() != images.data_ptr()  # a copy, not a view of the caller's batch


_FACTOR = "must be a number in (0, inf)"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mode": "foo"}, "mode='foo': must be one of 'resize', 'crop'"),
        ({"mode": None}, "mode=None: must be one of 'resize', 'crop'"),
        ({"scale_factor": 0}, f"scale_factor=0: {_FACTOR}"),
        ({"scale_factor": -0.5}, f"scale_factor=-0.5: {_FACTOR}"),
        ({"scale_factor": float("nan")}, f"scale_factor=nan: {_FACTOR}"),
        ({"scale_factor": "0.5"}, f"scale_factor='0.5': {_FACTOR}"),
        ({"scale_factor": True}, f"scale_factor=True: {_FACTOR}"),
        (
            {"scale_factor": 0.01},
            "scale_factor=0.01: shrinks the images of 32 x 32 pixels to 0 x 0; each side needs at least one pixel",
        ),
        (
            {"scale_factor": 0.2, "input": torch.rand(2, 3, 32, 4)},
            "scale_factor=0.2: shrinks the images of 32 x 4 pixels to 6 x 0; each side needs at least one pixel",
        ),
    ],
)
def test_bad_functional_arguments_fail_with_a_clear_error(kwargs, message):
    arguments = {"input": torch.rand(2, 3, 32, 32), "target": None, "scale_factor": 0.5, **kwargs}
    with pytest.raises(ValueError, match=exactly(message)):
        cf.resize_batch(**arguments)


_DENSE = (
    "target: resize_targets=True needs a dense target, a mask (N, H, W) or a tensor (N, C, H, W), got {}; "
    "leave resize_targets=False for class targets"
)


@pytest.mark.parametrize(
    ("input", "target", "scale_factor", "resize_targets", "message"),
    [
        (
            torch.rand(3, 32, 32),
            None,
            0.5,
            False,
            "input: Progressive Resizing needs an image batch (N, C, H, W), got (3, 32, 32)",
        ),
        ([[0.5]], None, 0.5, False, "input: Progressive Resizing needs an image batch (N, C, H, W), got list"),
        (torch.rand(2, 3, 8, 8), torch.tensor([0, 1]), 0.5, True, _DENSE.format("shape (2,)")),
        (torch.rand(2, 3, 8, 8), None, 1.0, True, _DENSE.format("NoneType")),
        (torch.rand(2, 3, 8, 8), [[0, 1]], 0.5, True, _DENSE.format("list")),
        (
            torch.rand(2, 3, 32, 32),
            torch.zeros(2, 4, 4),
            0.2,
            True,
            "scale_factor=0.2: shrinks the target of 4 x 4 pixels to 0 x 0; each side needs at least one pixel",
        ),
    ],
)
def test_bad_inputs_and_targets_fail_with_a_clear_error(input, target, scale_factor, resize_targets, message):
    with pytest.raises(ValueError, match=exactly(message)):
        cf.resize_batch(input, target, scale_factor, resize_targets=resize_targets)


_SCALE = "must be a number in (0, 1]"
_FRACTION = "must be a number in [0, 1]"
_INCREMENT = "must be an integer in [1, inf)"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mode": "Bilinear"}, "mode='Bilinear': must be one of 'resize', 'crop'"),
        ({"initial_scale": 0}, f"initial_scale=0: {_SCALE}"),
        ({"initial_scale": 1.2}, f"initial_scale=1.2: {_SCALE}"),
        ({"initial_scale": float("nan")}, f"initial_scale=nan: {_SCALE}"),
        ({"initial_scale": "0.5"}, f"initial_scale='0.5': {_SCALE}"),
        ({"finetune_fraction": 1.2}, f"finetune_fraction=1.2: {_FRACTION}"),
        ({"finetune_fraction": -0.1}, f"finetune_fraction=-0.1: {_FRACTION}"),
        ({"delay_fraction": -0.1}, f"delay_fraction=-0.1: {_FRACTION}"),
        ({"delay_fraction": True}, f"delay_fraction=True: {_FRACTION}"),
        (
            {"delay_fraction": 0.5, "finetune_fraction": 0.6},
            "delay_fraction=0.5, finetune_fraction=0.6: together more than all of training; they must add up to "
            "at most 1",
        ),
        ({"size_increment": 0}, f"size_increment=0: {_INCREMENT}"),
        ({"size_increment": 2.5}, f"size_increment=2.5: {_INCREMENT}"),
        ({"size_increment": True}, f"size_increment=True: {_INCREMENT}"),
    ],
)
def test_bad_hyperparameters_fail_with_a_clear_error(kwargs, message):
    with pytest.raises(ValueError, match=exactly(message)):
        ProgressiveResizing(**kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"initial_scale": 1},
        {"delay_fraction": 0.0, "finetune_fraction": 1.0},
        {"delay_fraction": 1.0, "finetune_fraction": 0.0},
        {"size_increment": 1},
    ],
)
def test_the_ends_of_each_range_are_accepted(kwargs):
    """initial_scale in (0, 1], the fractions in [0, 1], size_increment from 1: each end that is
    in its range works. At full scale, or with the whole run fine-tuning, the batch keeps its
    size; from a scale of 0.5 with increments of 1 pixel it is 8 of 16."""
    algorithm = ProgressiveResizing(**kwargs)
    state = _state(0, 10)
    state.batch = (torch.rand(2, 3, 16, 16), torch.zeros(2, dtype=torch.long))
    algorithm.apply(Event.AFTER_DATALOADER, state)
    full = kwargs.get("initial_scale") == 1 or kwargs.get("finetune_fraction") == 1.0
    assert state.batch[0].shape[-1] == (16 if full else 8)


def test_modes_are_accepted_in_any_case_as_composer_s_functional_form_does():
    images = torch.rand(2, 3, 8, 8)
    assert torch.equal(cf.resize_batch(images, None, 0.5, "Resize")[0], images[..., ::2, ::2])
    assert ProgressiveResizing(mode="CROP").mode == "crop"


# -- the schedule ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("initial_scale", "delay", "finetune", "increment", "width"),
    [
        (0.5, 0.5, 0.2, 4, 32),
        (0.25, 0.2, 0.3, 8, 64),
        (0.6, 0.0, 0.0, 4, 30),
        (0.5, 0.5, 0.5, 4, 32),
        (0.3, 0.1, 0.2, 16, 48),
    ],
)
def test_sizes_follow_the_schedule_at_its_landmarks(initial_scale, delay, finetune, increment, width):
    """At the start, the delay, the middle of the ramp, the fine-tune start and the end."""
    algorithm = ProgressiveResizing("resize", initial_scale, finetune, delay, increment)
    landmarks = [0.0, delay, (delay + 1 - finetune) / 2, 1 - finetune, 1.0]
    images = torch.rand(2, 3, width, width)
    for landmark in landmarks:
        state = _state(round(landmark * 1000), 1000)
        state.batch = (images, torch.zeros(2, dtype=torch.long))
        algorithm.apply(Event.AFTER_DATALOADER, state)
        progress = state.progress()
        expected = min(_schedule_width(progress, width, initial_scale, delay, finetune, increment), width)
        assert state.batch[0].shape[-2:] == (expected, expected), (progress, expected)
    assert expected == width  # full size at the end


@pytest.mark.parametrize(("initial_scale", "delay", "finetune"), [(0.5, 0.5, 0.2), (0.25, 0.0, 0.0), (0.3, 0.4, 0.6)])
def test_scheduled_scale_is_the_schedule_formula_and_exactly_1_once_fine_tuning_starts(initial_scale, delay, finetune):
    for progress in (0.0, 0.1, delay, (delay + 1 - finetune) / 2, 1 - finetune, 0.95, 1.0):
        expected = _schedule_scale(progress, initial_scale, delay, finetune)
        assert scheduled_scale(progress, initial_scale, delay, finetune) == pytest.approx(expected, abs=1e-12)
    assert (
        scheduled_scale(1 - finetune, initial_scale, delay, finetune)
        == scheduled_scale(1.0, initial_scale, delay, finetune)
        == 1.0
    )


@pytest.mark.parametrize(
    ("height", "width", "initial_scale", "increment", "new_width"),
    [
        (30, 47, 0.25, 4, 12),
        (90, 10, 0.7, 1, 7),
        (33, 16, 0.5, 4, 8),
    ],
)
def test_the_width_is_exactly_the_rounded_multiple_and_the_height_follows_by_the_same_factor(
    height, width, initial_scale, increment, new_width
):
    """The factor is new_width / width, as Composer's class passes it, and the height is
    int(factor * H), the size F.interpolate makes. 47 * 0.25 = 11.75 rounds to 12; 12 / 47 * 47
    is just below 12 in floating point, and the class still makes 12, not 11. At 7 / 10 of 90
    rows, 0.7 * 90 is just below 63 in floating point: 62 rows, as Composer makes."""
    algorithm = ProgressiveResizing(initial_scale=initial_scale, size_increment=increment)
    state = _state(0, 10)
    state.batch = (torch.rand(2, 3, height, width), torch.zeros(2, dtype=torch.long))
    algorithm.apply(Event.AFTER_DATALOADER, state)
    assert state.batch[0].shape == (2, 3, int(new_width / width * height), new_width)


def test_a_width_that_rounds_to_zero_is_one_increment():
    algorithm = ProgressiveResizing(initial_scale=0.1, size_increment=4)
    state = _state(0, 10)
    state.batch = (torch.rand(2, 3, 16, 16), torch.zeros(2, dtype=torch.long))  # 1.6 / 4 rounds to 0
    algorithm.apply(Event.AFTER_DATALOADER, state)
    assert state.batch[0].shape == (2, 3, 4, 4)


def _segmenter(k=3):
    torch.manual_seed(0)
    return torch.nn.Conv2d(3, k, 3, padding=1)


def _classifier(k=4):
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(4, k)
    )


@pytest.mark.parametrize("mode", ["resize", "crop"])
def test_in_the_trainer_the_model_sees_the_schedule_batch_by_batch(mode):
    """20 batches: at batch k the progress is k / 20, so the run passes the start, the delay (0.5),
    the middle of the ramp (0.65) and the fine-tune start (0.8). Each batch the model sees is the
    definition at the schedule's width, crops at the corners replayed from the class's generator;
    the labels are left alone and the loss is their cross entropy."""
    g = torch.Generator().manual_seed(0)
    batches = [(torch.rand(2, 3, 32, 32, generator=g), torch.randint(0, 4, (2,), generator=g)) for _ in range(20)]
    seen = Observed()
    Trainer(
        _classifier(), batches, "20ba", algorithms=[ProgressiveResizing(mode=mode), seen], seed=0, device="cpu"
    ).fit()
    replayed = replayed_generator(ProgressiveResizing, seed=0)
    widths = []
    for k, ((images, labels), image, out, label, loss) in enumerate(
        zip(batches, seen.inputs, seen.outputs, seen.targets, seen.losses, strict=True)
    ):
        w = _schedule_width(k / 20, 32)
        widths.append(w)
        if w == 32:
            expected = images
        elif mode == "resize":
            expected = F.interpolate(images, scale_factor=w / 32, mode="nearest", recompute_scale_factor=False)
        else:
            top = int(torch.randint(0, 32 - w + 1, (1,), generator=replayed))
            left = int(torch.randint(0, 32 - w + 1, (1,), generator=replayed))
            expected = images[..., top : top + w, left : left + w]
        assert torch.equal(image, expected), k
        assert torch.equal(label, labels)
        torch.testing.assert_close(loss, F.cross_entropy(out, labels))
    assert widths[0] == widths[10] == 16 and widths[13] == 24 and widths[16:] == [32] * 4
    assert widths == sorted(widths)


def test_dict_batches_resize_the_images_and_masks_by_their_keys():
    """A segmentation run: images and masks under their keys, the model predicting per pixel; the
    loss sees the mask resized alike, and a key the class does not name is left alone."""
    g = torch.Generator().manual_seed(0)
    batches = [
        {
            "image": torch.rand(2, 3, 16, 16, generator=g),
            "mask": torch.randint(0, 3, (2, 16, 16), generator=g),
            "id": torch.tensor([k, k]),
        }
        for k in range(4)
    ]
    seen = Observed(input_key="image", target_key="mask")
    algorithm = ProgressiveResizing(
        initial_scale=0.5,
        delay_fraction=0.5,
        finetune_fraction=0.25,
        resize_targets=True,
        input_key="image",
        target_key="mask",
    )
    Trainer(
        _segmenter(),
        batches,
        "4ba",
        algorithms=[algorithm, seen],
        seed=0,
        input_key="image",
        target_key="mask",
        device="cpu",
    ).fit()
    widths = []
    for k, (batch, image, mask, out, loss) in enumerate(
        zip(batches, seen.inputs, seen.targets, seen.outputs, seen.losses, strict=True)
    ):
        w = _schedule_width(k / 4, 16, 0.5, 0.5, 0.25)  # 8, 8, 8 (at the delay), then 16 (fine-tuning)
        step = 16 // w
        assert torch.equal(image, batch["image"][..., ::step, ::step])
        assert torch.equal(mask, batch["mask"][:, ::step, ::step])
        widths.append(w)
        torch.testing.assert_close(loss, F.cross_entropy(out, mask))
    assert widths == [8, 8, 8, 16]


def test_by_default_the_images_are_first_and_the_masks_second_in_a_tuple_batch():
    algorithm = ProgressiveResizing(resize_targets=True)
    state = _state(0, 10)
    images = _distinct(2, 3, 16, 16)
    masks = torch.randint(0, 3, (2, 16, 16), generator=torch.Generator().manual_seed(0))
    state.batch = (images, masks)
    algorithm.apply(Event.AFTER_DATALOADER, state)
    assert torch.equal(state.batch[0], images[..., ::2, ::2]) and torch.equal(state.batch[1], masks[:, ::2, ::2])


def test_without_resize_targets_the_target_key_is_not_read():
    batches = [{"image": torch.rand(2, 3, 8, 8), "label": torch.tensor([0, 1])}]
    seen = Observed(input_key="image", target_key="label")
    Trainer(
        _classifier(),
        batches,
        "1ba",
        algorithms=[ProgressiveResizing(input_key="image", target_key="missing"), seen],
        seed=0,
        input_key="image",
        target_key="label",
        device="cpu",
    ).fit()
    assert seen.inputs[0].shape == (2, 3, 4, 4) and torch.equal(seen.targets[0], torch.tensor([0, 1]))


def test_seeded_crop_runs_repeat_and_the_seed_matters():
    images = _distinct(2, 3, 32, 32)

    def run(seed):
        seen = Observed()
        Trainer(
            _classifier(),
            [(images, torch.tensor([0, 1]))] * 3,
            "3ba",
            algorithms=[ProgressiveResizing(mode="crop"), seen],
            seed=seed,
            device="cpu",
        ).fit()
        return [_find_window(images, x) for x in seen.inputs]

    assert run(0) == run(0) and run(0) != run(1)


class _RecordsShapes(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model, self.shapes = model, []

    def forward(self, x):
        self.shapes.append(tuple(x.shape))
        return self.model(x)


def test_evaluation_sees_the_full_size_images():
    """The schedule is a training-loop change: Trainer.eval runs the model on its batches as they are."""
    batches = [(torch.rand(2, 3, 16, 16), torch.tensor([0, 1]))] * 2
    model = _RecordsShapes(_classifier())
    trainer = Trainer(model, batches, "2ba", algorithms=[ProgressiveResizing()], seed=0, device="cpu")
    trainer.fit()
    trainer.eval(batches)
    assert model.shapes == [(2, 3, 8, 8)] * 2 + [(2, 3, 16, 16)] * 2


def test_listed_before_cutout_the_holes_are_cut_in_the_smaller_images():
    """CutOut after it sees the resized batch: its hole is int(length * 16) = 8 pixels of the
    16 x 16 images, its centres replayed from CutOut's own generator."""
    images = torch.rand(4, 3, 32, 32, generator=torch.Generator().manual_seed(0)) + 1  # no zero pixels
    seen = Observed()
    Trainer(
        _classifier(),
        [(images, torch.zeros(4, dtype=torch.long))],
        "1ba",
        algorithms=[ProgressiveResizing(), CutOut(length=0.5), seen],
        seed=0,
        device="cpu",
    ).fit()
    small = images[..., ::2, ::2]
    g = replayed_generator(CutOut, seed=0)
    ys = torch.randint(0, 16, (4, 1), generator=g).tolist()
    xs = torch.randint(0, 16, (4, 1), generator=g).tolist()
    expected = small.clone()
    for i in range(4):
        top, left = ys[i][0] - 4, xs[i][0] - 4
        expected[i, :, max(top, 0) : max(top + 8, 0), max(left, 0) : max(left + 8, 0)] = 0
    assert torch.equal(seen.inputs[0], expected)


# -- on the GPU -------------------------------------------------------------------------------


@pytest.mark.cuda
@pytest.mark.parametrize("mode", ["resize", "crop"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.uint8])
def test_on_cuda_it_stays_on_the_device_and_matches_the_cpu(mode, dtype):
    images = (torch.rand(4, 3, 32, 32) * 200).to(dtype).contiguous(memory_format=torch.channels_last)
    masks = torch.randint(0, 5, (4, 32, 32))
    cpu = cf.resize_batch(images, masks, 0.75, mode, True, generator=torch.Generator().manual_seed(0))
    gpu = cf.resize_batch(images.cuda(), masks.cuda(), 0.75, mode, True, generator=torch.Generator().manual_seed(0))
    for a, b in zip(cpu, gpu, strict=True):
        assert b.device.type == "cuda" and b.dtype == a.dtype and torch.equal(b.cpu(), a)
    assert gpu[0].is_contiguous(memory_format=torch.channels_last)


@pytest.mark.cuda
@pytest.mark.parametrize("mode", ["resize", "crop"])
def test_on_cuda_the_class_makes_no_host_sync(mode):
    algorithm = ProgressiveResizing(mode=mode, resize_targets=True)
    state = _state(0, 10, device="cuda")
    images = torch.rand(4, 3, 32, 32, device="cuda", dtype=torch.bfloat16)
    masks = torch.randint(0, 5, (4, 32, 32), device="cuda")
    state.batch = (images, masks)
    algorithm.generator(state)  # created outside the check: seeding is set-up, not the hot path
    with no_host_sync():
        algorithm.apply(Event.AFTER_DATALOADER, state)
    out, mask = state.batch
    assert out.device == images.device and out.dtype == torch.bfloat16 and out.shape == (4, 3, 16, 16)
    assert mask.device == images.device and mask.dtype == torch.int64 and mask.shape == (4, 16, 16)
    expected = cf.resize_batch(
        images.cpu(), masks.cpu(), 0.5, mode, True, generator=replayed_generator(ProgressiveResizing, seed=0)
    )
    assert torch.equal(out.cpu(), expected[0]) and torch.equal(mask.cpu(), expected[1])


def test_it_reports_the_batches_it_shrank():
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(4, 3, 32, 32, generator=g), torch.randint(0, 4, (4,), generator=g)) for _ in range(5)]
    seen = Observed()
    trainer = Trainer(_classifier(), batches, "1ep", algorithms=[ProgressiveResizing(), seen], seed=0, device="cpu")
    trainer.fit()
    shrunk = sum(x.shape[-1] < 32 for x in seen.inputs)
    assert 0 < shrunk < 5  # the last fifth of training (finetune_fraction) is at full size
    assert trainer.method_log.records["ProgressiveResizing"]["activity"] == {"batches_resized": shrunk}
