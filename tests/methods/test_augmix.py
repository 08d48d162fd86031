"""AugMix's own semantics, checked against its definition (Hendrycks et al., 2020, as Composer's
augmix_image writes it): per image, chain weights ``w ~ Dirichlet(alpha, ...)``, a skip weight
``m ~ Beta(alpha, alpha)``, ``width`` chains of ``depth`` random operations (1 to 3 per chain with
``depth=-1``), and the output ``(1 - m) x + m sum_c w_c chain_c(x)``.

The expected outputs replay the draws from the same seeded generator, in the order the
functional form documents, and apply the operations as :mod:`test_augmentations` defines them.
Tests that need no replay check the convex mix and the weights' distributions directly. The tests
every method passes already run from the metadata registry.
"""

from __future__ import annotations

import random

import pytest
import torch
from test_augmentations import ALLOWED_SETS, REFERENCE, Float64ImageWork, exactly, reference_magnitude
from trainer_support import Observed, image_batches, no_host_sync, one_hot, replayed_generator, soft_cross_entropy

import algorithms.functional as cf
from algorithms import AugMix, LabelSmoothing
from algorithms._augmentations import AUGMENTATION_SETS
from algorithms.augmix.augmix import mixing_weights
from algorithms.core import Event, State, Trainer
from algorithms.core.time import Duration


def expected_augmix(images, severity, depth, width, alpha, names, generator):
    """The definition, image by image, with the draws replayed from ``generator``: one seed for
    the standard library's Dirichlet (normalized gammas) and Beta draws per image, then per chain
    its depths (with depth -1) and per step the operations and their three uniforms."""
    peak = 255.0 if images.dtype == torch.uint8 else 1.0
    n, _, height, width_px = images.shape
    rng = random.Random(int(torch.randint(0, 2**62, (1,), generator=generator)))
    weights, skips = [], []
    for _ in range(n):
        gammas = [rng.gammavariate(alpha, 1.0) for _ in range(width)]
        weights.append([g / sum(gammas) for g in gammas])
        skips.append(rng.betavariate(alpha, alpha))
    x = [img.double() for img in images]
    mixed = [torch.zeros_like(img) for img in x]
    for chain in range(width):
        depths = [depth] * n if depth > 0 else torch.randint(1, 4, (n,), generator=generator).tolist()
        y = list(x)
        for step in range(depth if depth > 0 else 3):
            choice = torch.randint(len(names), (n,), generator=generator).tolist()
            u = torch.rand(3, n, generator=generator, dtype=torch.float64)
            for i, k in enumerate(choice):
                if step < depths[i]:
                    magnitude = reference_magnitude(names[k], severity, u[:, i].tolist(), height, width_px)
                    y[i] = REFERENCE[names[k]](y[i], magnitude, peak)
        mixed = [acc + weights[i][chain] * y[i] for i, acc in enumerate(mixed)]
    out = torch.stack([(1 - skips[i]) * x[i] + skips[i] * mixed[i] for i in range(n)])
    return out.round() if peak == 255 else out


