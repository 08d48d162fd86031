"""The methods in a training loop you write: :class:`Loop` fires the events at the points you mark.

The project's :class:`~algorithms.core.Trainer` is one user of it: it runs its batches through the
same calls, so a loop of your own and the Trainer cannot drift apart. With the same seed, data,
model and optimizer, N steps of the loop below equal N batches of ``Trainer(..., seed=0)``.

Example: a plain PyTorch loop with CutMix, label smoothing and EMA (its average evaluated)::

    >>> import torch
    >>> from algorithms import EMA, CutMix, LabelSmoothing
    >>> from algorithms.core import Loop
    >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 3))
    >>> data = [(torch.randn(4, 3, 2, 2), torch.randint(0, 3, (4,))) for _ in range(2)]
    >>> loop = Loop(model, [CutMix(alpha=1.0), LabelSmoothing(0.1), EMA(half_life="1ba")],
    ...             max_duration="2ep", optimizer=torch.optim.SGD(model.parameters(), lr=0.1), seed=0)
    >>> for epoch in range(2):
    ...     for batch in data:
    ...         loss = loop.train_step(batch)  # or: loop.batch, loop.forward, loop.loss, loop.backward, loop.step
    ...     loop.epoch_end()
    >>> loop.end()
    >>> with loop.evaluating():  # EMA's average is in the model inside the block
    ...     logits = model(data[0][0])
    >>> str(loop.timestamp.batch), str(loop.timestamp.epoch)
    ('4', '2')
"""

from __future__ import annotations

import contextlib
import functools
import operator
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch.optim import Optimizer

from .adapters import trainable_parameters
from .algorithm import Algorithm
from .distributed import all_reduce_sum
from .engine import Engine, check_together, run_order
from .event import Event
from .loss import loss_parts, total_loss
from .method_log import MethodLog, check_method_log
from .outputs import model_logits, model_loss
from .precision import autocast, check_precision
from .state import TIMESTAMP_FIELDS, State, batch_get_item
from .strategies import Single, Strategy
from .time import Duration, Timestamp, TimeUnit

__all__ = ["MODEL_LOSS", "Loop", "check_algorithms"]

#: ``loss_fn=MODEL_LOSS``: train on the loss the model computes itself (``outputs.loss``).
MODEL_LOSS = "model"


def check_algorithms(
    algorithms: Sequence[Algorithm],
    loss_fn: Any,
    parallel: str | Sequence[str] = "single",
    microbatch_size: int | None = None,
) -> None:
    """Refuse, with one line and before anything is done, a list of methods that cannot train
    correctly: anything not an :class:`Algorithm` (TypeError); a list :data:`~algorithms.core.engine.
    REFUSED_TOGETHER` names; a method ``parallel`` cannot run (``Algorithm.unsupported_parallel``:
    ``parallel`` is a mode's name, or the names a strategy answers to, :attr:`Strategy.refusal_modes
    <algorithms.core.strategies.Strategy.refusal_modes>`);
    a method that changes the loss from the logits and the target (``Algorithm.needs_loss_fn``)
    with ``loss_fn=MODEL_LOSS``; and a ``loss_fn`` that is neither a function nor ``MODEL_LOSS``
    (each a ValueError). With a ``microbatch_size`` (gradient accumulation), also what accumulation
    cannot make equal to the whole batch's step: SAM (its second gradient needs the whole batch's
    first), and LabelSmoothing running before CutMix or MixUp, or beside them with
    ``interpolate_loss=True`` (their microbatches mix in partners' targets from the whole batch,
    which the smoothing of one microbatch's targets has not reached)."""
    check_together(algorithms)
    if microbatch_size is not None:
        _check_microbatched(algorithms, microbatch_size)
    for algo in algorithms:
        for mode in (parallel,) if isinstance(parallel, str) else parallel:
            why = algo.unsupported_parallel.get(mode)
            if why is not None:
                raise ValueError(f"{algo.name} under parallel={mode!r}: {why}")
    if isinstance(loss_fn, str) and loss_fn != MODEL_LOSS:
        raise ValueError(f"loss_fn={loss_fn!r}: pass a function, or {MODEL_LOSS!r} for the loss the model computes")
    if not isinstance(loss_fn, str) and not callable(loss_fn):
        raise ValueError(f"loss_fn={loss_fn!r}: pass a function loss_fn(logits, target), or {MODEL_LOSS!r}")
    for algo in algorithms if loss_fn == MODEL_LOSS else ():
        if algo.needs_loss_fn:
            raise ValueError(
                f"{algo.name} with loss_fn={MODEL_LOSS!r}: it changes the loss computed from the logits and the "
                "target, not the model's own; pass a loss_fn"
            )


