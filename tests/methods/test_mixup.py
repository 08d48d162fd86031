"""MixUp: the functional form and the class, checked against the definition.

``test_each_example_is_mixed_with_its_partner`` asserts what Composer's own test of
``mixup_batch`` asserts (``tests/algorithms/test_mixup.py``: ``mixed[i] == (1 - m) * x[i] + m *
x[indices[i]]`` and ``target_perm[i] == y[indices[i]]``) over the same data shape and ``alpha``
values. Composer's test draws ``m`` with its private ``_gen_mixing_coef``; here ``m`` is drawn
the same way, ``min(z, 1 - z)`` with ``z ~ Beta(alpha, alpha)``, in the test itself.
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
from algorithms import MixUp
from algorithms.core import Event, Trainer


def validate_mixup_batch(x, y, indices, mixed, y_perm, mixing):
    for i in range(x.shape[0]):
        j = indices[i]
        torch.testing.assert_close(mixed[i], (1 - mixing) * x[i] + mixing * x[j])
        torch.testing.assert_close(y_perm[i], y[j])


@pytest.mark.parametrize("alpha", [0.2, 1])
def test_each_example_is_mixed_with_its_partner(alpha):
    torch.manual_seed(0)
    x, y = torch.randn(7, 11, 3, 5), torch.randint(10, size=(7,))
    indices = torch.randperm(7)
    z = np.random.default_rng(0).beta(alpha, alpha)
    mixing = min(z, 1.0 - z)  # a NumPy float, as Composer's test passes
    mixed, y_perm, m = cf.mixup_batch(x, y, mixing=mixing, indices=indices)
    validate_mixup_batch(x, y, indices, mixed, y_perm, mixing)
    assert m == pytest.approx(mixing)


def test_is_the_convex_combination():
    x = torch.randn(4, 3)
    y = torch.tensor([0, 1, 2, 0])
    idx = torch.tensor([2, 3, 0, 1])
    mixed, y_perm, m = cf.mixup_batch(x, y, mixing=0.3, indices=idx)
    assert m == 0.3
    torch.testing.assert_close(mixed, 0.7 * x + 0.3 * x[idx])
    assert torch.equal(y_perm, y[idx])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_keeps_dtype_and_memory_format(dtype):
    x = torch.randn(4, 3, 5, 5).to(dtype).contiguous(memory_format=torch.channels_last)
    mixed, _, _ = cf.mixup_batch(x, torch.arange(4), mixing=0.4)
    assert mixed.dtype == dtype and mixed.is_contiguous(memory_format=torch.channels_last)


def test_sampled_weight_is_at_most_half():
    g = torch.Generator().manual_seed(0)
    for _ in range(50):
        _, _, m = cf.mixup_batch(torch.randn(2, 2), torch.arange(2), alpha=1.0, generator=g)
        assert 0 <= m <= 0.5


def test_alpha_zero_mixes_nothing():
    x = torch.randn(3, 4)
    mixed, _, m = cf.mixup_batch(x, torch.arange(3), alpha=0.0)
    assert m == 0.0 and torch.equal(mixed, x)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: cf.mixup_batch(torch.randn(2, 3), torch.arange(2), alpha=-0.1),
            "alpha=-0.1: must be a number in [0, inf)",
        ),
        (lambda: cf.mixup_batch(torch.randn(2, 3), torch.arange(2), mixing=2.0), "mixing=2.0: must be in [0, 1]"),
        (lambda: cf.mixup_batch(torch.randn(2, 3), torch.arange(2), mixing=-0.5), "mixing=-0.5: must be in [0, 1]"),
        (
            lambda: cf.mixup_batch(torch.randn(2, 3), torch.arange(2), indices=torch.tensor([0])),
            "indices must be an integer tensor of shape (2,), got torch.int64 of shape (1,)",
        ),
        (
            lambda: cf.mixup_batch(torch.randn(2, 3), torch.arange(3)),
            "input and target must have the same batch size: input shape (2, 3), target shape (3,)",
        ),
        (
            lambda: cf.mixup_batch(torch.tensor(1.0), torch.arange(1)),
            "input and target must have the same batch size: input shape (), target shape (1,)",
        ),
        (
            lambda: cf.mixup_batch(torch.randn(2, 3), torch.tensor(1)),
            "input and target must have the same batch size: input shape (2, 3), target shape ()",
        ),
        (
            lambda: cf.mixup_batch(torch.randn(2, 3), torch.arange(2), indices=[1, 0]),
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
        MixUp(alpha=alpha)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 9),
    st.integers(1, 17),
    st.integers(2, 11),
    st.sampled_from([torch.float32, torch.bfloat16]),
    st.integers(0, 2**31 - 1),
    st.floats(0, 4),
)
def test_properties(n, d, k, dtype, seed, alpha):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 1, d, 1, generator=g).to(dtype)
    y = torch.randint(0, k, (n,), generator=g)
    x0 = x.clone()
    mixed, y_perm, m = cf.mixup_batch(x, y, alpha=alpha, generator=g)
    assert torch.equal(x, x0)
    assert mixed.shape == x.shape and mixed.dtype == dtype
    assert 0.0 <= m <= 0.5
    target = cf.interpolate_targets(y, y_perm, m, num_classes=k)
    torch.testing.assert_close(target.sum(1), torch.ones(n))
    # A convex combination lies between the batch's extremes, up to the rounding of the mix in
    # x's own dtype: a relative tolerance of 2 eps(dtype) * max|x| bounds the three roundings
    # (two products and a sum). An absolute 1e-2 was below bfloat16's rounding near |x| = 2.6
    # (an ulp there is 2 * 2**-7 = 0.0156), so the test failed now and then.
    tol = 2 * torch.finfo(dtype).eps * x.float().abs().max()
    assert mixed.float().min() >= x.float().min() - tol
    assert mixed.float().max() <= x.float().max() + tol


# -- inplace=True ----------------------------------------------------------------------------

# Examples of 64 KiB or more are mixed one at a time on the CPU, smaller ones by a gather.
EXAMPLE_SHAPES = [(3, 5), (3, 96, 96)]


@pytest.mark.parametrize("example_shape", EXAMPLE_SHAPES)
@pytest.mark.parametrize("indices", [[1, 2, 3, 0], [1, 0, 3, 2], [0, 0, 3, 3], [0, 1, 2, 3], [2, 0, 1, 3]])
@pytest.mark.parametrize("mixing", [0.0, 0.3, 0.5, 1.0])
def test_inplace_writes_the_convex_combination_into_the_input_and_returns_it(mixing, indices, example_shape):
    """Every partner is read before any example is written (cycles, swaps, repeats, itself)."""
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(4, *example_shape, generator=g), torch.randint(0, 3, (4,), generator=g)
    original, idx = x.clone(), torch.tensor(indices)
    mixed, y_perm, m = cf.mixup_batch(x, y, mixing=mixing, indices=idx, inplace=True)
    assert mixed is x and m == mixing and torch.equal(y_perm, y[idx])
    torch.testing.assert_close(x, (1 - mixing) * original + mixing * original[idx])
    if mixing in (0.0, 1.0):
        assert torch.equal(x, original if mixing == 0.0 else original[idx])


@pytest.mark.parametrize("size", [(5, 4), (128, 96)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("channels_last", [False, True])
def test_inplace_draws_and_writes_what_the_copy_does_keeping_dtype_and_layout(dtype, channels_last, size):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(6, 3, *size, generator=g).to(dtype)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 4, (6,), generator=g)
    for seed in range(6):
        before = x.clone()
        copied, y_copied, m_copied = cf.mixup_batch(x, y, alpha=1.0, generator=torch.Generator().manual_seed(seed))
        assert torch.equal(x, before)  # the default leaves the input as it was
        assert copied.dtype == dtype and copied.is_contiguous(
            memory_format=torch.channels_last if channels_last else torch.contiguous_format
        )
        mixed, y_perm, m = cf.mixup_batch(x, y, alpha=1.0, generator=torch.Generator().manual_seed(seed), inplace=True)
        assert mixed is x and torch.equal(x, copied) and m == m_copied and torch.equal(y_perm, y_copied)
        assert x.dtype == dtype and x.is_contiguous(
            memory_format=torch.channels_last if channels_last else torch.contiguous_format
        )


@pytest.mark.parametrize("indices", [[1, 2, 3, 4, 0], [0, 0, 4, 4, 1], [4, 3, 2, 1, 0]])
def test_large_examples_are_mixed_one_at_a_time_to_the_same_values(monkeypatch, indices):
    """From 64 KiB an example, the CPU mixes example by example: the values of the gather, and
    the formula's, for permutations and repeated partners alike, in both forms."""
    import algorithms._mixing as mixing_module

    g = torch.Generator().manual_seed(2)
    x, y, idx = torch.randn(5, 3, 96, 96, generator=g), torch.arange(5), torch.tensor(indices)
    assert x[0].numel() * x.element_size() >= mixing_module.ROW_BY_ROW_BYTES
    one_at_a_time = cf.mixup_batch(x, y, mixing=0.3, indices=idx)[0]
    work = x.clone()
    assert cf.mixup_batch(work, y, mixing=0.3, indices=idx, inplace=True)[0] is work
    monkeypatch.setattr(mixing_module, "ROW_BY_ROW_BYTES", float("inf"))
    gathered = cf.mixup_batch(x, y, mixing=0.3, indices=idx)[0]
    assert torch.equal(one_at_a_time, gathered) and torch.equal(work, gathered)
    torch.testing.assert_close(gathered, 0.7 * x + 0.3 * x[idx])


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int64, torch.bool])
def test_an_integer_batch_mixes_into_floats_by_the_formula(dtype):
    """Integer (and bool) examples are not rounded back to their dtype: the mixed batch is
    (1 - m) * x + m * x[indices] in torch's default float dtype, computed here in float64."""
    x = torch.randint(0, 2 if dtype is torch.bool else 200, (5, 2, 3), generator=torch.Generator().manual_seed(3))
    x, y, idx = x.to(dtype), torch.arange(5), torch.tensor([3, 0, 4, 1, 1])
    mixed, y_perm, m = cf.mixup_batch(x, y, mixing=0.3, indices=idx)
    assert mixed.dtype == torch.get_default_dtype() and type(m) is float and m == 0.3
    torch.testing.assert_close(mixed, (0.7 * x.double() + 0.3 * x[idx].double()).float())
    assert torch.equal(y_perm, y[idx])


