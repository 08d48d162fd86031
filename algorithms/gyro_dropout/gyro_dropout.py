"""Gyro Dropout: train a fixed set of pre-selected dropout masks (subnetworks), a few at a time.

Lee, Kim, Oh, Kim, Jeung, Noh and Seo, "Gyro Dropout: Maximizing Ensemble Effect in Neural Network
Training", MLSys 2022.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from ..core.algorithm import Algorithm
from ..core.distributed import unwrap_model
from ..core.event import Event
from ..core.parameters import Integer, Parameters, Real, Rule
from ..core.state import State
from ..core.time import TimeUnit
from ..surgery import recording_replacements, replace_module_classes

__all__ = ["GyroDropout", "GyroDropoutLayer", "apply_gyro_dropout"]

PARAMETERS = Parameters(
    Rule(
        lambda tau, sigma: tau <= sigma,
        "each batch trains tau distinct masks of the sigma pre-selected ones, so tau <= sigma",
    ),
    p=Real(low=0, high=1, high_open=True, note="The drop probability of each unit in each pre-selected mask."),
    sigma=Integer(low=1, note="How many masks each dropout layer pre-selects."),
    tau=Integer(low=1, note="How many of them each batch trains at once, at most sigma."),
)
#: The functional form's schedule: iters_per_epoch and max_epoch.
_COUNT = Integer(low=1, note="A count of batches or epochs.")


def apply_gyro_dropout(
    model: nn.Module, iters_per_epoch: int, max_epoch: int, p: float = 0.5, sigma: int = 256, tau: int = 16
) -> nn.Module:
    """Replace every ``nn.Dropout`` of ``model`` with a :class:`GyroDropoutLayer`, in place, as
    ``composer.functional.apply_gyro_dropout``.

    Args:
        model: the model to change.
        iters_per_epoch: training steps per epoch.
        max_epoch: epochs of the run; with ``iters_per_epoch`` it sets how long each selection of
            masks is trained (see :class:`GyroDropoutLayer`).
        p: the drop probability of each unit in each pre-selected mask, in ``[0, 1)``; it
            replaces the dropout's own.
        sigma: how many masks (subnetworks) each layer pre-selects, ``>= 1``.
        tau: how many of them each batch trains at once, in ``[1, sigma]``.

    Returns:
        ``model``; it warns (:class:`~algorithms.surgery.NoModulesReplacedWarning`) when it holds
        no ``nn.Dropout``.

    Example::

        >>> import torch
        >>> import algorithms.functional as cf
        >>> from algorithms.models import transformer_tiny
        >>> model = cf.apply_gyro_dropout(transformer_tiny(vocab_size=50), iters_per_epoch=100, max_epoch=2,
        ...                               p=0.1, sigma=16, tau=4)
        >>> type(model.drop).__name__, type(model.blocks[0].ffn.drop).__name__
        ('GyroDropoutLayer', 'GyroDropoutLayer')
    """
    PARAMETERS.check(p=p, sigma=sigma, tau=tau)
    _COUNT.check("iters_per_epoch", iters_per_epoch)
    _COUNT.check("max_epoch", max_epoch)
    replace_module_classes(
        model,
        {nn.Dropout: lambda module, index: GyroDropoutLayer(iters_per_epoch, max_epoch, p, sigma, tau)},
        method="GyroDropout",
    )
    return model


class GyroDropoutLayer(nn.Module):
    """Dropout with ``sigma`` fixed masks over the last dimension, ``tau`` of them per batch.

    At its first training call it draws ``sigma`` masks over the input's last dimension (the
    units), each unit kept with probability ``1 - p``. Every ``iter_num`` training calls it
    selects ``tau`` distinct masks among them, where ``iter_num = max(int(iters_per_epoch *
    max_epoch / sigma), 1) * tau``, so over the run the selections cover about ``sigma``
    masks. Each call splits the batch into ``tau`` runs of consecutive examples (``N / tau``
    each when ``tau`` divides ``N``) and multiplies run ``k`` by selected mask ``k`` and by
    ``1 / (1 - p)``, the same mask at every position of an example. In evaluation it is the
    identity.

    ``dropout_mask`` is the mask of the latest training call, one row per example (``None``
    before the first), as in Composer's layer.

    ``count_calls``: each training call is a step (True, as Composer's layer counts). The
    :class:`GyroDropout` class sets it False and advances ``training_step`` once per optimizer
    step instead, so a step that runs the model twice (SAM's second forward) trains both passes on
    the same selected masks and moves the schedule once.

    Draws come from ``generator`` (a CPU ``torch.Generator``) when set, else from torch's global
    one. The masks, the selection and the step count are in the state dict, so a resumed run
    goes on with the same subnetworks.
    """

    def __init__(self, iters_per_epoch: int, max_epoch: int, p: float, sigma: int, tau: int):
        super().__init__()
        PARAMETERS.check(p=p, sigma=sigma, tau=tau)
        _COUNT.check("iters_per_epoch", iters_per_epoch)
        _COUNT.check("max_epoch", max_epoch)
        self.iters_per_epoch, self.max_epoch = iters_per_epoch, max_epoch
        self.p, self.sigma, self.tau = float(p), sigma, tau
        self.iter_num = max(int(iters_per_epoch * max_epoch / sigma), 1) * tau
        self.training_step = 0
        self.count_calls = True
        self._selected_at = -1  # the step whose selection `selected` holds (a step selects once)
        self.generator: torch.Generator | None = None
        self.dropout_mask: torch.Tensor | None = None
        self.register_buffer("preselect_masks", torch.empty(0, 0))  # (sigma, units), 1 keeps a unit
        self.register_buffer("selected", torch.empty(0, dtype=torch.long))  # (tau,) indices of the masks

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return x
        if self.preselect_masks.numel() == 0:
            # rand draws from [0, 1), 0 included: ">=" keeps a unit with probability 1 - p, every unit at p = 0
            masks = torch.rand(self.sigma, x.shape[-1], generator=self.generator) >= self.p
            self.preselect_masks = masks.to(device=x.device, dtype=self.preselect_masks.dtype, non_blocking=True)
        if self.training_step % self.iter_num == 0 and self._selected_at != self.training_step:
            chosen = torch.randperm(self.sigma, generator=self.generator)[: self.tau]
            self.selected = chosen.to(x.device, non_blocking=True)
            self._selected_at = self.training_step
        if self.count_calls:
            self.training_step += 1
        n = x.shape[0]
        run = torch.arange(n, device=x.device) * self.tau // n  # which selected mask each example takes
        mask = self.preselect_masks[self.selected[run]].view(n, *([1] * (x.ndim - 2)), x.shape[-1])
        self.dropout_mask = mask  # the mask of the latest training call, as Composer's layer keeps it
        return x * mask.to(x.dtype) * (1 / (1 - self.p))

    def get_extra_state(self) -> dict[str, int]:
        return {"training_step": self.training_step}

    def set_extra_state(self, state: Mapping[str, int]) -> None:
        self.training_step = int(state["training_step"])

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # The masks' shape is known only once drawn: take the saved shape before loading into it.
        for name in ("preselect_masks", "selected"):
            saved = state_dict.get(prefix + name)
            if saved is not None and saved.shape != getattr(self, name).shape:
                current = getattr(self, name)
                setattr(self, name, torch.empty(saved.shape, dtype=current.dtype, device=current.device))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def extra_repr(self) -> str:
        return f"p={self.p}, sigma={self.sigma}, tau={self.tau}, iter_num={self.iter_num}"


class GyroDropout(Algorithm):
    """Gyro Dropout as a training-loop algorithm: at ``Event.INIT`` :func:`apply_gyro_dropout`
    replaces the model's ``nn.Dropout`` layers, with ``iters_per_epoch`` and ``max_epoch`` taken
    from the Trainer's data loader and ``max_duration`` (a run given in batches counts as one
    epoch of that many).

    Args:
        p: the drop probability of each unit in each pre-selected mask, in ``[0, 1)``.
        sigma: how many masks each dropout layer pre-selects.
        tau: how many of them each batch trains at once, ``<= sigma``.

    Each layer's schedule moves once per optimizer step (``AFTER_TRAIN_BATCH``), not per forward
    call, so an optimizer step that runs the model twice (SAM) trains both passes on the same masks.
    The layers draw their masks and selections from this algorithm's generator
    (:meth:`~algorithms.core.Algorithm.generator`: seeded from the Trainer's seed and the rank,
    and checkpointed), not from torch's global one, so they leave the model's other random draws
    as they would be without them.

    It counts ``modules_replaced``, the dropout layers it replaced; none, or ``p=0`` (every mask
    keeps every unit), means it did not act.

    Example::

        >>> import torch
        >>> from algorithms import GyroDropout
        >>> from algorithms.core import Trainer
        >>> model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Dropout(0.5),
        ...                             torch.nn.Linear(16, 4))
        >>> batches = [(torch.randn(8, 8), torch.randint(0, 4, (8,))) for _ in range(4)]
        >>> Trainer(model, batches, "1ep", algorithms=[GyroDropout(p=0.5, sigma=8, tau=4)], seed=0).fit()
    """

    activity = {"modules_replaced": "dropout layers replaced by gyro dropout"}

    def __init__(self, p: float = 0.5, sigma: int = 256, tau: int = 16):
        PARAMETERS.check(p=p, sigma=sigma, tau=tau)
        self.p, self.sigma, self.tau = p, sigma, tau

    def match(self, event: Event, state: State) -> bool:
        return event in (Event.INIT, Event.FIT_START, Event.AFTER_TRAIN_BATCH)

    def apply(self, event: Event, state: State, logger: Any | None = None) -> None:
        if event is not Event.INIT:
            for module in unwrap_model(state.model).modules():
                if not isinstance(module, GyroDropoutLayer) or module.count_calls:
                    continue
                if event is Event.FIT_START:  # the generator a loaded checkpoint gave, where there is one
                    module.generator = self.generator(state)
                else:
                    module.training_step += 1
            return
        unit, value = state.max_duration.unit, int(state.max_duration.value)
        if unit is TimeUnit.EPOCH and state.dataloader_len:
            iters_per_epoch, max_epoch = state.dataloader_len, value
        elif unit is TimeUnit.BATCH:
            iters_per_epoch, max_epoch = value, 1
        else:
            raise ValueError(
                f"max_duration={state.max_duration}: GyroDropout needs the run's number of steps, so "
                "give it in epochs of a data loader with a length, or in batches"
            )
        with recording_replacements() as replaced:
            apply_gyro_dropout(state.model, max(iters_per_epoch, 1), max(max_epoch, 1), self.p, self.sigma, self.tau)
        for module in state.model.modules():
            if isinstance(module, GyroDropoutLayer):
                module.count_calls = False
                module.generator = self.generator(state)
        self.report(logger, "modules_replaced", len(replaced))

    def acted(self, activity: Mapping[str, int]) -> bool:
        """With ``p=0`` a gyro dropout layer multiplies by 1."""
        return self.p > 0 and super().acted(activity)
