"""Stochastic Depth on torchvision's ResNet blocks (``torchvision.models.resnet``).

The registry imports this module only when a model holds those blocks, so the library needs no
torchvision otherwise; without torchvision (pytest collecting the doctests) it defines nothing.
"""

from __future__ import annotations

import torch

from .stochastic_depth import StochasticResidual

try:
    from torchvision.models import resnet
except ModuleNotFoundError:
    resnet = None

__all__ = ["StochasticTorchvisionBasicBlock", "StochasticTorchvisionBottleneck"]

if resnet is not None:

    class StochasticTorchvisionBasicBlock(StochasticResidual, resnet.BasicBlock):
        """torchvision's ``BasicBlock`` whose branch is dropped at random in training; its shortcut
        (``downsample``) and final ``relu`` are the block's own."""

        def branch(self, x: torch.Tensor) -> torch.Tensor:
            return self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x)))))

    class StochasticTorchvisionBottleneck(StochasticResidual, resnet.Bottleneck):
        """torchvision's ``Bottleneck`` whose branch is dropped at random in training."""

        def branch(self, x: torch.Tensor) -> torch.Tensor:
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            return self.bn3(self.conv3(out))
