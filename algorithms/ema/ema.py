"""EMA: evaluate with an exponential moving average of the weights seen during training.

The average of iterates goes back to Polyak and Juditsky, "Acceleration of Stochastic
Approximation by Averaging", 1992; the exponentially weighted form is the one Composer's EMA uses.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any

import torch

from ..core.algorithm import Algorithm
from ..core.distributed import unwrap_model
from ..core.event import Event
from ..core.parameters import Other, Parameters, Real, Rule
from ..core.state import State
from ..core.time import Duration, TimeUnit

__all__ = ["EMA", "compute_ema"]

_PERIODIC = (TimeUnit.BATCH, TimeUnit.EPOCH)
_MOMENTS = (TimeUnit.DURATION, TimeUnit.BATCH, TimeUnit.EPOCH, TimeUnit.SAMPLE)
#: compute_ema's smoothing; the class also takes None (smoothing from half_life).
SMOOTHING = Real(low=0, high=1, note="The share of the old average each update keeps; 0 copies the model.")

PARAMETERS = Parameters(
    Rule(
        lambda half_life, smoothing: (half_life is None) != (smoothing is None),
        "give either half_life (e.g. '1000ba') or smoothing (e.g. 0.999), not both; pass half_life=None with smoothing",
    ),
    Rule(
        lambda half_life, update_interval: (
            half_life is None
            or update_interval is None
            or Duration.parse(update_interval).unit is Duration.parse(half_life).unit
        ),
        "update_interval must be in half_life's unit, since the smoothing is their ratio",
    ),
    half_life=Other(
        optional=True,
        requires="a duration in batches or epochs, e.g. '1000ba' or '1ep'",
        parse=lambda name, value: duration_argument(name, value, _PERIODIC),
        note="How long a term of the average takes to lose half its weight; give it or smoothing.",
    ),
    smoothing=replace(
        SMOOTHING, optional=True, note="The share of the old average each update keeps, with half_life=None."
    ),
    ema_start=Other(
        requires="a duration, e.g. '0.0dur', '2ep' or '500ba'",
        parse=lambda name, value: duration_argument(name, value, _MOMENTS),
        note="When averaging starts.",
    ),
    update_interval=Other(
        optional=True,
        requires="at least one batch or epoch, e.g. '1ba' or '1ep'",
        parse=lambda name, value: interval_argument(name, value),
        note="Update every this many batches or epochs; by default one of half_life's unit.",
    ),
)


def compute_ema(model: torch.nn.Module, ema_model: torch.nn.Module, smoothing: float = 0.99) -> None:
    r"""Move ``ema_model``'s weights towards ``model``'s, in place, as ``composer.functional.compute_ema``:

    .. math::
        W_{ema} \leftarrow \text{smoothing} \cdot W_{ema} + (1 - \text{smoothing}) \cdot W_{model}

    for every parameter and every floating-point buffer (batch-norm statistics included); integer
    buffers (batch norm's ``num_batches_tracked``) are copied. A term's weight halves every
    :math:`-\ln 2 / \ln(\text{smoothing})` updates, so ``smoothing = exp(-ln 2 / half_life)``.

    Args:
        model: the model being trained; not modified.
        ema_model: a copy of ``model`` (the same parameters and buffers, in the same order) holding
            the average; changed in place. Its tensors may be of a wider dtype than ``model``'s (an
            fp32 copy of a bf16 model): the update is computed in ``ema_model``'s dtype.
        smoothing: how much of the old average each update keeps, in ``[0, 1]``: 0 copies
            ``model``, 1 leaves the average as it is.

    Example::

        >>> import torch
        >>> from algorithms.functional import compute_ema
        >>> model, ema_model = torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)
        >>> with torch.no_grad():
        ...     _ = model.weight.fill_(1.0), ema_model.weight.fill_(0.0)
        >>> compute_ema(model, ema_model, smoothing=0.9)
        >>> ema_model.weight
        Parameter containing:
        tensor([[0.1000, 0.1000]], requires_grad=True)
    """
    SMOOTHING.check("smoothing", smoothing)
    averaged, current = [], []
    with torch.no_grad():
        for ema_tensor, tensor in paired_tensors(model, ema_model):
            if ema_tensor.is_floating_point() or ema_tensor.is_complex():
                averaged.append(ema_tensor.detach())
                current.append(tensor.detach().to(ema_tensor.dtype))  # no copy where the dtypes agree
            else:
                ema_tensor.copy_(tensor)
        if averaged:
            torch._foreach_mul_(averaged, smoothing)
            torch._foreach_add_(averaged, current, alpha=1.0 - smoothing)


def paired_tensors(
    model: torch.nn.Module, copy_: torch.nn.Module, name: str = "ema_model"
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``(copy's tensor, model's tensor)`` for every parameter and then every buffer, checked to
    correspond (a ValueError naming the copy's argument otherwise)."""
    mine = [*copy_.parameters(), *copy_.buffers()]
    theirs = [*model.parameters(), *model.buffers()]
    if len(mine) != len(theirs) or any(a.shape != b.shape for a, b in zip(mine, theirs, strict=True)):
        raise ValueError(f"{name}: its parameters and buffers do not match model's — make it with copy.deepcopy(model)")
    return list(zip(mine, theirs, strict=True))


