"""Reference ResNets: CIFAR ResNet-20/56 (and ResNet-20 with group norm) and ResNet-18/50 for
224-pixel inputs.

The 224-pixel models use torchvision's module names and shapes (``conv1``, ``bn1``,
``layer1.0.downsample.0``, ``fc`` …), so a torchvision ``resnet18``/``resnet50`` state dict
loads with ``model.load_state_dict(state_dict)``; this module does not need torchvision.

The CIFAR models follow He et al. (2016, section 4.2): a 3x3 stem with 16 channels, three
stages of ``n`` basic blocks with 16, 32 and 64 channels (depth ``6n + 2``), global average
pooling and a linear classifier. Where a stage changes shape the shortcut is a 1x1 convolution
with batch norm (the paper's option B), named like torchvision's ``downsample``.
``resnet20_gn`` is ResNet-20 with every batch norm a group norm (Wu and He, 2018), the model on
which methods that act on group norms are measured.

Example::

    >>> import torch
    >>> from algorithms.models import get_model
    >>> model = get_model("resnet20", num_classes=10)
    >>> model(torch.randn(2, 3, 32, 32)).shape
    torch.Size([2, 10])
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

__all__ = [
    "BasicBlock",
    "Bottleneck",
    "ResNet",
    "get_model",
    "group_norm",
    "resnet18",
    "resnet20",
    "resnet20_gn",
    "resnet50",
    "resnet56",
]

Norm = Callable[[int], nn.Module]


def group_norm(channels: int, groups: int = 8) -> nn.GroupNorm:
    """A group norm over ``channels``: ``groups`` groups, or as many as there are channels
    when there are fewer (any of the CIFAR widths 16, 32, 64 splits into 8)."""
    return nn.GroupNorm(min(groups, channels), channels)


def _conv3x3(in_planes: int, out_planes: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=1, bias=False)


def _downsample(in_planes: int, out_planes: int, stride: int, norm: Norm) -> nn.Sequential | None:
    if stride == 1 and in_planes == out_planes:
        return None
    return nn.Sequential(nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride, bias=False), norm(out_planes))


class BasicBlock(nn.Module):
    """Two 3x3 convolutions and an identity (or projection) shortcut."""

    expansion = 1

    def __init__(self, in_planes: int, planes: int, stride: int = 1, norm: Norm = nn.BatchNorm2d):
        super().__init__()
        self.conv1 = _conv3x3(in_planes, planes, stride)
        self.bn1 = norm(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = _conv3x3(planes, planes)
        self.bn2 = norm(planes)
        self.downsample = _downsample(in_planes, planes, stride, norm)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (with the stride, as torchvision's "ResNet v1.5"), 1x1 expand by 4."""

    expansion = 4

    def __init__(self, in_planes: int, planes: int, stride: int = 1, norm: Norm = nn.BatchNorm2d):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, kernel_size=1, bias=False)
        self.bn1 = norm(planes)
        self.conv2 = _conv3x3(planes, planes, stride)
        self.bn2 = norm(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, kernel_size=1, bias=False)
        self.bn3 = norm(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = _downsample(in_planes, planes * 4, stride, norm)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    """A residual network of ``block`` stages.

    Args:
        block: :class:`BasicBlock` or :class:`Bottleneck`.
        layers: blocks per stage.
        widths: base channels per stage (the block's output is ``width * block.expansion``).
        num_classes: outputs of the final ``fc`` layer.
        stem: ``"imagenet"`` (7x7 stride-2 convolution and max pooling, for 224-pixel inputs)
            or ``"cifar"`` (one 3x3 convolution, for 32-pixel inputs).
        norm: builds each normalization layer from its channels (default ``nn.BatchNorm2d``;
            :func:`group_norm` for ``resnet20_gn``). The names stay ``bn1``, ``bn2`` ….
    """

    def __init__(
        self,
        block: type[BasicBlock] | type[Bottleneck],
        layers: list[int],
        widths: list[int],
        num_classes: int = 1000,
        stem: str = "imagenet",
        norm: Norm = nn.BatchNorm2d,
    ):
        super().__init__()
        if stem not in ("imagenet", "cifar"):
            raise ValueError(f"stem={stem!r}: use 'imagenet' or 'cifar'")
        self.in_planes = widths[0] if stem == "cifar" else 64
        if stem == "imagenet":
            self.conv1 = nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=False)
        else:
            self.conv1 = _conv3x3(3, self.in_planes)
        self.bn1 = norm(self.in_planes)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1) if stem == "imagenet" else nn.Identity()
        for i, (blocks, width) in enumerate(zip(layers, widths, strict=True)):
            stride = 1 if i == 0 else 2
            stage = []
            for j in range(blocks):
                stage.append(block(self.in_planes, width, stride if j == 0 else 1, norm))
                self.in_planes = width * block.expansion
            self.add_module(f"layer{i + 1}", nn.Sequential(*stage))
        self.num_stages = len(layers)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(self.in_planes, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        for i in range(self.num_stages):
            x = getattr(self, f"layer{i + 1}")(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet20(num_classes: int = 10) -> ResNet:
    """CIFAR ResNet-20 (n = 3): about 0.27 M parameters."""
    return ResNet(BasicBlock, [3, 3, 3], [16, 32, 64], num_classes, stem="cifar")


def resnet20_gn(num_classes: int = 10) -> ResNet:
    """CIFAR ResNet-20 with a group norm of 8 groups (:func:`group_norm`) wherever ResNet-20 has a
    batch norm: the same parameter count, and no running statistics."""
    return ResNet(BasicBlock, [3, 3, 3], [16, 32, 64], num_classes, stem="cifar", norm=group_norm)


def resnet56(num_classes: int = 10) -> ResNet:
    """CIFAR ResNet-56 (n = 9): about 0.86 M parameters."""
    return ResNet(BasicBlock, [9, 9, 9], [16, 32, 64], num_classes, stem="cifar")


def resnet18(num_classes: int = 1000) -> ResNet:
    """ResNet-18 for 224-pixel inputs, torchvision-compatible (11.7 M parameters at 1000 classes)."""
    return ResNet(BasicBlock, [2, 2, 2, 2], [64, 128, 256, 512], num_classes)


def resnet50(num_classes: int = 1000) -> ResNet:
    """ResNet-50 for 224-pixel inputs, torchvision-compatible (25.6 M parameters at 1000 classes)."""
    return ResNet(Bottleneck, [3, 4, 6, 3], [64, 128, 256, 512], num_classes)


def get_model(name: str, num_classes: int) -> nn.Module:
    """:func:`algorithms.models.get_model`, kept here for callers that import it from this module."""
    from . import get_model as get_any_model

    return get_any_model(name, num_classes)
