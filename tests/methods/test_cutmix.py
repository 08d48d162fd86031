"""CutMix: the functional form and the class, checked against the definition.

``test_box_pixels_come_from_the_partner`` asserts what Composer's own test of ``cutmix_batch``
asserts (``tests/algorithms/test_cutmix.py``: every pixel inside the box comes from the partner
``indices[i]``, every pixel outside from the example itself, and ``target_perm ==
target[indices]``), over the same data shape, both ``uniform_sampling`` values and boxes given
as NumPy integers. Composer's test draws its boxes with its private ``_rand_bbox``, which has
no counterpart here; the boxes below come from this implementation's sampler and from a fixed
list that includes empty, full and border-clipped boxes.
"""

from __future__ import annotations

import contextlib
import math
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from trainer_support import (
    Observed,
    image_batches,
    image_classifier,
    no_host_sync,
    one_hot,
    replayed_generator,
    soft_cross_entropy,
)

import algorithms.functional as cf
from algorithms import CutMix, LabelSmoothing
from algorithms.core import Event, Trainer
from algorithms.cutmix.cutmix import _sample_bbox


def validate_cutmix(x, y, indices, mixed, y_perm, bbox):
    x1, y1, x2, y2 = bbox
    for i in range(x.shape[0]):
        for r in range(x.shape[2]):
            for c in range(x.shape[3]):
                inside = x1 <= r < x2 and y1 <= c < y2
                torch.testing.assert_close(mixed[i, :, r, c], x[indices[i] if inside else i, :, r, c])
    torch.testing.assert_close(y_perm, y[indices])


def _sampled_boxes(h, w, uniform_sampling, count=4):
    g = torch.Generator().manual_seed(0)
    return [_sample_bbox(h, w, float(torch.rand(1, generator=g)), uniform_sampling, g) for _ in range(count)]


FIXED_BOXES = [(0, 0, 0, 0), (0, 0, 3, 5), (1, 2, 3, 4), (2, 0, 3, 5), (0, 4, 3, 5)]


@pytest.mark.parametrize("uniform_sampling", [True, False])
def test_box_pixels_come_from_the_partner(uniform_sampling):
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(7, 11, 3, 5, generator=g), torch.randint(10, (7,), generator=g)
    indices = torch.randperm(7, generator=g)
    for bbox in FIXED_BOXES + _sampled_boxes(3, 5, uniform_sampling):
        box = tuple(np.int64(v) for v in bbox)  # Composer's test passes NumPy integers
        mixed, y_perm, area, used = cf.cutmix_batch(
            x, y, alpha=1.0, bbox=box, indices=indices, uniform_sampling=uniform_sampling
        )
        validate_cutmix(x, y, indices, mixed, y_perm, bbox)
        assert used == tuple(bbox)
        assert area == pytest.approx(1 - (bbox[2] - bbox[0]) * (bbox[3] - bbox[1]) / 15)


def test_box_comes_from_partner_and_rest_is_unchanged():
    x = torch.arange(2 * 3 * 5 * 6, dtype=torch.float32).reshape(2, 3, 5, 6)
    y = torch.tensor([3, 7])
    idx = torch.tensor([1, 0])
    mixed, y_perm, area, bbox = cf.cutmix_batch(x, y, bbox=(1, 2, 4, 5), indices=idx)
    assert bbox == (1, 2, 4, 5)
    validate_cutmix(x, y, idx, mixed, y_perm, bbox)
    assert y_perm.tolist() == [7, 3]
    assert area == pytest.approx(1 - (3 * 3) / (5 * 6))


def test_length_sets_box_side():
    x = torch.randn(4, 1, 10, 10)
    _, _, area, (x1, y1, x2, y2) = cf.cutmix_batch(
        x, torch.arange(4), length=0.4, generator=torch.Generator().manual_seed(0)
    )
    assert area == pytest.approx(1 - (x2 - x1) * (y2 - y1) / 100)
    assert (x2 - x1) <= 4 and (y2 - y1) <= 4


