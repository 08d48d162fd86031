"""Factorize: replace wide convolutions and linear layers by two thinner ones through a low-rank
latent space, initialised from the truncated SVD of the original weights, to save multiply-adds.

Composer's Factorize method; the low-rank factorization of convolutional layers follows
Zhang, Zou, He and Sun, "Accelerating Very Deep Convolutional Networks for Classification and
Detection", IEEE TPAMI 2016.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from ..core.algorithm import Algorithm
from ..core.event import Event
from ..core.parameters import Boolean, FractionOrCount, Integer, Parameters, Rule
from ..core.state import State
from ..surgery import recording_replacements, replace_module_classes

__all__ = [
    "FactorizedConv2d",
    "FactorizedLinear",
    "Factorize",
    "apply_factorization",
    "factorizing_could_speedup",
    "latent_size",
    "low_rank_factors",
]

PARAMETERS = Parameters(
    Rule(
        lambda factorize_convs, factorize_linears: factorize_convs or factorize_linears,
        "Factorize would replace nothing; set one of them",
    ),
    factorize_convs=Boolean(note="Factorize torch.nn.Conv2d modules into FactorizedConv2d."),
    factorize_linears=Boolean(note="Factorize torch.nn.Linear modules into FactorizedLinear."),
    min_channels=Integer(low=0, note="Leave convolutions with fewer input or output channels alone."),
    latent_channels=FractionOrCount(
        of="the smaller width",
        note="A factorized convolution's latent channels: a fraction of the smaller width, or a count.",
    ),
    min_features=Integer(low=0, note="Leave linear layers with fewer input or output features alone."),
    latent_features=FractionOrCount(
        of="the smaller width",
        note="A factorized linear layer's latent features: a fraction of the smaller width, or a count.",
    ),
)


def apply_factorization(
    model: nn.Module,
    factorize_convs: bool = True,
    factorize_linears: bool = True,
    min_channels: int = 512,
    latent_channels: int | float = 0.25,
    min_features: int = 512,
    latent_features: int | float = 0.25,
    optimizers: torch.optim.Optimizer | Any | None = None,
) -> nn.Module:
    """Replace wide convolutions and linear layers by factorized pairs, in place, as
    ``composer.functional.apply_factorization``.

    A :class:`torch.nn.Conv2d` (``groups=1``) with at least ``min_channels`` input and output
    channels becomes a :class:`FactorizedConv2d`: a convolution of the same kernel, stride and
    padding to ``latent_channels`` channels, then a 1 x 1 convolution to the output channels. A
    :class:`torch.nn.Linear` with at least ``min_features`` input and output features becomes a
    :class:`FactorizedLinear`: two linear layers through ``latent_features`` features. A module is
    replaced only where the pair needs fewer multiply-adds than the original
    (:func:`factorizing_could_speedup`). Each pair is initialised from the truncated SVD of the
    original's weight, the best approximation of that rank (Eckart–Young); the bias moves to the
    second module.

    Args:
        model: the model to change, in place.
        factorize_convs: factorize convolutions.
        factorize_linears: factorize linear layers.
        min_channels: leave convolutions with fewer input or output channels alone, ``>= 0``.
        latent_channels: the latent channels of a factorized convolution: a fraction in ``(0, 1)``
            of ``min(in_channels, out_channels)`` (at least 1), or a count ``>= 1``.
        min_features: leave linear layers with fewer input or output features alone, ``>= 0``.
        latent_features: the latent features of a factorized linear layer: a fraction in
            ``(0, 1)`` of ``min(in_features, out_features)`` (at least 1), or a count ``>= 1``.
        optimizers: optimizers that already hold the model's parameters; they are given the
            replacements' parameters instead.

    Returns:
        ``model``, changed in place.

    Example::

        >>> import torch
        >>> from algorithms.functional import apply_factorization
        >>> from algorithms.models import resnet20
        >>> model = apply_factorization(resnet20(), min_channels=32, latent_channels=0.25)
        >>> model.layer3[1].conv1
        FactorizedConv2d(
          (module0): Conv2d(64, 16, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), bias=False)
          (module1): Conv2d(16, 64, kernel_size=(1, 1), stride=(1, 1), bias=False)
        )
    """
    PARAMETERS.check(
        factorize_convs=factorize_convs,
        factorize_linears=factorize_linears,
        min_channels=min_channels,
        latent_channels=latent_channels,
        min_features=min_features,
        latent_features=latent_features,
    )

    def factorize_conv(conv: nn.Conv2d, index: int) -> nn.Module | None:
        wide = min(conv.in_channels, conv.out_channels) >= min_channels
        if not (wide and factorizing_could_speedup(conv, latent_channels)):
            return None
        return FactorizedConv2d.from_conv2d(conv, latent_channels)

    def factorize_linear(linear: nn.Linear, index: int) -> nn.Module | None:
        wide = min(linear.in_features, linear.out_features) >= min_features
        if not (wide and factorizing_could_speedup(linear, latent_features)):
            return None
        return FactorizedLinear.from_linear(linear, latent_features)

    policies: dict[type, Any] = {}
    if factorize_convs:
        policies[nn.Conv2d] = factorize_conv
    if factorize_linears:
        policies[nn.Linear] = factorize_linear
    replace_module_classes(model, policies, optimizers=optimizers, method="Factorize")
    return model


def latent_size(latent: int | float, in_size: int, out_size: int) -> int:
    """A latent size as a count: a fraction in ``(0, 1)`` of ``min(in_size, out_size)``, rounded
    down but at least 1, or a count ``>= 1`` as it is (Composer's rule)."""
    if latent < 1:
        return max(1, int(latent * min(in_size, out_size)))
    return int(latent)


def factorizing_could_speedup(module: nn.Module, latent: int | float) -> bool:
    """Whether a factorization through ``latent`` needs fewer multiply-adds than ``module``.

    Per output position a convolution (``groups=1``) with fan-in ``F = in_channels * kH * kW``
    and ``O`` output channels costs ``F * O``; the pair costs ``r * (F + O)`` for ``r`` latent
    channels, so it saves work iff ``r * (F + O) < F * O`` (a linear layer: ``F = in_features``).
    Grouped convolutions and other modules are never factorized.
    """
    if isinstance(module, nn.Conv2d):
        if module.groups != 1:
            return False
        fan_in, out = module.in_channels * math.prod(module.kernel_size), module.out_channels
        rank = latent_size(latent, module.in_channels, module.out_channels)
    elif isinstance(module, nn.Linear):
        fan_in, out = module.in_features, module.out_features
        rank = latent_size(latent, fan_in, out)
    else:
        return False
    return rank * (fan_in + out) < fan_in * out


def low_rank_factors(matrix: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(first, second)`` of shapes ``(rank, n)`` and ``(m, rank)`` whose product ``second @ first``
    is the truncated SVD of ``matrix`` ``(m, n)``: ``U_r S_r V_r^T``, the closest matrix of that rank
    in the Frobenius and spectral norms (Eckart–Young). ``sqrt(S_r)`` goes to each factor, so the
    two are of the same scale. Computed in float64, returned in the matrix's dtype."""
    u, s, vh = torch.linalg.svd(matrix.detach().double(), full_matrices=False)
    root = s[:rank].sqrt()
    first = root[:, None] * vh[:rank]
    second = u[:, :rank] * root[None, :]
    return first.to(matrix.dtype), second.to(matrix.dtype)


class FactorizedLinear(nn.Module):
    """``module1(module0(x))``: ``module0`` maps ``in_features`` to ``latent_features`` (no bias),
    ``module1`` maps those to ``out_features`` (with the bias, if any). No nonlinearity between.

    Args:
        in_features: the input features.
        out_features: the output features.
        latent_features: a fraction in ``(0, 1)`` of ``min(in_features, out_features)`` or a
            count from 1 to ``min(in_features, out_features)`` (full rank, exact but no cheaper).
        bias: give ``module1`` a bias.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        latent_features: int | float = 0.25,
        bias: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ):
        super().__init__()
        PARAMETERS["latent_features"].check("latent_features", latent_features)
        rank = latent_size(latent_features, in_features, out_features)
        if rank > min(in_features, out_features):
            raise ValueError(
                f"latent_features={latent_features!r}: at most min(in_features, out_features) = "
                f"{min(in_features, out_features)}"
            )
        self.module0 = nn.Linear(in_features, rank, bias=False, device=device, dtype=dtype)
        self.module1 = nn.Linear(rank, out_features, bias=bias, device=device, dtype=dtype)

    @property
    def in_features(self) -> int:
        return self.module0.in_features

    @property
    def out_features(self) -> int:
        return self.module1.out_features

    @property
    def latent_features(self) -> int:
        return self.module0.out_features

    @classmethod
    def from_linear(cls, linear: nn.Linear, latent_features: int | float = 0.25) -> FactorizedLinear:
        """The factorization of ``linear`` whose product is the truncated SVD of its weight; its bias
        (a copy) is ``module1``'s."""
        weight = linear.weight
        new = cls(
            linear.in_features,
            linear.out_features,
            latent_features,
            bias=linear.bias is not None,
            device=weight.device,
            dtype=weight.dtype,
        )
        first, second = low_rank_factors(weight, new.latent_features)
        with torch.no_grad():
            new.module0.weight.copy_(first)
            new.module1.weight.copy_(second)
            if linear.bias is not None:
                new.module1.bias.copy_(linear.bias)
        return new

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return self.module1(self.module0(input))


class FactorizedConv2d(nn.Module):
    """``module1(module0(x))``: ``module0`` is a convolution of the original's kernel, stride,
    padding, dilation and padding mode to ``latent_channels`` channels (no bias), ``module1`` a
    1 x 1 convolution to ``out_channels`` (with the bias, if any). No nonlinearity between; the
    output has the original's shape.

    Args:
        in_channels: the input channels.
        out_channels: the output channels.
        kernel_size: the first convolution's kernel.
        latent_channels: a fraction in ``(0, 1)`` of ``min(in_channels, out_channels)`` or a count
            from 1 to ``min(out_channels, in_channels * kH * kW)`` (full rank, exact).
        stride, padding, dilation, padding_mode: the first convolution's, as in ``torch.nn.Conv2d``.
        bias: give ``module1`` a bias.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | tuple[int, int],
        latent_channels: int | float = 0.25,
        stride: int | tuple[int, int] = 1,
        padding: int | tuple[int, int] | str = 0,
        dilation: int | tuple[int, int] = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ):
        super().__init__()
        PARAMETERS["latent_channels"].check("latent_channels", latent_channels)
        kernel = (kernel_size, kernel_size) if isinstance(kernel_size, int) else tuple(kernel_size)
        rank = latent_size(latent_channels, in_channels, out_channels)
        full = min(out_channels, in_channels * math.prod(kernel))
        if rank > full:
            raise ValueError(
                f"latent_channels={latent_channels!r}: at most min(out_channels, in_channels * kH * kW) = {full}"
            )
        self.module0 = nn.Conv2d(
            in_channels,
            rank,
            kernel,
            stride=stride,
            padding=padding,
            dilation=dilation,
            bias=False,
            padding_mode=padding_mode,
            device=device,
            dtype=dtype,
        )
        self.module1 = nn.Conv2d(rank, out_channels, 1, bias=bias, device=device, dtype=dtype)

    @property
    def in_channels(self) -> int:
        return self.module0.in_channels

    @property
    def out_channels(self) -> int:
        return self.module1.out_channels

    @property
    def latent_channels(self) -> int:
        return self.module0.out_channels

    @classmethod
    def from_conv2d(cls, conv: nn.Conv2d, latent_channels: int | float = 0.25) -> FactorizedConv2d:
        """The factorization of ``conv`` (``groups=1``) whose product is the truncated SVD of its
        weight as an ``(out_channels, in_channels * kH * kW)`` matrix; its bias (a copy) is
        ``module1``'s."""
        if conv.groups != 1:
            raise ValueError(f"conv: groups={conv.groups}; only convolutions with groups=1 are factorized")
        weight = conv.weight
        new = cls(
            conv.in_channels,
            conv.out_channels,
            conv.kernel_size,
            latent_channels,
            stride=conv.stride,
            padding=conv.padding,
            dilation=conv.dilation,
            bias=conv.bias is not None,
            padding_mode=conv.padding_mode,
            device=weight.device,
            dtype=weight.dtype,
        )
        first, second = low_rank_factors(weight.reshape(weight.shape[0], -1), new.latent_channels)
        with torch.no_grad():
            new.module0.weight.copy_(first.reshape(new.module0.weight.shape))
            new.module1.weight.copy_(second.reshape(new.module1.weight.shape))
            if conv.bias is not None:
                new.module1.bias.copy_(conv.bias)
        return new

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return self.module1(self.module0(input))


class Factorize(Algorithm):
    """Factorize as a training-loop algorithm: at ``Event.INIT``, before the Trainer wraps the model
    or builds its optimizer, :func:`apply_factorization` replaces the wide convolutions and linear
    layers whose factorization saves multiply-adds (optimizers given to the Trainer are updated).

    Args:
        factorize_convs: factorize ``torch.nn.Conv2d`` modules into :class:`FactorizedConv2d`.
        factorize_linears: factorize ``torch.nn.Linear`` modules into :class:`FactorizedLinear`.
        min_channels: leave convolutions with fewer input or output channels alone.
        latent_channels: a factorized convolution's latent channels: a fraction in ``(0, 1)`` of
            the smaller of its input and output channels, or a count.
        min_features: leave linear layers with fewer input or output features alone.
        latent_features: a factorized linear layer's latent features: a fraction in ``(0, 1)``
            of the smaller of its input and output features, or a count.

    It counts ``modules_replaced``, the convolutions and linear layers it factorized; none means it did not act.

    Example::

        >>> import torch
        >>> from algorithms import Factorize
        >>> from algorithms.core import Trainer
        >>> from algorithms.models import resnet20
        >>> batches = [(torch.randn(4, 3, 16, 16), torch.randint(0, 10, (4,)))]
        >>> Trainer(resnet20(), batches, "1ep", algorithms=[Factorize(min_channels=32)], seed=0).fit()
    """

    activity = {"modules_replaced": "modules replaced by factorized ones"}

    def __init__(
        self,
        factorize_convs: bool = True,
        factorize_linears: bool = True,
        min_channels: int = 512,
        latent_channels: int | float = 0.25,
        min_features: int = 512,
        latent_features: int | float = 0.25,
    ):
        PARAMETERS.check(
            factorize_convs=factorize_convs,
            factorize_linears=factorize_linears,
            min_channels=min_channels,
            latent_channels=latent_channels,
            min_features=min_features,
            latent_features=latent_features,
        )
        self.factorize_convs = factorize_convs
        self.factorize_linears = factorize_linears
        self.min_channels = min_channels
        self.latent_channels = latent_channels
        self.min_features = min_features
        self.latent_features = latent_features

    def match(self, event: Event, state: State) -> bool:
        return event is Event.INIT

    def apply(self, event: Event, state: State, logger: Any | None = None) -> None:
        with recording_replacements() as replaced:
            apply_factorization(
                state.model,
                factorize_convs=self.factorize_convs,
                factorize_linears=self.factorize_linears,
                min_channels=self.min_channels,
                latent_channels=self.latent_channels,
                min_features=self.min_features,
                latent_features=self.latent_features,
                optimizers=state.optimizers,
            )
        self.report(logger, "modules_replaced", len(replaced))
