"""ColOut's own semantics, checked against its definition (Composer's ColOut, batch mode).

Of the ``H`` rows, ``int((1 - p_row) * H)`` are kept, and of the ``W`` columns
``int((1 - p_col) * W)``, drawn uniformly without replacement (rows first, then columns) and kept
in their order; every image and channel of the batch keeps the same ones, and a dense target with
the images' ``H, W`` loses the same rows and columns. The definition below builds the output pixel
by pixel from the kept indices, replayed from the same seeded generator. The tests every method
passes (it trains in the Trainer, it keeps the caller's tensors, its functional and class
defaults agree) already run from the metadata registry.
"""

from __future__ import annotations

import contextlib
import re

import pytest
import torch
from pil_support import pixels, random_image
from test_cutout import _expected as _cutout_definition
from trainer_support import Observed, no_host_sync, replayed_generator

import algorithms.functional as cf
from algorithms import ColOut, CutOut
from algorithms.core import Event, State, Trainer
from algorithms.core.time import Duration


def _kept(generator: torch.Generator, height: int, width: int, p_row: float, p_col: float):
    """The kept rows and columns, replayed: a uniform subset of each, sorted."""
    rows = sorted(torch.randperm(height, generator=generator)[: int((1 - p_row) * height)].tolist())
    cols = sorted(torch.randperm(width, generator=generator)[: int((1 - p_col) * width)].tolist())
    return rows, cols


def _definition(x: torch.Tensor, rows: list[int], cols: list[int]) -> torch.Tensor:
    """``out[..., i, j] = x[..., rows[i], cols[j]]``, pixel by pixel."""
    out = torch.empty(*x.shape[:-2], len(rows), len(cols), dtype=x.dtype)
    for i, row in enumerate(rows):
        for j, col in enumerate(cols):
            out[..., i, j] = x[..., row, col]
    return out


