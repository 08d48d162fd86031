"""The target utilities every method shares (``algorithms.targets``).

The one-hot tests assert what Composer's tests of its one-hot conversion assert
(``tests/loss/test_utils.py``: ``_one_hot`` equals ``F.one_hot`` with the classes moved to
``dim=1``; ``ensure_targets_one_hot`` maps a negative index to an all-zero vector;
``infer_target_type`` tells indices from one-hot by shape), over the same target shapes.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import algorithms.functional as cf
from algorithms.targets import (
    interpolate_targets,
    is_class_indices,
    lookup_smoothed,
    one_hot,
    smooth_targets,
    smoothed_rows,
    to_distribution,
)

TARGET_SHAPES = [((8,), 2), ((8,), 10), ((8, 5, 5), 2), ((8, 5, 5), 10), ((8, 5, 7, 11), 10)]


@pytest.mark.parametrize(("shape", "num_classes"), TARGET_SHAPES)
def test_one_hot_is_torchs_with_classes_on_dim_1(shape, num_classes):
    y = torch.randint(0, num_classes, shape, generator=torch.Generator().manual_seed(0))
    expected = torch.movedim(F.one_hot(y, num_classes), -1, 1).float()
    torch.testing.assert_close(one_hot(y, num_classes), expected)


@pytest.mark.parametrize("logits_shape", [(64, 2), (64, 10), (64, 2, 5, 5), (64, 10, 5, 7, 11)])
def test_negative_indices_get_all_zero_vectors(logits_shape):
    g = torch.Generator().manual_seed(0)
    index_shape = logits_shape[:1] + logits_shape[2:]
    y = torch.randint(-1, logits_shape[1], index_shape, generator=g)
    expected = torch.movedim(F.one_hot(y.clamp(min=0), logits_shape[1]), -1, 1).float()
    expected *= (y >= 0).unsqueeze(1)
    torch.testing.assert_close(to_distribution(y, logits_shape[1], torch.float32, logits_shape), expected)


@pytest.mark.parametrize("logits_shape", [(64, 2), (64, 10), (64, 2, 5, 5), (64, 10, 5, 7, 11)])
def test_the_shape_tells_indices_from_distributions(logits_shape):
    y = torch.zeros(logits_shape[:1] + logits_shape[2:], dtype=torch.long)
    assert is_class_indices(y, logits_shape)
    assert not is_class_indices(torch.zeros(logits_shape, dtype=torch.long), logits_shape)
    assert not is_class_indices(torch.zeros(logits_shape), logits_shape)


def test_without_logits_the_dtype_tells_them_apart():
    assert is_class_indices(torch.tensor([0, 1]))
    assert not is_class_indices(torch.tensor([[0.0, 1.0]]))


def test_interpolate_targets_definition():
    t = cf.interpolate_targets(torch.tensor([0, 2]), torch.tensor([1, 2]), 0.25, num_classes=3)
    torch.testing.assert_close(t, torch.tensor([[0.75, 0.25, 0.0], [0.0, 0.0, 1.0]]))


def test_interpolate_targets_of_dense_indices_with_the_logits_shape():
    y, y_perm = torch.randint(0, 3, (2, 4, 4)), torch.randint(0, 3, (2, 4, 4))
    t = interpolate_targets(y, y_perm, 0.3, logits_shape=(2, 3, 4, 4))
    torch.testing.assert_close(t, 0.7 * one_hot(y, 3) + 0.3 * one_hot(y_perm, 3))


def test_interpolate_targets_takes_the_classes_of_probability_targets():
    p, q = torch.tensor([[0.5, 0.5, 0.0], [0.0, 0.0, 1.0]]), torch.tensor([[1.0, 0.0, 0.0], [0.2, 0.3, 0.5]])
    torch.testing.assert_close(interpolate_targets(p, q, 0.25), 0.75 * p + 0.25 * q)


def test_interpolate_targets_reads_integer_one_hot_of_the_logits_shape_as_distributions():
    y, y_perm = torch.tensor([0, 2, 1, 1]), torch.tensor([1, 1, 0, 2])
    t = interpolate_targets(F.one_hot(y, 3), F.one_hot(y_perm, 3), 0.25, logits_shape=(4, 3))
    torch.testing.assert_close(t, 0.75 * one_hot(y, 3) + 0.25 * one_hot(y_perm, 3))


def test_interpolate_targets_in_float64_is_exact_to_float64():
    t = interpolate_targets(torch.tensor([0, 1]), torch.tensor([1, 1]), 0.3, num_classes=2, dtype=torch.float64)
    expected = torch.tensor([[1 - 0.3, 0.3], [0.0, 1 - 0.3 + 0.3]], dtype=torch.float64)
    torch.testing.assert_close(t, expected, rtol=0, atol=1e-15)


def test_smooth_targets_definition():
    p = torch.tensor([[0.5, 0.5, 0.0]])
    torch.testing.assert_close(smooth_targets(p, 0.3, 3), 0.7 * p + 0.1)
    torch.testing.assert_close(
        smooth_targets(torch.tensor([2, -100]), 0.3, 3), torch.tensor([[0.1, 0.1, 0.8], [0.0, 0.0, 0.0]])
    )


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: interpolate_targets(torch.tensor([0, 5]), torch.tensor([0, 1]), 0.5, 3),
            "target: class indices must be in [0, 3) (negative: ignored), found [5]",
        ),
        (
            lambda: interpolate_targets(torch.tensor([0, 1]), torch.tensor([0, 1]), 0.5),
            "num_classes is required when targets are class indices",
        ),
        (
            lambda: interpolate_targets(torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 3, dtype=torch.long), 0.5),
            "num_classes is required when targets are class indices",
        ),  # (N, L) integer targets hold indices
        (
            lambda: one_hot(torch.arange(10), 3),
            "target: class indices must be in [0, 3) (negative: ignored), found [3, 4, 5, 6, 7]",
        ),
        (
            lambda: cf.smooth_labels(torch.zeros(2, 3), torch.tensor([True, False])),
            "target: class indices must be an integer tensor, got torch.bool",
        ),
        (
            lambda: is_class_indices(torch.tensor([0.0, 1.0]), (2, 3)),
            "target: class indices must be an integer tensor, got torch.float32",
        ),
        (
            lambda: to_distribution(torch.zeros(2, 4), 3, torch.float32),
            "target: probabilities must have 3 classes on dim 1, (N, 3, ...), got shape (2, 4)",
        ),
        (
            lambda: to_distribution(torch.zeros(4), 3, torch.float32),
            "target: probabilities must have 3 classes on dim 1, (N, 3, ...), got shape (4,)",
        ),
        (
            lambda: to_distribution(torch.zeros(2, 4), 3, torch.float32, (2, 3)),
            "target: shape (2, 4) fits logits of shape (2, 3) neither as class indices (2,) nor as class "
            "probabilities (2, 3)",
        ),
        (lambda: smooth_targets(torch.tensor([0]), 1.5, 3), "smoothing=1.5: must be a number in [0, 1]"),
        (
            lambda: smooth_targets(torch.tensor([0, 1]), 0.1, 3, logits_shape=(2, 3, 4)),
            "target: shape (2,) fits logits of shape (2, 3, 4) neither as class indices (2, 4) nor as class "
            "probabilities (2, 3, 4)",
        ),
        (
            lambda: smooth_targets(torch.tensor([0, 1, 2]), 0.1, 3, logits_shape=(2, 3)),
            "target: shape (3,) fits logits of shape (2, 3) neither as class indices (2,) nor as class "
            "probabilities (2, 3)",
        ),
        (
            lambda: one_hot(torch.tensor([3]), 3),
            "target: class indices must be in [0, 3) (negative: ignored), found [3]",
        ),
        # a single index, not a batch: the error names it and the fix, for every form that takes indices
        (
            lambda: one_hot(torch.tensor(2), 3),
            "target: class indices need a batch dimension, (N, ...), got a single index 2 of shape (); pass "
            "target.reshape(1) for a batch of one",
        ),
        (
            lambda: smooth_targets(torch.tensor(1), 0.1, 3),
            "target: class indices need a batch dimension, (N, ...), got a single index 1 of shape (); pass "
            "target.reshape(1) for a batch of one",
        ),
        (
            lambda: interpolate_targets(torch.tensor(0), torch.tensor(1), 0.5, 3),
            "target: class indices need a batch dimension, (N, ...), got a single index 0 of shape (); pass "
            "target.reshape(1) for a batch of one",
        ),
    ],
)
def test_bad_input_raises_value_error(call, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        call()


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16, torch.float32])
def test_smooth_targets_of_class_indices_are_in_the_dtype_asked_for(dtype):
    y = torch.tensor([2, 0, 1, 2])
    for logits_shape in (None, (4, 3)):
        out = smooth_targets(y, 0.3, 3, dtype=dtype, logits_shape=logits_shape)
        expected = F.one_hot(y, 3).to(dtype) * (1 - 0.3) + 0.3 / 3  # the formula in that dtype
        assert out.dtype == dtype and torch.equal(out, expected)


def test_smoothed_rows_are_kept_for_up_to_1024_classes():
    rows = smoothed_rows(1024, 0.25, torch.float32)
    assert rows.shape == (1024, 1024) and smoothed_rows(1024, 0.25, torch.float32) is rows  # kept, not rebuilt
    assert torch.equal(rows, smooth_targets(torch.arange(1024), 0.25, 1024))
    assert smoothed_rows(1025, 0.25, torch.float32) is None
    assert smoothed_rows.cache_info().maxsize == 8  # at most 8 MiB each (float64), 64 MiB in all


@pytest.mark.parametrize(
    ("target", "logits_shape"),
    [
        (torch.tensor([[1, 2]]), None),  # not (N,)
        (torch.tensor([1.0, 2.0]), None),  # not indices
        (torch.tensor([1, 2], dtype=torch.uint8), None),  # an index dtype a gather does not take
        (torch.tensor([1, 2]), (2, 3, 4)),  # logits with more than (N, C)
        (torch.tensor([1, 2]), (3, 3)),  # another batch size
        (torch.tensor([1, -100]), (2, 3)),  # an ignored position
        (torch.tensor([1, 3]), (2, 3)),  # out of range
    ],
)
def test_lookup_is_left_to_the_formula_where_it_does_not_apply(target, logits_shape):
    assert lookup_smoothed(target, 0.1, 3, torch.float32, logits_shape) is None


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_lookup_gives_the_formula_for_class_indices(dtype):
    y = torch.tensor([2, 0, 1, 2], dtype=dtype)
    for logits_shape in (None, (4, 3)):
        assert torch.equal(
            lookup_smoothed(y, 0.3, 3, torch.float64, logits_shape),
            F.one_hot(y.long(), 3).double() * (1 - 0.3) + 0.3 / 3,
        )


# mixed_targets: the soft targets of a mixed batch, smoothed, in one call (timm's Mixup(label_smoothing=...)).
# The reference is the definition in float64 on torch's one-hot:
#     soft(y) = (1 - s) * onehot(y) + s / C,  mixed = w * soft(y) + (1 - w) * soft(y_perm)
# with w the weight of each example's own target.


def _soft(dist, s):
    return (1 - s) * dist.double() + s / dist.shape[1]


def _mixed_reference(dist, dist_perm, own, s):
    return own * _soft(dist, s) + (1 - own) * _soft(dist_perm, s)


def _labels(n=16, c=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, c, (n,), generator=g)
    return y, y[torch.randperm(n, generator=g)]


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.5, 1.0])
@pytest.mark.parametrize("own", [0.0, 0.3, 0.75, 1.0])
def test_mixed_targets_of_class_indices_is_the_definition(own, smoothing):
    y, y_perm = _labels()
    expected = _mixed_reference(F.one_hot(y, 7), F.one_hot(y_perm, 7), own, smoothing)
    by_own = cf.mixed_targets(y, y_perm, own_weight=own, num_classes=7, smoothing=smoothing)
    by_partner = cf.mixed_targets(y, y_perm, partner_weight=1 - own, num_classes=7, smoothing=smoothing)
    assert by_own.dtype == torch.float32 and by_own.shape == (16, 7)
    torch.testing.assert_close(by_own.double(), expected)
    torch.testing.assert_close(by_partner.double(), expected)
    torch.testing.assert_close(by_own.sum(dim=1), torch.ones(16))


@pytest.mark.parametrize(
    "weight", [np.float32(0.3), np.float64(0.3), np.array(0.3), torch.tensor(0.3)], ids=lambda w: type(w).__name__
)
def test_mixed_targets_takes_numpy_and_tensor_scalars(weight):
    """A weight sampled with NumPy (``np.random.beta``, as timm does) gives what the Python float gives."""
    y, y_perm = _labels()
    expected = _mixed_reference(F.one_hot(y, 7), F.one_hot(y_perm, 7), float(weight), 0.1)
    for kwargs in ({"own_weight": weight}, {"partner_weight": 1 - weight}):
        got = cf.mixed_targets(y, y_perm, num_classes=7, smoothing=np.float64(0.1), **kwargs)
        assert isinstance(got, torch.Tensor) and got.dtype == torch.float32
        torch.testing.assert_close(got.double(), expected)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_mixed_targets_of_class_probabilities_in_any_float_dtype(dtype):
    """Probability targets (themselves mixed or smoothed, in half precision from an autocast loader)
    mix and smooth as the definition says, computed in float32 at least (float64 for float64)."""
    g = torch.Generator().manual_seed(1)
    p = torch.softmax(torch.randn(12, 5, generator=g), dim=1).to(dtype)
    q = p[torch.randperm(12, generator=g)]
    got = cf.mixed_targets(p, q, own_weight=0.6, smoothing=0.2)  # the classes come from the targets
    assert got.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)
    torch.testing.assert_close(got.double(), _mixed_reference(p, q, 0.6, 0.2))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_mixed_targets_in_the_dtype_asked_for(dtype):
    y, y_perm = _labels()
    got = cf.mixed_targets(y, y_perm, own_weight=0.75, num_classes=7, smoothing=0.1, dtype=dtype)
    expected = _mixed_reference(F.one_hot(y, 7), F.one_hot(y_perm, 7), 0.75, 0.1)
    assert got.dtype == dtype
    tolerance = {torch.float16: 1e-3, torch.bfloat16: 1e-2, torch.float64: 1e-12}[dtype]
    torch.testing.assert_close(got.double(), expected, rtol=0, atol=tolerance)


def test_mixed_targets_of_dense_indices_and_ignored_positions():
    """Segmentation targets (N, H, W) against logits (N, C, H, W): each pixel mixes as the definition
    says, and a pixel ignored in one target (-100) adds only the other's share."""
    g = torch.Generator().manual_seed(2)
    y = torch.randint(0, 4, (3, 5, 5), generator=g)
    y_perm = y.flip(0)
    y[0, 0, 0] = -100
    got = cf.mixed_targets(y, y_perm, own_weight=0.7, smoothing=0.2, logits_shape=(3, 4, 5, 5))
    onehot = torch.movedim(F.one_hot(y.clamp(min=0), 4), -1, 1)
    onehot_perm = torch.movedim(F.one_hot(y_perm, 4), -1, 1)
    expected = _mixed_reference(onehot, onehot_perm, 0.7, 0.2)
    expected[0, :, 0, 0] = 0.3 * _soft(onehot_perm, 0.2)[0, :, 0, 0]  # the ignored target adds nothing
    torch.testing.assert_close(got.double(), expected)


