"""The comparison data sets: CIFAR-10's pickle format, digits, synthetic."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from algorithms.data import get_dataset
from algorithms.data.datasets import CIFAR10_MEAN, CIFAR10_STD


def _write_fake_cifar(root, per_batch=4):
    """A directory in the CIFAR-10 Python format: data_batch_1..5 and test_batch, each a pickled
    dict with bytes keys, ``data`` a uint8 array of N x 3072 (R, G, B planes of 32x32, row-major)
    and ``labels`` a list of ints."""
    rng = np.random.default_rng(0)
    batches = {}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        data = rng.integers(0, 256, size=(per_batch, 3072), dtype=np.uint8)
        labels = rng.integers(0, 10, size=per_batch).tolist()
        with open(root / name, "wb") as handle:
            pickle.dump(
                {b"batch_label": name.encode(), b"labels": labels, b"data": data, b"filenames": [b"x.png"] * per_batch},
                handle,
            )
        batches[name] = (data, labels)
    return batches


def test_cifar10_reads_the_python_format(tmp_path):
    batches = _write_fake_cifar(tmp_path)
    splits = get_dataset("cifar10", root=tmp_path)
    assert (len(splits.train), len(splits.test), splits.num_classes) == (20, 4, 10)
    data, labels = batches["data_batch_2"]
    image, label = splits.train[4]  # the first image of the second batch
    assert label == labels[0]
    # Pixel (channel 1, row 2, column 5) sits at 1024 * 1 + 32 * 2 + 5 of the flat record.
    raw = data[0][1024 + 64 + 5] / 255.0
    assert image[1, 2, 5].item() == pytest.approx((raw - CIFAR10_MEAN[1]) / CIFAR10_STD[1], abs=1e-6)
    resized = get_dataset("cifar10", root=tmp_path, image_size=64)
    assert resized.train[0][0].shape == (3, 64, 64) and resized.image_size == 64


def test_cifar10_errors_name_the_missing_piece(tmp_path):
    with pytest.raises(ValueError, match="needs its directory"):
        get_dataset("cifar10")
    with pytest.raises(FileNotFoundError, match="data_batch_1"):
        get_dataset("cifar10", root=tmp_path)


def test_digits_are_32_pixel_rgb_with_a_fixed_split():
    from sklearn.datasets import load_digits

    splits = get_dataset("digits")
    total = load_digits().target.shape[0]
    assert len(splits.train) + len(splits.test) == total == 1797
    assert len(splits.test) == round(0.2 * total)
    image, label = splits.train[0]
    assert image.shape == (3, 32, 32) and 0 <= label < 10
    assert torch.equal(image[0], image[1]) and torch.equal(image[1], image[2])  # grey in RGB
    xs = torch.stack([splits.train[i][0] for i in range(len(splits.train))])
    assert xs.mean().item() == pytest.approx(0.0, abs=1e-4) and xs.std().item() == pytest.approx(1.0, abs=1e-3)
    again = get_dataset("digits")
    assert torch.equal(again.test[5][0], splits.test[5][0])
    assert splits.has_accuracy


def test_synthetic_is_deterministic_and_has_no_accuracy():
    splits = get_dataset("synthetic", image_size=48)
    a, b = splits.train[7], get_dataset("synthetic", image_size=48).train[7]
    assert torch.equal(a[0], b[0]) and a[1] == b[1] and a[0].shape == (3, 48, 48)
    assert not torch.equal(splits.train[7][0], splits.train[8][0])
    assert not splits.has_accuracy
    with pytest.raises(ValueError, match="digits"):
        get_dataset("imagenet")


# --------------------------------------------------------------------------------------------- stdlib_text


@pytest.fixture(scope="module")
def stdlib_splits():
    return get_dataset("stdlib_text")


def test_stdlib_text_windows_are_inputs_and_labels_shifted_by_one(stdlib_splits):
    splits = stdlib_splits
    assert (splits.seq_len, splits.num_classes, splits.image_size, splits.has_accuracy) == (128, 256, None, False)
    first, second = splits.train[0], splits.train[1]
    assert set(first) == {"input_ids", "labels"}
    for example in (first, second, splits.test[0], splits.test[-1]):
        assert example["input_ids"].shape == example["labels"].shape == (128,)
        assert example["input_ids"].dtype == example["labels"].dtype == torch.long
    assert torch.equal(first["labels"][:-1], first["input_ids"][1:])
    assert first["labels"][-1] == second["input_ids"][0]  # non-overlapping windows of one stream
    assert int(first["input_ids"].max()) < 256
    with pytest.raises(IndexError):
        splits.train[len(splits.train)]


def test_stdlib_text_split_is_by_file_deterministic_and_disjoint(stdlib_splits):
    import sysconfig

    from algorithms.data.datasets import is_validation_file, stdlib_files

    files = stdlib_files()
    assert files == sorted(files) and files == stdlib_files()
    assert not any(part in ("site-packages", "test", "tests") for f in files for part in f.split("/"))
    root = Path(sysconfig.get_paths()["stdlib"])
    assert sum((root / f).stat().st_size for f in files) <= 4_000_000
    validation = [f for f in files if is_validation_file(f, 0.1)]
    assert 0 < len(validation) < len(files) / 4
    again = get_dataset("stdlib_text")
    for split in ("train", "test"):
        a, b = getattr(stdlib_splits, split), getattr(again, split)
        assert len(a) == len(b) and torch.equal(a[len(a) // 2]["input_ids"], b[len(b) // 2]["input_ids"])
    # the bytes of the train files and of the validation files, and nothing else
    n_train = sum((root / f).stat().st_size for f in files if f not in validation)
    assert len(stdlib_splits.train) == (n_train - 1) // 128


def test_stdlib_text_reads_a_given_tree_without_network(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "site-packages").mkdir()
    (tmp_path / "pkg" / "a.py").write_bytes(b"x = 1\n" * 50)
    (tmp_path / "b.py").write_bytes(b"y = 2\n" * 50)
    (tmp_path / "site-packages" / "c.py").write_bytes(b"z = 3\n" * 50)
    from algorithms.data import stdlib_text
    from algorithms.data.datasets import stdlib_files

    assert stdlib_files(tmp_path) == ["b.py", "pkg/a.py"]
    splits = stdlib_text(seq_len=8, root=tmp_path, validation_fraction=0.5)
    assert (len(splits.train) + len(splits.test)) * 8 <= 600
    assert bytes(splits.train[0]["input_ids"].tolist()).decode() in ("x = 1\nx ", "y = 2\ny ")


def test_stdlib_text_options_are_checked():
    with pytest.raises(ValueError, match="takes seq_len, not image_size"):
        get_dataset("stdlib_text", image_size=32)
    with pytest.raises(ValueError, match="holds images: it takes image_size, not seq_len"):
        get_dataset("digits", seq_len=64)
    from algorithms.data import stdlib_text

    with pytest.raises(ValueError, match="seq_len=0"):
        stdlib_text(seq_len=0)


def test_stdlib_text_metadata_matches_the_data_on_its_python(stdlib_splits):
    import platform

    from algorithms.metadata import load_all_datasets

    meta = load_all_datasets()["stdlib_text"].raw
    assert list(meta["input_shape"]) == [stdlib_splits.seq_len] and meta["num_classes"] == stdlib_splits.num_classes
    if platform.python_version() not in meta["source"]:
        pytest.skip(f"the split sizes are another Python's than {platform.python_version()}")
    assert dict(meta["splits"]) == {"train": len(stdlib_splits.train), "validation": len(stdlib_splits.test)}


def test_the_digits_read_from_scikit_learns_file_are_load_digits_own():
    """The file is read directly (importing scikit-learn takes seconds in every measured run); it must
    give exactly what ``load_digits`` gives, pixels and labels, in order."""
    from sklearn.datasets import load_digits

    from algorithms.data.datasets import _digits_arrays

    bunch = load_digits()
    pixels, labels = _digits_arrays()
    assert torch.equal(pixels, torch.as_tensor(bunch.data, dtype=torch.float32))
    assert torch.equal(labels, torch.as_tensor(bunch.target, dtype=torch.long))


def test_digits_hold_out_the_fraction_asked_for():
    splits = get_dataset("digits", image_size=8, test_fraction=0.8)
    assert (len(splits.train), len(splits.test)) == (359, 1438)
    assert splits.train[0][0].shape == (3, 8, 8)
    with pytest.raises(ValueError, match="test_fraction=0.5 is for 'digits'"):
        get_dataset("synthetic", image_size=8, test_fraction=0.5)
