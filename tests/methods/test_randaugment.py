"""RandAugment's own semantics, checked against its definition (Cubuk et al., 2020, as Composer
writes it): each of ``depth`` steps applies to each image one operation drawn uniformly from the
set, with its magnitude drawn from ``severity`` by Composer's mapping.

The expected outputs replay the draws from the same seeded generator, in the order the
functional form documents (per step: the operation of each image, then three uniform numbers per
image), and apply the operations as :mod:`test_augmentations` defines them, one image at a time.
The tests every method passes already run from the metadata registry.
"""

from __future__ import annotations

import pytest
import torch
from test_augmentations import REFERENCE, reference_magnitude
from trainer_support import Observed, no_host_sync, replayed_generator

import algorithms.functional as cf
from algorithms import RandAugment
from algorithms._augmentations import AUGMENTATION_SETS
from algorithms.core import Event, State, Trainer
from algorithms.core.time import Duration


def expected_randaugment(
    images: torch.Tensor, severity: float, depth: int, names, generator: torch.Generator
) -> torch.Tensor:
    """The definition, image by image, with the draws replayed from ``generator``."""
    peak = 255.0 if images.dtype == torch.uint8 else 1.0
    _, _, height, width = images.shape
    out = [img.double() for img in images]
    for _ in range(depth):
        choice = torch.randint(len(names), (len(out),), generator=generator).tolist()
        u = torch.rand(3, len(out), generator=generator, dtype=torch.float64)
        for i, k in enumerate(choice):
            magnitude = reference_magnitude(names[k], severity, u[:, i].tolist(), height, width)
            out[i] = REFERENCE[names[k]](out[i], magnitude, peak)
    return torch.stack(out)


