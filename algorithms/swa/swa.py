"""SWA: average snapshots of the weights taken late in training, then recompute batch-norm statistics.

Izmailov, Podoprikhin, Garipov, Vetrov and Wilson, "Averaging Weights Leads to Wider Optima and
Better Generalization", UAI 2018.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

import torch
from torch.optim.swa_utils import SWALR, get_swa_multi_avg_fn, update_bn

from ..core.algorithm import Algorithm, warn_from_callers_line
from ..core.distributed import all_reduce_sum, unwrap_model
from ..core.event import Event
from ..core.parameters import Boolean, Integer, Other, Parameters, Real, Rule
from ..core.precision import autocast
from ..core.state import State, batch_get_item
from ..core.time import Duration, TimeUnit
from ..ema.ema import averaging_copy, detached_state_dict, duration_argument, interval_argument, paired_tensors

__all__ = ["SWA", "update_swa_average"]

_ANNEAL = {"linear": "linear", "lin": "linear", "cos": "cos", "cosine": "cos"}
_MOMENTS = (TimeUnit.DURATION, TimeUnit.EPOCH, TimeUnit.BATCH)


def _moment(name: str, text: Any) -> Duration:
    return duration_argument(name, text, _MOMENTS)


def _anneal_strategy(name: str, strategy: Any) -> str:
    found = _ANNEAL.get(strategy.lower()) if isinstance(strategy, str) else None
    if found is None:
        raise ValueError(f"{name}={strategy!r}: must be 'linear' or 'cos'")
    return found


PARAMETERS = Parameters(
    Rule(
        lambda swa_start, swa_end: Duration.parse(swa_end).unit is Duration.parse(swa_start).unit,
        "swa_end must be in swa_start's unit",
    ),
    Rule(
        lambda swa_start, swa_end: Duration.parse(swa_end).value > Duration.parse(swa_start).value,
        "swa_end must come after swa_start",
    ),
    swa_start=Other(
        requires="a duration such as '0.7dur', '3ep' or '300ba'", parse=_moment, note="When averaging starts."
    ),
    swa_end=Other(
        requires="a duration in swa_start's unit, after it",
        parse=_moment,
        note="When the mean replaces the weights.",
    ),
    update_interval=Other(
        requires="at least one batch or epoch, e.g. '5ba' or '1ep'",
        parse=interval_argument,
        note="A snapshot every this many batches or epochs, the first at swa_start.",
    ),
    schedule_swa_lr=Boolean(note="Anneal the learning rate during averaging with SWALR."),
    anneal_strategy=Other(
        requires="'linear' or 'cos'",
        parse=_anneal_strategy,
        note="How the learning rate is annealed, with schedule_swa_lr ('lin' and 'cosine' too).",
    ),
    anneal_steps=Integer(low=1, note="The number of snapshots over which the learning rate is annealed."),
    swa_lr=Real(
        low=0,
        low_open=True,
        optional=True,
        note="The learning rate to anneal to; None keeps each group's rate at swa_start.",
    ),
)
#: update_swa_average's own argument.
_NUM_AVERAGED = Integer(low=0, note="How many snapshots swa_model holds.")


def update_swa_average(swa_model: torch.nn.Module, model: torch.nn.Module, num_averaged: int) -> int:
    r"""Add ``model``'s weights to the running mean in ``swa_model``, in place, and return the new count.

    With :math:`n` = ``num_averaged`` snapshots already averaged, every parameter becomes

    .. math::
        \bar W \leftarrow \bar W + \frac{W - \bar W}{n + 1} = \frac{n \bar W + W}{n + 1},

    the mean of the :math:`n + 1` snapshots (a copy of ``model`` for :math:`n = 0`), computed as
    ``torch.optim.swa_utils.AveragedModel.update_parameters`` does (its SWA average, one fused
    ``lerp``). Buffers are copied from ``model``, as ``AveragedModel`` does by default; batch-norm
    statistics of the average are recomputed afterwards (``torch.optim.swa_utils.update_bn``).

    Composer has no functional form of SWA; this is its core step.

    Args:
        swa_model: a copy of ``model`` (``copy.deepcopy``) holding the mean; changed in place. Its
            tensors may be of a wider dtype than ``model``'s (an fp32 copy of a bf16 model): the
            mean is computed in ``swa_model``'s dtype.
        model: the model whose weights are the next snapshot; not modified.
        num_averaged: how many snapshots ``swa_model`` holds, an integer ``>= 0``.

    Returns:
        ``num_averaged + 1``.

    Example::

        >>> import torch
        >>> from algorithms.functional import update_swa_average
        >>> model, swa_model = torch.nn.Linear(1, 1, bias=False), torch.nn.Linear(1, 1, bias=False)
        >>> n = 0
        >>> for w in (1.0, 2.0, 6.0):
        ...     with torch.no_grad():
        ...         _ = model.weight.fill_(w)
        ...     n = update_swa_average(swa_model, model, n)
        >>> n, swa_model.weight.item()
        (3, 3.0)
    """
    _NUM_AVERAGED.check("num_averaged", num_averaged)
    pairs = paired_tensors(model, swa_model, "swa_model")
    num_params = sum(1 for _ in swa_model.parameters())
    averaged, current = [], []
    with torch.no_grad():
        for i, (mean, tensor) in enumerate(pairs):
            if i >= num_params or num_averaged == 0 or not mean.is_floating_point():
                mean.copy_(tensor)
            else:
                averaged.append(mean.detach())
                current.append(tensor.detach().to(mean.dtype))  # no copy where the dtypes agree
        if averaged:
            get_swa_multi_avg_fn()(averaged, current, num_averaged)
    return num_averaged + 1


class SWA(Algorithm):
    """Stochastic Weight Averaging in the Trainer.

    From ``swa_start`` on, every ``update_interval`` it adds a snapshot of the weights to a running
    mean (:func:`update_swa_average`), optionally annealing the learning rate towards ``swa_lr``
    (``torch.optim.swa_utils.SWALR``, one step per snapshot). At ``swa_end`` (or at the end of
    training, if that comes first) it recomputes the mean's batch-norm statistics with one pass over
    the training data (``torch.optim.swa_utils.update_bn``) and loads the mean into the model; any
    training after ``swa_end`` goes on from there. The mean is kept in float32 whatever the model's
    dtype (float64 tensors stay float64), so that with a bf16 or fp16 model a late snapshot's
    ``1 / n`` share is not rounded away, and is cast to the model's dtype when loaded. The mean (in
    float32), its count and the schedule are in :meth:`state_dict`, so a checkpoint resumes them.

    Under FSDP and ZeRO stage 3 it is refused (:attr:`unsupported_parallel`): the mean is a copy of the whole model,
    which a sharded model cannot give.

    Args:
        swa_start: when averaging starts: ``'0.7dur'``, ``'3ep'`` or ``'300ba'``.
        swa_end: when the mean replaces the weights, in ``swa_start``'s unit and after it.
        update_interval: a snapshot every this many batches or epochs (``'5ba'``, ``'1ep'``),
            the first at ``swa_start``.
        schedule_swa_lr: anneal the learning rate during averaging with ``SWALR``.
        anneal_strategy: ``'linear'`` or ``'cos'`` annealing, with ``schedule_swa_lr``.
        anneal_steps: the number of snapshots over which the learning rate is annealed, ``> 0``.
        swa_lr: the learning rate to anneal to; ``None`` keeps each group's rate at ``swa_start``.
        input_key: where the model's input is in each batch, for the batch-norm pass.
        bn_dataloader: the batches of the batch-norm pass; by default the State's
            ``train_dataloader`` where it has one.

    It counts ``snapshots_averaged`` (the weights added to the mean) and ``averages_loaded`` (the
    mean loaded into the model, once per run that reaches ``swa_start``); both at 0 means it did not
    act.

    Example::

        >>> import torch
        >>> from algorithms import SWA
        >>> from algorithms.core import Trainer
        >>> model = torch.nn.Linear(4, 3)
        >>> batches = [(torch.randn(8, 4), torch.randint(0, 3, (8,))) for _ in range(10)]
        >>> swa = SWA(swa_start="0.5dur", swa_end="1.0dur", update_interval="1ba")
        >>> Trainer(model, batches, "1ep", algorithms=[swa], seed=0).fit()
        >>> swa.num_averaged  # the weights after batches 5 to 10
        6
    """

    unsupported_parallel = MappingProxyType(
        {
            "fsdp": "SWA keeps a whole copy of the model, which FSDP's sharded model cannot give; "
            "train with parallel='ddp', or average the gathered full weights outside FSDP with update_swa_average",
            "deepspeed:3": "SWA keeps a whole copy of the model, and at ZeRO stage 3 the model's parameters are "
            "DeepSpeed's empty placeholders between steps; use ZeRO stage 1 or 2, or parallel='ddp'",
        }
    )
    activity = {
        "snapshots_averaged": "weight snapshots added to the mean",
        "averages_loaded": "times the mean was loaded into the model",
    }

    def __init__(
        self,
        swa_start: str = "0.7dur",
        swa_end: str = "0.97dur",
        update_interval: str = "1ep",
        schedule_swa_lr: bool = False,
        anneal_strategy: str = "linear",
        anneal_steps: int = 10,
        swa_lr: float | None = None,
        input_key: int | str = 0,
        bn_dataloader: Iterable[Any] | None = None,
    ):
        PARAMETERS.check(
            swa_start=swa_start,
            swa_end=swa_end,
            update_interval=update_interval,
            schedule_swa_lr=schedule_swa_lr,
            anneal_strategy=anneal_strategy,
            anneal_steps=anneal_steps,
            swa_lr=swa_lr,
        )
        interval = Duration.parse(update_interval)
        strategy = _anneal_strategy("anneal_strategy", anneal_strategy)
        self.swa_start = swa_start
        self.swa_end = swa_end
        self.update_interval = update_interval
        self.schedule_swa_lr = schedule_swa_lr
        self.anneal_strategy = strategy
        self.anneal_steps = anneal_steps
        self.swa_lr = swa_lr
        self.input_key = input_key
        self._bn_dataloader = bn_dataloader
        self._interval = interval
        self.reset()

    def reset(self) -> None:
        """Forget the mean, its count, the schedule, whether averaging started or completed, and the
        generator."""
        super().reset()
        self._swa_model: torch.nn.Module | None = None
        self._scheduler: SWALR | None = None
        self._pending: dict[str, Any] = {}  # a checkpoint's mean and schedule, until the model is there
        self._started = self._completed = False
        self._step_counter = 0  # update events since swa_start
        self.num_averaged = 0

    def hyperparameters(self) -> dict[str, Any]:
        """The constructor's arguments (``num_averaged`` is the run's count, not one of them)."""
        return {k: v for k, v in super().hyperparameters().items() if k != "num_averaged"}

    @property
    def swa_model(self) -> torch.nn.Module | None:
        """The running mean as a copy of the model with float32 tensors (float64 ones stay float64;
        ``None`` before averaging and after it is loaded)."""
        return self._swa_model

    def _update_event(self) -> Event:
        return Event.BATCH_END if self._interval.unit is TimeUnit.BATCH else Event.EPOCH_END

    def match(self, event: Event, state: State) -> bool:
        return not self._completed and event in (Event.BATCH_END, Event.EPOCH_END, Event.FIT_END)

    def apply(self, event: Event, state: State, logger: Any | None = None) -> None:
        model = unwrap_model(state.model)
        if event is Event.FIT_END:
            if self._started:
                self._finish(state, model)
                self.report(logger, "averages_loaded")
            else:
                warn_from_callers_line(f"SWA: training ended before swa_start={self.swa_start!r}; nothing was averaged")
            return
        update = event is self._update_event()
        if not self._started:
            if not (update and state.reached(self.swa_start)):
                return
            self._started, self._step_counter, self.num_averaged = True, 0, 0
            self._swa_model = averaging_copy(model)
        swa_model = self._average(model)
        if update:
            if self._step_counter % int(self._interval.value) == 0:
                self.num_averaged = update_swa_average(swa_model, model, self.num_averaged)
                self.report(logger, "snapshots_averaged")
                if self.schedule_swa_lr:
                    with warnings.catch_warnings():  # made mid-run, SWALR has not seen this step's optimizer step
                        warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler\.step\(\)`")
                        self._lr_scheduler(state).step()
            self._step_counter += 1
        if state.reached(self.swa_end):
            self._finish(state, model)
            self.report(logger, "averages_loaded")

    def _average(self, model: torch.nn.Module) -> torch.nn.Module:
        if self._swa_model is None:  # resumed: the checkpoint's mean, in a copy of this model
            self._swa_model = averaging_copy(model)
            self._swa_model.load_state_dict(self._pending.pop("swa_model"))
        return self._swa_model

    def _lr_scheduler(self, state: State) -> SWALR:
        if self._scheduler is None:
            if len(state.optimizers) != 1:
                raise ValueError(
                    f"schedule_swa_lr=True: SWA anneals one optimizer's rate, the Trainer has {len(state.optimizers)}"
                )
            optimizer = state.optimizers[0]
            swa_lr = self.swa_lr if self.swa_lr is not None else [g["lr"] for g in optimizer.param_groups]
            # Made at swa_start, SWALR leaves the rate as it is (its first step anneals by 0).
            self._scheduler = SWALR(
                optimizer, swa_lr=swa_lr, anneal_epochs=self.anneal_steps, anneal_strategy=self.anneal_strategy
            )
            if self._pending.get("swa_scheduler") is not None:
                self._scheduler.load_state_dict(self._pending.pop("swa_scheduler"))
        return self._scheduler

    def _finish(self, state: State, model: torch.nn.Module) -> None:
        """Recompute the mean's batch-norm statistics and load the mean into the model."""
        swa_model = self._average(model)
        norms = [m for m in swa_model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
        loader = self._bn_dataloader if self._bn_dataloader is not None else state.train_dataloader
        if norms and loader is None:
            warn_from_callers_line(
                "SWA: no batches for the batch-norm pass (give bn_dataloader=, or a Trainer that "
                "puts train_dataloader on its State); the mean keeps the last snapshot's batch-norm "
                "statistics"
            )
        elif norms:
            recompute_batch_norm(swa_model, loader, state, self.input_key)
        model.load_state_dict(swa_model.state_dict())
        self._completed = True
        self._swa_model, self._scheduler = None, None

    def state_dict(self) -> dict[str, Any]:
        """The base's state and the mean (``swa_model``, a ``state_dict``), its count
        (``num_averaged``), the update events since ``swa_start`` (``step_counter``), whether
        averaging started and completed, and the ``SWALR`` schedule's state."""
        state = super().state_dict()
        weights = self._swa_model.state_dict() if self._swa_model is not None else self._pending.get("swa_model")
        schedule = self._scheduler.state_dict() if self._scheduler is not None else self._pending.get("swa_scheduler")
        state.update(
            {
                "swa_model": None if weights is None else detached_state_dict(weights),
                "swa_scheduler": schedule,
                "num_averaged": self.num_averaged,
                "step_counter": self._step_counter,
                "swa_started": self._started,
                "swa_completed": self._completed,
            }
        )
        return state

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self._started = bool(state_dict.get("swa_started", False))
        self._completed = bool(state_dict.get("swa_completed", False))
        self.num_averaged = int(state_dict.get("num_averaged", 0))
        self._step_counter = int(state_dict.get("step_counter", 0))
        self._swa_model, self._scheduler, self._pending = None, None, {}
        if state_dict.get("swa_model") is not None:
            self._pending["swa_model"] = dict(state_dict["swa_model"])
        if state_dict.get("swa_scheduler") is not None:
            self._pending["swa_scheduler"] = dict(state_dict["swa_scheduler"])

    def _state_keys(self) -> set[str]:
        return super()._state_keys() | {
            "swa_model",
            "swa_scheduler",
            "num_averaged",
            "step_counter",
            "swa_started",
            "swa_completed",
        }


@torch.no_grad()
def recompute_batch_norm(model: torch.nn.Module, loader: Iterable[Any], state: State, input_key: int | str = 0) -> None:
    """The batch-norm statistics of ``model`` from one pass over ``loader`` (``update_bn``: each
    batch's mean and variance weighted equally), on the State's device, dtype and precision; in a
    distributed run the ranks' statistics are averaged, so every rank evaluates with the same."""
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), None)

    def inputs() -> Iterator[torch.Tensor]:
        for batch in loader:
            x = batch_get_item(batch, input_key).to(state.device)
            yield x.to(dtype) if dtype is not None and x.is_floating_point() else x

    with autocast(state.precision, state.device):
        update_bn(inputs(), model)
    if state.world_size > 1:
        for module in model.modules():
            if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
                for stat in (module.running_mean, module.running_var):
                    all_reduce_sum(stat).div_(state.world_size)
