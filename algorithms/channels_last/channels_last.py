"""Channels Last: store the model's 4-D weights with the channels innermost (NHWC), the layout
that GPU convolution kernels (Tensor Cores in particular) read fastest.

PyTorch's tutorial "(beta) Channels Last Memory Format in PyTorch" describes the format.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..core.algorithm import Algorithm
from ..core.event import Event
from ..core.parameters import Parameters
from ..core.state import State

__all__ = ["ChannelsLast", "apply_channels_last"]

PARAMETERS = Parameters()  # no hyperparameters


def apply_channels_last(model: nn.Module) -> nn.Module:
    """Convert the model's 4-D parameters and buffers to ``torch.channels_last``, in place, as
    ``composer.functional.apply_channels_last``: ``model.to(memory_format=torch.channels_last)``.

    No module is replaced, so this is no surgery and does not go through
    :func:`algorithms.surgery.replace_module_classes`: only the memory layout of each 4-D tensor
    changes (a ``(N, C, H, W)`` tensor's strides become those of ``(N, H, W, C)``), not its
    shape, values, dtype or device. The parameters stay the same ``Parameter`` objects, so an
    optimizer built before holds them still. A convolution given a channels-last weight returns
    a channels-last output, so later layers (and the inputs, which are left as they are) follow
    without a conversion of the batch.

    Args:
        model: the model to change, in place; one with a 5-D parameter or buffer (a
            ``Conv3d``) is refused before anything changes, as ``channels_last`` is a 4-D layout.

    Returns:
        ``model``, changed in place.

    Example::

        >>> import torch
        >>> from algorithms.functional import apply_channels_last
        >>> from algorithms.models import resnet20
        >>> model = apply_channels_last(resnet20())
        >>> model.conv1.weight.is_contiguous(memory_format=torch.channels_last)
        True
    """
    if not isinstance(model, nn.Module):
        raise ValueError(f"model: must be a torch.nn.Module, got {type(model).__name__}")
    five_d = next((name for name, t in [*model.named_parameters(), *model.named_buffers()] if t.dim() == 5), None)
    if five_d is not None:
        raise ValueError(
            f"model: {five_d} is 5-D, and channels_last is a layout of 4-D tensors; convert a "
            "3-D convolutional model with model.to(memory_format=torch.channels_last_3d)"
        )
    return model.to(memory_format=torch.channels_last)


class ChannelsLast(Algorithm):
    """Channels Last as a training-loop algorithm: at ``Event.INIT``, before the Trainer wraps the
    model for a parallel mode, :func:`apply_channels_last` converts the model's 4-D parameters
    and buffers to ``torch.channels_last``. The batches are left as they are, as in Composer.
    It has no hyperparameters.

    It counts ``tensors_converted``, the 4-D parameters and buffers that were not channels-last
    before; none (a model without them) means it did not act.

    Example::

        >>> import torch
        >>> from algorithms import ChannelsLast
        >>> from algorithms.core import Trainer
        >>> from algorithms.models import resnet20
        >>> batches = [(torch.randn(4, 3, 16, 16), torch.randint(0, 10, (4,)))]
        >>> Trainer(resnet20(), batches, "1ep", algorithms=[ChannelsLast()], seed=0).fit()
    """

    activity = {"tensors_converted": "4-D weights and buffers converted to channels-last"}

    def match(self, event: Event, state: State) -> bool:
        return event is Event.INIT

    def apply(self, event: Event, state: State, logger: Any | None = None) -> None:
        tensors = [*state.model.parameters(), *state.model.buffers()]
        before = [t.dim() == 4 and not t.is_contiguous(memory_format=torch.channels_last) for t in tensors]
        apply_channels_last(state.model)
        self.report(logger, "tensors_converted", sum(before))