def _seeded(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize(("p_row", "p_col"), [(0.15, 0.15), (0.0, 0.0), (0.25, 0.5), (0.5, 0.05), (0.0, 0.3)])
def test_colout_batch_matches_its_definition(p_row, p_col):
    images = torch.rand(5, 3, 10, 14, generator=_seeded(1))
    out = cf.colout_batch(images, p_row=p_row, p_col=p_col, generator=_seeded(7))
    assert torch.equal(out, _definition(images, *_kept(_seeded(7), 10, 14, p_row, p_col)))


@pytest.mark.parametrize(
    ("height", "width", "p_row", "p_col"),
    [
        (32, 32, 0.15, 0.15),  # 27 x 27
        (8, 8, 0.15, 0.15),  # int(6.8) = 6 kept: the kept count is floored, not the dropped count rounded
        (10, 10, 0.3, 0.7),  # (1 - 0.3) * 10 = 7.000000000000001 and (1 - 0.7) * 10 = 3.0000000000000004
        (32, 48, 0.0, 0.25),
        (32, 48, 0.15, 0.05),  # rectangles and unequal fractions, as Composer tests
        (7, 5, 0.5, 0.5),
    ],
)
def test_the_output_size_is_the_kept_count_as_composer_computes_it(height, width, p_row, p_col):
    kept = (int((1 - p_row) * height), int((1 - p_col) * width))
    for channels in (1, 3):
        batch = torch.rand(16, channels, height, width)
        assert cf.colout_batch(batch, p_row=p_row, p_col=p_col).shape == (16, channels, *kept)
        assert cf.colout_batch(batch[0], p_row=p_row, p_col=p_col).shape == (channels, *kept)
        x, y = cf.colout_batch((batch, batch), p_row=p_row, p_col=p_col)  # Composer's pair of images
        assert x.shape == y.shape == (16, channels, *kept)


def test_every_output_pixel_is_the_same_images_pixel_in_order_and_all_images_keep_the_same_rows():
    """Each input value is unique, so each output value names where it came from: the same image
    and channel, rows and columns strictly increasing, and one set of rows and columns for all."""
    n, c, h, w = 6, 3, 20, 16
    images = torch.arange(n * c * h * w).reshape(n, c, h, w)
    out = cf.colout_batch(images, p_row=0.3, p_col=0.25, generator=_seeded(3))
    image, channel = out // (c * h * w), out // (h * w) % c
    row, col = out // w % h, out % w
    assert torch.equal(image, torch.arange(n).view(n, 1, 1, 1).expand_as(out))
    assert torch.equal(channel, torch.arange(c).view(1, c, 1, 1).expand_as(out))
    kept_rows, kept_cols = row[0, 0, :, 0], col[0, 0, 0, :]
    assert torch.equal(row, kept_rows.view(1, 1, -1, 1).expand_as(out))  # the same rows everywhere
    assert torch.equal(col, kept_cols.view(1, 1, 1, -1).expand_as(out))
    assert (kept_rows.diff() > 0).all() and (kept_cols.diff() > 0).all()  # in order, none repeated
    assert (len(kept_rows), len(kept_cols)) == (14, 12)


def test_each_row_and_column_is_kept_with_the_probability_the_draw_implies():
    """A uniform subset keeps each of the 10 rows with p = 8/10 (p_row=0.2) and each of the 10
    columns with 5/10 (p_col=0.5). Each frequency over 3,000 draws is checked within 5 standard
    deviations (a false alarm rate below 1e-6 per check; the seed is fixed, so it cannot flake)."""
    g, n = _seeded(5), 3000
    index = torch.arange(100).reshape(1, 1, 10, 10)
    rows, cols = torch.zeros(10), torch.zeros(10)
    for _ in range(n):
        out = cf.colout_batch(index, p_row=0.2, p_col=0.5, generator=g)
        rows[out[0, 0, :, 0] // 10] += 1
        cols[out[0, 0, 0, :] % 10] += 1
    for counts, p in ((rows, 0.8), (cols, 0.5)):
        assert ((counts / n - p).abs() < 5 * (p * (1 - p) / n) ** 0.5).all(), (counts, p)


def test_a_dense_target_loses_the_same_rows_and_columns():
    g = _seeded(2)
    images, masks = torch.rand(4, 3, 12, 10, generator=g), torch.randint(0, 5, (4, 12, 10), generator=g)
    for resize_target in ("auto", True):
        x, y = cf.colout_batch(
            (images, masks), p_row=0.25, p_col=0.2, resize_target=resize_target, generator=_seeded(9)
        )
        rows, cols = _kept(_seeded(9), 12, 10, 0.25, 0.2)
        assert torch.equal(x, _definition(images, rows, cols)) and torch.equal(y, _definition(masks, rows, cols))
        assert y.dtype == torch.long
    soft = torch.rand(4, 5, 12, 10, generator=g)  # per-pixel class probabilities (N, K, H, W)
    _, y = cf.colout_batch((images, soft), resize_target="auto", generator=_seeded(9))
    assert torch.equal(y, _definition(soft, *_kept(_seeded(9), 12, 10, 0.15, 0.15)))


@pytest.mark.parametrize(
    ("target", "resize_target"),
    [
        (torch.randint(0, 4, (4,)), "auto"),  # class indices
        (torch.rand(4, 12), "auto"),  # soft labels (N, K): two dims, even where K happened to be W
        (torch.randint(0, 4, (4, 8, 10)), "auto"),  # a mask of another height
        (torch.randint(0, 4, (4, 12, 10)), False),  # a mask, but resizing is off
        (torch.Tensor(), "auto"),  # the empty target of Composer's test
    ],
)
def test_a_target_not_to_resize_is_the_same_object(target, resize_target):
    images = torch.rand(4, 3, 12, 12) if target.ndim == 2 else torch.rand(4, 3, 12, 10)
    x, y = cf.colout_batch((images, target), resize_target=resize_target, generator=_seeded(4))
    assert y is target
    assert torch.equal(x, _definition(images, *_kept(_seeded(4), *images.shape[-2:], 0.15, 0.15)))


def test_a_single_image_resizes_its_mask_only_when_told_as_composer_does():
    """'auto' wants a target of three or more dims: a single image's (H, W) mask is resized with
    resize_target=True only (Composer's rule)."""
    image, mask = torch.rand(3, 10, 10), torch.randint(0, 3, (10, 10))
    _, kept_auto = cf.colout_batch((image, mask), resize_target="auto", generator=_seeded(0))
    x, y = cf.colout_batch((image, mask), resize_target=True, generator=_seeded(0))
    rows, cols = _kept(_seeded(0), 10, 10, 0.15, 0.15)
    assert kept_auto is mask
    assert torch.equal(x, _definition(image, rows, cols)) and torch.equal(y, _definition(mask, rows, cols))


def test_seeded_calls_repeat_on_the_generator_and_on_torchs_global_seed():
    images = torch.rand(16, 3, 32, 32)
    a = cf.colout_batch(images, generator=_seeded(42))
    assert torch.equal(a, cf.colout_batch(images, generator=_seeded(42)))
    assert not torch.equal(a, cf.colout_batch(images, generator=_seeded(43)))
    torch.manual_seed(42)  # Composer's reproducibility test: no generator, torch's global seed
    b = cf.colout_batch(images)
    torch.manual_seed(42)
    assert torch.equal(b, cf.colout_batch(images))


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.uint8, torch.bool, torch.float16, torch.bfloat16, torch.float64]
)
def test_dtype_and_memory_format_are_kept_and_the_input_is_not_modified(dtype):
    images = (torch.rand(4, 3, 12, 12, generator=_seeded(1)) * 200).to(dtype)
    rows, cols = _kept(_seeded(6), 12, 12, 0.15, 0.15)
    for batch in (images, images.contiguous(memory_format=torch.channels_last), images.transpose(0, 1)):
        before = batch.clone()
        out = cf.colout_batch(batch, generator=_seeded(6))
        assert out.dtype == dtype and torch.equal(out, _definition(batch, rows, cols))
        assert torch.equal(batch, before)
        if batch.is_contiguous(memory_format=torch.channels_last) and not batch.is_contiguous():
            assert out.is_contiguous(memory_format=torch.channels_last)
        elif batch.is_contiguous():  # a contiguous batch is not turned channels-last either
            assert out.is_contiguous()


