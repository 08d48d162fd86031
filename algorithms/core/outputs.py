"""What a model returns, read the same way by the Trainer and every method that needs its logits.

A model may return a tensor of logits, a mapping with a ``"logits"`` entry (a plain dict, or a
Hugging Face ``ModelOutput``, which is an ordered dict), or an object with a ``logits`` attribute;
``loss`` is read the same way where the model computed its own loss.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["model_logits", "model_loss"]


def _field(outputs: Any, name: str) -> Any:
    if isinstance(outputs, Mapping):
        return outputs.get(name)
    return getattr(outputs, name, None)


def model_logits(outputs: Any, where: str = "the model") -> torch.Tensor:
    """The logits in ``outputs``: the tensor itself, ``outputs["logits"]`` of a mapping, or
    ``outputs.logits``. Anything else is a ``TypeError`` of one line that names ``where`` the
    outputs came from and what to return; nothing is changed."""
    if isinstance(outputs, torch.Tensor):
        return outputs
    logits = _field(outputs, "logits")
    if isinstance(logits, torch.Tensor):
        return logits
    what = f"a {type(outputs).__name__}"
    if isinstance(outputs, Mapping):
        what += f" with keys {list(outputs)[:5]}"
    raise TypeError(
        f"{where} returned {what}: return a tensor of logits, a dict with 'logits', or an object with .logits"
    )


def model_loss(outputs: Any, where: str = "the model") -> torch.Tensor:
    """The loss a model computed itself: ``outputs["loss"]`` of a mapping or ``outputs.loss`` (a
    Hugging Face model given its labels). A ``TypeError`` of one line where there is none."""
    loss = _field(outputs, "loss")
    if isinstance(loss, torch.Tensor):
        return loss
    raise TypeError(
        f"{where} returned a {type(outputs).__name__} without a 'loss' tensor: give the model its labels so it "
        "computes one, or pass a loss_fn"
    )