def test_inplace_refuses_an_integer_batch_and_leaves_it_as_it_was():
    x = torch.arange(8).reshape(4, 2)
    with pytest.raises(
        ValueError,
        match=r"^inplace=True: the mixed batch is floating point and cannot be written "
        r"into the torch.int64 input; pass a floating batch or leave inplace=False$",
    ):
        cf.mixup_batch(x, torch.arange(4), mixing=0.5, inplace=True)
    assert torch.equal(x, torch.arange(8).reshape(4, 2))


# -- sampling, against the distribution the definition implies -------------------------------

BETA_CDF = {  # closed forms of the Beta(alpha, alpha) distribution function
    0.5: lambda t: 2 / math.pi * math.asin(math.sqrt(t)),
    1.0: lambda t: t,
    2.0: lambda t: t * t * (3 - 2 * t),
}


@pytest.mark.parametrize("alpha", [0.5, 1.0, 2.0])
def test_the_mixing_weight_is_the_smaller_of_z_and_1_minus_z(alpha):
    """m = min(z, 1 - z) with z ~ Beta(alpha, alpha), so P(m <= t) = 2 F(t) on [0, 1/2] (the Beta
    is symmetric). The frequency of each twentieth of [0, 1/2] over 4,000 draws is checked within
    5 standard deviations: a false-alarm rate of 5.7e-7 per bin, under 1e-5 for the ten (union
    bound); the seed is fixed, so the test is deterministic."""
    n, cdf = 4000, BETA_CDF[alpha]
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(2, 1), torch.arange(2)
    weights = torch.tensor([cf.mixup_batch(x, y, alpha=alpha, generator=g)[2] for _ in range(n)], dtype=torch.float64)
    assert ((weights >= 0) & (weights <= 0.5)).all()
    edges = [i / 20 for i in range(11)]
    for low, high in zip(edges[:-1], edges[1:], strict=True):
        p = 2 * (cdf(high) - cdf(low))
        frequency = ((weights >= low) & ((weights < high) | (high == 0.5))).double().mean().item()
        assert abs(frequency - p) <= 5 * math.sqrt(p * (1 - p) / n), (alpha, low, frequency, p)