def duration_argument(name: str, text: Any, units: tuple[TimeUnit, ...]) -> Duration:
    """``text`` parsed as a duration in one of ``units``, or a ValueError naming the argument."""
    try:
        duration = Duration.parse(text)
    except ValueError as exc:
        raise ValueError(f"{name}={text!r}: {exc}") from None
    if duration.unit not in units:
        example = "0.5dur" if units[0] is TimeUnit.DURATION else f"10{units[0].value}"  # a fraction is at most 1
        raise ValueError(f"{name}={text!r}: give it in {' or '.join(repr(u.value) for u in units)}, e.g. '{example}'")
    return duration


def interval_argument(name: str, text: Any) -> Duration:
    """``text`` parsed as a duration of at least one batch or epoch, or a ValueError naming it."""
    interval = duration_argument(name, text, _PERIODIC)
    if interval.value < 1:
        raise ValueError(f"{name}={text!r}: must be at least one batch or epoch")
    return interval


class EMA(Algorithm):
    """Keep an exponential moving average of the weights and evaluate with it.

    The training weights are left alone: after each update interval (from ``ema_start`` on) the
    average moves towards them with :func:`compute_ema`; at ``Event.EVAL_START`` the averaged
    weights, cast to the model's dtype, are copied into the model and at ``Event.EVAL_END`` the
    training weights come back exactly (a copy of them is held during evaluation). The first
    update at or after ``ema_start`` starts the average as a copy of the weights then. The average
    is kept in float32 whatever the model's dtype (float64 tensors stay float64), so that with a
    bf16 or fp16 model an update of ``(1 - smoothing) * W`` is not rounded away; it is in
    :meth:`state_dict`, in float32, so a checkpoint resumes it.

    Under FSDP and ZeRO stage 3 it is refused (:attr:`unsupported_parallel`): the average is a copy of the whole
    model, which a sharded model cannot give.

    Args:
        half_life: how long a term of the average takes to lose half its weight, in batches or
            epochs (``'1000ba'``, ``'1ep'``); ``smoothing = exp(-ln 2 * update_interval / half_life)``.
            Give either it or ``smoothing``.
        smoothing: the share of the old average each update keeps, in ``[0, 1]``, used as given
            (with ``half_life=None``).
        ema_start: when averaging starts: ``'0.0dur'``, ``'2ep'``, ``'500ba'``.
        update_interval: update every this many batches or epochs (``'1ba'``, ``'1ep'``); by default
            one of ``half_life``'s unit, or ``'1ba'`` with ``smoothing``. With ``half_life`` it must
            be in the same unit.

    It counts ``averaging_updates`` (the updates of the average, :func:`compute_ema`) and
    ``evaluations_averaged`` (each evaluation run with the averaged weights swapped in, once per
    ``Trainer.eval()``); both at 0 means it did not act: averaging never started, and no
    evaluation saw an average.

    Example::

        >>> import torch
        >>> from algorithms import EMA
        >>> from algorithms.core import Trainer
        >>> model = torch.nn.Linear(4, 3)
        >>> batches = [(torch.randn(8, 4), torch.randint(0, 3, (8,))) for _ in range(4)]
        >>> ema = EMA(half_life="2ba")
        >>> trainer = Trainer(model, batches, "1ep", algorithms=[ema], seed=0)
        >>> trainer.fit()
        >>> round(ema.smoothing, 4)
        0.7071
        >>> sorted(trainer.eval(batches))  # with the averaged weights
        ['accuracy', 'loss']
    """

    unsupported_parallel = MappingProxyType(
        {
            "fsdp": "EMA keeps a whole copy of the model, which FSDP's sharded model cannot give; "
            "train with parallel='ddp', or average the gathered full weights outside FSDP with compute_ema",
            "deepspeed:3": "EMA keeps a whole copy of the model, and at ZeRO stage 3 the model's parameters are "
            "DeepSpeed's empty placeholders between steps; use ZeRO stage 1 or 2, or parallel='ddp'",
        }
    )
    activity = {
        "averaging_updates": "updates of the averaged weights",
        "evaluations_averaged": "evaluations run with the averaged weights",
    }

    def __init__(
        self,
        half_life: str | None = "1000ba",
        smoothing: float | None = None,
        ema_start: str = "0.0dur",
        update_interval: str | None = None,
    ):
        PARAMETERS.check(half_life=half_life, smoothing=smoothing, ema_start=ema_start, update_interval=update_interval)
        life = Duration.parse(half_life) if half_life is not None else None
        if update_interval is None:
            interval = Duration(1, life.unit if life is not None else TimeUnit.BATCH)
        else:
            interval = Duration.parse(update_interval)
        self.half_life = half_life
        #: The smoothing of each update: as given, or ``exp(-ln 2 * update_interval / half_life)``.
        self.smoothing = float(smoothing) if smoothing is not None else _smoothing(interval, life)
        self.ema_start = ema_start
        self.update_interval = str(interval)
        self._interval = interval
        self._smoothing_given = smoothing is not None
        self.reset()

    def hyperparameters(self) -> dict[str, Any]:
        """The constructor's arguments, so that :func:`repr` is a call that builds this EMA:
        ``smoothing`` is ``None`` where it was derived from ``half_life`` (read the derived value
        from the :attr:`smoothing` attribute), and ``update_interval`` is the interval used."""
        params = super().hyperparameters()
        if not self._smoothing_given:
            params["smoothing"] = None
        return params

    def reset(self) -> None:
        """Forget the average (and a checkpoint's average waiting to be loaded) and the generator."""
        super().reset()
        self._ema_model: torch.nn.Module | None = None
        self._pending: Mapping[str, torch.Tensor] | None = None  # averaged weights loaded before the copy exists
        self._swapped_into: torch.nn.Module | None = None  # the model holding the average during evaluation
        self._training_weights: list[torch.Tensor] | None = None  # held during evaluation, put back at its end

    @property
    def ema_model(self) -> torch.nn.Module | None:
        """The averaged weights as a copy of the model with float32 tensors (float64 ones stay
        float64; ``None`` before averaging starts)."""
        return self._ema_model

    def _update_event(self) -> Event:
        return Event.BATCH_END if self._interval.unit is TimeUnit.BATCH else Event.EPOCH_END

    def _started(self) -> bool:
        return self._ema_model is not None or self._pending is not None

    def match(self, event: Event, state: State) -> bool:
        if event is self._update_event():
            return True
        return event in (Event.EVAL_START, Event.EVAL_END) and self._started()

    def apply(self, event: Event, state: State, logger: Any | None = None) -> None:
        model = unwrap_model(state.model)
        if event is Event.EVAL_START:
            if self._swapped_into is None:
                self._training_weights = _load_average(model, self._average(model))
                self._swapped_into = model
                self.report(logger, "evaluations_averaged")
        elif event is Event.EVAL_END:
            if self._swapped_into is not None:
                _restore(self._swapped_into, self._training_weights)
                self._swapped_into, self._training_weights = None, None
        elif not self._started():
            if state.reached(self.ema_start):
                self._ema_model = averaging_copy(model)
        elif state.timestamp.get(self._interval.unit) % int(self._interval.value) == 0:
            compute_ema(model, self._average(model), self.smoothing)
            self.report(logger, "averaging_updates")

    def _average(self, model: torch.nn.Module) -> torch.nn.Module:
        """The copy holding the average, made from ``model`` where a checkpoint's weights wait for it."""
        if self._ema_model is None:
            self._ema_model = averaging_copy(model)
            self._ema_model.load_state_dict(self._pending)
            self._pending = None
        return self._ema_model

    def state_dict(self) -> dict[str, Any]:
        """The base's state and ``ema_weights``: the average's ``state_dict`` in float32 (``None``
        before it starts)."""
        state = super().state_dict()
        if self._ema_model is not None:
            state["ema_weights"] = detached_state_dict(self._ema_model.state_dict())
        elif self._pending is not None:
            state["ema_weights"] = dict(self._pending)
        else:
            state["ema_weights"] = None
        return state

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        super().load_state_dict(state_dict)
        weights = state_dict.get("ema_weights")
        if self._swapped_into is not None:  # loaded during evaluation: the training weights go back first
            _restore(self._swapped_into, self._training_weights)
        self._swapped_into, self._training_weights = None, None
        if weights is None:
            self._ema_model, self._pending = None, None
        elif self._ema_model is not None:
            self._ema_model.load_state_dict(weights)
        else:
            self._pending = dict(weights)

    def _state_keys(self) -> set[str]:
        return super()._state_keys() | {"ema_weights"}