def _seeded(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize(
    ("severity", "depth", "augmentation_set"),
    [
        (9, 2, "all"),
        (4.5, 3, "safe"),
        (10, 1, "original"),
        (0, 2, "all"),
        (7, 2, ("rotate", "solarize", "color")),
    ],
)
def test_randaugment_image_matches_its_definition(severity, depth, augmentation_set):
    images = torch.rand(8, 3, 7, 6, generator=_seeded(1))
    out = cf.randaugment_image(
        images, severity=severity, depth=depth, augmentation_set=augmentation_set, generator=_seeded(5)
    )
    names = AUGMENTATION_SETS.get(augmentation_set, augmentation_set)
    expected = expected_randaugment(images, severity, depth, names, _seeded(5))
    torch.testing.assert_close(out.double(), expected, atol=1e-5, rtol=0)


def test_images_that_all_drew_geometric_operations_in_another_order_keep_their_own():
    """Two images, two geometric operations: when image 0 draws shear_x and image 1 rotate, the
    batch is resampled in the order rotate, shear_x (image 1 first); each image must still get
    its own operation and magnitude back in its own place."""
    images = torch.rand(2, 3, 7, 6, generator=_seeded(1))
    names = ("rotate", "shear_x")
    swapped = 0
    for seed in range(8):
        swapped += torch.randint(2, (2,), generator=_seeded(seed)).tolist() == [1, 0]
        out = cf.randaugment_image(images, severity=9, depth=1, augmentation_set=names, generator=_seeded(seed))
        torch.testing.assert_close(
            out.double(), expected_randaugment(images, 9, 1, names, _seeded(seed)), atol=1e-5, rtol=0
        )
    assert swapped  # the order above was drawn


def test_uint8_images_match_the_definition_within_one_level():
    """One step from whole levels: rounding a value computed in another order moves it by at
    most one level."""
    images = torch.randint(0, 256, (12, 3, 6, 5), dtype=torch.uint8, generator=_seeded(2))
    out = cf.randaugment_image(images, severity=9, depth=1, generator=_seeded(3))
    expected = expected_randaugment(images, 9, 1, AUGMENTATION_SETS["all"], _seeded(3))
    assert out.dtype == torch.uint8
    assert (out.double() - expected).abs().max() <= 1


@pytest.mark.parametrize(
    "augmentation_set", [("equalize", "posterize", "solarize"), ("color", "contrast", "brightness", "sharpness")]
)
def test_uint8_images_hold_whole_levels_between_operations(augmentation_set):
    """Three pixelwise operations in a row match the definition exactly: each result is rounded
    to a whole level before the next operation, as PIL holds 8-bit images."""
    images = torch.randint(0, 256, (12, 3, 6, 5), dtype=torch.uint8, generator=_seeded(2))
    out = cf.randaugment_image(images, severity=7, depth=3, augmentation_set=augmentation_set, generator=_seeded(3))
    expected = expected_randaugment(images, 7, 3, augmentation_set, _seeded(3))
    assert out.dtype == torch.uint8 and torch.equal(out.double(), expected)


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
    out = cf.randaugment_image(images, generator=_seeded(0))
    assert isinstance(out, torch.Tensor) and out.shape == images.shape and out.dtype == dtype
    assert torch.equal(images, before)


def test_a_single_image_is_the_first_image_of_a_batch_of_one():
    image = torch.rand(3, 8, 8, generator=_seeded(4))
    single = cf.randaugment_image(image, generator=_seeded(9))
    batch = cf.randaugment_image(image[None], generator=_seeded(9))
    assert torch.equal(single, batch[0])


def test_seeded_calls_repeat_and_different_seeds_differ():
    images = torch.rand(6, 3, 8, 8, generator=_seeded(0))
    first = cf.randaugment_image(images, generator=_seeded(11))
    assert torch.equal(first, cf.randaugment_image(images, generator=_seeded(11)))
    assert not torch.equal(first, cf.randaugment_image(images, generator=_seeded(12)))


def test_each_image_of_a_batch_draws_its_own_operations():
    """Sixteen copies of one image come out as many different images: with 13 operations and
    continuous magnitudes, two copies agree only when they drew the same operations with equal
    whole-number magnitudes (or two identities), which is rare."""
    images = torch.rand(1, 3, 8, 8, generator=_seeded(0)).expand(16, -1, -1, -1)
    out = cf.randaugment_image(images, generator=_seeded(1))
    assert len({tuple(img.flatten().tolist()) for img in out}) >= 12


def test_depth_0_is_an_unchanged_copy():
    images = torch.rand(2, 3, 5, 5)
    out = cf.randaugment_image(images, depth=0)
    assert torch.equal(out, images) and out.data_ptr() != images.data_ptr()


def test_the_defaults_are_composers():
    images = torch.rand(5, 3, 6, 6, generator=_seeded(0))
    out = cf.randaugment_image(images, generator=_seeded(2))
    torch.testing.assert_close(
        out.double(), expected_randaugment(images, 9, 2, AUGMENTATION_SETS["all"], _seeded(2)), atol=1e-5, rtol=0
    )
    algo = RandAugment()
    assert (algo.severity, algo.depth, algo.augmentation_set, algo.value_range) == (9, 2, "all", None)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"severity": -1}, "severity=-1"),
        ({"severity": 11}, "severity=11"),
        ({"severity": float("nan")}, "severity=nan"),
        ({"severity": "9"}, "severity='9'"),
        ({"severity": True}, "severity=True"),
        ({"depth": -1}, "depth=-1"),
        ({"depth": 1.5}, "depth=1.5"),
        ({"depth": True}, "depth=True"),
        ({"augmentation_set": "everything"}, "augmentation_set='everything'"),
        ({"augmentation_set": ["rotate", "blur"]}, "'blur' is not an operation"),
        ({"augmentation_set": []}, r"augmentation_set=\[\]"),
    ],
)
def test_bad_hyperparameters_fail_with_a_clear_error(kwargs, words):
    with pytest.raises(ValueError, match=words):
        RandAugment(**kwargs)
    with pytest.raises(ValueError, match=words):
        cf.randaugment_image(torch.rand(2, 3, 8, 8), **kwargs)


