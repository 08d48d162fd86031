"""Low Precision LayerNorm: layer norms that run in the autocast dtype instead of float32.

Under ``torch.autocast`` on CUDA, ``layer_norm`` is on the list of operations autocast runs in
float32, so every layer norm casts its half-precision input up and its output stays float32 (on
the CPU it runs in its input's dtype, and a float32 residual stream keeps it in float32).
:class:`LPLayerNorm` casts its input, weight and bias to the autocast dtype and runs there.
Composer's ``LowPrecisionLayerNorm`` is the model for this method.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.nn.functional as F
from torch import nn

from .._low_precision import AUTOCAST_PRECISIONS, LowPrecisionNorm
from ..core.algorithm import warn_from_callers_line
from ..core.options import PRECISIONS
from ..core.parameters import Parameters
from ..surgery import NoModulesReplacedWarning, class_path, replace_module_classes

__all__ = ["LPLayerNorm", "LPLayerNorm2d", "LowPrecisionLayerNorm", "apply_low_precision_layernorm"]

#: The layer norm classes whose forward computes ``nn.LayerNorm``'s, over the last dimensions, by
#: import path (timm is not imported): each becomes an :class:`LPLayerNorm`.
SAME_AS_LAYERNORM = frozenset({class_path(nn.LayerNorm), "timm.layers.norm.LayerNorm"})
#: Those that normalize the channels of an ``(N, C, H, W)`` tensor: each becomes an :class:`LPLayerNorm2d`.
CHANNELS_FIRST_LAYERNORM = frozenset({"timm.layers.norm.LayerNorm2d"})

PARAMETERS = Parameters()  # no hyperparameters


def apply_low_precision_layernorm(
    model: nn.Module,
    precision: str | None = None,
    optimizers: torch.optim.Optimizer | Iterable[torch.optim.Optimizer] | None = None,
) -> nn.Module:
    """Replace every ``nn.LayerNorm`` of ``model`` with :class:`LPLayerNorm`, in place, as
    ``composer.functional.apply_low_precision_layernorm``.

    Only for the autocast precisions: with ``precision`` ``"amp_fp16"`` or ``"amp_bf16"`` (the
    Trainer's names) each layer norm is replaced, its weight and bias copied;
    a subclass of ``nn.LayerNorm`` is replaced only where its forward is known to compute the same
    (:data:`SAME_AS_LAYERNORM`, timm's ``LayerNorm``; timm's channels-first ``LayerNorm2d`` becomes
    an :class:`LPLayerNorm2d`), and any other (one that adds an activation, as timm's
    ``LayerNormAct``, or that normalizes another layout) is left as it is; with any other
    precision (``None`` included, the default) nothing is replaced and it warns, since outside
    autocast the replacement computes exactly what ``nn.LayerNorm`` does.

    Args:
        model: the model to change.
        precision: the Trainer precision the model will train under, one of
            :data:`~algorithms.core.options.PRECISIONS` or ``None``.
        optimizers: optimizers that already hold the model's parameters; they are given the
            replacements' parameters (and their state) instead.

    Returns:
        ``model``; it warns (:class:`~algorithms.surgery.NoModulesReplacedWarning`) when it
        replaces nothing.

    Example::

        >>> import torch
        >>> import algorithms.functional as cf
        >>> from algorithms.models import transformer_tiny
        >>> model = cf.apply_low_precision_layernorm(transformer_tiny(vocab_size=50), precision="amp_bf16")
        >>> type(model.ln_f).__name__
        'LPLayerNorm'
        >>> with torch.autocast("cpu", dtype=torch.bfloat16):
        ...     model.ln_f(torch.randn(2, 64)).dtype
        torch.bfloat16
    """
    if precision is not None and precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r}: use one of {', '.join(PRECISIONS)} (or None)")
    if precision not in AUTOCAST_PRECISIONS:
        warn_from_callers_line(
            f"LowPrecisionLayerNorm: precision={precision!r} runs no autocast, where a low "
            "precision layer norm computes what nn.LayerNorm does; it applies to amp_fp16 and "
            "amp_bf16 only, so the model is unchanged",
            NoModulesReplacedWarning,
        )
        return model
    replace_module_classes(
        model, {nn.LayerNorm: _to_lp_layernorm}, optimizers=optimizers, method="LowPrecisionLayerNorm"
    )
    return model


class LPLayerNorm(nn.LayerNorm):
    """``nn.LayerNorm`` that, under autocast, runs in the autocast dtype: its input, weight and
    bias are cast to it and ``layer_norm`` runs with autocast off, so the output has that dtype.
    Outside autocast it is ``nn.LayerNorm``."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        device_type = input.device.type
        if not torch.is_autocast_enabled(device_type):
            return super().forward(input)
        dtype = torch.get_autocast_dtype(device_type)
        weight = None if self.weight is None else self.weight.to(dtype)
        bias = None if self.bias is None else self.bias.to(dtype)
        with torch.autocast(device_type=device_type, enabled=False):
            return F.layer_norm(input.to(dtype), self.normalized_shape, weight, bias, self.eps)


class LPLayerNorm2d(LPLayerNorm):
    """:class:`LPLayerNorm` over the channels of an ``(N, C, H, W)`` tensor, as timm's
    ``LayerNorm2d``: the channels are moved last, normalized, and moved back."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return super().forward(input.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


def _forward_owner(module: nn.Module) -> str:
    """The import path of the class whose ``forward`` the module runs."""
    return class_path(next(cls for cls in type(module).__mro__ if "forward" in vars(cls)))


def _to_lp_layernorm(module: nn.Module, index: int) -> LPLayerNorm | None:
    if isinstance(module, LPLayerNorm):
        return None  # already low precision
    assert isinstance(module, nn.LayerNorm)
    owner = _forward_owner(module)
    if owner in CHANNELS_FIRST_LAYERNORM:
        cls = LPLayerNorm2d
    elif owner in SAME_AS_LAYERNORM:
        cls = LPLayerNorm
    else:
        return None  # a forward of its own: replacing it would change what the model computes
    new = cls(
        module.normalized_shape,
        eps=module.eps,
        elementwise_affine=module.elementwise_affine,
        bias=module.bias is not None,
    )
    with torch.no_grad():
        if module.weight is not None:
            new.weight.copy_(module.weight)
        if module.bias is not None:
            new.bias.copy_(module.bias)
    return new.train(module.training)


class LowPrecisionLayerNorm(LowPrecisionNorm):
    """Low Precision LayerNorm as a training-loop algorithm: at ``Event.INIT``,
    :func:`apply_low_precision_layernorm` replaces the model's layer norms when the Trainer's
    precision is ``amp_fp16`` or ``amp_bf16`` (and warns, changing nothing, otherwise).

    It counts ``modules_replaced`` (the layer norms it replaced) and ``batches_in_low_precision``
    (the training batches whose forward ran under the 16-bit autocast with them). It acted only
    where both are above 0: outside autocast the replacements compute what the originals do.

    Example::

        >>> import torch
        >>> from algorithms import LowPrecisionLayerNorm
        >>> from algorithms.core import Trainer
        >>> from algorithms.models import lm_loss, transformer_tiny
        >>> ids = torch.randint(0, 50, (4, 17))
        >>> batches = [{"input_ids": ids[:, :-1], "labels": ids[:, 1:]}]
        >>> Trainer(transformer_tiny(50), batches, "1ba", loss_fn=lm_loss, input_key="input_ids",
        ...         target_key="labels", algorithms=[LowPrecisionLayerNorm()], precision="amp_bf16",
        ...         device="cpu", seed=0).fit()
    """

    activity = {
        "modules_replaced": "layer norms replaced by low precision ones",
        "batches_in_low_precision": "training batches run under a 16-bit autocast with them",
    }

    replace = staticmethod(apply_low_precision_layernorm)