def _seeded(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize(
    ("severity", "depth", "width", "alpha", "augmentation_set"),
    [
        (3, -1, 3, 1.0, "all"),
        (6, 2, 2, 0.5, "safe"),
        (10, 1, 1, 2.0, "original"),
        (3, 3, 4, 1.0, ("translate_x", "posterize")),
    ],
)
def test_augmix_image_matches_its_definition(severity, depth, width, alpha, augmentation_set):
    images = torch.rand(6, 3, 7, 6, generator=_seeded(1))
    out = cf.augmix_image(
        images,
        severity=severity,
        depth=depth,
        width=width,
        alpha=alpha,
        augmentation_set=augmentation_set,
        generator=_seeded(5),
    )
    names = AUGMENTATION_SETS.get(augmentation_set, augmentation_set)
    expected = expected_augmix(images, severity, depth, width, alpha, names, _seeded(5))
    torch.testing.assert_close(out.double(), expected, atol=1e-5, rtol=0)


def test_uint8_images_match_the_definition_within_one_level():
    images = torch.randint(0, 256, (8, 3, 6, 5), dtype=torch.uint8, generator=_seeded(2))
    out = cf.augmix_image(images, depth=1, generator=_seeded(3))
    expected = expected_augmix(images, 3, 1, 3, 1.0, AUGMENTATION_SETS["all"], _seeded(3))
    assert out.dtype == torch.uint8 and (out.double() - expected).abs().max() <= 1


def test_with_one_deterministic_operation_the_output_is_the_convex_mix_with_it():
    """Autocontrast takes no magnitude and repeating it changes nothing, so every chain of any
    depth is autocontrast(x) and the chain weights sum to 1: the output must be
    (1 - m) x + m autocontrast(x), one m in [0, 1] per image, the same at every pixel."""
    g = _seeded(0)
    images = torch.rand(64, 3, 6, 6, generator=g, dtype=torch.float64) * 0.5 + 0.25
    low, high = images.amin(dim=(2, 3), keepdim=True), images.amax(dim=(2, 3), keepdim=True)
    stretched = (images - low) / (high - low)
    out = cf.augmix_image(images, augmentation_set=["autocontrast"], generator=_seeded(1))
    m = ((out - images) * (stretched - images)).sum(dim=(1, 2, 3)) / ((stretched - images) ** 2).sum(dim=(1, 2, 3))
    assert ((m >= 0) & (m <= 1)).all()
    torch.testing.assert_close(out, (1 - m.view(-1, 1, 1, 1)) * images + m.view(-1, 1, 1, 1) * stretched)
    assert len(set(m.round(decimals=6).tolist())) > 60  # each image draws its own skip weight


@pytest.mark.parametrize(("width", "alpha"), [(3, 1.0), (2, 0.3), (4, 5.0)])
def test_the_weights_are_dirichlet_and_beta(width, alpha):
    """Over 20,000 images: each chain weight has the Dirichlet's mean 1 / width and variance
    (1/k)(1 - 1/k) / (k alpha + 1), the skip weight Beta(alpha, alpha)'s mean 1/2 and variance
    1 / (4 (2 alpha + 1)). Means within 5 standard errors, variances within 10%, with a fixed
    seed (false alarm rate below 1e-5 per check, and the seed never changes)."""
    n = 20_000
    chains, skips = mixing_weights(n, width, alpha, _seeded(0))
    assert chains.dtype == skips.dtype == torch.float64
    assert chains.shape == (n, width) and torch.allclose(chains.sum(dim=1), torch.ones(n, dtype=torch.float64))
    assert ((chains >= 0) & (chains <= 1)).all() and ((skips >= 0) & (skips <= 1)).all()
    k = width
    chain_var, skip_var = (1 / k) * (1 - 1 / k) / (k * alpha + 1), 1 / (4 * (2 * alpha + 1))
    for column in chains.T:
        assert abs(float(column.mean()) - 1 / k) < 5 * (chain_var / n) ** 0.5
        assert abs(float(column.var()) / chain_var - 1) < 0.1
    assert abs(float(skips.mean()) - 0.5) < 5 * (skip_var / n) ** 0.5
    assert abs(float(skips.var()) / skip_var - 1) < 0.1


def test_the_chain_weights_are_a_convex_combination_even_when_every_gamma_draw_underflows():
    """With alpha = 0.001 most Gamma(alpha, 1) draws are below the smallest float, so an image's
    draws are often all 0; its chain weights must still be weights (each in [0, 1], summing to
    1), not a division by zero."""
    chains, skips = mixing_weights(2000, 3, 0.001, _seeded(0))
    assert ((chains >= 0) & (chains <= 1)).all() and ((skips >= 0) & (skips <= 1)).all()
    torch.testing.assert_close(chains.sum(dim=1), torch.ones(2000, dtype=torch.float64))


@pytest.mark.parametrize(
    "augmentation_set", [("equalize", "posterize", "solarize"), ("color", "contrast", "brightness", "sharpness")]
)
def test_uint8_images_of_the_pixelwise_operations_match_the_definition_exactly(augmentation_set):
    """Every chain holds whole levels between its operations, as PIL's 8-bit images do, and the
    mix is rounded to the nearest level at the end (not truncated)."""
    images = torch.randint(0, 256, (8, 3, 6, 5), dtype=torch.uint8, generator=_seeded(2))
    out = cf.augmix_image(images, severity=6, depth=3, width=2, augmentation_set=augmentation_set, generator=_seeded(3))
    expected = expected_augmix(images, 6, 3, 2, 1.0, augmentation_set, _seeded(3))
    assert out.dtype == torch.uint8 and torch.equal(out.double(), expected)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float16, torch.float32])
def test_images_below_float64_are_mixed_in_float32(dtype):
    """The card's promise: uint8, float16 and float32 images are computed in float32, the mix
    included (no image-sized float64 tensor), so a batch costs what its float32 copy does."""
    images = torch.rand(4, 3, 6, 6, generator=_seeded(0)).mul(255).to(dtype)
    with Float64ImageWork(3 * 6 * 6) as work:
        cf.augmix_image(images, depth=2, width=2, generator=_seeded(1))
    assert work.calls == []


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float16, torch.float32, torch.float64])
@pytest.mark.parametrize("single", [False, True])
def test_shape_and_dtype_are_kept(dtype, single):
    """Composer's tests: a single image (3, 6, 5) or a batch (4, 3, 6, 5) keeps its type and
    shape; here the dtype is kept too."""
    g = _seeded(123)
    shape = (3, 6, 5) if single else (4, 3, 6, 5)
    images = (
        torch.randint(0, 256, shape, dtype=torch.uint8, generator=g)
        if dtype == torch.uint8
        else torch.rand(shape, generator=g).to(dtype)
    )
    before = images.clone()
    out = cf.augmix_image(images, generator=_seeded(0))
    assert isinstance(out, torch.Tensor) and out.shape == images.shape and out.dtype == dtype
    assert torch.equal(images, before)