def test_dropping_nothing_is_an_unchanged_copy():
    images = torch.rand(2, 3, 8, 8)
    out = cf.colout_batch(images, p_row=0, p_col=0)
    assert torch.equal(out, images) and out.data_ptr() != images.data_ptr()


def _whole(message: str) -> str:
    return f"^{re.escape(message)}$"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"p_row": 1.5}, "p_row=1.5: must be a number in [0, 1)"),
        ({"p_col": 1.5}, "p_col=1.5: must be a number in [0, 1)"),
        ({"p_row": -0.1}, "p_row=-0.1: must be a number in [0, 1)"),
        ({"p_col": 1}, "p_col=1: must be a number in [0, 1)"),
        ({"p_row": float("nan")}, "p_row=nan: must be a number in [0, 1)"),
        ({"p_row": "0.15"}, "p_row='0.15': must be a number in [0, 1)"),
        ({"p_col": True}, "p_col=True: must be a number in [0, 1)"),
        ({"resize_target": "yes"}, "resize_target='yes': must be one of 'auto', True, False"),
        ({"resize_target": None}, "resize_target=None: must be one of 'auto', True, False"),
        ({"resize_target": 1}, "resize_target=1: must be one of 'auto', True, False"),
    ],
)
def test_bad_hyperparameters_fail_with_a_clear_error(kwargs, message):
    with pytest.raises(ValueError, match=_whole(message)):
        ColOut(**kwargs)
    with pytest.raises(ValueError, match=_whole(message)):
        cf.colout_batch(torch.rand(2, 3, 8, 8), **kwargs)