# -- the class in the Trainer -----------------------------------------------------------------


def _replay_draws(generator, n, alpha):
    """The partners and the weight a MixUp class draws next from ``generator``: the draws depend
    on the batch size alone, so the functional form run on a stand-in, with the class indices
    0..n-1 as labels, returns them."""
    _, partners, mixing = cf.mixup_batch(torch.zeros(n, 1), torch.arange(n), alpha=alpha, generator=generator)
    return partners, mixing


def _draws_show_a_swap(mixing, y, partners):
    """Whether a batch tells the two label weights apart: some label differs from its partner's
    and the weight is neither 0 nor 1/2."""
    return 0 < mixing < 0.5 and bool((y != y[partners]).any())


@pytest.mark.parametrize("interpolate_loss", [False, True])
def test_in_the_trainer_the_model_and_the_loss_see_the_definition(interpolate_loss):
    """The model sees (1 - m) x + m x[partners]; the loss is the cross entropy against
    (1 - m) onehot(y) + m onehot(y[partners]), or with interpolate_loss (1 - m) CE(y) +
    m CE(y[partners]) against the untouched labels. The draws are replayed from the generator
    the class is defined to use."""
    batches, seen = image_batches(n=3), Observed()
    algo = MixUp(alpha=1.0, interpolate_loss=interpolate_loss)
    trainer = Trainer(image_classifier(), batches, "3ba", algorithms=[algo, seen], seed=1, device="cpu")
    trainer.fit()
    generator, telling = replayed_generator(MixUp, seed=1), []
    for (x, y), model_input, out, target, loss in zip(
        batches, seen.inputs, seen.outputs, seen.targets, seen.losses, strict=True
    ):
        partners, m = _replay_draws(generator, len(y), 1.0)
        torch.testing.assert_close(model_input, (1 - m) * x + m * x[partners])
        if interpolate_loss:
            assert torch.equal(target, y)
            expected = (1 - m) * F.cross_entropy(out, y) + m * F.cross_entropy(out, y[partners])
        else:
            mixed_target = (1 - m) * one_hot(y, 4) + m * one_hot(y[partners], 4)
            torch.testing.assert_close(target, mixed_target)
            expected = soft_cross_entropy(out, mixed_target)
        torch.testing.assert_close(loss, expected.float())
        telling.append(_draws_show_a_swap(m, y, partners))
    assert any(telling), "the seed must draw a weight that tells the two label weights apart"
    ran = {t.event for t in trainer.engine.trace if "MixUp" in t.algorithms}
    assert ran == {Event.AFTER_DATALOADER, Event.AFTER_LOSS if interpolate_loss else Event.BEFORE_LOSS}


