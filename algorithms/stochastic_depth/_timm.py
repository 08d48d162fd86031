"""Stochastic Depth on timm's ResNet blocks (``timm.models.resnet``, timm 1.0).

The registry imports this module only when a model holds those blocks, so the library needs no
timm otherwise; without timm (pytest collecting the doctests) it defines nothing. timm's blocks
apply their own ``drop_block``, anti-aliasing (``aa``), squeeze-excite (``se``) and ``drop_path``
inside the branch, as their forward does, and end with ``act2`` (``BasicBlock``) or ``act3``
(``Bottleneck``).
"""

from __future__ import annotations

import torch

from .stochastic_depth import StochasticResidual

try:
    from timm.models import resnet
except ModuleNotFoundError:
    resnet = None

__all__ = ["StochasticTimmBasicBlock", "StochasticTimmBottleneck"]


def _tail(block: StochasticResidual, x: torch.Tensor) -> torch.Tensor:
    """What both of timm's blocks do after their last norm: squeeze-excite and drop path, if any."""
    if block.se is not None:
        x = block.se(x)
    if block.drop_path is not None:
        x = block.drop_path(x)
    return x


if resnet is not None:

    class StochasticTimmBasicBlock(StochasticResidual, resnet.BasicBlock):
        """timm's ``BasicBlock`` whose branch is dropped at random in training."""

        def branch(self, x: torch.Tensor) -> torch.Tensor:
            x = self.aa(self.act1(self.drop_block(self.bn1(self.conv1(x)))))
            return _tail(self, self.bn2(self.conv2(x)))

        def activate(self, x: torch.Tensor) -> torch.Tensor:
            return self.act2(x)

    class StochasticTimmBottleneck(StochasticResidual, resnet.Bottleneck):
        """timm's ``Bottleneck`` whose branch is dropped at random in training."""

        def branch(self, x: torch.Tensor) -> torch.Tensor:
            x = self.act1(self.bn1(self.conv1(x)))
            x = self.aa(self.act2(self.drop_block(self.bn2(self.conv2(x)))))
            return _tail(self, self.bn3(self.conv3(x)))

        def activate(self, x: torch.Tensor) -> torch.Tensor:
            return self.act3(x)