def test_seeded_calls_repeat_and_different_seeds_differ():
    images = torch.rand(6, 3, 8, 8, generator=_seeded(0))
    first = cf.augmix_image(images, generator=_seeded(11))
    assert torch.equal(first, cf.augmix_image(images, generator=_seeded(11)))
    assert not torch.equal(first, cf.augmix_image(images, generator=_seeded(12)))


def test_each_image_of_a_batch_draws_its_own_mix():
    images = torch.rand(1, 3, 8, 8, generator=_seeded(0)).expand(16, -1, -1, -1)
    out = cf.augmix_image(images, generator=_seeded(1))
    assert len({tuple(img.flatten().tolist()) for img in out}) == 16


def test_the_defaults_are_composers():
    images = torch.rand(4, 3, 6, 6, generator=_seeded(0))
    out = cf.augmix_image(images, generator=_seeded(2))
    expected = expected_augmix(images, 3, -1, 3, 1.0, AUGMENTATION_SETS["all"], _seeded(2))
    torch.testing.assert_close(out.double(), expected, atol=1e-5, rtol=0)
    algo = AugMix()
    assert (algo.severity, algo.depth, algo.width, algo.alpha, algo.augmentation_set, algo.value_range) == (
        3,
        -1,
        3,
        1.0,
        "all",
        None,
    )


_SEVERITY = "must be a number in [0, 10]"
_DEPTH = "must be -1 or an integer in [1, inf)"
_WIDTH = "must be an integer in [1, inf)"
_ALPHA = "must be a number in (0, inf)"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"severity": -0.5}, f"severity=-0.5: {_SEVERITY}"),
        ({"severity": 10.5}, f"severity=10.5: {_SEVERITY}"),
        ({"severity": None}, f"severity=None: {_SEVERITY}"),
        ({"depth": 0}, f"depth=0: {_DEPTH}"),
        ({"depth": -2}, f"depth=-2: {_DEPTH}"),
        ({"depth": 2.0}, f"depth=2.0: {_DEPTH}"),
        ({"width": 0}, f"width=0: {_WIDTH}"),
        ({"width": 1.5}, f"width=1.5: {_WIDTH}"),
        ({"width": True}, f"width=True: {_WIDTH}"),
        ({"alpha": 0}, f"alpha=0: {_ALPHA}"),
        ({"alpha": -1.0}, f"alpha=-1.0: {_ALPHA}"),
        ({"alpha": float("inf")}, f"alpha=inf: {_ALPHA}"),
        ({"alpha": "1"}, f"alpha='1': {_ALPHA}"),
        ({"augmentation_set": "none"}, f"augmentation_set='none': must be {ALLOWED_SETS}"),
        (
            {"augmentation_set": ("rotate", "zoom")},
            f"augmentation_set=('rotate', 'zoom'): 'zoom' is not an operation; must be {ALLOWED_SETS}",
        ),
    ],
)
def test_bad_hyperparameters_fail_with_a_clear_error(kwargs, message):
    with pytest.raises(ValueError, match=exactly(message)):
        AugMix(**kwargs)
    with pytest.raises(ValueError, match=exactly(message)):
        cf.augmix_image(torch.rand(2, 3, 8, 8), **kwargs)


def test_the_class_keeps_its_own_copy_of_a_list_of_operations():
    names = ["rotate", "solarize"]
    algo = AugMix(augmentation_set=names)
    names.append("zoom")
    assert algo.augmentation_set == ("rotate", "solarize")


def test_bad_images_are_refused():
    with pytest.raises(ValueError, match=r"img: needs an image \(C, H, W\) or a batch \(N, C, H, W\), got \(8,\)"):
        cf.augmix_image(torch.rand(8))


def _unit(images, value_range=None):
    """The class's mapping, from its definition: each image's min..max (or the given range, the
    values outside it clipped) to [0, 1]."""
    if value_range is None:
        low = images.amin(dim=(1, 2, 3), keepdim=True)
        span = images.amax(dim=(1, 2, 3), keepdim=True) - low
    else:
        low, span = torch.tensor(value_range[0]), torch.tensor(value_range[1] - value_range[0])
    return ((images - low) / span).clamp(0, 1), low, span