@pytest.mark.parametrize("interpolate_loss", [False, True])
def test_segmentation_targets_are_mixed_per_pixel(interpolate_loss):
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(4, 3, 5, 5, generator=g), torch.randint(0, 3, (4, 5, 5), generator=g))]
    seen = Observed()
    Trainer(
        torch.nn.Conv2d(3, 3, 1),
        batches,
        "1ba",
        algorithms=[MixUp(alpha=1.0, interpolate_loss=interpolate_loss), seen],
        seed=1,
        device="cpu",
    ).fit()
    ((x, y),) = batches
    partners, m = _replay_draws(replayed_generator(MixUp, seed=1), 4, 1.0)
    assert _draws_show_a_swap(m, y, partners)
    mixed_target = (1 - m) * one_hot(y, 3) + m * one_hot(y[partners], 3)  # (N, C, H, W)
    if not interpolate_loss:
        torch.testing.assert_close(seen.targets[0], mixed_target)
    torch.testing.assert_close(seen.losses[0], soft_cross_entropy(seen.outputs[0], mixed_target))


def test_dict_batches_are_mixed_by_key():
    g = torch.Generator().manual_seed(0)
    batches = [
        {"x": torch.randn(4, 5, generator=g), "y": torch.randint(0, 3, (4,), generator=g), "id": torch.arange(4)}
    ]
    seen = Observed(input_key="x", target_key="y")
    Trainer(
        torch.nn.Linear(5, 3),
        batches,
        "1ba",
        algorithms=[MixUp(input_key="x", target_key="y"), seen],
        input_key="x",
        target_key="y",
        seed=0,
        device="cpu",
    ).fit()
    (batch,) = batches
    partners, m = _replay_draws(replayed_generator(MixUp, seed=0), 4, 0.2)
    assert 0 < m < 0.5
    torch.testing.assert_close(seen.inputs[0], (1 - m) * batch["x"] + m * batch["x"][partners])
    torch.testing.assert_close(seen.targets[0], (1 - m) * one_hot(batch["y"], 3) + m * one_hot(batch["y"][partners], 3))


@pytest.mark.cuda
def test_on_cuda_without_changing_device_dtype_or_memory_format():
    dev = torch.device("cuda")
    x = torch.randn(8, 3, 16, 16, device=dev, dtype=torch.bfloat16).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (8,), device=dev)
    mixed, y_perm, _ = cf.mixup_batch(x, y)
    assert mixed.device == x.device and mixed.dtype == x.dtype and y_perm.device == y.device
    assert mixed.is_contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize("mixing", [0.0, 1.0])
