"""Loaders returning train and test splits as ``torch.utils.data.Dataset`` objects.

Nothing here downloads: CIFAR-10 is read from a directory the user provides, ``digits``
ships inside scikit-learn and ``stdlib_text`` is read from the running interpreter's own
standard library.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import Dataset, TensorDataset

from .names import dataset_names

__all__ = ["DataSplits", "cifar10", "digits", "get_dataset", "stdlib_text", "synthetic"]

# Per-channel statistics of the CIFAR-10 training set (as commonly used with torchvision).
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)


@dataclass(frozen=True)
class DataSplits:
    """A data set's splits and what a comparison needs to know about it.

    ``test`` is the held-out split (``stdlib_text`` calls it validation). Image data sets have an
    ``image_size``; token sequences have a ``seq_len`` instead, and ``num_classes`` is then the
    vocabulary size (the logits' last dimension).
    """

    name: str
    train: Dataset
    test: Dataset
    num_classes: int
    image_size: int | None
    has_accuracy: bool  # False for synthetic data: its "accuracy" means nothing
    seq_len: int | None = None


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
        raise FileNotFoundError(
            f"{path}: missing — expected the CIFAR-10 Python version "
            "(data_batch_1..5 and test_batch, as in cifar-10-python.tar.gz)"
        )
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
    train, size = _maybe_resized(TensorDataset(_normalize(train_x, CIFAR10_MEAN, CIFAR10_STD), train_y), 32, image_size)
    test, _ = _maybe_resized(TensorDataset(_normalize(test_x, CIFAR10_MEAN, CIFAR10_STD), test_y), 32, image_size)
    return DataSplits("cifar10", train, test, num_classes=10, image_size=size, has_accuracy=True)


def _digits_arrays() -> tuple[torch.Tensor, torch.Tensor]:
    """scikit-learn's digits as ``(pixels (1797, 64) float32, labels (1797,) long)``, read from the
    file the package ships (``sklearn/datasets/data/digits.csv.gz``: 64 pixels and the label per
    line) without importing scikit-learn, whose import takes seconds: each measured run is a
    process of its own and reads the digits afresh. Through ``load_digits`` where that file is
    not where this expects it."""
    import gzip
    import importlib.util

    spec = importlib.util.find_spec("sklearn")
    folders = list(spec.submodule_search_locations or []) if spec else []
    path = Path(folders[0]) / "datasets" / "data" / "digits.csv.gz" if folders else None
    if path is None or not path.is_file():
        from sklearn.datasets import load_digits

        bunch = load_digits()
        return (torch.as_tensor(bunch.data, dtype=torch.float32), torch.as_tensor(bunch.target, dtype=torch.long))
    with gzip.open(path, "rt") as f:
        rows = torch.tensor([[float(v) for v in line.split(",")] for line in f if line.strip()])
    return rows[:, :64].contiguous(), rows[:, 64].long()


def digits(image_size: int | None = None, test_fraction: float = 0.2, seed: int = 0) -> DataSplits:
    """scikit-learn's 1,797 handwritten digits (8x8, 16 grey levels) as 32x32 RGB images.

    Upsampled bilinearly to 32x32 and repeated over three channels so the CIFAR models take them
    unchanged; standardized with the training split's mean and deviation. The split is a fixed
    permutation from ``seed``: ``test_fraction`` of the images are held out.
    """
    pixels, target = _digits_arrays()
    images = pixels.reshape(-1, 1, 8, 8) / 16.0
    images = F.interpolate(images, size=(32, 32), mode="bilinear", align_corners=False).repeat(1, 3, 1, 1)
    labels = target
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


def synthetic(
    image_size: int | None = None,
    train_size: int = 50_000,
    test_size: int = 10_000,
    num_classes: int = 10,
    seed: int = 0,
) -> DataSplits:
    """Random Gaussian images with random labels: for timing and memory, not accuracy."""
    size = image_size or 32
    return DataSplits(
        "synthetic",
        _Synthetic(train_size, size, num_classes, seed),
        _Synthetic(test_size, size, num_classes, seed + 1),
        num_classes=num_classes,
        image_size=size,
        has_accuracy=False,
    )


# Directories of the standard library that are not its own source: installed packages and the
# test suites (whose data files and generated cases would dominate the sample).
_STDLIB_SKIP = frozenset({"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"})


def _digest(relative: str) -> bytes:
    return hashlib.sha256(relative.encode("utf-8")).digest()


def stdlib_files(root: str | Path | None = None, max_bytes: int = 4_000_000) -> list[str]:
    """The standard library's ``*.py`` files the corpus reads, as sorted ``/``-separated paths
    relative to ``root`` (default: the running interpreter's ``sysconfig`` stdlib directory).

    Files are taken in the order of a SHA-256 of their relative path, each whole, while the total
    stays within ``max_bytes``: a fixed sample spread over the whole library rather than its
    first modules in alphabetical order.
    """
    root = Path(root) if root is not None else Path(sysconfig.get_paths()["stdlib"])
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: no such directory — the standard library's sources are needed")
    relative = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _STDLIB_SKIP)
        base = Path(folder).relative_to(root)
        relative += [(base / n).as_posix() for n in names if n.endswith(".py")]
    chosen, total = [], 0
    for path in sorted(relative, key=_digest):
        size = (root / path).stat().st_size
        if total + size <= max_bytes:
            chosen.append(path)
            total += size
    return sorted(chosen)


def is_validation_file(relative: str, validation_fraction: float) -> bool:
    """Whether the file at ``relative`` belongs to the validation split: a fixed hash of the path,
    so the split is the same on every machine and a file is never in both splits."""
    return int.from_bytes(_digest(relative)[8:16], "big") < validation_fraction * 2**64


class TokenWindows(Dataset):
    """Non-overlapping windows of ``seq_len`` tokens over ``tokens`` (a 1-D uint8 tensor): example
    ``i`` is ``{"input_ids": tokens[i*T : i*T+T], "labels": tokens[i*T+1 : i*T+T+1]}`` as long
    tensors, the labels the inputs shifted by one position."""

    def __init__(self, tokens: torch.Tensor, seq_len: int):
        self.tokens, self.seq_len = tokens, seq_len
        self.length = max(len(tokens) - 1, 0) // seq_len

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        if not -self.length <= index < self.length:
            raise IndexError(index)
        start = (index % self.length) * self.seq_len
        window = self.tokens[start : start + self.seq_len + 1].long()
        return {"input_ids": window[:-1], "labels": window[1:]}


def stdlib_text(
    seq_len: int = 128, max_bytes: int = 4_000_000, validation_fraction: float = 0.1, root: str | Path | None = None
) -> DataSplits:
    """A character-level corpus of Python source: the standard library's own ``*.py`` files.

    Read from the running interpreter's installation (``root`` overrides it), without the test
    suites and installed packages, sampled to at most ``max_bytes`` (:func:`stdlib_files`). The
    tokens are the files' bytes (vocabulary 0 to 255, the same on every machine). A file goes
    to validation by a fixed hash of its path (:func:`is_validation_file`, about
    ``validation_fraction`` of them), else to train; each split is its files joined in sorted
    order, cut into non-overlapping windows of ``seq_len`` (:class:`TokenWindows`). The sources
    differ between Python versions, so the splits' sizes do too.
    """
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
        raise ValueError(f"seq_len={seq_len!r}: must be a positive integer")
    if not 0 < validation_fraction < 1:
        raise ValueError(f"validation_fraction={validation_fraction!r}: must be between 0 and 1")
    base = Path(root) if root is not None else Path(sysconfig.get_paths()["stdlib"])
    parts: dict[bool, list[bytes]] = {False: [], True: []}
    for relative in stdlib_files(base, max_bytes):
        parts[is_validation_file(relative, validation_fraction)].append((base / relative).read_bytes())
    train, validation = (
        torch.frombuffer(bytearray(b"".join(parts[v])), dtype=torch.uint8)
        if parts[v]
        else torch.zeros(0, dtype=torch.uint8)
        for v in (False, True)
    )
    return DataSplits(
        "stdlib_text",
        TokenWindows(train, seq_len),
        TokenWindows(validation, seq_len),
        num_classes=256,
        image_size=None,
        has_accuracy=False,
        seq_len=seq_len,
    )


def get_dataset(
    name: str,
    root: str | Path | None = None,
    image_size: int | None = None,
    seq_len: int | None = None,
    test_fraction: float | None = None,
) -> DataSplits:
    """The data set ``name`` (one of :func:`algorithms.data.names.dataset_names`); ``root`` is
    needed for ``cifar10``; ``image_size`` is for the image data sets, ``seq_len`` for
    ``stdlib_text``; ``test_fraction`` is the held-out share of ``digits`` (default 0.2)."""
    if test_fraction is not None and name != "digits":
        raise ValueError(f"data {name!r} has its own split: test_fraction={test_fraction} is for 'digits'")
    if name == "stdlib_text":
        if image_size is not None:
            raise ValueError(f"data 'stdlib_text' is text: it takes seq_len, not image_size={image_size}")
        return stdlib_text(seq_len or 128)
    if seq_len is not None:
        raise ValueError(f"data {name!r} holds images: it takes image_size, not seq_len={seq_len}")
    if name == "cifar10":
        if root is None:
            raise ValueError("data 'cifar10' needs its directory: pass the extracted cifar-10-batches-py folder")
        return cifar10(root, image_size)
    if name == "digits":
        return digits(image_size) if test_fraction is None else digits(image_size, test_fraction=test_fraction)
    if name == "synthetic":
        return synthetic(image_size)
    raise ValueError(f"data {name!r} is not known — use one of {', '.join(dataset_names())}")
