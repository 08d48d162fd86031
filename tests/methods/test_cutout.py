"""CutOut's own semantics, checked against its definition (DeVries and Taylor, 2017).

A hole is a square of side ``int(length * min(H, W))`` whose top-left corner is its centre minus
half the side, clipped to the image; each image draws its own centres, uniform in the image (or,
with ``uniform_sampling``, in a range widened by half a hole). The tests every method passes (it
trains in the Trainer, it keeps the caller's tensors, its functional and class defaults agree)
already run from the metadata registry.
"""

from __future__ import annotations

import contextlib
import math
import re

import pytest
import torch
from pil_support import pixels, random_image
from trainer_support import Observed, no_host_sync, replayed_generator

import algorithms.functional as cf
from algorithms import CutOut
from algorithms.core import Algorithm, Event, Trainer
from algorithms.cutout.cutout import keep_mask


def _expected(
    images: torch.Tensor,
    num_holes: int,
    length: float,
    uniform_sampling: bool,
    seed: int | None = None,
    generator: torch.Generator | None = None,
):
    """The definition, pixel by pixel, with the centres replayed from the same seeded generator."""
    n, _, h, w = images.shape
    side = int(length * min(h, w))
    half = side // 2
    g = generator if generator is not None else torch.Generator().manual_seed(seed)
    low_y, high_y = (-half, h + half) if uniform_sampling else (0, h)
    low_x, high_x = (-half, w + half) if uniform_sampling else (0, w)
    ys = torch.randint(low_y, high_y, (n, num_holes), generator=g).tolist()
    xs = torch.randint(low_x, high_x, (n, num_holes), generator=g).tolist()
    out = images.clone()
    for i in range(n):
        for k in range(num_holes):
            for row in range(max(ys[i][k] - half, 0), min(ys[i][k] - half + side, h)):
                for col in range(max(xs[i][k] - half, 0), min(xs[i][k] - half + side, w)):
                    out[i, :, row, col] = 0
    return out


@pytest.mark.parametrize("num_holes", [1, 3])
@pytest.mark.parametrize("length", [0.25, 0.5, 0.3])
@pytest.mark.parametrize("uniform_sampling", [False, True])
def test_cutout_batch_matches_its_definition(num_holes, length, uniform_sampling):
    images = torch.rand(6, 3, 10, 12, generator=torch.Generator().manual_seed(1)) + 1  # no zero pixels
    out = cf.cutout_batch(
        images,
        num_holes=num_holes,
        length=length,
        uniform_sampling=uniform_sampling,
        generator=torch.Generator().manual_seed(7),
    )
    assert torch.equal(out, _expected(images, num_holes, length, uniform_sampling, seed=7))


@pytest.mark.parametrize(
    ("dtype", "outside"),
    [
        (torch.bool, True),
        (torch.float32, 1),
        (torch.bfloat16, 1),
        (torch.uint8, 255),
        (torch.int8, -1),
        (torch.int32, -1),
    ],
)
@pytest.mark.parametrize(("height", "width", "uniform_sampling"), [(10, 12, False), (10, 12, True), (9, 9, False)])
@pytest.mark.parametrize("num_holes", [1, 3])
def test_the_keep_mask_is_the_definition_in_the_dtype_asked_for(
    dtype, outside, height, width, uniform_sampling, num_holes
):
    """keep_mask, which cutout_batch fills by or ANDs a batch's bits with: zero inside the holes,
    (n, height, width), in the dtype asked for, and outside them one, true, or an integer with
    every bit set."""
    keep = keep_mask(
        5, height, width, num_holes, 0.4, uniform_sampling, torch.device("cpu"), dtype, torch.Generator().manual_seed(3)
    )
    expected = _expected(torch.ones(5, 1, height, width), num_holes, 0.4, uniform_sampling, seed=3)[:, 0]
    assert keep.shape == (5, height, width) and keep.dtype == dtype
    assert torch.equal(keep, (expected * outside).to(dtype)) and (expected == 0).any()