@pytest.mark.parametrize("batch", [False, 0, "True"])
def test_only_the_batch_mode_is_offered(batch):
    message = f"batch={batch!r}: must be True"  # per-sample ColOut is colout_batch in a dataset transform
    with pytest.raises(ValueError, match=_whole(message)):
        ColOut(batch=batch)


def test_the_repr_names_every_hyperparameter():
    assert repr(ColOut()) == (
        "ColOut(p_row=0.15, p_col=0.15, batch=True, resize_target='auto', input_key=0, target_key=1)"
    )
    assert repr(ColOut(0.25, 0.5, resize_target=True, input_key="image", target_key="mask")) == (
        "ColOut(p_row=0.25, p_col=0.5, batch=True, resize_target=True, input_key='image', target_key='mask')"
    )


IMAGES_OR_BATCH = "sample: ColOut needs an image tensor (C, H, W) or a batch (N, C, H, W), got "


@pytest.mark.parametrize(
    ("sample", "kwargs", "message"),
    [
        (torch.rand(4, 5), {}, IMAGES_OR_BATCH + "shape (4, 5)"),
        (torch.rand(1, 2, 3, 8, 8), {}, IMAGES_OR_BATCH + "shape (1, 2, 3, 8, 8)"),
        ((torch.rand(2, 3, 8, 8),) * 3, {}, "sample: a tensor or an (input, target) pair, got a tuple of 3 items"),
        ([], {}, "sample: a tensor or an (input, target) pair, got a list of 0 items"),
        (
            torch.rand(2, 3, 8, 8),
            {"resize_target": True},
            "resize_target=True: the sample has no target to resize; pass (input, target)",
        ),
        (
            (torch.rand(2, 3, 8, 8), torch.zeros(2)),
            {"resize_target": True},
            "resize_target=True: the target's last two dims must be the input's (8, 8), got shape (2,)",
        ),
        (
            (torch.rand(3, 8, 6), torch.zeros(8, 5)),
            {"resize_target": True},
            "resize_target=True: the target's last two dims must be the input's (8, 6), got shape (8, 5)",
        ),
        (
            (torch.rand(2, 3, 8, 8), [0, 1]),
            {"resize_target": True},
            "resize_target=True: the target's last two dims must be the input's (8, 8), got a list",
        ),
        (
            torch.rand(2, 3, 8, 8),
            {"p_row": 0.9},
            "p_row=0.9: keeps int((1 - p_row) * 8) = 0 of the 8 rows; use a smaller p_row or larger images",
        ),
        (
            torch.rand(2, 3, 8, 4),
            {"p_col": 0.8},
            "p_col=0.8: keeps int((1 - p_col) * 4) = 0 of the 4 columns; use a smaller p_col or larger images",
        ),
    ],
)
def test_bad_input_fails_with_a_clear_error(sample, kwargs, message):
    with pytest.raises(ValueError, match=_whole(message)):
        cf.colout_batch(sample, **kwargs)


@pytest.mark.parametrize("wrap", [tuple, list])
def test_a_sample_of_one_item_is_its_input_alone(wrap):
    images = torch.rand(3, 3, 10, 8, generator=_seeded(1))
    out = cf.colout_batch(wrap([images]), p_row=0.3, p_col=0.25, generator=_seeded(2))
    assert isinstance(out, torch.Tensor)
    assert torch.equal(out, _definition(images, *_kept(_seeded(2), 10, 8, 0.3, 0.25)))


def test_it_runs_only_after_the_data_loader():
    state = State(model=torch.nn.Identity(), max_duration=Duration.parse("1ep"))
    algo = ColOut()
    assert algo.match(Event.AFTER_DATALOADER, state)
    assert not any(algo.match(event, state) for event in Event if event is not Event.AFTER_DATALOADER)


