"""Property tests over batch sizes, image sizes and dtypes."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import algorithms.functional as cf

dtypes = st.sampled_from([torch.float32, torch.bfloat16])
batch = st.integers(1, 9)
side = st.integers(1, 17)
classes = st.integers(2, 11)
seeds = st.integers(0, 2**31 - 1)


def _data(n, c, h, w, k, dtype, seed, channels_last=False):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, c, h, w, generator=g).to(dtype)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, k, (n,), generator=g)
    return x, y, g


@settings(max_examples=60, deadline=None)
@given(batch, st.integers(1, 4), side, side, classes, dtypes, seeds, st.floats(0, 4), st.booleans(),
       st.booleans())
def test_cutmix_properties(n, c, h, w, k, dtype, seed, alpha, uniform, channels_last):
    x, y, g = _data(n, c, h, w, k, dtype, seed, channels_last)
    x0, y0 = x.clone(), y.clone()
    mixed, y_perm, area, (x1, y1, x2, y2) = cf.cutmix_batch(
        x, y, alpha=alpha, uniform_sampling=uniform, generator=g)
    assert torch.equal(x, x0) and torch.equal(y, y0)  # inputs untouched
    assert mixed.shape == x.shape and mixed.dtype == dtype
    if channels_last:
        assert mixed.is_contiguous(memory_format=torch.channels_last)
    assert 0 <= x1 <= x2 <= h and 0 <= y1 <= y2 <= w
    assert 0.0 <= area <= 1.0
    target = cf.interpolate_targets(y, y_perm, 1 - area, num_classes=k)
    torch.testing.assert_close(target.sum(1), torch.ones(n))
    assert (target >= 0).all()
    # every pixel comes from the example itself or from its partner
    assert sorted(y_perm.tolist()) == sorted(y.tolist())


@settings(max_examples=60, deadline=None)
@given(batch, side, classes, dtypes, seeds, st.floats(0, 4))
def test_mixup_properties(n, d, k, dtype, seed, alpha):
    x, y, g = _data(n, 1, d, 1, k, dtype, seed)
    x0 = x.clone()
    mixed, y_perm, m = cf.mixup_batch(x, y, alpha=alpha, generator=g)
    assert torch.equal(x, x0)
    assert mixed.shape == x.shape and mixed.dtype == dtype
    assert 0.0 <= m <= 0.5
    target = cf.interpolate_targets(y, y_perm, m, num_classes=k)
    torch.testing.assert_close(target.sum(1), torch.ones(n))
    # a convex combination lies between the batch's extremes
    tol = 1e-2 if dtype == torch.bfloat16 else 1e-6
    assert mixed.float().min() >= x.float().min() - tol
    assert mixed.float().max() <= x.float().max() + tol
