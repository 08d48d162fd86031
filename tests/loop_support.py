"""What the loop tests share (the Trainer's accumulation, a loop of one's own, the Lightning
callback): small random images, a small convolutional model, and its optimizer."""

from __future__ import annotations

import torch
from torch.utils.data import TensorDataset


def image_data(n: int = 48, seed: int = 0) -> TensorDataset:
    """``n`` random 3x8x8 images with labels in 0..3, the same for a seed."""
    g = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(n, 3, 8, 8, generator=g), torch.randint(0, 4, (n,), generator=g))


def conv_net(seed: int = 5) -> torch.nn.Sequential:
    """Two convolutions (the first followed by batch norm), pooling and a linear layer: 4 classes,
    the same weights for a seed."""
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1),
        torch.nn.BatchNorm2d(16),
        torch.nn.ReLU(),
        torch.nn.Conv2d(16, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(16, 4),
    )


def sgd(params, lr: float = 0.05) -> torch.optim.SGD:
    return torch.optim.SGD(params, lr=lr, momentum=0.9)
