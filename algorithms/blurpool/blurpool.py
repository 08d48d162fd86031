"""BlurPool: low-pass filter before every strided convolution and max-pool, so downsampling aliases less.

Zhang, "Making Convolutional Networks Shift-Invariant Again", ICML 2019.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..core.algorithm import Algorithm
from ..core.event import Event
from ..core.parameters import Boolean, Integer, Parameters, Rule
from ..core.state import State
from ..surgery import recording_replacements, replace_module_classes

__all__ = ["BlurConv2d", "BlurMaxPool2d", "BlurPool", "apply_blurpool", "blur_2d", "blur_filter"]

PARAMETERS = Parameters(
    Rule(
        lambda replace_convs, replace_maxpools: replace_convs or replace_maxpools,
        "BlurPool would replace nothing; set one of them",
    ),
    replace_convs=Boolean(note="Replace strided convolutions with BlurConv2d."),
    replace_maxpools=Boolean(note="Replace max-pools with BlurMaxPool2d."),
    blur_first=Boolean(
        note="Blur before the strided convolution; False convolves densely, then blurs, as the paper does."
    ),
    min_channels=Integer(low=0, note="Leave convolutions with fewer input channels alone."),
)


def apply_blurpool(
    model: nn.Module,
    replace_convs: bool = True,
    replace_maxpools: bool = True,
    blur_first: bool = True,
    min_channels: int = 16,
    optimizers: torch.optim.Optimizer | Any | None = None,
) -> nn.Module:
    """Put a fixed blur in front of the model's strided convolutions and inside its max-pools, in
    place, as ``composer.functional.apply_blurpool``.

    Each :class:`torch.nn.Conv2d` with a stride above 1 (on either axis) and at least
    ``min_channels`` input channels becomes a :class:`BlurConv2d` holding a convolution with the
    original's weights and bias; each :class:`torch.nn.MaxPool2d` becomes a :class:`BlurMaxPool2d`
    with the same window. A convolution that is already a BlurConv2d's own is left alone, so applying
    it twice blurs once.

    Args:
        model: the model to change, in place.
        replace_convs: replace the strided convolutions.
        replace_maxpools: replace the max-pools.
        blur_first: blur a convolution's input, then convolve with its stride (the cost of one blur);
            otherwise convolve with stride 1 and blur the output with the stride, as the paper does
            (about stride² times the convolution's multiply-adds).
        min_channels: leave convolutions with fewer input channels alone (an RGB stem, say), ``>= 0``.
        optimizers: optimizers that already hold the model's parameters; they are given the
            replacements' parameters instead.

    Returns:
        ``model``, changed in place.

    Example::

        >>> import torch
        >>> from algorithms.functional import apply_blurpool
        >>> from algorithms.models import resnet20
        >>> model = apply_blurpool(resnet20())
        >>> type(model.layer2[0].conv1).__name__, model(torch.randn(2, 3, 16, 16)).shape
        ('BlurConv2d', torch.Size([2, 10]))
    """
    PARAMETERS.check(
        replace_convs=replace_convs, replace_maxpools=replace_maxpools, blur_first=blur_first, min_channels=min_channels
    )

    def blur_conv(conv: nn.Conv2d, index: int) -> nn.Module | None:
        strided = max(conv.stride) > 1
        if not strided or conv.in_channels < min_channels or getattr(conv, "_blurpool_own", False):
            return None
        return BlurConv2d.from_conv2d(conv, blur_first=blur_first)

    policies: dict[type, Any] = {}
    if replace_maxpools:
        # A max-pool has no tensors: the surgery helper puts its replacement on the model's device and dtype.
        policies[nn.MaxPool2d] = lambda pool, index: BlurMaxPool2d.from_maxpool2d(pool)
    if replace_convs:
        policies[nn.Conv2d] = blur_conv
    replace_module_classes(model, policies, optimizers=optimizers, method="BlurPool")
    return model


def blur_filter(dtype: torch.dtype = torch.float32, device: torch.device | str | None = None) -> torch.Tensor:
    """The paper's 3 x 3 binomial low-pass filter, ``[1, 2, 1]^T [1, 2, 1] / 16``: it sums to 1."""
    row = torch.tensor([1.0, 2.0, 1.0], dtype=dtype, device=device)
    return torch.outer(row, row) / 16


def blur_2d(input: torch.Tensor, stride: int | tuple[int, int] = 1, filter: torch.Tensor | None = None) -> torch.Tensor:
    """Blur each channel of ``input`` with ``filter`` (default :func:`blur_filter`), then keep every
    ``stride``-th pixel, as ``composer.functional``'s ``blur_2d``.

    The border is padded by reflection, as in the paper's code (replication where a side is one
    pixel), so a constant image stays constant and the output has ``ceil(H / stride)`` rows.

    Args:
        input: a batch ``(N, C, H, W)``; not modified.
        stride: the subsampling step along H and W (an int or a pair).
        filter: ``(kh, kw)``, ``(1, 1, kh, kw)`` or ``(C, 1, kh, kw)``, with odd ``kh`` and ``kw``;
            cross-correlated with each channel on its own.

    Returns:
        The blurred (and subsampled) batch, in the input's dtype and on its device.
    """
    if input.ndim != 4:
        raise ValueError(f"input: blur_2d needs a batch (N, C, H, W), got shape {tuple(input.shape)}")
    channels = input.shape[1]
    if filter is None:
        filter = blur_filter(input.dtype, input.device)
    if filter.ndim == 2:
        filter = filter[None, None]
    if filter.ndim != 4 or filter.shape[1] != 1 or filter.shape[0] not in (1, channels):
        raise ValueError(
            f"filter: needs shape (kh, kw), (1, 1, kh, kw) or ({channels}, 1, kh, kw), got {tuple(filter.shape)}"
        )
    kh, kw = filter.shape[-2:]
    if kh % 2 == 0 or kw % 2 == 0:
        raise ValueError(f"filter: needs odd height and width, got {kh} x {kw}")
    filter = filter.to(dtype=input.dtype).expand(channels, 1, kh, kw)
    pad = (kw // 2, kw // 2, kh // 2, kh // 2)
    mode = "reflect" if input.shape[-2] > kh // 2 and input.shape[-1] > kw // 2 else "replicate"
    return F.conv2d(F.pad(input, pad, mode=mode), filter, stride=stride, groups=channels)


class BlurConv2d(nn.Module):
    """A strided convolution with the paper's blur in front of it (or after it, at stride 1).

    ``blur_first=True``: ``conv(blur_2d(x))``, the convolution keeping its stride.
    ``blur_first=False``: ``blur_2d(conv(x), stride)``, the convolution at stride 1, as in the
    paper. Either way the output has the shape the original convolution's had. The filter is a
    buffer that is not saved in the state dict (it is a constant).
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | tuple[int, int],
        stride: int | tuple[int, int] = 2,
        padding: int | tuple[int, int] | str = 0,
        dilation: int | tuple[int, int] = 1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        blur_first: bool = True,
    ):
        super().__init__()
        self.blur_first = blur_first
        self.blur_stride = 1 if blur_first else stride
        self.conv = nn.Conv2d(
            in_channels,
            out_channels,
            kernel_size,
            stride=stride if blur_first else 1,
            padding=padding,
            dilation=dilation,
            groups=groups,
            bias=bias,
            padding_mode=padding_mode,
        )
        self.conv._blurpool_own = True  # a second apply_blurpool leaves it alone
        blurred = in_channels if blur_first else out_channels
        self.register_buffer("blur_filter", blur_filter()[None, None].repeat(blurred, 1, 1, 1), persistent=False)

    @classmethod
    def from_conv2d(cls, conv: nn.Conv2d, blur_first: bool = True) -> BlurConv2d:
        """A BlurConv2d whose convolution has ``conv``'s shape, settings, weights and bias (copies)."""
        new = cls(
            conv.in_channels,
            conv.out_channels,
            conv.kernel_size,
            stride=conv.stride,
            padding=conv.padding,
            dilation=conv.dilation,
            groups=conv.groups,
            bias=conv.bias is not None,
            padding_mode=conv.padding_mode,
            blur_first=blur_first,
        )
        with torch.no_grad():
            new.conv.weight.copy_(conv.weight)
            if conv.bias is not None:
                new.conv.bias.copy_(conv.bias)
        return new

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if self.blur_first:
            return self.conv(blur_2d(input, filter=self.blur_filter))
        return blur_2d(self.conv(input), stride=self.blur_stride, filter=self.blur_filter)

    def extra_repr(self) -> str:
        return f"blur_first={self.blur_first}"


class BlurMaxPool2d(nn.Module):
    """Max-pooling with the paper's blur between the max and the subsampling (its MaxBlurPool):
    ``blur_2d(max_pool2d(x, kernel_size, stride=1), stride)``, the window's padding, dilation
    and ceil mode kept. The output has the shape :class:`torch.nn.MaxPool2d`'s has for the same
    arguments; in ceil mode its last row or column is then the blurred maximum of a window that
    the input's edge cuts, as MaxPool2d's is that window's maximum."""

    def __init__(
        self,
        kernel_size: int | tuple[int, int],
        stride: int | tuple[int, int] | None = None,
        padding: int | tuple[int, int] = 0,
        dilation: int | tuple[int, int] = 1,
        ceil_mode: bool = False,
    ):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = kernel_size if stride is None else stride
        self.padding = padding
        self.dilation = dilation
        self.ceil_mode = ceil_mode
        self.register_buffer("blur_filter", blur_filter()[None, None], persistent=False)

    @classmethod
    def from_maxpool2d(cls, pool: nn.MaxPool2d) -> BlurMaxPool2d:
        """A BlurMaxPool2d with ``pool``'s window, stride, padding, dilation and ceil mode."""
        return cls(pool.kernel_size, pool.stride, pool.padding, pool.dilation, pool.ceil_mode)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        extra = self._ceil_mode_extra(input.shape[-2:]) if self.ceil_mode else (0, 0)
        if any(extra):
            # ceil mode's last, partial windows: the input goes on below and to the right as -inf,
            # which no maximum takes (each such window starts inside the input or its left padding)
            input = F.pad(input, (0, extra[1], 0, extra[0]), value=float("-inf"))
        maxima = F.max_pool2d(input, self.kernel_size, stride=1, padding=self.padding, dilation=self.dilation)
        return blur_2d(maxima, stride=self.stride, filter=self.blur_filter)

    def _ceil_mode_extra(self, size: torch.Size) -> tuple[int, int]:
        """Per axis, how many maxima past the last full window ceil mode needs. torch's MaxPool2d gives
        ``ceil((L + 2p - d(k - 1) - 1) / s) + 1`` outputs, but not a last one that would start past
        the input and its left padding; the stride-1 maxima must reach where the last one starts."""
        kernel, stride, padding, dilation = (
            _pair(v) for v in (self.kernel_size, self.stride, self.padding, self.dilation)
        )
        extra = []
        for axis in (0, 1):
            # the maxima of the full windows at stride 1, and where ceil mode's last window starts
            span = size[axis] + 2 * padding[axis] - dilation[axis] * (kernel[axis] - 1)
            last = -(-(span - 1) // stride[axis]) * stride[axis]
            extra.append(last + 1 - span if last < size[axis] + padding[axis] else 0)
        return extra[0], extra[1]

    def extra_repr(self) -> str:
        return (
            f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
            f"dilation={self.dilation}, ceil_mode={self.ceil_mode}"
        )


def _pair(value: int | tuple[int, int]) -> tuple[int, int]:
    return (value, value) if isinstance(value, int) else (int(value[0]), int(value[1]))


class BlurPool(Algorithm):
    """BlurPool as a training-loop algorithm: at ``Event.INIT``, before the Trainer wraps the model
    or builds its optimizer, :func:`apply_blurpool` blurs the model's strided convolutions and
    max-pools (optimizers given to the Trainer are updated).

    Args:
        replace_convs: replace strided convolutions with :class:`BlurConv2d`.
        replace_maxpools: replace max-pools with :class:`BlurMaxPool2d`.
        blur_first: blur before the (strided) convolution; otherwise convolve at stride 1 and blur
            after, as the paper does, at about stride² times the convolution's cost.
        min_channels: leave convolutions with fewer input channels alone.

    It counts ``modules_replaced``, the convolutions and max pools it replaced; none means it did not act.

    Example::

        >>> import torch
        >>> from algorithms import BlurPool
        >>> from algorithms.core import Trainer
        >>> from algorithms.models import resnet20
        >>> batches = [(torch.randn(4, 3, 16, 16), torch.randint(0, 10, (4,)))]
        >>> Trainer(resnet20(), batches, "1ep", algorithms=[BlurPool()], seed=0).fit()
    """

    activity = {"modules_replaced": "modules replaced by blurred ones"}

    def __init__(
        self, replace_convs: bool = True, replace_maxpools: bool = True, blur_first: bool = True, min_channels: int = 16
    ):
        PARAMETERS.check(
            replace_convs=replace_convs,
            replace_maxpools=replace_maxpools,
            blur_first=blur_first,
            min_channels=min_channels,
        )
        self.replace_convs = replace_convs
        self.replace_maxpools = replace_maxpools
        self.blur_first = blur_first
        self.min_channels = min_channels

    def match(self, event: Event, state: State) -> bool:
        return event is Event.INIT

    def apply(self, event: Event, state: State, logger: Any | None = None) -> None:
        with recording_replacements() as replaced:
            apply_blurpool(
                state.model,
                replace_convs=self.replace_convs,
                replace_maxpools=self.replace_maxpools,
                blur_first=self.blur_first,
                min_channels=self.min_channels,
                optimizers=state.optimizers,
            )
        self.report(logger, "modules_replaced", len(replaced))