def test_the_class_keeps_its_own_copy_of_a_list_of_operations():
    names = ["rotate", "solarize"]
    algo = RandAugment(augmentation_set=names)
    names.append("zoom")
    assert algo.augmentation_set == ("rotate", "solarize")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_the_class_maps_half_precision_batches_in_float32_and_gives_back_their_dtype(dtype):
    """With depth 0 the batch goes to [0, 1] and back unchanged: in float32 the round trip is
    exact once rounded to half precision (in half precision itself it would not be)."""
    images = torch.randn(4, 3, 8, 8, generator=_seeded(0)).to(dtype)
    state = State(model=torch.nn.Identity(), max_duration=Duration.parse("1ep"), seed=0)
    state.batch = (images, torch.zeros(4, dtype=torch.long))
    RandAugment(depth=0).apply(Event.AFTER_DATALOADER, state)
    assert state.batch[0].dtype == dtype and torch.equal(state.batch[0], images)


def test_bad_images_and_value_ranges_are_refused():
    with pytest.raises(ValueError, match=r"img: needs an image \(C, H, W\) or a batch \(N, C, H, W\), got \(4, 5\)"):
        cf.randaugment_image(torch.rand(4, 5))
    with pytest.raises(ValueError, match="value_range=0.5"):
        RandAugment(value_range=0.5)


def _unit(images, value_range):
    """The class's mapping, from its definition: each image's min..max (or the given range) to [0, 1]."""
    if value_range is None:
        low = images.amin(dim=(1, 2, 3), keepdim=True)
        span = images.amax(dim=(1, 2, 3), keepdim=True) - low
    else:
        low, span = torch.tensor(value_range[0]), torch.tensor(value_range[1] - value_range[0])
    return ((images - low) / span).clamp(0, 1), low, span


@pytest.mark.parametrize("value_range", [None, (-2.0, 2.0)])
def test_in_the_trainer_the_model_sees_the_definition_on_standardized_dict_batches(value_range):
    """Standardized images are mapped to [0, 1] (each image's own min..max, or the given range
    with the values outside it clipped), augmented with the draws replayed from the class's
    generator, and mapped back; the labels are untouched."""
    g = _seeded(0)
    batches = [
        {"image": torch.randn(6, 3, 8, 8, generator=g), "label": torch.randint(0, 4, (6,), generator=g)}
        for _ in range(3)
    ]
    seen = Observed(input_key="image", target_key="label")
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 4))
    algo = RandAugment(severity=8, depth=2, value_range=value_range, input_key="image")
    Trainer(
        model, batches, "3ba", algorithms=[algo, seen], seed=0, input_key="image", target_key="label", device="cpu"
    ).fit()
    replayed = replayed_generator(RandAugment, seed=0)
    for batch, image, label in zip(batches, seen.inputs, seen.targets, strict=True):
        unit, low, span = _unit(batch["image"], value_range)
        expected = expected_randaugment(unit, 8, 2, AUGMENTATION_SETS["all"], replayed) * span + low
        torch.testing.assert_close(image, expected.float(), atol=1e-4, rtol=0)
        assert torch.equal(label, batch["label"])


def test_the_class_passes_uint8_batches_through_as_0_to_255():
    images = torch.randint(0, 256, (6, 3, 8, 8), dtype=torch.uint8, generator=_seeded(1))
    state = State(model=torch.nn.Identity(), max_duration=Duration.parse("1ep"), seed=3)
    state.batch = (images, torch.zeros(6, dtype=torch.long))
    algo = RandAugment(
        severity=5, depth=1, augmentation_set=["equalize", "posterize", "solarize"], value_range=(-1.0, 1.0)
    )
    assert algo.match(Event.AFTER_DATALOADER, state) and not algo.match(Event.BEFORE_FORWARD, state)
    algo.apply(Event.AFTER_DATALOADER, state)
    expected = expected_randaugment(
        images, 5, 1, ("equalize", "posterize", "solarize"), replayed_generator(RandAugment, 3)
    )
    assert state.batch[0].dtype == torch.uint8 and torch.equal(state.batch[0].double(), expected)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float16, torch.float32])