def _smoothing(interval: Duration, half_life: Duration) -> float:
    if half_life.value == 0:  # a half life of nothing keeps nothing of the past
        return 0.0
    return math.exp(-math.log(2) * interval.value / half_life.value)


def frozen_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of ``model`` on its device, without gradients, to hold averaged weights."""
    duplicate = copy.deepcopy(model)
    for p in duplicate.parameters():
        p.grad = None
        p.requires_grad_(False)
    return duplicate


def averaging_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A :func:`frozen_copy` of ``model`` whose floating tensors are float32 (float64 ones stay
    float64), to accumulate an average that a bf16 or fp16 copy would round away."""
    duplicate = frozen_copy(model)
    with torch.no_grad():
        for tensor in [*duplicate.parameters(), *duplicate.buffers()]:
            if tensor.is_floating_point() and tensor.dtype not in (torch.float32, torch.float64):
                tensor.data = tensor.data.to(torch.float32)
    return duplicate


@torch.no_grad()
def _load_average(model: torch.nn.Module, average: torch.nn.Module) -> list[torch.Tensor]:
    """Copy ``average``'s values into ``model`` (cast to its dtypes) and return copies of the values
    ``model`` held, for :func:`_restore`."""
    pairs = paired_tensors(model, average)
    held = [tensor.detach().clone() for _, tensor in pairs]
    for mean, tensor in pairs:
        tensor.copy_(mean)
    return held


@torch.no_grad()
def _restore(model: torch.nn.Module, held: list[torch.Tensor]) -> None:
    """Put back the values :func:`_load_average` returned, bit for bit."""
    for tensor, value in zip([*model.parameters(), *model.buffers()], held, strict=True):
        tensor.copy_(value)


def detached_state_dict(state_dict: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a module's ``state_dict``: its tensors detached and cloned, anything else (a
    layer's extra state, such as Gyro Dropout's step count) deep-copied."""
    return {k: v.detach().clone() if isinstance(v, torch.Tensor) else copy.deepcopy(v) for k, v in state_dict.items()}