def test_mixed_targets_with_integer_one_hot_targets_of_the_logits_shape():
    y, y_perm = _labels()
    got = cf.mixed_targets(
        F.one_hot(y, 7), F.one_hot(y_perm, 7), partner_weight=0.25, smoothing=0.1, logits_shape=(16, 7)
    )
    torch.testing.assert_close(got.double(), _mixed_reference(F.one_hot(y, 7), F.one_hot(y_perm, 7), 0.75, 0.1))


def test_mixed_targets_does_not_modify_its_inputs():
    p = torch.softmax(torch.randn(4, 3), dim=1)
    q, copies = p.flip(0), (p.clone(), p.flip(0).clone())
    cf.mixed_targets(p, q, own_weight=0.5, smoothing=0.3)
    assert torch.equal(p, copies[0]) and torch.equal(q, copies[1])


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({}, ValueError, "own_weight=None, partner_weight=None: give one of them, by keyword"),
        ({"own_weight": 0.3, "partner_weight": 0.7}, ValueError, "own_weight=0.3, partner_weight=0.7: give one"),
        ({"own_weight": 1.5}, ValueError, "own_weight=1.5: must be in [0, 1]"),
        ({"partner_weight": -0.1}, ValueError, "partner_weight=-0.1: must be in [0, 1]"),
        ({"own_weight": "a"}, TypeError, "own_weight='a': a number in [0, 1] is needed"),
        ({"own_weight": 0.5, "smoothing": 2.0}, ValueError, "smoothing=2.0: must be a number in [0, 1]"),
    ],
)
def test_mixed_targets_bad_weights(kwargs, error, message):
    y, y_perm = _labels()
    with pytest.raises(error, match=f"^{re.escape(message)}"):
        cf.mixed_targets(y, y_perm, num_classes=7, **kwargs)


def test_mixed_targets_weights_are_keyword_only_and_classes_are_needed_for_indices():
    y, y_perm = _labels()
    with pytest.raises(TypeError):
        cf.mixed_targets(y, y_perm, 0.5, 7)  # a positional weight could mean either
    with pytest.raises(ValueError, match="num_classes is required"):
        cf.mixed_targets(y, y_perm, own_weight=0.5)
    with pytest.raises(ValueError, match=r"target_perm: the partners' targets must have the targets' shape \(16,\)"):
        cf.mixed_targets(y, y_perm[:8], own_weight=0.5, num_classes=7)
