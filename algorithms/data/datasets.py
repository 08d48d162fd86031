"""Loaders returning train and test splits as ``torch.utils.data.Dataset`` objects.

Nothing here downloads: CIFAR-10 is read from a directory the user provides and ``digits``
ships inside scikit-learn.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import Dataset, TensorDataset

from ..core.options import dataset_names

__all__ = ["DataSplits", "cifar10", "digits", "get_dataset", "synthetic"]

# Per-channel statistics of the CIFAR-10 training set (as commonly used with torchvision).
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)


@dataclass(frozen=True)
class DataSplits:
    """A data set's splits and what a comparison needs to know about it."""

    name: str
    train: Dataset
    test: Dataset
    num_classes: int
    image_size: int
    has_accuracy: bool  # False for synthetic data: its "accuracy" means nothing


class _Resized(Dataset):
    """Bilinear resize of each image on access (keeps 224-pixel copies out of memory)."""

    def __init__(self, base: Dataset, size: int):
        self.base, self.size = base, size

    def __len__(self) -> int:
        return len(self.base)  # type: ignore[arg-type]

    def __getitem__(self, index: int):
        image, label = self.base[index]
        image = F.interpolate(image[None], size=(self.size, self.size), mode="bilinear", align_corners=False)[0]
        return image, label


def _maybe_resized(dataset: Dataset, native: int, size: int | None) -> tuple[Dataset, int]:
    if size is None or size == native:
        return dataset, native
    return _Resized(dataset, size), size


def _read_cifar_batch(path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing — expected the CIFAR-10 Python version "
                                "(data_batch_1..5 and test_batch, as in cifar-10-python.tar.gz)")
    with path.open("rb") as handle:
        entry = pickle.load(handle, encoding="bytes")
    data = entry.get(b"data", entry.get("data"))
    labels = entry.get(b"labels", entry.get("labels"))
    if data is None or labels is None:
        raise ValueError(f"{path}: not a CIFAR-10 batch (needs 'data' and 'labels' entries)")
    images = torch.as_tensor(data, dtype=torch.uint8).reshape(-1, 3, 32, 32)
    return images, torch.as_tensor(labels, dtype=torch.long)


def _normalize(images: torch.Tensor, mean: tuple[float, ...], std: tuple[float, ...]) -> torch.Tensor:
    images = images.float() / 255.0
    return (images - torch.tensor(mean).view(1, -1, 1, 1)) / torch.tensor(std).view(1, -1, 1, 1)


def cifar10(root: str | Path, image_size: int | None = None) -> DataSplits:
    """CIFAR-10 from ``root``, the extracted ``cifar-10-batches-py`` directory.

    Images are scaled to [0, 1] and normalized with the training set's channel statistics;
    ``image_size`` resizes them (e.g. 224 for the ImageNet-style ResNets).
    """
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: no such directory — pass the extracted cifar-10-batches-py folder")
    parts = [_read_cifar_batch(root / f"data_batch_{i}") for i in range(1, 6)]
    train_x = torch.cat([p[0] for p in parts])
    train_y = torch.cat([p[1] for p in parts])
    test_x, test_y = _read_cifar_batch(root / "test_batch")
    train, size = _maybe_resized(TensorDataset(_normalize(train_x, CIFAR10_MEAN, CIFAR10_STD), train_y), 32,
                                 image_size)
    test, _ = _maybe_resized(TensorDataset(_normalize(test_x, CIFAR10_MEAN, CIFAR10_STD), test_y), 32, image_size)
    return DataSplits("cifar10", train, test, num_classes=10, image_size=size, has_accuracy=True)


def digits(image_size: int | None = None, test_fraction: float = 0.2, seed: int = 0) -> DataSplits:
    """scikit-learn's 1,797 handwritten digits (8x8, 16 grey levels) as 32x32 RGB images.

    Upsampled bilinearly to 32x32 and repeated over three channels so the CIFAR models take them
    unchanged; standardized with the training split's mean and deviation. The split is a fixed
    permutation from ``seed``: ``test_fraction`` of the images are held out.
    """
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images = torch.as_tensor(bunch.images, dtype=torch.float32)[:, None] / 16.0
    images = F.interpolate(images, size=(32, 32), mode="bilinear", align_corners=False).repeat(1, 3, 1, 1)
    labels = torch.as_tensor(bunch.target, dtype=torch.long)
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))
    n_test = int(round(len(labels) * test_fraction))
    test_idx, train_idx = order[:n_test], order[n_test:]
    mean, std = images[train_idx].mean(), images[train_idx].std()
    images = (images - mean) / std
    train, size = _maybe_resized(TensorDataset(images[train_idx], labels[train_idx]), 32, image_size)
    test, _ = _maybe_resized(TensorDataset(images[test_idx], labels[test_idx]), 32, image_size)
    return DataSplits("digits", train, test, num_classes=10, image_size=size, has_accuracy=True)


class _Synthetic(Dataset):
    """Random images drawn on access from a per-index seed: any size, no memory held."""

    def __init__(self, length: int, image_size: int, num_classes: int, seed: int):
        self.length, self.image_size, self.num_classes, self.seed = length, image_size, num_classes, seed

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        if not 0 <= index < self.length:
            raise IndexError(index)
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        image = torch.randn(3, self.image_size, self.image_size, generator=g)
        return image, int(torch.randint(0, self.num_classes, (), generator=g))


def synthetic(image_size: int | None = None, train_size: int = 50_000, test_size: int = 10_000,
              num_classes: int = 10, seed: int = 0) -> DataSplits:
    """Random Gaussian images with random labels: for timing and memory, not accuracy."""
    size = image_size or 32
    return DataSplits("synthetic", _Synthetic(train_size, size, num_classes, seed),
                      _Synthetic(test_size, size, num_classes, seed + 1),
                      num_classes=num_classes, image_size=size, has_accuracy=False)


def get_dataset(name: str, root: str | Path | None = None, image_size: int | None = None) -> DataSplits:
    """The data set ``name`` (one of :func:`algorithms.core.options.dataset_names`); ``root`` is
    needed for ``cifar10``."""
    if name == "cifar10":
        if root is None:
            raise ValueError("data 'cifar10' needs its directory: pass the extracted cifar-10-batches-py folder")
        return cifar10(root, image_size)
    if name == "digits":
        return digits(image_size)
    if name == "synthetic":
        return synthetic(image_size)
    raise ValueError(f"data {name!r} is not known — use one of {', '.join(dataset_names())}")
