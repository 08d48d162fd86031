"""The methods in a Lightning run: :class:`MethodsCallback` and :class:`MethodsModule`.

``pip install 'methods-library[lightning]'`` (Lightning 2.6). The callback drives a
:class:`~algorithms.core.Loop` from Lightning's hooks, so a method behaves as in the project's
:class:`~algorithms.core.Trainer`: with the same seed, model, SGD optimizer and batches, a
Lightning run ends at the Trainer's weights (``tests/integrations/test_lightning.py``).

Example: CutMix, label smoothing and EMA, the EMA average validated::

    import lightning as L
    from algorithms import EMA, CutMix, LabelSmoothing
    from algorithms.integrations.lightning import MethodsCallback, MethodsModule

    class Net(MethodsModule):  # its training_step: the methods' forward and loss
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(...)

        def forward(self, x):
            return self.net(x)

        def validation_step(self, batch, batch_idx):
            self.log("val_loss", F.cross_entropy(self(batch[0]), batch[1]))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    methods = MethodsCallback([CutMix(alpha=1.0), LabelSmoothing(0.1), EMA(half_life="50ba")], seed=0)
    L.Trainer(max_epochs=3, callbacks=[methods]).fit(Net(), train_loader, val_loader)

Where each event is fired (Lightning's hook → the loop):

========================================  =====================================================
``Callback.setup`` (any stage, once)      the Loop is built over the LightningModule: ``INIT``
                                          (surgery), before Lightning restores a checkpoint's
                                          weights and before ``configure_optimizers``, so the
                                          optimizer holds the changed model's parameters
``on_fit_start``                          the loop takes Lightning's optimizers; ``FIT_START``
``on_train_start``                        the loop takes the train loader and its length
``on_train_epoch_start``                  ``EPOCH_START``
``MethodsModule.on_after_batch_transfer`` ``loop.batch``: ``BATCH_START``, the batch counted,
                                          ``AFTER_DATALOADER``; the training step gets the batch
                                          as the methods left it (CutMix's mixed images)
``MethodsModule.training_step``           ``loop.forward()`` and ``loop.loss()``: ``BEFORE_/
                                          AFTER_FORWARD``, ``BEFORE_/AFTER_LOSS`` (label
                                          smoothing's target, CutMix's mixed one)
``on_before_backward``                    ``BEFORE_BACKWARD``
``on_after_backward``                     ``AFTER_BACKWARD``
``on_before_optimizer_step``              ``BEFORE_OPTIMIZER_STEP`` (gradients unscaled under
                                          ``16-mixed``, not yet clipped by ``gradient_clip_val``)
``on_train_batch_end``                    ``loop.batch_end()``: ``AFTER_TRAIN_BATCH``, the
                                          counters, ``BATCH_END`` (EMA's update)
``on_train_epoch_end``                    ``loop.epoch_end()``: ``EPOCH_END``, where the epoch
                                          ran to its last batch (a ``max_steps`` stop mid-epoch
                                          leaves it open, as the Trainer's does)
``on_train_end``                          ``FIT_END`` (not ``on_fit_end``: that runs after the
                                          strategy's teardown has moved the model to the CPU)
``on_validation_start``/``_end``,         ``EVAL_START``/``EVAL_END``: EMA's average is in the
``on_test_start``/``_end``                model while Lightning evaluates, the training weights
                                          after (a checkpoint written at ``on_validation_end``
                                          holds the training weights: Lightning runs
                                          ``ModelCheckpoint`` after the other callbacks)
``..._batch_start``/``..._batch_end``     ``EVAL_BATCH_START``/``EVAL_BATCH_END``
``state_dict``/``load_state_dict``        the loop's state (the methods' generators, EMA's
                                          average, the counters) in Lightning's checkpoint;
                                          ``fit(ckpt_path=...)`` puts it back before ``FIT_START``
========================================  =====================================================

What works: every method but SAM. Surgery (BlurPool, Squeeze-Excite, ...), EMA, SWA, Layer
Freezing, Gradient Clipping, Stochastic Depth and the other methods that read or change only the
model, its weights or its gradients work with any LightningModule; the methods that change the
batch (CutMix, MixUp, CutOut, Progressive Resizing, ...) or the loss (Label Smoothing, CutMix,
MixUp, Selective Backprop) need the module to be a :class:`MethodsModule` whose training step
returns ``self.methods.loss()``; those that compute a loss themselves use the callback's
``loss_fn``.

What is refused, with one line: SAM (it steps the optimizer twice through a closure of its own,
which Lightning's automatic optimization owns), ``accumulate_grad_batches`` other than 1 (the
methods count a batch as an optimizer step), a list the Trainer refuses (``check_algorithms``),
a batch- or loss-changing method with a module that is not a :class:`MethodsModule`, and a training
step that returned something other than ``self.methods.loss()`` where a method changes the loss.
Lightning's own precision (``precision="16-mixed"``) casts and scales; the loop stays ``fp32``.
Build the network in the module's ``__init__``: the surgery runs in the callback's ``setup``,
before the module's own ``setup`` and ``configure_model``. One device is tested; under DDP the
ranks come from ``torch.distributed`` as in any :class:`~algorithms.core.Loop`.

Resuming: the methods' state comes back whole from any Lightning checkpoint, but Lightning
resumes a run stopped mid-epoch, or by ``max_steps``, with its loader restarted and that epoch
given more batches; a run stopped by ``max_epochs``, saved and resumed trains the uninterrupted
run's batches and ends at its weights (the tests check it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

try:
    import lightning.pytorch as pl
except ImportError as exc:  # one line saying what to install, not a traceback into the package
    raise ImportError(
        "algorithms.integrations.lightning needs Lightning: pip install 'methods-library[lightning]'"
    ) from exc

from ..core import Algorithm, Event, Loop, MethodLog
from ..core.loop import check_algorithms

__all__ = ["MethodsCallback", "MethodsModule"]

#: Lightning's own default when neither ``max_steps`` nor ``max_epochs`` is given.
_LIGHTNING_DEFAULT_EPOCHS = 1000


class MethodsCallback(pl.Callback):
    """Runs ``algorithms`` in a Lightning run (the hooks and events: :mod:`this module's table
    <algorithms.integrations.lightning>`).

    Args:
        algorithms: the methods, checked as the Trainer checks them; SAM is refused.
        max_duration: what schedules over the training measure against (``"3ep"``, ``"1000ba"``);
            default: the Lightning Trainer's ``max_steps`` (as batches), else its ``max_epochs``.
        loss_fn: ``loss_fn(logits, target)``, what ``self.methods.loss()`` computes and the methods
            that compute a loss themselves (Selective Backprop, CutMix's interpolation) call.
        input_key, target_key: where the input and the target are in a batch.
        seed: seeds torch's global generator just before ``INIT`` (so the modules surgery adds
            start alike) and the methods' own generators; None seeds the methods from torch's
            generator (seed it with ``L.seed_everything``).
        logger: a :class:`~algorithms.core.MethodLog` for what the methods did (``method_log``).

    After ``setup``, ``callback.loop`` is the :class:`~algorithms.core.Loop`; one callback serves
    one LightningModule, through later ``fit``, ``validate`` and ``test`` calls alike.
    """

    def __init__(
        self,
        algorithms: Sequence[Algorithm],
        max_duration: str | None = None,
        loss_fn: Callable[..., Any] = F.cross_entropy,
        input_key: int | str | None = 0,
        target_key: int | str = 1,
        seed: int | None = None,
        logger: MethodLog | None = None,
    ):
        from ..sam import SAM

        algorithms = list(algorithms)
        check_algorithms(algorithms, loss_fn)
        for algo in algorithms:
            if isinstance(algo, SAM):
                raise ValueError(
                    "SAM under Lightning: it steps the optimizer twice through a closure of its own, which "
                    "Lightning's automatic optimization owns; use the project's Trainer or a Loop of your own"
                )
        self.algorithms = algorithms
        self.max_duration = max_duration
        self.loss_fn = loss_fn
        self.input_key, self.target_key = input_key, target_key
        self.seed = seed
        self.method_log = logger if logger is not None else MethodLog()
        self.loop: Loop | None = None
        self._module_batches = False  # the module feeds the loop its batches (a MethodsModule)

    # -- the run ---------------------------------------------------------------------------------

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if trainer.accumulate_grad_batches != 1:
            raise ValueError(
                f"accumulate_grad_batches={trainer.accumulate_grad_batches} with MethodsCallback: the methods count "
                "each batch as an optimizer step; use accumulate_grad_batches=1 (a larger batch instead)"
            )
        self._module_batches = isinstance(pl_module, MethodsModule)
        if not self._module_batches:
            changing = [a.name for a in self.algorithms if a.needs_loss_fn]
            if changing:
                raise ValueError(
                    f"{', '.join(changing)} with {type(pl_module).__name__}: they change the batch or the loss, which "
                    "Lightning computes in the module; derive it from MethodsModule and return self.methods.loss()"
                )
        if self.loop is not None:
            if self.loop.model is not pl_module:
                raise ValueError("MethodsCallback: this callback ran another LightningModule; give each its own")
            return
        self.loop = Loop(
            pl_module,
            self.algorithms,
            max_duration=self.max_duration or _duration(trainer),
            loss_fn=self.loss_fn,
            device=trainer.strategy.root_device,
            seed=self.seed,
            input_key=self.input_key,
            target_key=self.target_key,
            logger=self.method_log,
        )

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        loop = self._loop()
        loop.state.optimizers = tuple(trainer.optimizers)
        loop.start()

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        state = self._loop().state
        state.train_dataloader = trainer.train_dataloader
        batches = trainer.num_training_batches
        state.dataloader_len = int(batches) if math.isfinite(batches) else None

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._loop().epoch_start()

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, idx: int) -> None:
        loop = self._loop()
        if not self._module_batches:  # a plain module: the loop counts the batch Lightning trains on
            loop.batch(batch)
            if loop.state.batch is not batch:
                changed = ", ".join(a.name for a in loop.state.algorithms)
                raise RuntimeError(
                    f"a method of [{changed}] changed the batch, which would not reach {type(pl_module).__name__}'s "
                    "training_step; derive it from MethodsModule"
                )
        loop.state.loss = None  # the training step sets it through self.methods.loss()

    def on_before_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: torch.Tensor) -> None:
        loop = self._loop()
        if loop.state.loss is None and any(a.needs_loss_fn for a in loop.state.algorithms):
            raise RuntimeError(
                "the training step did not compute its loss through self.methods.loss(), so the methods that "
                "change the loss did not act; return self.methods.loss() (after self.methods.forward())"
            )
        loop.run_event(Event.BEFORE_BACKWARD)

    def on_after_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._loop().run_event(Event.AFTER_BACKWARD)

    def on_before_optimizer_step(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: torch.optim.Optimizer
    ) -> None:
        self._loop().run_event(Event.BEFORE_OPTIMIZER_STEP)

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, idx: int
    ) -> None:
        self._loop().batch_end()

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        loop = self._loop()
        finished = trainer.fit_loop.epoch_loop.batch_progress.is_last_batch
        if finished or loop.timestamp.batch_in_epoch >= trainer.num_training_batches:
            loop.epoch_end()

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._loop().end()

    # -- evaluation ------------------------------------------------------------------------------

    def _eval(self, event: Event) -> None:
        if self.loop is not None:
            self.loop.run_event(event)

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._eval(Event.EVAL_START)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._eval(Event.EVAL_END)

    def on_test_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._eval(Event.EVAL_START)

    def on_test_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._eval(Event.EVAL_END)

    def on_validation_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        self._eval(Event.EVAL_BATCH_START)

    def on_validation_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        self._eval(Event.EVAL_BATCH_END)

    def on_test_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        self._eval(Event.EVAL_BATCH_START)

    def on_test_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        self._eval(Event.EVAL_BATCH_END)

    # -- checkpoints -----------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The loop's :meth:`~algorithms.core.Loop.state_dict`, kept in Lightning's checkpoint."""
        return self.loop.state_dict() if self.loop is not None else {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Put a checkpoint's loop state back (Lightning calls it after ``setup``, before ``on_fit_start``)."""
        if state_dict:
            self._loop().load_state_dict(state_dict)

    def _loop(self) -> Loop:
        if self.loop is None:
            raise RuntimeError("MethodsCallback: no loop before Lightning's setup; pass it in Trainer(callbacks=[...])")
        return self.loop


class MethodsModule(pl.LightningModule):
    """A LightningModule whose training batches go through the methods: derive yours from it.

    ``on_after_batch_transfer`` hands each training batch to ``self.methods.batch`` (the methods'
    batch is what ``training_step`` gets), and the default ``training_step`` is::

        self.methods.forward()     # the module on the batch's input, as the methods left it
        return self.methods.loss() # the callback's loss_fn on the logits and the methods' target

    Override ``training_step`` to log or to call the model another way
    (``self.methods.forward(lambda batch: self(batch["x"]))``); return ``self.methods.loss()``.
    Validation and test batches pass unchanged.
    """

    @property
    def methods(self) -> Loop:
        """The :class:`~algorithms.core.Loop` of the Trainer's :class:`MethodsCallback`."""
        for callback in self.trainer.callbacks:
            if isinstance(callback, MethodsCallback) and callback.loop is not None:
                return callback.loop
        raise RuntimeError(
            f"{type(self).__name__}.methods: no MethodsCallback in the Trainer; "
            "pass Trainer(callbacks=[MethodsCallback(...)])"
        )

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        batch = super().on_after_batch_transfer(batch, dataloader_idx)
        return self.methods.batch(batch) if self.trainer.training else batch

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.methods.forward()
        return self.methods.loss()


def _duration(trainer: pl.Trainer) -> str:
    """The Lightning Trainer's length as a duration: ``max_steps`` batches, else ``max_epochs``."""
    if trainer.max_steps is not None and trainer.max_steps >= 0:
        return f"{trainer.max_steps}ba"
    epochs = trainer.max_epochs if trainer.max_epochs is not None else _LIGHTNING_DEFAULT_EPOCHS
    if epochs < 0:
        raise ValueError("max_epochs=-1 trains without end: pass MethodsCallback(max_duration=...), e.g. '100ep'")
    return f"{epochs}ep"