def _check_microbatched(algorithms: Sequence[Algorithm], microbatch_size: int) -> None:
    order = [a.name for a in run_order(algorithms)]
    where = f"microbatch_size={microbatch_size}"
    if "SAM" in order:
        raise ValueError(
            f"SAM with {where}: its second gradient is taken at weights moved by the whole batch's first, which "
            "accumulation cannot give; leave microbatch_size unset"
        )
    mixing = [a for a in run_order(algorithms) if a.name in ("CutMix", "MixUp")]
    if "LabelSmoothing" not in order:
        return
    for algo in mixing:
        if getattr(algo, "interpolate_loss", False):
            raise ValueError(
                f"{algo.name}(interpolate_loss=True) with LabelSmoothing and {where}: its partners' targets come from "
                "the whole batch, which the smoothing of one microbatch has not reached; use interpolate_loss=False"
            )
        if order.index("LabelSmoothing") < order.index(algo.name):
            raise ValueError(
                f"LabelSmoothing listed before {algo.name} with {where}: list {algo.name} first (the targets are the "
                "same: smoothing commutes with mixing), so that it mixes the loader's targets and the smoothing follows"
            )


class Loop:
    """Runs ``algorithms`` in a training loop you write, at the points you mark with its calls.

    Each training batch, in this order (:meth:`train_step` makes all five calls)::

        batch = loop.batch(batch)   # BATCH_START, its samples and tokens counted, AFTER_DATALOADER
        outputs = loop.forward()    # BEFORE_FORWARD, the model on the batch, AFTER_FORWARD
        loss = loop.loss()          # BEFORE_LOSS, loss_fn on the logits and the target, AFTER_LOSS
        loop.backward()             # BEFORE_BACKWARD, the backward, AFTER_BACKWARD
        loop.step()                 # BEFORE_OPTIMIZER_STEP, the step, AFTER_TRAIN_BATCH, BATCH_END

    or, for gradient accumulation, :meth:`accumulate` in place of the forward, loss and backward
    (each microbatch's forward, loss and backward in turn); then :meth:`epoch_end` at each epoch's
    end, :meth:`end` when training is over, and ``with loop.evaluating():`` around evaluation
    (EMA's and SWA's weights are in the model inside it, the training weights after it). The
    first :meth:`batch` of a run fires ``FIT_START`` and the first of each epoch ``EPOCH_START``
    (:meth:`start` and :meth:`epoch_start` fire them earlier).

    The methods read and change ``loop.state`` (a :class:`~algorithms.core.State`): the batch
    that :meth:`batch` returns is the batch as they left it (CutMix's mixed images), and
    :meth:`forward` and :meth:`loss` work on ``state.batch``, so what a method changes between them
    (label smoothing's target) is what the model and the loss see. Keep using the objects the loop
    gives back: ``loop.model`` after a surgery method changed it at ``Event.INIT`` (which runs in
    the constructor), ``loop.optimizer`` after SAM wrapped it at ``FIT_START``.

    Args:
        model: the network; methods that change the model (surgery) change it at construction, so
            build the optimizer afterwards, or pass one built over ``model.parameters()`` (the
            surgery moves its parameter groups to the new modules).
        algorithms: the methods, ordered as the Trainer orders them (:data:`~algorithms.core.
            engine.ORDER_RULES`); refused with one line where they cannot be correct together
            (:func:`check_algorithms`).
        max_duration: how long training lasts (``"3ep"``, ``"1000ba"``, ``"50000sp"``,
            ``"1000000tok"``): what schedules that run over the training (Progressive Resizing,
            SWA's start, ``"0.5dur"``) measure it against.
        optimizer: the optimizer; a function ``params -> optimizer``, called after ``Event.INIT``
            with the (changed) model's trainable parameters (``requires_grad=True``: a ``peft``
            model's adapter, see :mod:`algorithms.core.adapters`); or None, to set ``loop.optimizer``
            before the first :meth:`step`.
        loss_fn: ``loss_fn(logits, target)`` as :meth:`loss` computes it, with the logits in
            float32 (a model's ``.logits`` or ``["logits"]`` where it returns an output object);
            ``MODEL_LOSS`` takes the model's own ``outputs.loss`` and refuses the methods that
            recompute the loss. Methods that interpolate or select by the loss call it too.
        schedulers: stepped after every optimizer step (or at every :meth:`epoch_end` with
            ``step_schedulers_every_batch=False``).
        train_dataloader: your training loader, where you have one: its ``len()`` gives the
            batches per epoch (for ``"ep"`` durations' progress), SWA's batch-norm pass reads it
            again, and checkpoints keep its own generators.
        precision: ``fp32`` (default), ``amp_fp16`` or ``amp_bf16`` (autocast around the forward
            and the loss; ``amp_fp16`` scales the loss with a GradScaler), or ``fp16``/``bf16``
            where the model and the inputs are already in that dtype. Leave it ``fp32`` where
            something else (Accelerate's ``mixed_precision``) casts.
        device: the device of the model (default: its first parameter's).
        seed: seeds torch's global generator (before ``Event.INIT``, as the Trainer does) and the
            methods' own generators; None leaves torch's alone and seeds the methods from it.
        input_key, target_key: where the input and the target are in a batch (index or key); with
            ``input_key=None`` the model is called as ``model(**batch)`` (a Hugging Face model).
        logger: a :class:`~algorithms.core.MethodLog` for what the methods did (``loop.method_log``).
        strategy: the Trainer's parallel mode, bound already (:mod:`algorithms.core.strategies`);
            leave it out in a loop of your own: then the backward is ``loss.backward()`` (scaled
            under ``amp_fp16``) and the step ``optimizer.step()`` then ``zero_grad()``, and in a
            process group (DDP, Accelerate) the ranks come from ``torch.distributed``.
        ranks: ``(rank, world_size)`` where they are not ``torch.distributed``'s (the Trainer's
            strategy says); default: the default process group's, or ``(0, 1)`` without one.
    """

    #: How errors name this loop's options (``Trainer(target_key='label'): ...``): its owner's class.
    label = "Loop"

    def __init__(
        self,
        model: torch.nn.Module,
        algorithms: Sequence[Algorithm] = (),
        *,
        max_duration: str | Duration,
        optimizer: Optimizer | Callable[[Iterable[torch.nn.Parameter]], Optimizer] | None = None,
        loss_fn: Callable[..., Any] | str = F.cross_entropy,
        schedulers: Sequence[Any] = (),
        step_schedulers_every_batch: bool = True,
        train_dataloader: Iterable[Any] | None = None,
        precision: str = "fp32",
        device: str | torch.device | None = None,
        seed: int | None = None,
        input_key: int | str | None = 0,
        target_key: int | str = 1,
        logger: MethodLog | None = None,
        strategy: Strategy | None = None,
        ranks: tuple[int, int] | None = None,
    ):
        method_log = check_method_log(logger, "Loop(logger=...)")
        check_precision(precision)
        duration = Duration.parse(max_duration)
        if duration.unit is TimeUnit.DURATION:
            raise ValueError(
                f"max_duration={max_duration!r}: give epochs, batches, samples or tokens, e.g. '2ep' or '100ba'"
            )
        if strategy is None:
            first = next(model.parameters(), None)
            device = torch.device(device) if device is not None else (first.device if first is not None else None)
            strategy = Single()
            strategy.bind(precision, device or torch.device("cpu"))
        rank, world_size = ranks if ranks is not None else _process_group()
        check_algorithms(algorithms, loss_fn, strategy.refusal_modes)
        self.strategy = strategy
        self.input_key, self.target_key = input_key, target_key
        self.step_schedulers_every_batch = bool(step_schedulers_every_batch)
        try:
            dataloader_len = len(train_dataloader)  # type: ignore[arg-type]
        except TypeError:
            dataloader_len = None
        given = optimizer if isinstance(optimizer, Optimizer) else None
        self.state = State(
            model=model,
            max_duration=duration,
            optimizers=(given,) if given else (),
            schedulers=tuple(schedulers),
            loss_fn=loss_fn,
            precision=precision,
            device=strategy.device,
            rank=rank,
            world_size=world_size,
            seed=seed,
            dataloader_len=dataloader_len,
            train_dataloader=train_dataloader,
            scaler=strategy.scaler,
        )
        #: What :meth:`forward` calls: the model, or what a parallel mode calls instead (DeepSpeed's engine).
        self.forward_module: Callable[..., Any] | None = None
        self._started = False  # FIT_START fired, FIT_END not yet
        self._epoch_open = False  # EPOCH_START fired, EPOCH_END not yet
        self._loaded: Any = None  # the batch as AFTER_DATALOADER left it (SAM's second pass starts from it)
        self._counts = (0, 0)  # the latest batch's samples and tokens, added to the timestamp at its end
        self._microbatch_checked: int | None = None  # the microbatch size the methods were checked for
        if seed is not None:
            torch.manual_seed(seed)
        self.engine = Engine(self.state, algorithms, method_log)
        self.method_log = method_log
        self.engine.run_event(Event.INIT)
        if optimizer is not None and given is None:
            self.state.optimizers = (optimizer(trainable_parameters(self.state.model.parameters())),)

    # -- what the methods and you share -----------------------------------------------------------

    @property
    def model(self) -> torch.nn.Module:
        """The model as the methods left it (changed by surgery at ``Event.INIT``)."""
        return self.state.model

    @property
    def optimizer(self) -> Optimizer | None:
        """The optimizer the step uses (SAM's wrapper after ``FIT_START``)."""
        return self.state.optimizer

    @optimizer.setter
    def optimizer(self, optimizer: Optimizer) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"loop.optimizer = {optimizer!r}: not a torch.optim.Optimizer")
        self.state.optimizers = (optimizer,)

    @property
    def timestamp(self) -> Timestamp:
        """Epochs, batches, samples and tokens trained so far (summed over the ranks)."""
        return self.state.timestamp

    def run_event(self, event: Event, log: bool = True) -> tuple[str, ...]:
        """Run one event (:meth:`Engine.run_event <algorithms.core.Engine.run_event>`): for an
        adapter whose framework does the work between two events itself."""
        return self.engine.run_event(event, log)

    # -- the run and its epochs ------------------------------------------------------------------

    def start(self) -> None:
        """``FIT_START`` (the first :meth:`batch` fires it where you do not)."""
        self._started = True
        self.engine.run_event(Event.FIT_START)

    def epoch_start(self) -> None:
        """``EPOCH_START`` (the first :meth:`batch` of an epoch fires it where you do not)."""
        self._epoch_open = True
        self.engine.run_event(Event.EPOCH_START)

    def epoch_end(self) -> None:
        """The epoch is over: the epoch count rises, per-epoch schedulers step, ``EPOCH_END``."""
        ts = self.state.timestamp
        ts.epoch += 1
        ts.batch_in_epoch = 0
        if not self.step_schedulers_every_batch:
            for scheduler in self.state.schedulers:
                scheduler.step()
        self._epoch_open = False
        self.engine.run_event(Event.EPOCH_END)

    def end(self) -> None:
        """Training is over: ``FIT_END`` (SWA puts its average in the model; the method log is
        written). A later :meth:`batch` starts a new fit."""
        self._started = False
        self.engine.run_event(Event.FIT_END)

    def done(self) -> bool:
        """Whether ``max_duration`` is reached."""
        return self.state.reached(self.state.max_duration)

    # -- one batch -------------------------------------------------------------------------------

    def batch(self, batch: Any) -> Any:
        """``BATCH_START``; the batch's samples and tokens counted (before any method changes
        it, summed over the ranks); ``AFTER_DATALOADER``. Returns the batch as the methods left
        it (on the device you put it on: the loop moves nothing)."""
        if not self._started:
            self.start()
        if not self._epoch_open and self.state.timestamp.batch_in_epoch == 0:
            self.epoch_start()
        self._epoch_open = True  # a run resumed mid-epoch is inside an epoch already
        self.engine.run_event(Event.BATCH_START)
        self.state.batch = batch
        self._counts = self.count(batch)
        self.engine.run_event(Event.AFTER_DATALOADER)
        self._loaded = self.state.batch
        return self.state.batch

    def forward(self, call: Callable[[Any], Any] | None = None, log: bool = True) -> Any:
        """``BEFORE_FORWARD``; the outputs of ``call(batch)``, or of the model on the batch's
        input (``batch[input_key]``, or ``model(**batch)`` with ``input_key=None``), under the
        precision's autocast; ``AFTER_FORWARD``. Returns ``state.outputs`` as the methods left it."""
        state = self.state
        run = functools.partial(self.engine.run_event, log=log)
        run(Event.BEFORE_FORWARD)
        with autocast(state.precision, state.device):
            state.outputs = call(state.batch) if call is not None else self.call(self.forward_module, state.batch)
        run(Event.AFTER_FORWARD)
        return state.outputs

    def loss(self, log: bool = True) -> torch.Tensor:
        """``BEFORE_LOSS``; ``loss_fn`` on the outputs' logits (float32) and the batch's target as
        the methods left them (label smoothing's), or the model's own loss (``MODEL_LOSS``);
        ``AFTER_LOSS``. Returns ``state.loss`` as the methods left it (CutMix's interpolated loss)."""
        state = self.state
        run = functools.partial(self.engine.run_event, log=log)
        run(Event.BEFORE_LOSS)
        state.loss_target = self.item(state.batch, "target_key")
        with autocast(state.precision, state.device):
            returned = self.loss_of(state.outputs, state.loss_target)
            state.loss = total_loss(returned)
        state.loss_parts = loss_parts(returned)
        run(Event.AFTER_LOSS)
        return state.loss

    def backward(self, backward: Callable[[torch.Tensor], Any] | None = None) -> None:
        """``BEFORE_BACKWARD``; the backward of ``state.loss``: ``backward(loss)`` where you give
        one (``accelerator.backward``), else ``loss.backward()`` (scaled under ``amp_fp16``; the
        parallel mode's in the Trainer); ``AFTER_BACKWARD``. An optimizer with ``first_step``
        (SAM's) then takes its second gradient through the same batch: :meth:`forward` and
        :meth:`loss` again from the batch as ``AFTER_DATALOADER`` left it, with the methods' logs
        off, so nothing counts twice; the first pass's batch, outputs and loss are put back."""
        state, strategy = self.state, self.strategy
        self.engine.run_event(Event.BEFORE_BACKWARD)
        once = backward if backward is not None else strategy.backward_once

        def again() -> torch.Tensor:
            first = (state.batch, state.outputs, state.loss, state.loss_parts, state.loss_target)
            with torch.enable_grad():
                state.batch = self._loaded
                self.forward(log=False)
                loss = self.loss(log=False)
                once(loss)
            state.batch, state.outputs, state.loss, state.loss_parts, state.loss_target = first
            return loss.detach()

        strategy.backward(state.loss, state.optimizer, again, once=backward)
        self.engine.run_event(Event.AFTER_BACKWARD)

    def accumulate(self, microbatch_size: int, backward: Callable[[torch.Tensor], Any] | None = None) -> torch.Tensor:
        """In place of :meth:`forward`, :meth:`loss` and :meth:`backward`, after :meth:`batch`:
        gradient accumulation. The batch as the methods left it at ``AFTER_DATALOADER`` is cut into
        microbatches of ``microbatch_size`` examples (the last may hold fewer): every tensor whose
        first dimension is the batch's size (:meth:`batch_size`) is cut along it, anything else goes
        whole to every microbatch. Each microbatch then takes ``BEFORE_FORWARD`` to ``AFTER_BACKWARD``,
        with ``state.batch`` the microbatch and ``state.microbatch_rows`` its rows of the batch, and
        its backward is of its loss times its share of the batch's examples, so the gradients summed
        over the microbatches are those of the batch's mean loss (exactly, up to float rounding,
        where the loss is a mean over examples and the model treats examples independently: a batch
        norm normalizes each microbatch on its own, as under Composer's and Accelerate's
        accumulation). The parallel mode synchronizes the gradients over the ranks only in the last
        microbatch's backward (DDP's ``no_sync``, FSDP's ``set_requires_gradient_sync``,
        Accelerate's ``no_sync``, DeepSpeed's accumulation boundary).

        A method's counters count batches, not microbatches: the events of the microbatches after
        the first run without the method log. Afterwards ``state.batch`` is the whole batch again,
        ``state.loss`` the batch's loss (the microbatches' losses weighted by their shares, detached),
        ``state.outputs`` the last microbatch's, and ``state.microbatch_rows`` None. A batch of
        ``microbatch_size`` examples or fewer is one :meth:`forward`, :meth:`loss` and
        :meth:`backward`, exactly. ``backward(loss)`` replaces the parallel mode's backward, as in
        :meth:`backward`. Refused (ValueError): a ``microbatch_size`` below 1; an optimizer that
        takes a second gradient per step (SAM's ``first_step``), which needs the whole batch's
        gradient first; and the methods :func:`check_algorithms` refuses with a ``microbatch_size``.
        Returns the batch's loss."""
        state, strategy = self.state, self.strategy
        size = check_microbatch_size(microbatch_size, f"{self.label}(microbatch_size=...)")
        if self._microbatch_checked != size:
            _check_microbatched(self.engine.algorithms, size)
            self._microbatch_checked = size
        if getattr(state.optimizer, "first_step", None) is not None:
            raise ValueError(
                f"{self.label}(microbatch_size={size}): the optimizer takes a second gradient through the whole batch "
                "(SAM), which accumulation cannot give; leave microbatch_size unset"
            )
        whole = state.batch
        n = self.batch_size(whole)
        if n <= size:
            self.forward()
            loss = self.loss()
            self.backward(backward)
            return loss.detach()
        once = backward if backward is not None else strategy.backward_once
        total = None
        starts = range(0, n, size)
        try:
            for i, start in enumerate(starts):
                rows = slice(start, min(start + size, n))
                log, last = i == 0, i == len(starts) - 1
                state.batch, state.microbatch_rows = _rows_of(whole, n, rows), rows
                share = (rows.stop - rows.start) / n
                with strategy.gradient_sync(state.model, last):  # DDP decides in the forward whether to sync
                    self.forward(log=log)
                    self.loss(log=log)
                    self.engine.run_event(Event.BEFORE_BACKWARD, log)
                    once(state.loss * share)
                    self.engine.run_event(Event.AFTER_BACKWARD, log)
                part = state.loss.detach() * share
                total = part if total is None else total + part
        finally:
            state.batch, state.microbatch_rows = whole, None
        state.loss = total
        return total

    def step(self, step: Callable[[], Any] | None = None) -> None:
        """The gradients unscaled and clipped (the Trainer's ``grad_clip_norm``);
        ``BEFORE_OPTIMIZER_STEP``; ``step()`` where you give one (it also clears the gradients),
        else the optimizer's step and ``zero_grad(set_to_none=True)``; the schedulers (per
        batch); then :meth:`batch_end`."""
        state = self.state
        if state.optimizer is None and step is None:
            raise RuntimeError("loop.step(): no optimizer; pass Loop(optimizer=...) or set loop.optimizer")
        if state.optimizer is not None:
            self.strategy.prepare_step(state.model, state.optimizer)
        self.engine.run_event(Event.BEFORE_OPTIMIZER_STEP)
        if step is not None:
            step()
        else:
            self.strategy.step(state.optimizer)
        if self.step_schedulers_every_batch:
            for scheduler in state.schedulers:
                scheduler.step()
        self.batch_end()

    def batch_end(self) -> None:
        """``AFTER_TRAIN_BATCH``; the batch, its samples and tokens counted; ``BATCH_END`` (for an
        adapter whose framework steps the optimizer itself; :meth:`step` calls it)."""
        self.engine.run_event(Event.AFTER_TRAIN_BATCH)
        samples, tokens = self._counts
        ts = self.state.timestamp
        ts.batch += 1
        ts.batch_in_epoch += 1
        ts.sample += samples
        ts.token += tokens
        self.engine.run_event(Event.BATCH_END)

    def train_step(
        self,
        batch: Any,
        backward: Callable[[torch.Tensor], Any] | None = None,
        step: Callable[[], Any] | None = None,
    ) -> torch.Tensor:
        """One training batch: :meth:`batch`, :meth:`forward`, :meth:`loss`, :meth:`backward`
        (with ``backward``), :meth:`step` (with ``step``). Returns the loss, detached."""
        self.batch(batch)
        self.forward()
        loss = self.loss()
        self.backward(backward)
        self.step(step)
        return loss.detach()

    # -- evaluation ------------------------------------------------------------------------------

    @contextlib.contextmanager
    def evaluating(self) -> Iterator[torch.nn.Module]:
        """``EVAL_START``, the model in eval mode; the block (given the model); then, even after
        an error, the model's training mode back and ``EVAL_END``: EMA's or SWA's average is the
        model's inside the block and the training weights after it."""
        model = self.state.model
        was_training = model.training
        self.engine.run_event(Event.EVAL_START)
        try:
            model.eval()
            yield model
        finally:
            model.train(was_training)
            self.engine.run_event(Event.EVAL_END)

    # -- checkpoints -----------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The methods' state (their generators, EMA's average...) and the counters, to save
        beside your model's and optimizer's; ``loop.state.state_dict()`` holds all of it."""
        return {
            "timestamp": {name: getattr(self.timestamp, name) for name in TIMESTAMP_FIELDS},
            "algorithms": [{"name": a.name, "state": a.state_dict()} for a in self.state.algorithms],
        }

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Put back what :meth:`state_dict` returned, into a loop with the same methods in the same
        order (a ValueError naming the difference otherwise, before anything changes)."""
        saved = [entry["name"] for entry in state_dict["algorithms"]]
        ours = [a.name for a in self.state.algorithms]
        if saved != ours:
            raise ValueError(f"Loop.load_state_dict: the state holds methods {saved}, this loop runs {ours}")
        for algo, entry in zip(self.state.algorithms, state_dict["algorithms"], strict=True):
            algo.load_state_dict(entry["state"])
        for name in TIMESTAMP_FIELDS:
            setattr(self.timestamp, name, int(state_dict["timestamp"][name]))

    # -- the batch's parts -----------------------------------------------------------------------

    def item(self, batch: Any, which: str) -> Any:
        """``batch[input_key]`` (``which="input_key"``) or ``batch[target_key]``, or a KeyError
        naming the key and what to pass."""
        key = getattr(self, which)
        try:
            return batch_get_item(batch, key)
        except KeyError as exc:
            raise KeyError(
                f"{self.label}({which}={key!r}): {exc.args[0]}; pass the {which} that names the batch's "
                f"{which.removesuffix('_key')}"
            ) from None

    def call(self, model: Callable[..., Any] | None, batch: Any) -> Any:
        """``model`` (default: ``state.model``) on ``batch[input_key]``, or on the whole batch with
        ``input_key=None`` (``model(**batch)`` for a mapping, ``model(*batch)`` otherwise)."""
        model = model if model is not None else self.state.model
        if self.input_key is not None:
            return model(self.item(batch, "input_key"))
        return model(**batch) if isinstance(batch, Mapping) else model(*batch)

    def loss_of(self, outputs: Any, target: Any) -> Any:
        """What ``loss_fn`` returns for the logits in ``outputs`` (float32), or the model's own loss."""
        if self.state.loss_fn == MODEL_LOSS:
            return model_loss(outputs, "the model (loss_fn='model')")
        return self.state.loss_fn(model_logits(outputs).float(), target)

    def batch_size(self, batch: Any) -> int:
        """The input's first dimension: ``batch[input_key]``'s, or the first tensor's of the batch."""
        if self.input_key is not None:
            return int(self.item(batch, "input_key").shape[0])
        items = batch.values() if isinstance(batch, Mapping) else batch
        first = next((x for x in items if isinstance(x, torch.Tensor)), None)
        if first is None:
            raise TypeError("input_key=None: the batch holds no tensor to count its samples by")
        return int(first.shape[0])

    def count(self, batch: Any) -> tuple[int, int]:
        """The samples and tokens of ``batch`` over every rank, summed over the process group (one
        small all-reduce a batch, as Composer's Trainer does, so ranks whose last batches differ in
        size still count what was trained). Samples: the input's batch size. Tokens: the input's
        elements where it holds token ids (an integer tensor of two or more dimensions, as a
        language model's ``input_ids``), else 0."""
        samples = self.batch_size(batch)
        inputs = self.item(batch, "input_key") if self.input_key is not None else None
        if inputs is None and isinstance(batch, Mapping):
            inputs = batch.get("input_ids")
        ids = isinstance(inputs, torch.Tensor) and not inputs.is_floating_point() and inputs.ndim >= 2
        tokens = int(inputs.numel()) if ids else 0
        if self.state.world_size > 1:
            counts = all_reduce_sum(torch.tensor([samples, tokens], device=self.state.device))
            samples, tokens = (int(n) for n in counts.tolist())
        return samples, tokens