def test_the_ends_of_the_mixing_range_are_allowed(mixing):
    x, y, idx = torch.randn(4, 3), torch.arange(4), torch.tensor([1, 2, 3, 0])
    mixed, y_perm, m = cf.mixup_batch(x, y, mixing=mixing, indices=idx)
    assert m == mixing and torch.equal(mixed, x if mixing == 0 else x[idx]) and torch.equal(y_perm, y[idx])


def test_the_functional_default_alpha_is_0_2():
    x, y = torch.randn(4, 3), torch.arange(4)
    draws = [cf.mixup_batch(x, y, generator=torch.Generator().manual_seed(s))[2] for s in range(20)]
    assert draws == [cf.mixup_batch(x, y, alpha=0.2, generator=torch.Generator().manual_seed(s))[2] for s in range(20)]


@pytest.mark.parametrize("precision", ["fp16", "fp32"])
def test_mixed_targets_are_at_least_float32_and_follow_float64_outputs(precision):
    """The target the loss gets is float32 for half or float32 outputs, float64 for float64 ones."""

    class Double(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(5, 3)

        def forward(self, x):
            out = self.linear(x)
            return out.double() if precision == "fp32" else out

    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(4, 5, generator=g), torch.randint(0, 3, (4,), generator=g))]
    seen = Observed()
    Trainer(
        Double(), batches, "1ba", algorithms=[MixUp(alpha=1.0), seen], precision=precision, seed=0, device="cpu"
    ).fit()
    assert seen.targets[0].dtype == (torch.float64 if precision == "fp32" else torch.float32)


def _check_the_batch_forms_on(device: torch.device) -> None:
    """Both forms on the device (on CUDA under torch's sync debug mode "error", so that a host
    synchronisation raises) give the CPU's result."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 3, 16, 16, generator=g).to(torch.bfloat16).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (8,), generator=g)
    xd, yd, work = x.to(device, copy=True), y.to(device), x.to(device, copy=True)
    with no_host_sync() if device.type == "cuda" else contextlib.nullcontext():
        mixed, y_perm, m = cf.mixup_batch(xd, yd, generator=torch.Generator().manual_seed(1))
        written = cf.mixup_batch(work, yd, generator=torch.Generator().manual_seed(1), inplace=True)
    expected, y_expected, m_expected = cf.mixup_batch(x, y, generator=torch.Generator().manual_seed(1))
    assert m == m_expected and written[0] is work
    for got in (mixed, work):
        assert got.device == xd.device and got.is_contiguous(memory_format=torch.channels_last)
        torch.testing.assert_close(got.cpu(), expected)  # the same formula; a GPU may round differently
    assert y_perm.device == yd.device and torch.equal(y_perm.cpu(), y_expected)


def test_the_batch_forms_check_on_the_cpu():
    _check_the_batch_forms_on(torch.device("cpu"))


@pytest.mark.cuda
def test_on_cuda_the_batch_forms_make_no_host_sync():
    _check_the_batch_forms_on(torch.device("cuda"))


@pytest.mark.parametrize("alpha", [0.2, 1])
@pytest.mark.parametrize("interpolate_loss", [True, False])
def test_the_class_exposes_the_last_mix_under_composers_names(alpha, interpolate_loss):
    # Composer's test_mixup_algorithm, its assertions as written: the class's indices, mixing and
    # permuted_target describe the batch it mixed (here at AFTER_DATALOADER, where this class mixes).
    from algorithms.core import State
    from algorithms.core.time import Duration

    torch.manual_seed(0)
    x_fake, y_fake = torch.randn(7, 11, 3, 5), torch.randint(10, size=(7,))
    algorithm = MixUp(alpha=alpha, interpolate_loss=interpolate_loss)
    assert algorithm.indices is None and algorithm.permuted_target is None and algorithm.mixing == 0.0
    state = State(model=torch.nn.Flatten(), max_duration=Duration.parse("1ep"), seed=0)
    state.batch = (x_fake, y_fake)
    algorithm.apply(Event.AFTER_DATALOADER, state, None)
    x, _ = state.batch
    validate_mixup_batch(x_fake, y_fake, algorithm.indices, x, algorithm.permuted_target, algorithm.mixing)