@pytest.mark.parametrize("value_range", [None, (-2.0, 2.0)])
def test_in_the_trainer_the_model_sees_the_definition_on_standardized_dict_batches(value_range):
    """Each image is mapped to [0, 1] (from its own min..max, or from the given range), mixed
    with the draws replayed from the class's generator, and mapped back; the labels are
    untouched."""
    g = _seeded(0)
    batches = [
        {"image": torch.randn(5, 3, 6, 6, generator=g), "label": torch.randint(0, 4, (5,), generator=g)}
        for _ in range(2)
    ]
    seen = Observed(input_key="image", target_key="label")
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 6 * 6, 4))
    algo = AugMix(severity=4, depth=-1, width=2, alpha=0.7, value_range=value_range, input_key="image")
    Trainer(
        model, batches, "2ba", algorithms=[algo, seen], seed=0, input_key="image", target_key="label", device="cpu"
    ).fit()
    replayed = replayed_generator(AugMix, seed=0)
    for batch, image, label in zip(batches, seen.inputs, seen.targets, strict=True):
        unit, low, span = _unit(batch["image"], value_range)
        expected = expected_augmix(unit, 4, -1, 2, 0.7, AUGMENTATION_SETS["all"], replayed) * span + low
        torch.testing.assert_close(image, expected.float(), atol=1e-4, rtol=0)
        assert torch.equal(label, batch["label"])


def test_the_class_passes_uint8_batches_through_as_0_to_255():
    images = torch.randint(0, 256, (6, 3, 8, 8), dtype=torch.uint8, generator=_seeded(1))
    state = State(model=torch.nn.Identity(), max_duration=Duration.parse("1ep"), seed=3)
    state.batch = (images, torch.zeros(6, dtype=torch.long))
    algo = AugMix(depth=1, width=2, augmentation_set=["equalize", "posterize", "solarize"])
    assert algo.match(Event.AFTER_DATALOADER, state) and not algo.match(Event.AFTER_LOSS, state)
    algo.apply(Event.AFTER_DATALOADER, state)
    expected = expected_augmix(
        images, 3, 1, 2, 1.0, ("equalize", "posterize", "solarize"), replayed_generator(AugMix, 3)
    )
    assert state.batch[0].dtype == torch.uint8 and (state.batch[0].double() - expected).abs().max() <= 1


def test_with_label_smoothing_the_model_sees_mixed_images_and_the_loss_smoothed_labels():
    """The composability the card states, in either order."""
    for augmix_first in (True, False):
        batches = image_batches(n=2, bs=4, k=4, size=6)
        seen = Observed()
        pair = [AugMix(width=2), LabelSmoothing(0.2)]
        model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 6 * 6, 4))
        Trainer(
            model, batches, "2ba", algorithms=(pair if augmix_first else pair[::-1]) + [seen], seed=0, device="cpu"
        ).fit()
        replayed = replayed_generator(AugMix, seed=0)
        for (x, y), image, out, loss in zip(batches, seen.inputs, seen.outputs, seen.losses, strict=True):
            unit, low, span = _unit(x)
            expected = expected_augmix(unit, 3, -1, 2, 1.0, AUGMENTATION_SETS["all"], replayed) * span + low
            torch.testing.assert_close(image, expected.float(), atol=1e-4, rtol=0)
            torch.testing.assert_close(loss, soft_cross_entropy(out, 0.8 * one_hot(y, 4) + 0.2 / 4))


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float16, torch.float32])
def test_on_cuda_it_stays_on_the_device_and_agrees_with_the_cpu(dtype):
    g = _seeded(0)
    images = (
        torch.randint(0, 256, (16, 3, 12, 12), dtype=torch.uint8, generator=g)
        if dtype == torch.uint8
        else torch.rand(16, 3, 12, 12, generator=g).to(dtype)
    )
    out = cf.augmix_image(images.cuda(), generator=_seeded(1))
    assert out.device.type == "cuda" and out.dtype == dtype
    cpu = cf.augmix_image(images, generator=_seeded(1))
    close = ((out.cpu().double() - cpu.double()).abs() <= (2 if dtype == torch.uint8 else 4e-3)).double().mean()
    assert close > 0.99


@pytest.mark.cuda
def test_on_cuda_the_class_makes_no_host_sync():
    images = torch.randn(32, 3, 16, 16, device="cuda")
    state = State(model=torch.nn.Identity(), max_duration=Duration.parse("1ep"), seed=0)
    state.batch = (images, torch.zeros(32, dtype=torch.long, device="cuda"))
    algo = AugMix()
    algo.apply(Event.AFTER_DATALOADER, state)  # warm up (first-call allocations)
    with no_host_sync():
        algo.apply(Event.AFTER_DATALOADER, state)
    assert state.batch[0].device.type == "cuda" and state.batch[0].dtype == torch.float32