@pytest.mark.parametrize("dtype", [torch.bool, torch.float32, torch.uint8, torch.int64])
def test_without_holes_the_keep_mask_keeps_every_pixel(dtype):
    for num_holes, length in ((0, 0.5), (2, 0.05)):  # no hole, or a side of int(0.05 * 9) = 0 pixels
        keep = keep_mask(2, 9, 11, num_holes, length, False, torch.device("cpu"), dtype)
        assert keep.shape == (2, 9, 11) and keep.dtype == dtype
        assert torch.equal(
            keep,
            torch.ones(2, 9, 11, dtype=dtype).neg()
            if dtype == torch.int64
            else torch.full((2, 9, 11), 255 if dtype == torch.uint8 else 1, dtype=dtype),
        )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("inplace", [False, True])
def test_a_pixel_in_a_hole_is_zero_whatever_it_held(dtype, inplace):
    """inf, -inf and NaN included (a multiply by zero would give NaN), and a negative pixel gives
    +0, not -0; outside the holes every pixel keeps its value, NaN included, bit for bit."""
    values = torch.tensor([float("inf"), float("-inf"), float("nan"), -2.5, 3.0])
    images = values[torch.randint(0, 5, (6, 3, 10, 12), generator=torch.Generator().manual_seed(4))].to(dtype)
    before = images.clone()
    out = cf.cutout_batch(images, 2, 0.4, generator=torch.Generator().manual_seed(8), inplace=inplace)
    hole = _expected(torch.ones(6, 1, 10, 12), 2, 0.4, False, seed=8) == 0
    assert hole.any() and not hole.all()
    bits = {torch.float64: torch.int64, torch.float32: torch.int32}.get(dtype, torch.int16)
    assert torch.equal(out.view(bits), before.masked_fill(hole, 0).view(bits))
    assert (out.view(bits)[hole.expand_as(out)] == 0).all()  # +0.0 has no bit set


def test_a_batch_that_requires_grad_gets_zero_gradient_in_the_holes():
    images = (torch.rand(4, 3, 8, 8) + 1).requires_grad_()
    out = cf.cutout_batch(images, 1, 0.5, generator=torch.Generator().manual_seed(2))
    out.sum().backward()
    hole = _expected(torch.ones(4, 1, 8, 8), 1, 0.5, False, seed=2) == 0
    assert hole.any()
    assert torch.equal(images.grad, (~hole).to(torch.float32).expand(4, 3, 8, 8))
    assert torch.equal(out.detach(), images.detach().masked_fill(hole, 0))


def test_an_interior_hole_is_a_full_square_of_the_stated_side():
    """A hole away from the border is exactly side x side pixels (an odd side is not one short)."""
    images = torch.ones(400, 1, 32, 32)
    out = cf.cutout_batch(images, length=7 / 32, generator=torch.Generator().manual_seed(0))
    zeros = out[:, 0] == 0
    rows, cols = zeros.any(dim=2), zeros.any(dim=1)
    interior = (
        rows[:, 0].logical_not() & rows[:, -1].logical_not() & cols[:, 0].logical_not() & cols[:, -1].logical_not()
    )
    assert interior.sum() > 100
    assert (zeros[interior].sum(dim=(1, 2)) == 49).all()
    assert (rows[interior].sum(dim=1) == 7).all() and (cols[interior].sum(dim=1) == 7).all()


def test_each_image_draws_its_own_hole():
    out = cf.cutout_batch(torch.ones(16, 1, 16, 16), length=0.25, generator=torch.Generator().manual_seed(0))
    masks = {tuple(m.flatten().tolist()) for m in (out[:, 0] == 0)}
    assert len(masks) > 8


