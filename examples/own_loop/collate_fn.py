"""The functional forms inside a DataLoader's collate_fn, as torchvision v2's CutMix is used: any
loop, no driver. The loader yields mixed images and their smoothed soft targets in one call.

Run: python examples/own_loop/collate_fn.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch.utils.data import DataLoader, default_collate

sys.path.insert(0, str(Path(__file__).parent))
from _digits import accuracy, digits, small_cnn  # noqa: E402

import algorithms.functional as cf  # noqa: E402


def cutmix_collate(examples):
    images, labels = default_collate(examples)
    mixed = cf.cutmix_batch(images, labels, alpha=1.0)
    # own_weight: the weight of each image's own label (CutMix's kept area); smoothing as label smoothing's
    targets = cf.mixed_targets(labels, mixed.target_perm, own_weight=mixed.own_weight, num_classes=10, smoothing=0.1)
    return mixed.mixed, targets


torch.manual_seed(0)
train = DataLoader(digits(train=True), batch_size=64, shuffle=True, collate_fn=cutmix_collate)
test = DataLoader(digits(train=False), batch_size=256)
model = small_cnn()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
for _ in range(4):
    model.train()
    for images, targets in train:
        loss = torch.nn.functional.cross_entropy(model(images), targets)  # soft targets: probabilities
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
model.eval()
print(f"test accuracy: {accuracy(model, test):.3f}")