def test_alpha_zero_cuts_nothing():
    x = torch.randn(3, 2, 4, 4)
    mixed, _, area, _ = cf.cutmix_batch(x, torch.arange(3), alpha=0.0)
    assert area == 1.0 and torch.equal(mixed, x)


def test_generator_makes_it_repeatable():
    x = torch.randn(6, 3, 8, 8)
    a = cf.cutmix_batch(x, torch.arange(6), generator=torch.Generator().manual_seed(3))
    b = cf.cutmix_batch(x, torch.arange(6), generator=torch.Generator().manual_seed(3))
    assert torch.equal(a[0], b[0]) and a[2:] == b[2:]


def test_any_target_is_permuted_with_the_images():
    x = torch.randn(4, 1, 4, 4)
    idx = torch.tensor([3, 2, 1, 0])
    for target in (torch.arange(4), torch.rand(4, 10), torch.randint(0, 3, (4, 4, 4))):
        _, target_perm, _, _ = cf.cutmix_batch(x, target, indices=idx)
        assert torch.equal(target_perm, target[idx])


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: cf.cutmix_batch(torch.randn(2, 3, 4), torch.arange(2)),
            "input: CutMix needs an image batch (N, C, H, W), got shape (2, 3, 4)",
        ),
        (
            lambda: cf.cutmix_batch(torch.randn(2, 1, 4, 4), torch.arange(3)),
            "input and target must have the same batch size: input shape (2, 1, 4, 4), target shape (3,)",
        ),
        (
            lambda: cf.cutmix_batch(torch.randn(2, 1, 4, 4), torch.arange(2), alpha=-1),
            "alpha=-1: must be a number in [0, inf)",
        ),
        (
            lambda: cf.cutmix_batch(torch.randn(2, 1, 4, 6), torch.arange(2), bbox=(0, 0, 9, 2)),
            "bbox=(0, 0, 9, 2): need 0 <= x1 <= x2 <= 4 (height) and 0 <= y1 <= y2 <= 6 (width)",
        ),
        (
            lambda: cf.cutmix_batch(torch.randn(2, 1, 4, 6), torch.arange(2), bbox=(0, 3, 4, 2)),
            "bbox=(0, 3, 4, 2): need 0 <= x1 <= x2 <= 4 (height) and 0 <= y1 <= y2 <= 6 (width)",
        ),
        (
            lambda: cf.cutmix_batch(torch.randn(2, 1, 4, 4), torch.arange(2), length=1.5),
            "length=1.5: must be in (0, 1]",
        ),
        (lambda: cf.cutmix_batch(torch.randn(2, 1, 4, 4), torch.arange(2), length=0), "length=0: must be in (0, 1]"),
        (
            lambda: cf.cutmix_batch(torch.randn(2, 1, 4, 4), torch.arange(2), length=0.5, bbox=(0, 0, 1, 1)),
            "length=0.5, bbox=(0, 0, 1, 1): give one of them, not both",
        ),
        (
            lambda: cf.cutmix_batch(torch.randn(2, 1, 4, 4), torch.arange(2), indices=torch.tensor([0.0, 1.0])),
            "indices must be an integer tensor of shape (2,), got torch.float32 of shape (2,)",
        ),
        (
            lambda: cf.cutmix_batch(torch.randn(2, 1, 4, 4), torch.arange(2), indices=[1, 0]),
            "indices must be an integer tensor of shape (2,), got list",
        ),
    ],
)
def test_bad_input_raises_value_error_naming_the_argument(call, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        call()


@pytest.mark.parametrize("alpha", [-0.5, float("nan"), True])
def test_bad_alpha_fails_at_construction(alpha):
    with pytest.raises(ValueError, match=f"^alpha={re.escape(repr(alpha))}: must be a number in \\[0, inf\\)$"):
        CutMix(alpha=alpha)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 9),
    st.integers(1, 4),
    st.integers(1, 17),
    st.integers(1, 17),
    st.integers(2, 11),
    st.sampled_from([torch.float32, torch.bfloat16]),
    st.integers(0, 2**31 - 1),
    st.floats(0, 4),
    st.booleans(),
    st.booleans(),
)
def test_properties(n, c, h, w, k, dtype, seed, alpha, uniform, channels_last):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, c, h, w, generator=g).to(dtype)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, k, (n,), generator=g)
    x0, y0 = x.clone(), y.clone()
    mixed, y_perm, area, (x1, y1, x2, y2) = cf.cutmix_batch(x, y, alpha=alpha, uniform_sampling=uniform, generator=g)
    assert torch.equal(x, x0) and torch.equal(y, y0)  # inputs untouched
    assert mixed.shape == x.shape and mixed.dtype == dtype
    if channels_last:
        assert mixed.is_contiguous(memory_format=torch.channels_last)
    assert 0 <= x1 <= x2 <= h and 0 <= y1 <= y2 <= w
    assert area == pytest.approx(1 - (x2 - x1) * (y2 - y1) / (h * w))
    target = cf.interpolate_targets(y, y_perm, 1 - area, num_classes=k)
    torch.testing.assert_close(target.sum(1), torch.ones(n))
    assert (target >= 0).all()
    assert sorted(y_perm.tolist()) == sorted(y.tolist())  # partners come from a permutation