def test_a_single_image_and_every_dtype_and_memory_format_are_kept():
    g = torch.Generator().manual_seed(0)
    image = torch.randint(1, 255, (3, 16, 16), dtype=torch.uint8, generator=g)
    out = cf.cutout_batch(image, length=0.5, generator=torch.Generator().manual_seed(3))
    assert out.shape == image.shape and out.dtype == torch.uint8
    assert torch.equal(out, _expected(image[None], 1, 0.5, False, seed=3)[0])
    for dtype in (torch.float16, torch.bfloat16, torch.float64):
        batch = torch.rand(4, 3, 8, 8).to(dtype).contiguous(memory_format=torch.channels_last)
        before = batch.clone()
        out = cf.cutout_batch(batch, generator=torch.Generator().manual_seed(1))
        assert out.dtype == dtype and out.is_contiguous(memory_format=torch.channels_last)
        assert torch.equal(batch, before)  # the caller's tensor is never modified


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.uint8, torch.bool])
@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize(("num_holes", "uniform_sampling"), [(1, False), (3, True)])
def test_inplace_zeroes_the_holes_of_the_input_and_returns_it(dtype, channels_last, num_holes, uniform_sampling):
    """The same holes as the copy (the same draws), written into the caller's batch, whose dtype and
    layout stay as they were; the default leaves the batch untouched."""
    images = (torch.rand(5, 3, 9, 12, generator=torch.Generator().manual_seed(2)) * 100 + 1).to(dtype)
    if channels_last:
        images = images.contiguous(memory_format=torch.channels_last)
    before = images.clone()
    copied = cf.cutout_batch(images, num_holes, 0.4, uniform_sampling, generator=torch.Generator().manual_seed(5))
    assert torch.equal(images, before)
    assert torch.equal(copied, _expected(before, num_holes, 0.4, uniform_sampling, seed=5))
    out = cf.cutout_batch(
        images, num_holes, 0.4, uniform_sampling, generator=torch.Generator().manual_seed(5), inplace=True
    )
    assert out is images and torch.equal(images, copied) and images.dtype == dtype
    assert images.is_contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)


def test_inplace_on_a_single_image_writes_into_it():
    image = torch.rand(3, 10, 10) + 1
    before = image.clone()
    out = cf.cutout_batch(image, length=0.5, generator=torch.Generator().manual_seed(4), inplace=True)
    assert out is image and out.shape == (3, 10, 10)
    assert torch.equal(image, _expected(before[None], 1, 0.5, False, seed=4)[0])


def test_no_holes_is_an_unchanged_copy():
    images = torch.rand(2, 3, 8, 8)
    out = cf.cutout_batch(images, num_holes=0)
    assert torch.equal(out, images) and out.data_ptr() != images.data_ptr()


def test_pixels_are_cut_with_the_probabilities_the_sampling_implies():
    """Paper sampling cuts the centre more often than a corner; uniform sampling cuts every pixel
    alike. Side 8 on 16 x 16: the centre pixel is cut with p = (8/16)^2, the corner with
    (5/16)^2; with uniform sampling every pixel with (8/24)^2. Each frequency over 4,000 images
    is checked within 5 standard deviations (a false alarm rate below 1e-6 per check, and the
    seed is fixed, so the test cannot flake)."""
    n = 4000
    for uniform, expected in (
        (False, {(8, 8): (8 / 16) ** 2, (0, 0): (5 / 16) ** 2}),
        (True, {(8, 8): (8 / 24) ** 2, (0, 0): (8 / 24) ** 2, (15, 4): (8 / 24) ** 2}),
    ):
        cut = (
            cf.cutout_batch(
                torch.ones(n, 1, 16, 16),
                length=0.5,
                uniform_sampling=uniform,
                generator=torch.Generator().manual_seed(11),
            )[:, 0]
            == 0
        )
        for (row, col), p in expected.items():
            frequency = cut[:, row, col].double().mean().item()
            assert abs(frequency - p) < 5 * math.sqrt(p * (1 - p) / n), (uniform, row, col, frequency, p)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"num_holes": -1}, "num_holes=-1"),
        ({"num_holes": 1.5}, "num_holes=1.5"),
        ({"length": 0}, "length=0"),
        ({"length": 1.5}, "length=1.5"),
        ({"length": 16}, "length=16: must be a number in (0, 1]"),
        ({"length": float("nan")}, "length=nan"),
        ({"length": "0.5"}, "length='0.5'"),
        ({"length": True}, "length=True"),
        ({"num_holes": True}, "num_holes=True"),
        ({"num_holes": "1"}, "num_holes='1'"),
    ],
)
def test_bad_hyperparameters_fail_with_a_clear_error(kwargs, words):
    with pytest.raises(ValueError, match=words.replace("(", r"\(")):
        CutOut(**kwargs)
    with pytest.raises(ValueError, match=words.replace("(", r"\(")):
        cf.cutout_batch(torch.rand(2, 3, 8, 8), **kwargs)


