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

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import algorithms.functional as cf
from algorithms import CutMix, LabelSmoothing
from algorithms.core import Algorithm, Event, State, Trainer
from algorithms.core.time import Duration
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
        mixed, y_perm, area, used = cf.cutmix_batch(x, y, alpha=1.0, bbox=box, indices=indices,
                                                    uniform_sampling=uniform_sampling)
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
    _, _, area, (x1, y1, x2, y2) = cf.cutmix_batch(x, torch.arange(4), length=0.4,
                                                   generator=torch.Generator().manual_seed(0))
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
    ("call", "pattern"),
    [
        (lambda: cf.cutmix_batch(torch.randn(2, 3, 4), torch.arange(2)), r"input: .*\(N, C, H, W\).*\(2, 3, 4\)"),
        (lambda: cf.cutmix_batch(torch.randn(2, 1, 4, 4), torch.arange(3)), r"batch size.*\(2, 1, 4, 4\).*\(3,\)"),
        (lambda: cf.cutmix_batch(torch.randn(2, 1, 4, 4), torch.arange(2), alpha=-1), r"alpha=-1"),
        (lambda: cf.cutmix_batch(torch.randn(2, 1, 4, 4), torch.arange(2), bbox=(0, 0, 9, 2)), r"bbox="),
        (lambda: cf.cutmix_batch(torch.randn(2, 1, 4, 4), torch.arange(2), length=1.5), r"length=1.5"),
        (lambda: cf.cutmix_batch(torch.randn(2, 1, 4, 4), torch.arange(2), length=0.5, bbox=(0, 0, 1, 1)),
         r"length=0.5, bbox=\(0, 0, 1, 1\): give one of them, not both"),
        (lambda: cf.cutmix_batch(torch.randn(2, 1, 4, 4), torch.arange(2), indices=torch.tensor([0.0, 1.0])),
         r"indices"),
    ],
)
def test_bad_input_raises_value_error_naming_the_argument(call, pattern):
    with pytest.raises(ValueError, match=pattern):
        call()


@pytest.mark.parametrize("alpha", [-0.5, float("nan"), True])
def test_bad_alpha_fails_at_construction(alpha):
    with pytest.raises(ValueError, match=rf"alpha={alpha!r}"):
        CutMix(alpha=alpha)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 9), st.integers(1, 4), st.integers(1, 17), st.integers(1, 17), st.integers(2, 11),
       st.sampled_from([torch.float32, torch.bfloat16]), st.integers(0, 2**31 - 1), st.floats(0, 4),
       st.booleans(), st.booleans())
def test_properties(n, c, h, w, k, dtype, seed, alpha, uniform, channels_last):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, c, h, w, generator=g).to(dtype)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, k, (n,), generator=g)
    x0, y0 = x.clone(), y.clone()
    mixed, y_perm, area, (x1, y1, x2, y2) = cf.cutmix_batch(
        x, y, alpha=alpha, uniform_sampling=uniform, generator=g)
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


# -- the class --------------------------------------------------------------------------------

class Recorder(Algorithm):
    """Records the events, what the model saw, and the target the loss was given."""

    def __init__(self):
        self.inputs, self.targets, self.events = [], [], []

    def match(self, event, state):
        return True

    def apply(self, event, state, logger=None):
        self.events.append(event)
        if event is Event.BEFORE_FORWARD:
            self.inputs.append(state.batch_get_item(0).clone())
        if event is Event.AFTER_LOSS:
            self.targets.append(state.batch_get_item(1).clone())


def _batches(n=2, bs=6, k=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(bs, 3, 8, 8, generator=g), torch.randint(0, k, (bs,), generator=g))
            for _ in range(n)]


def _model(k=4):
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.AdaptiveAvgPool2d(1),
                               torch.nn.Flatten(), torch.nn.Linear(4, k))


def _fit(algo, batches, **kw):
    rec = Recorder()
    trainer = Trainer(_model(), batches, "2ba", algorithms=[algo, rec], seed=1, device="cpu", **kw)
    trainer.fit()
    return trainer, rec