# -- inplace=True ----------------------------------------------------------------------------

# Partners that overlap: a cycle through the batch, a swap, and repeats (not a permutation).
INPLACE_INDICES = ([1, 2, 3, 4, 0], [1, 0, 2, 4, 3], [0, 0, 4, 4, 1])


@pytest.mark.parametrize("indices", INPLACE_INDICES)
@pytest.mark.parametrize("bbox", [(1, 2, 5, 7), (0, 0, 6, 7), (2, 3, 2, 6), (5, 0, 6, 1)])
def test_inplace_writes_the_definition_into_the_input_and_returns_it(bbox, indices):
    """Every box is read before any is written: each example's box is its partner's as it was."""
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(5, 3, 6, 7, generator=g), torch.randint(0, 4, (5,), generator=g)
    original, idx = x.clone(), torch.tensor(indices)
    mixed, y_perm, area, used = cf.cutmix_batch(x, y, bbox=bbox, indices=idx, inplace=True)
    assert mixed is x and used == bbox
    assert torch.equal(x, _cutmix_definition(original, idx, bbox)[0])
    assert torch.equal(y_perm, y[idx]) and area == pytest.approx(_cutmix_definition(original, idx, bbox)[1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.uint8])
@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("uniform_sampling", [False, True])
def test_inplace_draws_and_writes_what_the_copy_does_keeping_dtype_and_layout(dtype, channels_last, uniform_sampling):
    g = torch.Generator().manual_seed(1)
    x = (torch.rand(6, 3, 9, 11, generator=g) * 100).to(dtype)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 4, (6,), generator=g)
    for seed in range(8):
        before = x.clone()
        copied = cf.cutmix_batch(
            x, y, alpha=1.0, uniform_sampling=uniform_sampling, generator=torch.Generator().manual_seed(seed)
        )
        assert torch.equal(x, before)  # the default leaves the input as it was
        written = cf.cutmix_batch(
            x,
            y,
            alpha=1.0,
            uniform_sampling=uniform_sampling,
            generator=torch.Generator().manual_seed(seed),
            inplace=True,
        )
        assert written[0] is x and torch.equal(x, copied[0]) and written[2:] == copied[2:]
        assert torch.equal(written[1], copied[1])
        assert x.dtype == dtype and x.is_contiguous(
            memory_format=torch.channels_last if channels_last else torch.contiguous_format
        )