def check_microbatch_size(value: Any, where: str) -> int:
    """``value`` as a number of examples: an integer (a NumPy one too) of at least 1, else one line."""
    try:
        size = operator.index(value) if not isinstance(value, bool) else None
    except TypeError:
        size = None
    if size is None or size < 1:
        raise ValueError(f"{where}: {value!r} — give a whole number of examples, at least 1 (or None: no accumulation)")
    return size


def _rows_of(batch: Any, n: int, rows: slice) -> Any:
    """``batch`` with every tensor whose first dimension is ``n`` cut to ``rows``, through tuples,
    lists and dicts; anything else as it is."""
    if isinstance(batch, torch.Tensor):
        return batch[rows] if batch.ndim > 0 and batch.shape[0] == n else batch
    if isinstance(batch, Mapping):  # a dict, or a mapping built from one (a Hugging Face BatchEncoding)
        cut = {k: _rows_of(v, n, rows) for k, v in batch.items()}
        return cut if type(batch) is dict else type(batch)(cut)
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a named tuple
        return type(batch)(*(_rows_of(v, n, rows) for v in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(_rows_of(v, n, rows) for v in batch)
    return batch


def _process_group() -> tuple[int, int]:
    """This process's rank and the group's size where a default process group exists, else (0, 1)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1
