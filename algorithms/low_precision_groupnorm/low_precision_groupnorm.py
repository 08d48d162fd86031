"""Low Precision GroupNorm: group norms that run in the autocast dtype instead of float32.

Under ``torch.autocast`` on CUDA, ``group_norm`` is on the list of operations autocast runs in
float32, so every group norm casts its half-precision input up and its output stays float32.
:class:`LPGroupNorm` casts its input, weight and bias to the autocast dtype and runs there.
Composer's ``LowPrecisionGroupNorm`` is the model for this method.
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

__all__ = ["LPGroupNorm", "LowPrecisionGroupNorm", "apply_low_precision_groupnorm"]

#: The group norm classes whose forward computes ``nn.GroupNorm``'s, by import path (timm is not
#: imported); any other subclass (timm's ``GroupNormAct`` adds an activation) is left as it is.
SAME_AS_GROUPNORM = frozenset({class_path(nn.GroupNorm), "timm.layers.norm.GroupNorm", "timm.layers.norm.GroupNorm1"})

PARAMETERS = Parameters()  # no hyperparameters


def apply_low_precision_groupnorm(
    model: nn.Module,
    precision: str | None = None,
    optimizers: torch.optim.Optimizer | Iterable[torch.optim.Optimizer] | None = None,
) -> nn.Module:
    """Replace every ``nn.GroupNorm`` of ``model`` with :class:`LPGroupNorm`, in place, as
    ``composer.functional.apply_low_precision_groupnorm``.

    Only for the autocast precisions: with ``precision`` ``"amp_fp16"`` or ``"amp_bf16"`` (the
    Trainer's names) each group norm is replaced, its weight and bias copied (a subclass only where
    its forward is known to compute the same, :data:`SAME_AS_GROUPNORM`); with any other
    precision (``None`` included, the default) nothing is replaced and it warns, since outside
    autocast the replacement computes exactly what ``nn.GroupNorm`` does.

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
        >>> model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.GroupNorm(4, 8))
        >>> model = cf.apply_low_precision_groupnorm(model, precision="amp_bf16")
        >>> type(model[1]).__name__
        'LPGroupNorm'
        >>> with torch.autocast("cpu", dtype=torch.bfloat16):
        ...     model[1](torch.randn(2, 8, 4, 4)).dtype
        torch.bfloat16
    """
    if precision is not None and precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r}: use one of {', '.join(PRECISIONS)} (or None)")
    if precision not in AUTOCAST_PRECISIONS:
        warn_from_callers_line(
            f"LowPrecisionGroupNorm: precision={precision!r} runs no autocast, where a low "
            "precision group norm computes what nn.GroupNorm does; it applies to amp_fp16 and "
            "amp_bf16 only, so the model is unchanged",
            NoModulesReplacedWarning,
        )
        return model
    replace_module_classes(
        model, {nn.GroupNorm: _to_lp_groupnorm}, optimizers=optimizers, method="LowPrecisionGroupNorm"
    )
    return model


class LPGroupNorm(nn.GroupNorm):
    """``nn.GroupNorm`` that, under autocast, runs in the autocast dtype: its input, weight and
    bias are cast to it and ``group_norm`` runs with autocast off, so the output has that dtype.
    Outside autocast it is ``nn.GroupNorm``."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        device_type = input.device.type
        if not torch.is_autocast_enabled(device_type):
            return super().forward(input)
        dtype = torch.get_autocast_dtype(device_type)
        weight = None if self.weight is None else self.weight.to(dtype)
        bias = None if self.bias is None else self.bias.to(dtype)
        with torch.autocast(device_type=device_type, enabled=False):
            return F.group_norm(input.to(dtype), self.num_groups, weight, bias, self.eps)


def _to_lp_groupnorm(module: nn.Module, index: int) -> LPGroupNorm | None:
    if type(module) is LPGroupNorm:
        return None  # already low precision
    owner = class_path(next(cls for cls in type(module).__mro__ if "forward" in vars(cls)))
    if owner not in SAME_AS_GROUPNORM:
        return (
            None  # a forward of its own (timm's GroupNormAct adds an activation): replacing it would change the model
        )
    new = LPGroupNorm(module.num_groups, module.num_channels, eps=module.eps, affine=module.affine)
    if module.affine:
        with torch.no_grad():
            new.weight.copy_(module.weight)
            new.bias.copy_(module.bias)
    return new


class LowPrecisionGroupNorm(LowPrecisionNorm):
    """Low Precision GroupNorm as a training-loop algorithm: at ``Event.INIT``,
    :func:`apply_low_precision_groupnorm` replaces the model's group norms when the Trainer's
    precision is ``amp_fp16`` or ``amp_bf16`` (and warns, changing nothing, otherwise).

    It counts ``modules_replaced`` (the group norms it replaced) and ``batches_in_low_precision``
    (the training batches whose forward ran under the 16-bit autocast with them). It acted only
    where both are above 0: outside autocast the replacements compute what the originals do.

    Example::

        >>> import torch
        >>> from algorithms import LowPrecisionGroupNorm
        >>> from algorithms.core import Trainer
        >>> model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.GroupNorm(4, 8),
        ...                             torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 10))
        >>> batches = [(torch.randn(4, 3, 8, 8), torch.randint(0, 10, (4,)))]
        >>> Trainer(model, batches, "1ep", algorithms=[LowPrecisionGroupNorm()], precision="amp_bf16",
        ...         device="cpu", seed=0).fit()
    """

    activity = {
        "modules_replaced": "group norms replaced by low precision ones",
        "batches_in_low_precision": "training batches run under a 16-bit autocast with them",
    }

    replace = staticmethod(apply_low_precision_groupnorm)