@pytest.mark.parametrize("resize_target", ["auto", False])
def test_in_the_trainer_images_are_dropped_and_class_labels_kept(resize_target):
    """The model sees the definition with the draws replayed from the class's generator; the loss
    is the cross entropy against the labels as they were."""
    g = _seeded(0)
    batches = [(torch.rand(6, 3, 12, 10, generator=g), torch.randint(0, 4, (6,), generator=g)) for _ in range(3)]
    seen = Observed()
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten())
    Trainer(
        model,
        batches,
        "3ba",
        algorithms=[ColOut(p_row=0.25, p_col=0.3, resize_target=resize_target), seen],
        seed=0,
        device="cpu",
    ).fit()
    replayed = replayed_generator(ColOut, seed=0)
    for (x, y), image, out, label, loss in zip(
        batches, seen.inputs, seen.outputs, seen.targets, seen.losses, strict=True
    ):
        assert torch.equal(image, _definition(x, *_kept(replayed, 12, 10, 0.25, 0.3)))
        assert torch.equal(label, y)
        torch.testing.assert_close(loss, torch.nn.functional.cross_entropy(out, y))


@pytest.mark.parametrize("resize_target", ["auto", True])
def test_in_the_trainer_a_segmentation_mask_in_a_dict_batch_is_dropped_alike(resize_target):
    """Dict batches by key; the per-pixel loss is against the mask with the same rows and columns
    dropped. With resize_target=False the mask would no longer match the output, so the loss
    could not be computed: the test sees the mask resized or fails."""
    g = _seeded(1)
    batches = [
        {"image": torch.rand(4, 3, 12, 12, generator=g), "mask": torch.randint(0, 3, (4, 12, 12), generator=g)}
        for _ in range(2)
    ]
    seen = Observed(input_key="image", target_key="mask")
    algo = ColOut(p_row=0.25, p_col=0.5, resize_target=resize_target, input_key="image", target_key="mask")
    Trainer(
        torch.nn.Conv2d(3, 3, 1),
        batches,
        "2ba",
        algorithms=[algo, seen],
        seed=3,
        input_key="image",
        target_key="mask",
        device="cpu",
    ).fit()
    replayed = replayed_generator(ColOut, seed=3)
    for batch, image, out, mask, loss in zip(
        batches, seen.inputs, seen.outputs, seen.targets, seen.losses, strict=True
    ):
        rows, cols = _kept(replayed, 12, 12, 0.25, 0.5)
        assert torch.equal(image, _definition(batch["image"], rows, cols))
        assert torch.equal(mask, _definition(batch["mask"], rows, cols)) and mask.shape == (4, 9, 6)
        torch.testing.assert_close(loss, torch.nn.functional.cross_entropy(out, mask))


def test_resize_target_true_refuses_class_labels_in_the_batch():
    """True means every target loses the rows and columns: class labels (N,) cannot, so the class
    refuses them as the functional form does, rather than leaving them as 'auto' would."""
    state = State(model=torch.nn.Identity(), max_duration=Duration.parse("1ep"), seed=0)
    state.batch = (torch.rand(4, 3, 8, 8), torch.zeros(4, dtype=torch.long))
    message = "resize_target=True: the target's last two dims must be the input's (8, 8), got shape (4,)"
    with pytest.raises(ValueError, match=_whole(message)):
        ColOut(resize_target=True).apply(Event.AFTER_DATALOADER, state)


def test_seeded_runs_repeat_and_the_seed_matters():
    def run(seed):
        seen = Observed()
        batches = [(torch.rand(4, 3, 16, 16, generator=_seeded(0)), torch.zeros(4, dtype=torch.long))]
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 2, 3), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten())
        Trainer(model, batches, "1ba", algorithms=[ColOut(), seen], seed=seed, device="cpu").fit()
        return seen.inputs[0]

    assert torch.equal(run(0), run(0)) and not torch.equal(run(0), run(1))