def test_a_batch_that_is_not_images_is_refused():
    with pytest.raises(ValueError, match=r"got shape \(4, 5\)"):
        cf.cutout_batch(torch.rand(4, 5))


class _Seen(Algorithm):
    def __init__(self):
        self.inputs, self.targets = [], []

    def match(self, event, state):
        return event is Event.BEFORE_FORWARD

    def apply(self, event, state, logger=None):
        self.inputs.append(state.batch_get_item("image").clone())
        self.targets.append(state.batch_get_item("label").clone())


@pytest.mark.parametrize("uniform_sampling", [False, True])
def test_in_the_trainer_the_model_sees_the_definition_and_the_loss_the_labels(uniform_sampling):
    """Each image the model sees is the definition applied with the centres replayed from the
    generator the class is defined to use; the loss is the cross entropy against the labels."""
    g = torch.Generator().manual_seed(0)
    batches = [
        {"image": torch.rand(8, 3, 12, 12, generator=g) + 1, "label": torch.randint(0, 4, (8,), generator=g)}
        for _ in range(3)
    ]
    seen = Observed(input_key="image", target_key="label")
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 12 * 12, 4))
    algo = CutOut(num_holes=2, length=0.5, uniform_sampling=uniform_sampling, input_key="image")
    Trainer(
        model, batches, "3ba", algorithms=[algo, seen], seed=0, input_key="image", target_key="label", device="cpu"
    ).fit()
    replayed = replayed_generator(CutOut, seed=0)
    for batch, image, out, label, loss in zip(
        batches, seen.inputs, seen.outputs, seen.targets, seen.losses, strict=True
    ):
        assert torch.equal(image, _expected(batch["image"], 2, 0.5, uniform_sampling, generator=replayed))
        assert torch.equal(label, batch["label"])
        torch.testing.assert_close(loss, torch.nn.functional.cross_entropy(out, batch["label"]))


def test_seeded_runs_repeat_and_the_seed_matters():
    def run(seed):
        seen = _Seen()
        batches = [{"image": torch.ones(4, 3, 8, 8), "label": torch.zeros(4, dtype=torch.long)}]
        model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 2))
        Trainer(
            model,
            batches,
            "1ba",
            algorithms=[CutOut(input_key="image"), seen],
            seed=seed,
            input_key="image",
            target_key="label",
            device="cpu",
        ).fit()
        return seen.inputs[0]

    assert torch.equal(run(0), run(0)) and not torch.equal(run(0), run(1))


@pytest.mark.cuda
def test_on_cuda_it_stays_on_the_device():
    images = torch.rand(4, 3, 16, 16, device="cuda", dtype=torch.float16)
    out = cf.cutout_batch(images, generator=torch.Generator().manual_seed(0))
    assert out.device == images.device and out.dtype == torch.float16
    assert torch.equal(out.cpu(), _expected(images.cpu(), 1, 0.5, False, seed=0))


def test_a_pixel_length_is_refused_with_the_whole_message():
    with pytest.raises(
        ValueError,
        match=r"^length=16: must be a number in \(0, 1\]$",
    ):
        CutOut(length=16)


def test_length_1_cuts_a_hole_as_wide_as_the_shorter_side():
    out = cf.cutout_batch(torch.ones(200, 1, 6, 9), length=1, generator=torch.Generator().manual_seed(0))
    assert torch.equal(out, _expected(torch.ones(200, 1, 6, 9), 1, 1.0, False, seed=0))
    assert ((out[:, 0] == 0).any(dim=2).sum(dim=1) <= 6).all() and (out == 0).sum(dim=(1, 2, 3)).max() == 36


def test_one_pixel_holes_are_cut():
    """length * min(H, W) = 1: every hole is exactly one pixel (centres inside the image)."""
    out = cf.cutout_batch(torch.ones(50, 2, 8, 8), length=1 / 8, generator=torch.Generator().manual_seed(0))
    assert ((out == 0).sum(dim=(1, 2, 3)) == 2).all()  # one pixel, both channels