@pytest.mark.parametrize("indices", INPLACE_INDICES + ([4, 3, 2, 1, 0],))
def test_inplace_moves_large_boxes_one_at_a_time_to_the_same_values(monkeypatch, indices):
    """From boxes of 64 KiB, the CPU moves them in place example by example, along each cycle of
    the permutation (repeated partners take the gather): the definition, as gathered. Without
    inplace such boxes are copied into a new batch, the input left as it was."""
    import algorithms._mixing as mixing_module

    g = torch.Generator().manual_seed(3)
    x, y, idx = torch.randn(5, 3, 128, 128, generator=g), torch.arange(5), torch.tensor(indices)
    assert x[0, :, 10:120, 20:111].numel() * x.element_size() >= mixing_module.ROW_BY_ROW_BYTES
    one_at_a_time, original = x.clone(), x.clone()
    copied = cf.cutmix_batch(x, y, bbox=(10, 20, 120, 111), indices=idx)[0]
    assert copied is not x and torch.equal(x, original)
    assert torch.equal(copied, _cutmix_definition(original, idx, (10, 20, 120, 111))[0])
    assert cf.cutmix_batch(one_at_a_time, y, bbox=(10, 20, 120, 111), indices=idx, inplace=True)[0] is one_at_a_time
    monkeypatch.setattr(mixing_module, "ROW_BY_ROW_BYTES", float("inf"))
    gathered = cf.cutmix_batch(x, y, bbox=(10, 20, 120, 111), indices=idx, inplace=True)[0]
    assert torch.equal(one_at_a_time, gathered)
    assert torch.equal(gathered, _cutmix_definition(original, idx, (10, 20, 120, 111))[0])


def test_permutation_cycles_visit_every_example_once_in_partner_order():
    from algorithms._mixing import permutation_cycles

    g = torch.Generator().manual_seed(0)
    for n in (1, 2, 7, 40):
        for _ in range(20):
            partners = torch.randperm(n, generator=g).tolist()
            cycles = permutation_cycles(partners)
            assert sorted(i for cycle in cycles for i in cycle) == list(range(n))
            for cycle in cycles:
                assert [partners[i] for i in cycle] == cycle[1:] + cycle[:1]


def test_inplace_writes_nothing_outside_the_box():
    x = torch.randn(4, 2, 8, 8)
    outside = x.clone()
    mixed, _, _, (x1, y1, x2, y2) = cf.cutmix_batch(
        x, torch.arange(4), bbox=(2, 3, 5, 7), indices=torch.tensor([3, 2, 1, 0]), inplace=True
    )
    keep = torch.ones(8, 8, dtype=torch.bool)
    keep[x1:x2, y1:y2] = False
    assert torch.equal(mixed[..., keep], outside[..., keep])
    assert torch.equal(mixed[:, :, x1:x2, y1:y2], outside[[3, 2, 1, 0], :, x1:x2, y1:y2])


def test_inplace_with_alpha_zero_leaves_the_input_as_it_was():
    x = torch.randn(3, 2, 4, 4)
    before = x.clone()
    mixed, _, area, _ = cf.cutmix_batch(x, torch.arange(3), alpha=0.0, inplace=True)
    assert mixed is x and area == 1.0 and torch.equal(x, before)


def test_randints_draws_what_successive_single_draws_do():
    from algorithms._mixing import randint, randints

    for ranges in (((0, 7),), ((0, 7), (0, 7)), ((-3, 12), (-3, 12), (-3, 12)), ((0, 7), (0, 9)), ((-2, 5), (0, 5))):
        a, b = torch.Generator().manual_seed(4), torch.Generator().manual_seed(4)
        for _ in range(20):
            assert randints(ranges, a) == [randint(low, high, b) for low, high in ranges]
        assert torch.equal(a.get_state(), b.get_state())


# -- sampling, against the distribution the definition implies -------------------------------
#
# The box side is int(S * sqrt(1 - lam)) pixels with lam ~ Beta(alpha, alpha). Its top-left
# corner is its centre minus half the side, and it is clipped to the image. The centre is uniform
# in [0, S), or with uniform_sampling in [-(side // 2), S + side // 2). From that the tests below
# compute exactly how often each pixel is cut and how the cut area is distributed. They compare
# frequencies over a few thousand draws with these probabilities. A check fails beyond 5 standard
# deviations: its false-alarm rate is erfc(5 / sqrt 2) = 5.7e-7, and under 1e-4 for all of a
# test's checks together (union bound). The seeds are fixed, so the tests are deterministic.

BETA_CDF = {  # closed forms of the Beta(alpha, alpha) distribution function
    0.5: lambda t: 2 / math.pi * math.asin(math.sqrt(t)),
    1.0: lambda t: t,
    2.0: lambda t: t * t * (3 - 2 * t),
}
SIGMAS = 5


