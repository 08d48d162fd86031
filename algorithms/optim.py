"""Optimizers whose weight decay is decoupled from the learning rate.

Loshchilov and Hutter, "Decoupled Weight Decay Regularization", ICLR 2019. Before each step the
weights shrink by the decay alone, on the learning rate's schedule but not scaled by the
learning rate itself::

    p <- p * (1 - (lr / initial_lr) * weight_decay)

and then the usual SGD (momentum, Nesterov) or Adam step follows, with no decay term in the
gradient. ``initial_lr`` is each parameter group's learning rate when the group was added (kept
in the group, where ``torch.optim.lr_scheduler`` keeps it too, and saved by ``state_dict``), so
``weight_decay`` is the fraction a weight loses per step at the initial learning rate, whatever
that rate is. Names and signatures are ``composer.optim``'s.

Example::

    >>> import torch
    >>> from algorithms.optim import DecoupledSGDW
    >>> p = torch.nn.Parameter(torch.ones(2))
    >>> opt = DecoupledSGDW([p], lr=0.1, weight_decay=0.01)
    >>> p.grad = torch.zeros(2)
    >>> opt.step()
    >>> p.data  # shrunk by weight_decay, not by lr * weight_decay
    tensor([0.9900, 0.9900])
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.optim import SGD, AdamW

__all__ = ["DecoupledAdamW", "DecoupledSGDW"]

log = logging.getLogger(__name__)

#: From this value on a decoupled decay is probably a coupled one's value (Composer warns too).
_HIGH_DECAY = 1e-3


def _check(name: str, value: Any, low: float = 0.0, high: float | None = None) -> None:
    """``value`` is a finite real number ``>= low``, and ``< high`` where ``high`` is given."""
    ok = (
        not isinstance(value, bool)
        and isinstance(value, (int, float))
        and math.isfinite(value)
        and value >= low
        and (high is None or value < high)
    )
    if not ok:
        where = f">= {low}" if high is None else f"in [{low}, {high})"
        raise ValueError(f"{name}={value!r}: must be a real number {where}")


def _warn_high_decay(cls: str, weight_decay: float) -> None:
    if weight_decay >= _HIGH_DECAY:
        log.warning(
            "%s(weight_decay=%s): decoupled decay is not scaled by lr, so every step multiplies the "
            "weights by %s at the initial learning rate; a value meant for torch.optim is usually "
            "lr times too large",
            cls,
            weight_decay,
            1.0 - weight_decay,
        )


class _DecoupledDecay:
    """The shared part: remember each group's ``initial_lr``, shrink the weights, then let the torch
    optimizer take its step with no decay of its own."""

    param_groups: list[dict[str, Any]]

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        super().add_param_group(param_group)  # type: ignore[misc]
        group = self.param_groups[-1]
        group.setdefault("initial_lr", group["lr"])

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Decay every parameter that has a gradient, then take the optimizer's own step.

        Args:
            closure: re-evaluates the model and returns the loss; run once, before the decay.
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        kept = []
        for group in self.param_groups:
            decay, lr, initial = group["weight_decay"], group["lr"], group.get("initial_lr", group["lr"])
            kept.append(decay)
            if decay:
                factor = 1.0 - (lr / initial if initial else 1.0) * decay
                for p in group["params"]:
                    if p.grad is not None:
                        p.mul_(factor)
            group["weight_decay"] = 0.0  # the torch step below must not decay again
        try:
            self._torch_step()
        finally:
            for group, decay in zip(self.param_groups, kept, strict=True):
                group["weight_decay"] = decay
        return loss

    def _torch_step(self) -> None:
        """The torch optimizer's own step, without the step hooks torch wraps it in (they ran once
        already, around :meth:`step`)."""
        mro = type(self).__mro__
        cls = next(c for c in mro[mro.index(_DecoupledDecay) + 1 :] if "step" in vars(c))
        step = vars(cls)["step"]
        while getattr(step, "hooked", False):
            step = step.__wrapped__
        step(self)


class DecoupledSGDW(_DecoupledDecay, SGD):
    """SGD with decoupled weight decay: ``p <- p * (1 - (lr / initial_lr) * weight_decay)``, then
    ``torch.optim.SGD``'s step without weight decay (momentum and Nesterov as there).

    Without momentum this is ``torch.optim.SGD`` with ``weight_decay / initial_lr``, under any
    schedule; with momentum it is not, because SGD's decay term goes into the momentum buffer
    and this decay does not.

    Args:
        params: the parameters to optimize, or dicts defining parameter groups.
        lr: the learning rate (required, as in ``composer.optim``).
        momentum: the momentum factor.
        dampening: the dampening of the momentum.
        weight_decay: the fraction of each weight removed per step at the initial learning rate
            (not multiplied by ``lr``, so much smaller than ``torch.optim.SGD``'s).
        nesterov: Nesterov momentum.

    Example::

        >>> import torch
        >>> from algorithms.optim import DecoupledSGDW
        >>> model = torch.nn.Linear(4, 2)
        >>> opt = DecoupledSGDW(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
        >>> model(torch.randn(3, 4)).sum().backward()
        >>> opt.step()
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        lr: float,
        momentum: float = 0,
        dampening: float = 0,
        weight_decay: float = 0,
        nesterov: bool = False,
    ):
        _check("lr", lr)
        _check("momentum", momentum)
        _check("dampening", dampening)
        _check("weight_decay", weight_decay)
        _warn_high_decay(type(self).__name__, weight_decay)
        super().__init__(
            params, lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay, nesterov=nesterov
        )


class DecoupledAdamW(_DecoupledDecay, AdamW):
    """Adam with decoupled weight decay: ``p <- p * (1 - (lr / initial_lr) * weight_decay)``, then
    Adam's step (``torch.optim.AdamW`` without weight decay).

    ``torch.optim.AdamW`` multiplies its decay by the current ``lr``; this one by
    ``lr / initial_lr``, so it is ``torch.optim.AdamW`` with ``weight_decay / initial_lr`` under
    any schedule: the same decay, in units that do not change when the learning rate is tuned.
    The defaults are Composer's: ``weight_decay=1e-5`` (not 1e-2, since it is not multiplied by
    ``lr=1e-3``) and ``betas=(0.9, 0.95)``.

    Args:
        params: the parameters to optimize, or dicts defining parameter groups.
        lr: the learning rate.
        betas: the decay rates of the running averages of the gradient and of its square.
        eps: added to the denominator for numerical stability.
        weight_decay: the fraction of each weight removed per step at the initial learning rate.
        amsgrad: use the maximum of the second-moment averages so far (AMSGrad).

    Example::

        >>> import torch
        >>> from algorithms.optim import DecoupledAdamW
        >>> model = torch.nn.Linear(4, 2)
        >>> opt = DecoupledAdamW(model.parameters(), lr=1e-3, weight_decay=1e-5)
        >>> model(torch.randn(3, 4)).sum().backward()
        >>> opt.step()
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.95),
        eps: float = 1e-8,
        weight_decay: float = 1e-5,
        amsgrad: bool = False,
    ):
        _check("lr", lr)
        if not (isinstance(betas, (tuple, list)) and len(betas) == 2):
            raise ValueError(f"betas={betas!r}: must be a pair (beta1, beta2), each in [0, 1)")
        for i, beta in enumerate(betas):
            _check(f"betas[{i}]", beta, 0.0, 1.0)
        _check("eps", eps)
        _check("weight_decay", weight_decay)
        _warn_high_decay(type(self).__name__, weight_decay)
        super().__init__(params, lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, amsgrad=amsgrad)