def test_a_batch_of_one_image_keeps_its_batch_dimension():
    images = torch.rand(1, 3, 8, 8) + 1
    out = cf.cutout_batch(images, generator=torch.Generator().manual_seed(0))
    assert out.shape == (1, 3, 8, 8) and torch.equal(out, _expected(images, 1, 0.5, False, seed=0))


@pytest.mark.parametrize("dtype", [torch.uint8, torch.bool, torch.float32])
def test_no_holes_leaves_images_of_every_dtype_as_they_are(dtype):
    images = torch.ones(2, 3, 8, 8).to(dtype)
    for kwargs in ({"num_holes": 0}, {"length": 0.1}):  # no hole, or holes of side int(0.8) = 0
        out = cf.cutout_batch(images, **kwargs, generator=torch.Generator().manual_seed(0))
        assert out.dtype == dtype and torch.equal(out, images)


def test_the_defaults_are_one_hole_of_half_the_side_centred_inside_the_image():
    images = torch.rand(6, 3, 10, 10) + 1
    seen = [Observed(), Observed()]
    for algo, probe in zip((CutOut(), CutOut(num_holes=1, length=0.5, uniform_sampling=False)), seen, strict=True):
        model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(300, 4))
        Trainer(
            model, [(images, torch.zeros(6, dtype=torch.long))], "1ba", algorithms=[algo, probe], seed=2, device="cpu"
        ).fit()
    assert torch.equal(seen[0].inputs[0], seen[1].inputs[0])
    assert torch.equal(seen[0].inputs[0], _expected(images, 1, 0.5, False, generator=replayed_generator(CutOut, 2)))
    out = cf.cutout_batch(images, generator=torch.Generator().manual_seed(4))
    assert torch.equal(out, _expected(images, 1, 0.5, False, seed=4))


def _check_the_batch_forms_on(device: torch.device) -> None:
    """Both forms on the device (on CUDA under torch's sync debug mode "error", so that a host
    synchronisation raises) give the CPU's result."""
    g = torch.Generator().manual_seed(0)
    x = (torch.rand(8, 3, 16, 12, generator=g) + 1).to(torch.float16).contiguous(memory_format=torch.channels_last)
    masks = torch.randint(1, 5, (8, 3, 16, 12), generator=g, dtype=torch.uint8)
    xd, work, masks_d = x.to(device, copy=True), x.to(device, copy=True), masks.to(device, copy=True)
    with no_host_sync() if device.type == "cuda" else contextlib.nullcontext():
        out = cf.cutout_batch(xd, num_holes=2, generator=torch.Generator().manual_seed(1))
        written = cf.cutout_batch(work, num_holes=2, generator=torch.Generator().manual_seed(1), inplace=True)
        out_masks = cf.cutout_batch(masks_d, generator=torch.Generator().manual_seed(2))
    expected = _expected(x, 2, 0.5, False, seed=1)
    assert written is work
    for got in (out, work):
        assert got.device == xd.device and got.is_contiguous(memory_format=torch.channels_last)
        assert torch.equal(got.cpu(), expected)
    assert torch.equal(out_masks.cpu(), _expected(masks, 1, 0.5, False, seed=2))


def test_the_batch_forms_check_on_the_cpu():
    _check_the_batch_forms_on(torch.device("cpu"))


@pytest.mark.cuda
def test_on_cuda_the_batch_forms_make_no_host_sync():
    _check_the_batch_forms_on(torch.device("cuda"))


@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize(("num_holes", "uniform_sampling"), [(1, False), (3, True)])
def test_the_fill_path_matches_the_definition(inplace, num_holes, uniform_sampling):
    """The batches the bitwise path does not take: complex128 (16-byte elements, no integer of that
    size) and a batch that requires grad (a non-leaf, which can be written in place) are filled
    with masked_fill; they get the same holes, in place or not, and the gradient is zero in the
    holes."""
    images = torch.rand(5, 3, 9, 12, generator=torch.Generator().manual_seed(2)) + 1  # no zero pixels
    expected = _expected(images, num_holes, 0.4, uniform_sampling, seed=5)
    complex_batch = images.to(torch.complex128)
    out = cf.cutout_batch(
        complex_batch, num_holes, 0.4, uniform_sampling, generator=torch.Generator().manual_seed(5), inplace=inplace
    )
    assert (out is complex_batch) == inplace and torch.equal(out, expected.to(torch.complex128))
    assert torch.equal(complex_batch, expected.to(torch.complex128) if inplace else images.to(torch.complex128))
    leaf = images.clone().requires_grad_()
    batch = leaf * 1
    out = cf.cutout_batch(
        batch, num_holes, 0.4, uniform_sampling, generator=torch.Generator().manual_seed(5), inplace=inplace
    )
    assert (out is batch) == inplace and torch.equal(out.detach(), expected)
    assert torch.equal(batch.detach(), expected if inplace else images)
    out.sum().backward()
    assert torch.equal(leaf.grad, (expected != 0).to(torch.float32))


