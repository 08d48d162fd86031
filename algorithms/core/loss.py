"""The loss to backpropagate, from what a ``loss_fn`` returns, as Composer's Trainer reads it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["loss_parts", "total_loss"]


def total_loss(loss: Any) -> torch.Tensor:
    """A tensor as it is; a dict's ``"total"``, or without one the sum of its values' means; a tuple
    or list, the sum of its items' means. Anything else is a ``TypeError`` that says what to return.
    """
    if isinstance(loss, torch.Tensor):
        return loss
    if isinstance(loss, Mapping):
        if "total" in loss:
            return total_loss(loss["total"])
        parts, what = list(loss.values()), "a dict"
    elif isinstance(loss, (tuple, list)):
        parts, what = list(loss), f"a {type(loss).__name__}"
    else:
        parts, what = None, type(loss).__name__
    if not parts or not all(isinstance(p, torch.Tensor) for p in parts):
        raise TypeError(
            f"loss_fn: returned {what}{' without tensors' if parts is not None else ''}; return a tensor, a dict of "
            "tensors (its 'total', or the sum of its values) or a tuple of tensors (their sum)"
        )
    total = parts[0].mean()
    for part in parts[1:]:
        total = total + part.mean()
    return total


def loss_parts(loss: Any) -> dict[str, torch.Tensor]:
    """The parts of what a ``loss_fn`` returned, each detached and reduced to its mean, by name: a
    dict's keys (``"total"`` included where there is one), a tuple's or list's positions (``"0"``,
    ``"1"``, ...); empty for a plain tensor. No host sync: the values stay on their device."""
    if isinstance(loss, Mapping):
        items = loss.items()
    elif isinstance(loss, (tuple, list)):
        items = ((str(i), part) for i, part in enumerate(loss))
    else:
        return {}
    return {str(name): part.detach().mean() for name, part in items if isinstance(part, torch.Tensor)}
