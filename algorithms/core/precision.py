"""Numeric precision modes of the Trainer.

=============  ==========================================================================
``fp32``       everything in float32
``fp16``       the whole model (weights, activations, gradients) in float16
``bf16``       the whole model in bfloat16
``amp_fp16``   float32 weights; ``torch.autocast`` to float16 and a ``GradScaler``
``amp_bf16``   float32 weights; ``torch.autocast`` to bfloat16 (no scaling needed)
=============  ==========================================================================
"""

from __future__ import annotations

import contextlib

import torch

from .options import PRECISIONS

__all__ = ["PRECISIONS", "autocast", "check_precision", "grad_scaler", "model_dtype"]


def check_precision(precision: str) -> str:
    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r} is not supported — use one of {', '.join(PRECISIONS)}")
    return precision


def model_dtype(precision: str) -> torch.dtype:
    """The dtype of the model's parameters (and float inputs) under ``precision``."""
    return {"fp16": torch.float16, "bf16": torch.bfloat16}.get(check_precision(precision), torch.float32)


def autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    """The autocast context for the forward pass and loss, or a no-op outside AMP modes."""
    if check_precision(precision) == "amp_fp16":
        return torch.autocast(device_type=device.type, dtype=torch.float16)
    if precision == "amp_bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def grad_scaler(precision: str, device: torch.device) -> torch.amp.GradScaler:
    """A loss scaler, enabled only for ``amp_fp16`` (float16 gradients underflow without it)."""
    return torch.amp.GradScaler(device.type, enabled=check_precision(precision) == "amp_fp16")
