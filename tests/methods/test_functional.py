"""Functional forms checked against their definitions, with explicit parameters."""

from __future__ import annotations

import pytest
import torch

import algorithms.functional as cf


def test_cutmix_box_comes_from_partner_and_rest_is_unchanged():
    x = torch.arange(2 * 3 * 5 * 6, dtype=torch.float32).reshape(2, 3, 5, 6)
    y = torch.tensor([3, 7])
    idx = torch.tensor([1, 0])
    mixed, y_perm, area, bbox = cf.cutmix_batch(x, y, bbox=(1, 2, 4, 5), indices=idx)
    assert bbox == (1, 2, 4, 5)
    for i in range(2):
        for r in range(5):
            for c in range(6):
                inside = 1 <= r < 4 and 2 <= c < 5
                src = idx[i] if inside else i
                assert torch.equal(mixed[i, :, r, c], x[src, :, r, c])
    assert y_perm.tolist() == [7, 3]
    assert area == pytest.approx(1 - (3 * 3) / (5 * 6))


def test_cutmix_length_sets_box_side():
    x = torch.randn(4, 1, 10, 10)
    _, _, area, (x1, y1, x2, y2) = cf.cutmix_batch(x, torch.arange(4), length=0.4,
                                                   generator=torch.Generator().manual_seed(0))
    assert area == pytest.approx(1 - (x2 - x1) * (y2 - y1) / 100)
    assert (x2 - x1) <= 4 and (y2 - y1) <= 4


def test_cutmix_alpha_zero_cuts_nothing():
    x = torch.randn(3, 2, 4, 4)
    mixed, _, area, _ = cf.cutmix_batch(x, torch.arange(3), alpha=0.0)
    assert area == 1.0 and torch.equal(mixed, x)


def test_cutmix_generator_makes_it_repeatable():
    x = torch.randn(6, 3, 8, 8)
    a = cf.cutmix_batch(x, torch.arange(6), generator=torch.Generator().manual_seed(3))
    b = cf.cutmix_batch(x, torch.arange(6), generator=torch.Generator().manual_seed(3))
    assert torch.equal(a[0], b[0]) and a[2:] == b[2:]


def test_mixup_is_the_convex_combination():
    x = torch.randn(4, 3)
    y = torch.tensor([0, 1, 2, 0])
    idx = torch.tensor([2, 3, 0, 1])
    mixed, y_perm, m = cf.mixup_batch(x, y, mixing=0.3, indices=idx)
    assert m == 0.3
    torch.testing.assert_close(mixed, 0.7 * x + 0.3 * x[idx])
    assert torch.equal(y_perm, y[idx])


def test_mixup_sampled_weight_is_at_most_half():
    g = torch.Generator().manual_seed(0)
    for _ in range(50):
        _, _, m = cf.mixup_batch(torch.randn(2, 2), torch.arange(2), alpha=1.0, generator=g)
        assert 0 <= m <= 0.5


def test_interpolate_targets_definition():
    t = cf.interpolate_targets(torch.tensor([0, 2]), torch.tensor([1, 2]), 0.25, num_classes=3)
    torch.testing.assert_close(t, torch.tensor([[0.75, 0.25, 0.0], [0.0, 0.0, 1.0]]))


# -- bad input -------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("call", "pattern"),
    [
        (lambda: cf.cutmix_batch(torch.randn(2, 3, 4), torch.arange(2)), r"input: .*\(N, C, H, W\).*\(2, 3, 4\)"),
        (lambda: cf.cutmix_batch(torch.randn(2, 1, 4, 4), torch.arange(3)), r"batch size.*\(2, 1, 4, 4\).*\(3,\)"),
        (lambda: cf.cutmix_batch(torch.randn(2, 1, 4, 4), torch.arange(2), alpha=-1), r"alpha=-1"),
        (lambda: cf.cutmix_batch(torch.randn(2, 1, 4, 4), torch.arange(2), bbox=(0, 0, 9, 2)), r"bbox="),
        (lambda: cf.cutmix_batch(torch.randn(2, 1, 4, 4), torch.arange(2), length=1.5), r"length=1.5"),
        (lambda: cf.mixup_batch(torch.randn(2, 3), torch.arange(2), alpha=-0.1), r"alpha=-0.1"),
        (lambda: cf.mixup_batch(torch.randn(2, 3), torch.arange(2), mixing=2.0), r"mixing=2.0"),
        (lambda: cf.mixup_batch(torch.randn(2, 3), torch.arange(2), indices=torch.tensor([0])), r"indices"),
        (lambda: cf.interpolate_targets(torch.tensor([0, 5]), torch.tensor([0, 1]), 0.5, 3), r"target"),
    ],
)
def test_bad_input_raises_value_error_naming_the_argument(call, pattern):
    with pytest.raises(ValueError, match=pattern):
        call()


@pytest.mark.parametrize(
    ("make", "pattern"),
    [
        (lambda: __import__("algorithms").CutMix(alpha=-0.5), r"alpha=-0.5"),
        (lambda: __import__("algorithms").MixUp(alpha=float("nan")), r"alpha=nan"),
    ],
)
def test_bad_hyperparameters_fail_at_construction(make, pattern):
    with pytest.raises(ValueError, match=pattern):
        make()


@pytest.mark.cuda
def test_methods_run_on_cuda_without_changing_device_or_dtype():
    dev = torch.device("cuda")
    x = torch.randn(8, 3, 16, 16, device=dev, dtype=torch.bfloat16).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (8,), device=dev)
    mixed, y_perm, _, _ = cf.cutmix_batch(x, y)
    assert mixed.device == x.device and mixed.dtype == x.dtype
    assert mixed.is_contiguous(memory_format=torch.channels_last)
    mixed, y_perm, _ = cf.mixup_batch(x, y)
    assert mixed.device == x.device and mixed.dtype == x.dtype and y_perm.device == y.device