def _side_probabilities(size, alpha):
    """P(side = k) for k = 0..size: k <= size * sqrt(1 - lam) < k + 1."""
    cdf = BETA_CDF[alpha]
    return [cdf(1 - (k / size) ** 2) - cdf(max(0.0, 1 - ((k + 1) / size) ** 2)) for k in range(size + 1)]


def _centres(size, side, uniform_sampling):
    return range(-(side // 2), size + side // 2) if uniform_sampling else range(size)


def _cut_rows(size, side, centre):
    return range(max(centre - side // 2, 0), min(centre - side // 2 + side, size))


def _cut_probabilities(size, alpha, uniform_sampling):
    """``(P(pixel (r, c) is cut) as a (size, size) tensor, {cut pixel count: probability})``."""
    pixel = torch.zeros(size, size, dtype=torch.float64)
    counts = {}
    for side, p_side in enumerate(_side_probabilities(size, alpha)):
        centres = _centres(size, side, uniform_sampling)
        row = torch.zeros(size, dtype=torch.float64)
        extents = {}
        for centre in centres:
            rows = _cut_rows(size, side, centre)
            row[list(rows)] += 1 / len(centres)
            extents[len(rows)] = extents.get(len(rows), 0) + 1 / len(centres)
        pixel += p_side * row[:, None] * row[None, :]  # the two centre coordinates are independent
        for h, p_h in extents.items():
            for w, p_w in extents.items():
                counts[h * w] = counts.get(h * w, 0) + p_side * p_h * p_w
    return pixel, counts


def _within(frequency, p, n):
    return abs(frequency - p) <= SIGMAS * math.sqrt(p * (1 - p) / n) + 1e-12


@pytest.mark.parametrize("uniform_sampling", [False, True])
@pytest.mark.parametrize("alpha", [0.5, 2.0])
def test_boxes_are_sampled_as_defined(alpha, uniform_sampling):
    """Every pixel is cut as often as the definition says (with uniform_sampling: every pixel
    equally often), the cut area follows the distribution Beta(alpha, alpha) implies, and the
    returned label weight is the fraction of pixels each image kept."""
    size, n = 12, 2500
    x = torch.stack([torch.zeros(1, size, size), torch.ones(1, size, size)])
    g = torch.Generator().manual_seed(0)
    cut, kept = [], []
    for _ in range(n):  # image 0 takes its box from image 1, which is all ones
        mixed, _, area, _ = cf.cutmix_batch(
            x,
            torch.arange(2),
            alpha=alpha,
            indices=torch.tensor([1, 0]),
            uniform_sampling=uniform_sampling,
            generator=g,
        )
        cut.append(mixed[0, 0])
        kept.append(area)
    cut = torch.stack(cut)
    cut_pixels = cut.sum(dim=(1, 2)).round().long()
    torch.testing.assert_close(torch.tensor(kept, dtype=torch.float64), 1 - cut_pixels.double() / size**2)

    pixel, counts = _cut_probabilities(size, alpha, uniform_sampling)
    if uniform_sampling:
        torch.testing.assert_close(pixel, torch.full_like(pixel, pixel[0, 0].item()))
    frequency = cut.double().mean(dim=0)
    bad = [
        (r, c, frequency[r, c].item(), pixel[r, c].item())
        for r in range(size)
        for c in range(size)
        if not _within(frequency[r, c].item(), pixel[r, c].item(), n)
    ]
    assert not bad, f"pixels cut too often or too rarely (row, col, frequency, probability): {bad[:5]}"

    bins = 8  # cut area in eighths of the image
    expected = [0.0] * bins
    for count, p in counts.items():
        expected[min(count * bins // size**2, bins - 1)] += p
    observed = torch.bincount((cut_pixels * bins // size**2).clamp(max=bins - 1), minlength=bins).double() / n
    for b in range(bins):
        assert _within(observed[b].item(), expected[b], n), (b, observed.tolist(), expected)


@pytest.mark.parametrize("uniform_sampling", [False, True])
def test_with_a_fixed_side_every_row_and_column_is_cut_as_the_centre_range_implies(uniform_sampling):
    """length=1 on a 5 x 5 image: a box of side 5 around a centre drawn from [0, 5), or with
    uniform_sampling from [-2, 7) so that every row and column is cut with p = 5/9. Each row's and
    column's frequency over 4,000 draws is checked within 5 standard deviations (false alarms
    under 1e-5 for the ten checks together; the seed is fixed)."""
    size, n = 5, 4000
    x = torch.stack([torch.zeros(1, size, size), torch.ones(1, size, size)])
    g = torch.Generator().manual_seed(0)
    cut = torch.stack(
        [
            cf.cutmix_batch(
                x,
                torch.arange(2),
                length=1,
                indices=torch.tensor([1, 0]),
                uniform_sampling=uniform_sampling,
                generator=g,
            )[0][0, 0]
            for _ in range(n)
        ]
    )
    centres = _centres(size, size, uniform_sampling)
    for axis in (1, 2):  # rows are cut where any column of theirs is, and the other way round
        frequency = (cut.amax(dim=axis) > 0).double().mean(dim=0)
        for i in range(size):
            p = sum(i in _cut_rows(size, size, c) for c in centres) / len(centres)
            assert _within(frequency[i].item(), p, n), (axis, i, frequency.tolist(), p)


def test_the_functional_defaults_are_alpha_1_and_centres_inside_the_image():
    x, y = torch.randn(4, 1, 8, 8), torch.arange(4)
    for seed in range(10):
        a = cf.cutmix_batch(x, y, generator=torch.Generator().manual_seed(seed))
        b = cf.cutmix_batch(x, y, alpha=1.0, uniform_sampling=False, generator=torch.Generator().manual_seed(seed))
        assert torch.equal(a[0], b[0]) and a[2:] == b[2:]


def test_length_1_is_allowed():
    x, y = torch.randn(3, 1, 6, 6), torch.arange(3)
    _, _, area, (x1, y1, x2, y2) = cf.cutmix_batch(x, y, length=1, generator=torch.Generator().manual_seed(0))
    assert area == pytest.approx(1 - (x2 - x1) * (y2 - y1) / 36) and (x2 - x1) * (y2 - y1) > 0


# -- the class in the Trainer -----------------------------------------------------------------


def _replay_draws(generator, n, height, width, alpha, uniform_sampling):
    """The partners and the box a CutMix class draws next from ``generator``: the draws depend
    on the batch's shape alone, so the functional form run on stand-ins, with the class indices
    0..n-1 as labels, returns them."""
    _, partners, _, bbox = cf.cutmix_batch(
        torch.zeros(n, 1, height, width),
        torch.arange(n),
        alpha=alpha,
        uniform_sampling=uniform_sampling,
        generator=generator,
    )
    return partners, bbox


def _cutmix_definition(x, partners, bbox):
    """``(mixed images, weight of each image's own label)``: inside the box (rows x1..x2-1,
    columns y1..y2-1) every pixel is the partner's; the weight is the fraction of pixels kept."""
    x1, y1, x2, y2 = bbox
    rows, cols = torch.arange(x.shape[-2]), torch.arange(x.shape[-1])
    inside = ((rows >= x1) & (rows < x2))[:, None] & ((cols >= y1) & (cols < y2))[None, :]
    return torch.where(inside, x[partners], x), 1.0 - inside.double().mean().item()


def _draws_show_a_swap(kept, y, partners):
    """Whether a batch tells the two label weights apart: some label differs from its partner's,
    and the box is neither empty nor the whole image nor half of it."""
    return 0 < kept < 1 and kept != 0.5 and bool((y != y[partners]).any())


@pytest.mark.parametrize("uniform_sampling", [False, True])
@pytest.mark.parametrize("interpolate_loss", [False, True])
def test_in_the_trainer_the_model_and_the_loss_see_the_definition(interpolate_loss, uniform_sampling):
    """The model sees each image with the box pasted from its partner; the loss is the cross
    entropy against kept * onehot(y) + (1 - kept) * onehot(y[partners]), or with interpolate_loss
    kept * CE(y) + (1 - kept) * CE(y[partners]) against the untouched labels. The draws are
    replayed from the generator the class is defined to use."""
    batches, seen = image_batches(n=3), Observed()
    algo = CutMix(alpha=1.0, interpolate_loss=interpolate_loss, uniform_sampling=uniform_sampling)
    trainer = Trainer(image_classifier(), batches, "3ba", algorithms=[algo, seen], seed=1, device="cpu")
    trainer.fit()
    generator, telling = replayed_generator(CutMix, seed=1), []
    for (x, y), model_input, out, target, loss in zip(
        batches, seen.inputs, seen.outputs, seen.targets, seen.losses, strict=True
    ):
        partners, bbox = _replay_draws(generator, len(y), 8, 8, 1.0, uniform_sampling)
        mixed, kept = _cutmix_definition(x, partners, bbox)
        assert torch.equal(model_input, mixed)
        if interpolate_loss:
            assert torch.equal(target, y)
            expected = kept * F.cross_entropy(out, y) + (1 - kept) * F.cross_entropy(out, y[partners])
        else:
            mixed_target = kept * one_hot(y, 4) + (1 - kept) * one_hot(y[partners], 4)
            torch.testing.assert_close(target, mixed_target)
            expected = soft_cross_entropy(out, mixed_target)
        torch.testing.assert_close(loss, expected.float())
        telling.append(_draws_show_a_swap(kept, y, partners))
    assert any(telling), "the seed must draw a box that tells the two label weights apart"
    ran = {t.event for t in trainer.engine.trace if "CutMix" in t.algorithms}
    assert ran == {Event.AFTER_DATALOADER, Event.AFTER_LOSS if interpolate_loss else Event.BEFORE_LOSS}


def test_label_smoothing_after_cutmix_smooths_the_mixed_target():
    batches, seen = image_batches(n=1), Observed()
    Trainer(
        image_classifier(),
        batches,
        "1ba",
        algorithms=[CutMix(alpha=1.0), LabelSmoothing(0.2), seen],
        seed=1,
        device="cpu",
    ).fit()
    ((x, y),) = batches
    partners, bbox = _replay_draws(replayed_generator(CutMix, seed=1), len(y), 8, 8, 1.0, False)
    _, kept = _cutmix_definition(x, partners, bbox)
    mixed_target = kept * one_hot(y, 4) + (1 - kept) * one_hot(y[partners], 4)
    torch.testing.assert_close(seen.targets[0], 0.8 * mixed_target + 0.2 / 4)
    torch.testing.assert_close(seen.losses[0], soft_cross_entropy(seen.outputs[0], 0.8 * mixed_target + 0.05))


def test_dense_targets_are_refused_with_a_clear_error():
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(2, 3, 4, 4, generator=g), torch.randint(0, 3, (2, 4, 4), generator=g))]
    with pytest.raises(
        ValueError,
        match=r"^target: CutMix mixes one label per image, class indices \(N,\) or "
        r"probabilities \(N, C\); got shape \(2, 4, 4\) \(dense targets such as segmentation "
        r"masks are not supported\)$",
    ):
        Trainer(torch.nn.Conv2d(3, 3, 1), batches, "1ba", algorithms=[CutMix()], device="cpu").fit()


def test_seeded_runs_repeat():
    batches = image_batches(n=2)
    a = Trainer(image_classifier(), batches, "2ba", algorithms=[CutMix()], seed=5)
    a.fit()
    b = Trainer(image_classifier(), batches, "2ba", algorithms=[CutMix()], seed=5)
    b.fit()
    for p, q in zip(a.state.model.parameters(), b.state.model.parameters(), strict=True):
        assert torch.equal(p, q)


@pytest.mark.cuda
def test_on_cuda_without_changing_device_dtype_or_memory_format():
    dev = torch.device("cuda")
    x = torch.randn(8, 3, 16, 16, device=dev, dtype=torch.bfloat16).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (8,), device=dev)
    mixed, y_perm, _, _ = cf.cutmix_batch(x, y)
    assert mixed.device == x.device and mixed.dtype == x.dtype and y_perm.device == y.device
    assert mixed.is_contiguous(memory_format=torch.channels_last)


def test_the_defaults_are_alpha_1_mixed_targets_and_centres_inside_the_image():
    """CutMix() draws and mixes as CutMix(alpha=1.0, interpolate_loss=False, uniform_sampling=False)."""

    def run(algo):
        seen = Observed()
        Trainer(image_classifier(), image_batches(n=2), "2ba", algorithms=[algo, seen], seed=3, device="cpu").fit()
        return seen

    default, explicit = run(CutMix()), run(CutMix(alpha=1.0, interpolate_loss=False, uniform_sampling=False))
    for a, b in zip(default.inputs + default.targets, explicit.inputs + explicit.targets, strict=True):
        assert torch.equal(a, b)


def test_probability_targets_are_mixed_by_area():
    batches = [
        (x, torch.softmax(torch.randn(len(y), 4, generator=torch.Generator().manual_seed(1)), dim=1))
        for x, y in image_batches(n=1)
    ]
    seen = Observed()
    Trainer(image_classifier(), batches, "1ba", algorithms=[CutMix(), seen], seed=1, device="cpu").fit()
    ((x, p),) = batches
    partners, bbox = _replay_draws(replayed_generator(CutMix, seed=1), len(p), 8, 8, 1.0, False)
    _, kept = _cutmix_definition(x, partners, bbox)
    assert 0 < kept < 1
    torch.testing.assert_close(seen.targets[0], kept * p + (1 - kept) * p[partners])


def test_dict_batches_are_mixed_by_key_with_the_classes_alpha():
    batches = [{"image": x, "label": y, "index": torch.arange(len(y))} for x, y in image_batches(n=4)]
    seen = Observed(input_key="image", target_key="label")
    algo = CutMix(alpha=0.5, input_key="image", target_key="label")
    Trainer(
        image_classifier(),
        batches,
        "4ba",
        algorithms=[algo, seen],
        input_key="image",
        target_key="label",
        seed=1,
        device="cpu",
    ).fit()
    generator = replayed_generator(CutMix, seed=1)
    for batch, model_input, target in zip(batches, seen.inputs, seen.targets, strict=True):
        partners, bbox = _replay_draws(generator, 6, 8, 8, 0.5, False)
        mixed, kept = _cutmix_definition(batch["image"], partners, bbox)
        assert torch.equal(model_input, mixed)
        torch.testing.assert_close(
            target, kept * one_hot(batch["label"], 4) + (1 - kept) * one_hot(batch["label"][partners], 4)
        )


def _check_the_batch_forms_on(device: torch.device) -> None:
    """Both forms on the device (on CUDA under torch's sync debug mode "error", so that a host
    synchronisation raises) give the CPU's result."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 3, 16, 16, generator=g).to(torch.bfloat16).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (8,), generator=g)
    xd, yd, work = x.to(device, copy=True), y.to(device), x.to(device, copy=True)
    with no_host_sync() if device.type == "cuda" else contextlib.nullcontext():
        mixed, y_perm, area, bbox = cf.cutmix_batch(xd, yd, generator=torch.Generator().manual_seed(1))
        written = cf.cutmix_batch(work, yd, generator=torch.Generator().manual_seed(1), inplace=True)
    expected, y_expected, *drawn = cf.cutmix_batch(x, y, generator=torch.Generator().manual_seed(1))
    assert [area, bbox] == drawn and written[0] is work
    for got in (mixed, work):
        assert got.device == xd.device and got.is_contiguous(memory_format=torch.channels_last)
        assert torch.equal(got.cpu(), expected)
    assert y_perm.device == yd.device and torch.equal(y_perm.cpu(), y_expected)


def test_the_batch_forms_check_on_the_cpu():
    _check_the_batch_forms_on(torch.device("cpu"))


@pytest.mark.cuda
def test_on_cuda_the_batch_forms_make_no_host_sync():
    _check_the_batch_forms_on(torch.device("cuda"))