@pytest.mark.parametrize("colout_first", [True, False], ids=["colout-then-cutout", "cutout-then-colout"])
def test_it_composes_with_cutout_in_either_order(colout_first):
    """The model sees the two definitions applied in the listed order, each with its own class's
    replayed draws: CutOut's holes are sized on the image it is given."""
    g = _seeded(2)
    batches = [(torch.rand(4, 3, 16, 12, generator=g) + 1, torch.randint(0, 4, (4,), generator=g)) for _ in range(2)]
    seen = Observed()
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten())
    pair = [ColOut(p_row=0.25, p_col=0.25), CutOut(length=0.5)]
    Trainer(
        model, batches, "2ba", algorithms=[*(pair if colout_first else pair[::-1]), seen], seed=4, device="cpu"
    ).fit()
    colout_draws, cutout_draws = replayed_generator(ColOut, 4), replayed_generator(CutOut, 4)
    for (x, _), image in zip(batches, seen.inputs, strict=True):
        if colout_first:
            expected = _cutout_definition(
                _definition(x, *_kept(colout_draws, 16, 12, 0.25, 0.25)), 1, 0.5, False, generator=cutout_draws
            )
        else:
            cut = _cutout_definition(x, 1, 0.5, False, generator=cutout_draws)
            expected = _definition(cut, *_kept(colout_draws, 16, 12, 0.25, 0.25))
        assert image.shape == (4, 3, 12, 9) and torch.equal(image, expected)


@pytest.mark.cuda
def test_on_cuda_it_stays_on_the_device_and_matches_the_definition():
    g = _seeded(0)
    images, masks = torch.rand(4, 3, 16, 12, generator=g), torch.randint(0, 3, (4, 16, 12), generator=g)
    for dtype in (torch.float16, torch.uint8):
        for memory_format in (torch.contiguous_format, torch.channels_last):
            batch = (images * 100).to(dtype).cuda().contiguous(memory_format=memory_format)
            x, y = cf.colout_batch((batch, masks.cuda()), generator=_seeded(5))
            rows, cols = _kept(_seeded(5), 16, 12, 0.15, 0.15)
            assert x.device == batch.device and y.device == batch.device and x.dtype == dtype
            assert x.is_contiguous(memory_format=memory_format)
            assert torch.equal(x.cpu(), _definition(batch.cpu(), rows, cols))
            assert torch.equal(y.cpu(), _definition(masks, rows, cols))


@pytest.mark.cuda
def test_on_cuda_the_class_makes_no_host_sync():
    state = State(model=torch.nn.Identity(), max_duration=Duration.parse("1ep"), seed=0)
    images, masks = torch.rand(8, 3, 32, 32, device="cuda"), torch.randint(0, 3, (8, 32, 32), device="cuda")
    state.batch = (images, masks)
    algo = ColOut()
    with no_host_sync():
        algo.apply(Event.AFTER_DATALOADER, state)
    x, y = state.batch
    rows, cols = _kept(replayed_generator(ColOut, 0), 32, 32, 0.15, 0.15)
    assert x.device == images.device and y.device == images.device
    assert torch.equal(x.cpu(), _definition(images.cpu(), rows, cols))
    assert torch.equal(y.cpu(), _definition(masks.cpu(), rows, cols))