@pytest.mark.parametrize("inplace", [False, True])
def test_without_holes_every_form_returns_the_batch_unchanged(inplace):
    """No hole (``num_holes=0``, or a side of ``int(0.05 * 9) = 0`` pixels): the values come back as
    they were, whichever path cuts (the bitwise one, the fill for complex128 and for a batch that
    requires grad), and a gradient of one everywhere."""
    for num_holes, length in ((0, 0.5), (2, 0.05)):
        images = torch.rand(3, 2, 9, 11, generator=torch.Generator().manual_seed(0)) + 1
        for batch in (images.clone(), images.to(torch.complex128)):
            out = cf.cutout_batch(batch, num_holes, length, generator=torch.Generator().manual_seed(1), inplace=inplace)
            assert (out is batch) == inplace and torch.equal(out, images.to(batch.dtype))
        leaf = images.clone().requires_grad_()
        batch = leaf * 1
        out = cf.cutout_batch(batch, num_holes, length, generator=torch.Generator().manual_seed(1), inplace=inplace)
        assert torch.equal(out.detach(), images)
        out.sum().backward()
        assert torch.equal(leaf.grad, torch.ones_like(images))


@pytest.mark.parametrize(("kwargs", "cut"), [({}, 2), ({"num_holes": 0}, 0), ({"length": 0.1}, 0)])
def test_it_reports_the_batches_given_holes_of_a_pixel_or_more(kwargs, cut):
    """8 x 8 images: a length of 0.1 is a hole of int(0.8) = 0 pixels."""
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(4, 3, 8, 8, generator=g), torch.randint(0, 4, (4,), generator=g)) for _ in range(2)]
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 4))
    trainer = Trainer(model, batches, "1ep", algorithms=[CutOut(**kwargs)], seed=0, device="cpu")
    trainer.fit()
    assert trainer.method_log.records["CutOut"]["activity"] == {"batches_cut": cut}


# -- PIL images, as Composer's cutout_batch takes them ------------------------------------------


@pytest.mark.parametrize("mode", ["RGB", "L", "RGBA", "P", "I", "F", "1"])
def test_a_pil_image_is_cut_as_its_pixel_values_and_given_back_in_its_mode(mode):
    img = random_image(mode, height=7, width=6, seed=3)
    out = cf.cutout_batch(img, num_holes=2, length=0.5, generator=torch.Generator().manual_seed(5))
    expected = cf.cutout_batch(pixels(img), num_holes=2, length=0.5, generator=torch.Generator().manual_seed(5))
    assert type(out) is type(img) and (out.mode, out.size) == (img.mode, img.size)
    assert torch.equal(pixels(out), expected)
    assert out.getpalette() == img.getpalette()
    assert torch.equal(pixels(img), pixels(random_image(mode, height=7, width=6, seed=3)))  # not modified


def test_a_pil_image_is_not_cut_in_place():
    with pytest.raises(ValueError, match=r"^inplace=True: a PIL image is not written in place; pass a tensor"):
        cf.cutout_batch(random_image(), inplace=True)


@pytest.mark.parametrize("input", [[[[0.5]]], "image", None])
def test_an_input_neither_tensor_nor_pil_image_is_a_type_error(input):
    message = f"input: needs a torch.Tensor or a PIL.Image.Image, got {type(input).__name__}"
    with pytest.raises(TypeError, match=f"^{re.escape(message)}$"):
        cf.cutout_batch(input)
