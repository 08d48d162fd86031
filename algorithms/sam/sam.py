"""SAM: step with the gradient taken at the worst weights within a small ball, so training seeks
flat minima.

Foret, Kleiner, Mobahi and Neyshabur, "Sharpness-Aware Minimization for Efficiently Improving
Generalization", ICLR 2021.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from ..core.algorithm import Algorithm
from ..core.event import Event
from ..core.parameters import Integer, Parameters, Real
from ..core.state import State

__all__ = ["SAM", "SAMOptimizer", "sam_perturbation"]

PARAMETERS = Parameters(
    rho=Real(low=0, note="The neighbourhood's radius; 0 takes plain steps at twice the cost."),
    epsilon=Real(low=0, note="Added to the gradient norm, so a zero gradient does not divide by zero."),
    interval=Integer(low=1, note="Take the gradient at w + e(w) every interval-th step only."),
)


def sam_perturbation(grads: Sequence[torch.Tensor], rho: float = 0.05, epsilon: float = 1e-12) -> list[torch.Tensor]:
    """SAM's ascent step ``e(w) = rho * g / (||g|| + epsilon)``, one tensor per gradient.

    ``||g||`` is the L2 norm of all of ``grads`` together (the whole model's gradient, not each
    tensor's): ``e(w)`` is the first-order solution of the paper's inner maximisation
    ``max_{||e|| <= rho} L(w + e)`` (its equation 2 with p = 2), a step of length ``rho`` (less
    ``epsilon``'s share) uphill. Where the gradient is not finite (an overflowed ``amp_fp16``
    backward), or is zero with ``epsilon=0``, every tensor is zero, decided on the device without
    a host sync.

    Args:
        grads: the gradients ``g`` at the weights ``w``; not modified.
        rho: the radius of the neighbourhood, ``>= 0``.
        epsilon: added to the norm so a zero gradient gives a zero step, ``>= 0``.

    Returns:
        New tensors, one per gradient, of its shape, dtype and device.

    Example::

        >>> import torch
        >>> from algorithms.functional import sam_perturbation
        >>> [e] = sam_perturbation([torch.tensor([3.0, 4.0])], rho=0.5)
        >>> e
        tensor([0.3000, 0.4000])
    """
    PARAMETERS.check(rho=rho, epsilon=epsilon)
    grads = list(grads)
    if not grads:
        return []
    norm = torch.nn.utils.get_total_norm(grads, norm_type=2.0)
    if hasattr(norm, "full_tensor"):  # FSDP's sharded gradients give a sharded norm
        norm = norm.full_tensor()
    scale = rho / (norm.float() + epsilon)
    # Not finite: an overflowed gradient, or a zero one with epsilon = 0 (a scale of rho / 0): no step.
    finite = torch.isfinite(norm) & torch.isfinite(scale)
    return [torch.where(finite.to(g.device), g * scale.to(g.device, g.dtype), 0.0) for g in grads]


class SAMOptimizer(torch.optim.Optimizer):
    """``base_optimizer`` stepping with the gradient at ``w + e(w)`` (:func:`sam_perturbation`).

    It shares the base optimizer's parameter groups, state and ``state_dict`` (so schedulers,
    checkpoints and anything that edits the groups act on both); it only adds
    :meth:`first_step`, which the :class:`~algorithms.core.Trainer` calls after each backward
    with a closure that runs the batch's forward, loss and backward again.

    Args:
        base_optimizer: the optimizer that takes the step.
        rho: the neighbourhood's radius.
        epsilon: added to the gradient norm.
        interval: the gradient is taken at ``w + e(w)`` every ``interval``-th step; the others are
            plain steps of the base optimizer.
        global_step: steps already taken (a resumed run's), so the interval goes on in phase.

    ``perturbed_steps`` counts the calls of :meth:`first_step` that took the gradient at
    ``w + e(w)``.
    """

    def __init__(
        self,
        base_optimizer: torch.optim.Optimizer,
        rho: float = 0.05,
        epsilon: float = 1e-12,
        interval: int = 1,
        global_step: int = 0,
    ):
        PARAMETERS.check(rho=rho, epsilon=epsilon, interval=interval)
        # Not Optimizer.__init__: that would copy the groups' list and add SAM's keys to them.
        self.base_optimizer = base_optimizer
        self.rho, self.epsilon, self.interval = rho, epsilon, interval
        self.global_step = global_step
        self.perturbed_steps = 0

    @property
    def param_groups(self) -> list[dict[str, Any]]:  # type: ignore[override]
        return self.base_optimizer.param_groups

    @property
    def state(self) -> Any:  # type: ignore[override]
        return self.base_optimizer.state

    @property
    def defaults(self) -> dict[str, Any]:  # type: ignore[override]
        return self.base_optimizer.defaults

    def first_step(self, closure: Callable[[], Any]) -> Any:
        """On a SAM step: move the weights ``w`` to ``w + e(w)`` computed from their gradients,
        clear the gradients, call ``closure`` (which leaves the gradient at ``w + e(w)``), and put
        the weights back to exactly ``w``. Returns what ``closure`` returned, or ``None`` on the
        other steps, which leave everything as it is."""
        self.global_step += 1
        if self.global_step % self.interval:
            return None
        params = [p for group in self.param_groups for p in group["params"] if p.grad is not None]
        if not params:
            return None
        with torch.no_grad():
            saved = [p.detach().clone() for p in params]
            for p, e in zip(params, sam_perturbation([p.grad for p in params], self.rho, self.epsilon), strict=True):
                p.add_(e)  # climb to w + e(w)
                p.grad = None
        with torch.enable_grad():
            loss = closure()
        with torch.no_grad():
            for p, w in zip(params, saved, strict=True):
                p.copy_(w)  # back to w exactly (w + e - e can differ in the last bit)
        self.perturbed_steps += 1
        return loss

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:  # type: ignore[override]
        """The base optimizer's step, with whatever gradients the parameters hold."""
        return self.base_optimizer.step(closure)

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.base_optimizer.zero_grad(set_to_none=set_to_none)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        self.base_optimizer.add_param_group(param_group)

    def state_dict(self) -> dict[str, Any]:  # type: ignore[override]
        return self.base_optimizer.state_dict()

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:  # type: ignore[override]
        self.base_optimizer.load_state_dict(state_dict)

    def __getstate__(self) -> dict[str, Any]:
        return self.__dict__

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __repr__(self) -> str:
        return (
            f"SAMOptimizer({self.base_optimizer!r}, rho={self.rho!r}, epsilon={self.epsilon!r}, "
            f"interval={self.interval!r})"
        )


class SAM(Algorithm):
    """Sharpness-aware minimization in the Trainer: at ``Event.FIT_START`` (once the Trainer has
    built the optimizer) it wraps each optimizer in a :class:`SAMOptimizer`. Each batch then
    costs one more forward and backward (every ``interval``-th batch): the Trainer's backward
    gives the gradient at ``w``, the weights move to ``w + e(w)``, the batch runs forward and
    backward again there, the weights go back to ``w`` and the optimizer steps with that second
    gradient, which the Trainer unscales, clips and (under DDP) has averaged as usual.

    Args:
        rho: the neighbourhood's radius, ``>= 0``; 0 takes plain steps at twice the cost.
        epsilon: added to the gradient norm, ``>= 0``.
        interval: take the gradient at ``w + e(w)`` every ``interval``-th step only, ``>= 1``.

    It counts ``sam_steps``, the optimizer steps taken with the gradient at ``w + e(w)`` during a
    ``fit()`` (reported at its end); none, or ``rho=0`` (where ``w + e(w)`` is ``w``), means it did
    not act. Under DeepSpeed, whose engine steps its own optimizer, there are none.

    Example::

        >>> import torch
        >>> from algorithms import SAM
        >>> from algorithms.core import Trainer
        >>> model = torch.nn.Linear(5, 3)
        >>> batches = [(torch.randn(8, 5), torch.randint(0, 3, (8,)))]
        >>> trainer = Trainer(model, batches, "2ba", algorithms=[SAM(rho=0.05)], seed=0)
        >>> trainer.fit()
        >>> type(trainer.state.optimizer).__name__
        'SAMOptimizer'
    """

    activity = {"sam_steps": "optimizer steps with the gradient at the perturbed weights"}

    def __init__(self, rho: float = 0.05, epsilon: float = 1e-12, interval: int = 1):
        PARAMETERS.check(rho=rho, epsilon=epsilon, interval=interval)
        self.rho = rho
        self.epsilon = epsilon
        self.interval = interval
        self.reset()

    def reset(self) -> None:
        """Forget the step count at the last ``fit()``'s start and the generator (the optimizers are
        the Trainer's: a new Trainer's are wrapped afresh at ``Event.FIT_START``)."""
        super().reset()
        self._steps_at_fit_start = 0

    def match(self, event: Event, state: State) -> bool:
        return event in (Event.FIT_START, Event.FIT_END)

    def apply(self, event: Event, state: State, logger: Any | None = None) -> None:
        if event is Event.FIT_START:
            state.optimizers = tuple(
                opt
                if isinstance(opt, SAMOptimizer)
                # a second fit() of the same Trainer
                else SAMOptimizer(opt, self.rho, self.epsilon, self.interval, global_step=state.timestamp.batch)
                for opt in state.optimizers
            )
            self._steps_at_fit_start = _perturbed_steps(state)
        else:
            self.report(logger, "sam_steps", _perturbed_steps(state) - self._steps_at_fit_start)

    def acted(self, activity: Mapping[str, int]) -> bool:
        """A step at ``w + e(w)`` with ``rho=0`` is a plain step."""
        return self.rho > 0 and super().acted(activity)


def _perturbed_steps(state: State) -> int:
    return sum(opt.perturbed_steps for opt in state.optimizers if isinstance(opt, SAMOptimizer))