def _check_the_batch_form_on(device: torch.device) -> None:
    """The form on the device (on CUDA under torch's sync debug mode "error", so that a host
    synchronisation raises) gives the CPU's result."""
    g = _seeded(0)
    images = torch.rand(4, 3, 16, 12, generator=g).contiguous(memory_format=torch.channels_last)
    masks = torch.randint(0, 3, (4, 16, 12), generator=g)
    with no_host_sync() if device.type == "cuda" else contextlib.nullcontext():
        x, y = cf.colout_batch((images.to(device), masks.to(device)), generator=_seeded(5))
        alone = cf.colout_batch(images.contiguous().to(device), p_row=0.3, p_col=0.1, generator=_seeded(6))
    rows, cols = _kept(_seeded(5), 16, 12, 0.15, 0.15)
    assert x.device.type == y.device.type == alone.device.type == device.type
    assert x.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(x.cpu(), _definition(images, rows, cols))
    assert torch.equal(y.cpu(), _definition(masks, rows, cols))
    assert torch.equal(alone.cpu(), _definition(images, *_kept(_seeded(6), 16, 12, 0.3, 0.1)))


def test_the_batch_form_checks_on_the_cpu():
    _check_the_batch_form_on(torch.device("cpu"))


@pytest.mark.cuda
def test_on_cuda_the_batch_form_makes_no_host_sync():
    _check_the_batch_form_on(torch.device("cuda"))


@pytest.mark.parametrize(("kwargs", "cut"), [({}, 2), ({"p_row": 0.0, "p_col": 0.0}, 0)])
def test_it_reports_the_batches_that_lost_rows_or_columns(kwargs, cut):
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(4, 3, 16, 16, generator=g), torch.randint(0, 4, (4,), generator=g)) for _ in range(2)]
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(4, 4)
    )
    trainer = Trainer(model, batches, "1ep", algorithms=[ColOut(**kwargs)], seed=0, device="cpu")
    trainer.fit()
    assert trainer.method_log.records["ColOut"]["activity"] == {"batches_cut": cut}


# -- PIL images, as Composer's colout_batch takes them ------------------------------------------


@pytest.mark.parametrize("mode", ["RGB", "L", "RGBA", "P", "I", "F", "1"])
def test_a_pil_image_loses_its_rows_and_columns_in_its_mode(mode):
    img = random_image(mode, height=10, width=8, seed=4)
    out = cf.colout_batch(img, p_row=0.3, p_col=0.25, generator=_seeded(2))
    assert type(out) is type(img) and out.mode == img.mode and out.size == (int(0.75 * 8), int(0.7 * 10))
    assert torch.equal(pixels(out), cf.colout_batch(pixels(img), p_row=0.3, p_col=0.25, generator=_seeded(2)))
    assert out.getpalette() == img.getpalette()


def test_a_pair_of_pil_images_loses_the_same_rows_and_columns():
    img, mask = random_image("RGB", 10, 8, seed=4), random_image("L", 10, 8, seed=5)
    out, out_mask = cf.colout_batch((img, mask), p_row=0.3, p_col=0.25, generator=_seeded(2))
    x, y = cf.colout_batch((pixels(img), pixels(mask)), p_row=0.3, p_col=0.25, generator=_seeded(2))
    assert (out.mode, out_mask.mode) == ("RGB", "L") and out.size == out_mask.size == (6, 7)
    assert torch.equal(pixels(out), x) and torch.equal(pixels(out_mask), y)


def test_a_pil_image_with_class_targets_keeps_its_targets():
    img, target = random_image("RGB", 10, 8, seed=4), torch.tensor([3])
    out, out_target = cf.colout_batch((img, target), p_row=0.3, p_col=0.25, generator=_seeded(2))
    assert out_target is target
    assert torch.equal(pixels(out), cf.colout_batch(pixels(img), p_row=0.3, p_col=0.25, generator=_seeded(2)))


@pytest.mark.parametrize("sample", ["images", ([[0.5]], torch.zeros(1)), None])
def test_a_sample_neither_tensor_nor_pil_image_is_a_type_error(sample):
    input = sample[0] if isinstance(sample, tuple) else sample
    message = (
        "sample: ColOut needs a torch.Tensor or a PIL.Image.Image, or an (input, target) pair, "
        f"got {type(input).__name__}"
    )
    with pytest.raises(TypeError, match=_whole(message)):
        cf.colout_batch(sample)