def test_on_cuda_it_stays_on_the_device_and_agrees_with_the_cpu(dtype):
    g = _seeded(0)
    images = (
        torch.randint(0, 256, (16, 3, 12, 12), dtype=torch.uint8, generator=g)
        if dtype == torch.uint8
        else torch.rand(16, 3, 12, 12, generator=g).to(dtype)
    )
    out = cf.randaugment_image(images.cuda(), generator=_seeded(1))
    assert out.device.type == "cuda" and out.dtype == dtype
    cpu = cf.randaugment_image(images, generator=_seeded(1))
    # a one-level rounding difference can move a later posterize by a bucket, so compare the bulk
    close = ((out.cpu().double() - cpu.double()).abs() <= (1 if dtype == torch.uint8 else 2e-3)).double().mean()
    assert close > 0.99


@pytest.mark.cuda
def test_on_cuda_the_class_makes_no_host_sync():
    images = torch.randn(32, 3, 16, 16, device="cuda")
    state = State(model=torch.nn.Identity(), max_duration=Duration.parse("1ep"), seed=0)
    state.batch = (images, torch.zeros(32, dtype=torch.long, device="cuda"))
    algo = RandAugment()
    algo.apply(Event.AFTER_DATALOADER, state)  # warm up (first-call allocations)
    with no_host_sync():
        algo.apply(Event.AFTER_DATALOADER, state)
    assert state.batch[0].device.type == "cuda" and state.batch[0].dtype == torch.float32


def test_with_label_smoothing_the_model_sees_augmented_images_and_the_loss_smoothed_labels():
    """The composability the card states: RandAugment changes only the images, LabelSmoothing
    only the targets, so together the loss is the cross entropy of the augmented images against
    (1 - s) * onehot(y) + s / C, in either order."""
    from trainer_support import image_batches, one_hot, soft_cross_entropy

    from algorithms import LabelSmoothing

    for randaugment_first in (True, False):
        batches = image_batches(n=2, bs=6, k=4, size=8)
        seen = Observed()
        pair = [RandAugment(severity=6, depth=2), LabelSmoothing(0.2)]
        algorithms = (pair if randaugment_first else pair[::-1]) + [seen]
        model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 4))
        Trainer(model, batches, "2ba", algorithms=algorithms, seed=0, device="cpu").fit()
        replayed = replayed_generator(RandAugment, seed=0)
        for (x, y), image, out, loss in zip(batches, seen.inputs, seen.outputs, seen.losses, strict=True):
            unit, low, span = _unit(x, None)
            expected = expected_randaugment(unit, 6, 2, AUGMENTATION_SETS["all"], replayed) * span + low
            torch.testing.assert_close(image, expected.float(), atol=1e-4, rtol=0)
            torch.testing.assert_close(loss, soft_cross_entropy(out, 0.8 * one_hot(y, 4) + 0.2 / 4))


@pytest.mark.parametrize(("depth", "acted"), [(2, True), (0, False)])
def test_it_reports_the_batches_it_augmented_and_with_no_operation_did_not_act(depth, acted):
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(4, 3, 8, 8, generator=g), torch.randint(0, 4, (4,), generator=g)) for _ in range(2)]
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 4))
    trainer = Trainer(model, batches, "1ep", algorithms=[RandAugment(depth=depth)], seed=0, device="cpu")
    trainer.fit()
    assert trainer.method_log.records["RandAugment"]["activity"] == {"batches_augmented": 2}
    assert trainer.method_log.acted("RandAugment") is acted
