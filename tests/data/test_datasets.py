"""The comparison data sets: CIFAR-10's pickle format, digits, synthetic."""

from __future__ import annotations

import pickle

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
            pickle.dump({b"batch_label": name.encode(), b"labels": labels, b"data": data,
                         b"filenames": [b"x.png"] * per_batch}, handle)
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
