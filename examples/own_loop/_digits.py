"""What the examples share: scikit-learn's bundled handwritten digits (no download) as 8x8
images, and a small CNN for them."""

from __future__ import annotations

import torch
from sklearn.datasets import load_digits
from torch.utils.data import TensorDataset


def digits(train: bool) -> TensorDataset:
    """The first 1,400 digits (train) or the other 397 (test): images (N, 1, 8, 8) in [0, 1], labels (N,)."""
    data = load_digits()
    images = torch.tensor(data.images, dtype=torch.float32).unsqueeze(1) / 16.0
    labels = torch.tensor(data.target)
    part = slice(0, 1400) if train else slice(1400, None)
    return TensorDataset(images[part], labels[part])


def small_cnn() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 32, 3, padding=1),
        torch.nn.BatchNorm2d(32),
        torch.nn.ReLU(),
        torch.nn.Conv2d(32, 64, 3, padding=1, stride=2),
        torch.nn.BatchNorm2d(64),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(64, 10),
    )


@torch.no_grad()
def accuracy(model: torch.nn.Module, loader) -> float:
    correct = total = 0
    for images, labels in loader:
        correct += (model(images).argmax(1) == labels).sum().item()
        total += len(labels)
    return correct / total