EXPECTED_EVENTS = [Event.INIT, Event.FIT_START, Event.EPOCH_START,
                   *Event.batch_events(), *Event.batch_events(), Event.EPOCH_END, Event.FIT_END]


@pytest.mark.parametrize("uniform_sampling", [True, False])
@pytest.mark.parametrize("alpha", [0.2, 1.0])
def test_the_class_calls_the_functional_form_with_its_own_generator(alpha, uniform_sampling):
    """After the data loader the batch is what ``cutmix_batch`` gives with the class's seeded
    generator: the class samples, the functional form does the math."""
    x, y = _batches(n=1)[0]
    state = State(model=torch.nn.Identity(), max_duration=Duration.parse("1ep"), seed=7)
    state.batch = (x, y)
    algo = CutMix(alpha=alpha, uniform_sampling=uniform_sampling)
    algo.apply(Event.AFTER_DATALOADER, state, None)
    mixed, y_perm, _, _ = cf.cutmix_batch(x, y, alpha=alpha, uniform_sampling=uniform_sampling,
                                          generator=CutMix().generator(state))
    assert torch.equal(state.batch[0], mixed)
    assert state.batch[1] is y and torch.equal(algo._target_perm, y_perm)


def test_the_class_mixes_the_batch_the_model_sees_and_the_target_the_loss_sees():
    batches = _batches()
    trainer, rec = _fit(CutMix(alpha=1.0), batches)
    assert rec.events == EXPECTED_EVENTS
    for seen, (x, _) in zip(rec.inputs, batches, strict=True):
        assert seen.shape == x.shape and not torch.equal(seen, x)
    for target, (_, y) in zip(rec.targets, batches, strict=True):
        assert target.shape == (len(y), 4)  # mixed soft targets reached the loss
        torch.testing.assert_close(target.sum(1), torch.ones(len(y)))
    ran = {t.event for t in trainer.engine.trace if "CutMix" in t.algorithms}
    assert ran == {Event.AFTER_DATALOADER, Event.BEFORE_LOSS}


def test_interpolate_loss_mixes_losses_not_targets():
    batches = _batches()
    trainer, rec = _fit(CutMix(alpha=1.0, interpolate_loss=True), batches)
    for target, (_, y) in zip(rec.targets, batches, strict=True):
        assert torch.equal(target, y)  # targets untouched
    ran = {t.event for t in trainer.engine.trace if "CutMix" in t.algorithms}
    assert ran == {Event.AFTER_DATALOADER, Event.AFTER_LOSS}


def test_label_smoothing_after_cutmix_smooths_the_mixed_target():
    batches = _batches(n=1)
    _, rec = _fit(CutMix(alpha=1.0), batches)
    seen = {}

    class Spy(Algorithm):
        def match(self, event, state):
            return event is Event.BEFORE_LOSS

        def apply(self, event, state, logger=None):
            seen["target"] = state.batch_get_item(1)

    Trainer(_model(), batches, "1ba", algorithms=[CutMix(alpha=1.0), LabelSmoothing(0.2), Spy()],
            seed=1, device="cpu").fit()
    mixed = rec.targets[0]
    torch.testing.assert_close(seen["target"], 0.8 * mixed + 0.2 / 4)


def test_dense_targets_are_refused_with_a_clear_error():
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(2, 3, 4, 4, generator=g), torch.randint(0, 3, (2, 4, 4), generator=g))]
    with pytest.raises(ValueError, match=r"target: CutMix mixes one label per image.*\(2, 4, 4\)"):
        Trainer(torch.nn.Conv2d(3, 3, 1), batches, "1ba", algorithms=[CutMix()], device="cpu").fit()


def test_seeded_runs_repeat():
    batches = _batches()
    torch.manual_seed(0)
    a = Trainer(_model(), batches, "2ba", algorithms=[CutMix()], seed=5)
    a.fit()
    torch.manual_seed(0)
    b = Trainer(_model(), batches, "2ba", algorithms=[CutMix()], seed=5)
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
