"""MixUp: the functional form and the class, checked against the definition.

``test_each_example_is_mixed_with_its_partner`` asserts what Composer's own test of
``mixup_batch`` asserts (``tests/algorithms/test_mixup.py``: ``mixed[i] == (1 - m) * x[i] + m *
x[indices[i]]`` and ``target_perm[i] == y[indices[i]]``) over the same data shape and ``alpha``
values. Composer's test draws ``m`` with its private ``_gen_mixing_coef``; here ``m`` is drawn
the same way, ``min(z, 1 - z)`` with ``z ~ Beta(alpha, alpha)``, in the test itself.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import algorithms.functional as cf
from algorithms import MixUp
from algorithms.core import Algorithm, Event, State, Trainer
from algorithms.core.time import Duration


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
    ("call", "pattern"),
    [
        (lambda: cf.mixup_batch(torch.randn(2, 3), torch.arange(2), alpha=-0.1), r"alpha=-0.1"),
        (lambda: cf.mixup_batch(torch.randn(2, 3), torch.arange(2), mixing=2.0), r"mixing=2.0"),
        (lambda: cf.mixup_batch(torch.randn(2, 3), torch.arange(2), indices=torch.tensor([0])), r"indices"),
        (lambda: cf.mixup_batch(torch.randn(2, 3), torch.arange(3)), r"batch size"),
    ],
)
def test_bad_input_raises_value_error_naming_the_argument(call, pattern):
    with pytest.raises(ValueError, match=pattern):
        call()


@pytest.mark.parametrize("alpha", [-0.5, float("nan"), True])
def test_bad_alpha_fails_at_construction(alpha):
    with pytest.raises(ValueError, match=rf"alpha={alpha!r}"):
        MixUp(alpha=alpha)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 9), st.integers(1, 17), st.integers(2, 11), st.sampled_from([torch.float32, torch.bfloat16]),
       st.integers(0, 2**31 - 1), st.floats(0, 4))
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


# -- the class --------------------------------------------------------------------------------

class Recorder(Algorithm):
    """Records what the model saw, the outputs, the loss and the target the loss was given."""

    def __init__(self):
        self.inputs, self.outputs, self.losses, self.targets = [], [], [], []

    def match(self, event, state):
        return event in (Event.BEFORE_FORWARD, Event.AFTER_LOSS)

    def apply(self, event, state, logger=None):
        if event is Event.BEFORE_FORWARD:
            self.inputs.append(state.batch_get_item(0).clone())
        else:
            self.outputs.append(state.outputs.detach().clone())
            self.losses.append(state.loss.detach().clone())
            self.targets.append(state.batch_get_item(1).clone())


def _batches(n=2, bs=6, k=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(bs, 3, 8, 8, generator=g), torch.randint(0, k, (bs,), generator=g))
            for _ in range(n)]


def _model(k=4):
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.AdaptiveAvgPool2d(1),
                               torch.nn.Flatten(), torch.nn.Linear(4, k))


def _fit(algo, batches, model=None, **kw):
    rec = Recorder()
    trainer = Trainer(model or _model(), batches, f"{len(batches)}ba", algorithms=[algo, rec], seed=1,
                      device="cpu", **kw)
    trainer.fit()
    return trainer, rec


def test_the_class_calls_the_functional_form_with_its_own_generator():
    x, y = _batches(n=1)[0]
    state = State(model=torch.nn.Identity(), max_duration=Duration.parse("1ep"), seed=7)
    state.batch = (x, y)
    algo = MixUp(alpha=1.0)
    algo.apply(Event.AFTER_DATALOADER, state, None)
    mixed, y_perm, m = cf.mixup_batch(x, y, alpha=1.0, generator=MixUp().generator(state))
    assert torch.equal(state.batch[0], mixed)
    assert torch.equal(algo._target_perm, y_perm) and algo._weight_perm == m


def test_the_class_mixes_the_batch_the_model_sees_and_the_target_the_loss_sees():
    batches = _batches()
    trainer, rec = _fit(MixUp(alpha=1.0), batches)
    for seen, (x, _) in zip(rec.inputs, batches, strict=True):
        assert seen.shape == x.shape and not torch.equal(seen, x)
    for target, (_, y) in zip(rec.targets, batches, strict=True):
        assert target.shape == (len(y), 4)
        torch.testing.assert_close(target.sum(1), torch.ones(len(y)))
        assert (target.max(1).values < 1).any()
    ran = {t.event for t in trainer.engine.trace if "MixUp" in t.algorithms}
    assert ran == {Event.AFTER_DATALOADER, Event.BEFORE_LOSS}


@pytest.mark.parametrize("interpolate_loss", [False, True])
def test_the_loss_is_the_mixture_of_the_losses_against_both_labels(interpolate_loss):
    """Mixed targets and mixed losses give the same loss: (1-m) CE(out, y) + m CE(out, y_perm)."""
    batches = _batches(n=1)
    algo = MixUp(alpha=1.0, interpolate_loss=interpolate_loss)
    trainer, rec = _fit(algo, batches)
    m, y, y_perm = algo._weight_perm, batches[0][1], algo._target_perm
    out = rec.outputs[0]
    torch.testing.assert_close(rec.losses[0], (1 - m) * F.cross_entropy(out, y) + m * F.cross_entropy(out, y_perm))
    assert torch.equal(rec.targets[0], y) == interpolate_loss  # interpolate_loss leaves the target alone
    ran = {t.event for t in trainer.engine.trace if "MixUp" in t.algorithms}
    assert ran == {Event.AFTER_DATALOADER, Event.AFTER_LOSS if interpolate_loss else Event.BEFORE_LOSS}


def test_segmentation_targets_are_mixed_per_pixel():
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(4, 3, 5, 5, generator=g), torch.randint(0, 3, (4, 5, 5), generator=g))]
    algo = MixUp(alpha=1.0)
    _, rec = _fit(algo, batches, model=torch.nn.Conv2d(3, 3, 1))
    m, y, y_perm, out = algo._weight_perm, batches[0][1], algo._target_perm, rec.outputs[0]
    assert rec.targets[0].shape == (4, 3, 5, 5)
    torch.testing.assert_close(rec.losses[0], (1 - m) * F.cross_entropy(out, y) + m * F.cross_entropy(out, y_perm))


def test_dict_batches_with_keys():
    g = torch.Generator().manual_seed(0)
    batches = [{"x": torch.randn(4, 5, generator=g), "y": torch.randint(0, 3, (4,), generator=g)}]
    trainer = Trainer(torch.nn.Linear(5, 3), batches, "1ba", algorithms=[MixUp(input_key="x", target_key="y")],
                      input_key="x", target_key="y", seed=0, device="cpu")
    trainer.fit()
    assert trainer.state.batch["y"].shape == (4, 3)  # the mixed target replaced the labels


@pytest.mark.cuda
def test_on_cuda_without_changing_device_dtype_or_memory_format():
    dev = torch.device("cuda")
    x = torch.randn(8, 3, 16, 16, device=dev, dtype=torch.bfloat16).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (8,), device=dev)
    mixed, y_perm, _ = cf.mixup_batch(x, y)
    assert mixed.device == x.device and mixed.dtype == x.dtype and y_perm.device == y.device
    assert mixed.is_contiguous(memory_format=torch.channels_last)


def test_indices_must_be_a_tensor():
    with pytest.raises(ValueError, match=r"indices must be an integer tensor of shape \(2,\), got list"):
        cf.mixup_batch(torch.randn(2, 3), torch.arange(2), indices=[1, 0])
