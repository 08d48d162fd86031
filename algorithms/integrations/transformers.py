"""The methods inside the Hugging Face ``transformers.Trainer``: :class:`MethodsTrainer`.

Answering "I use the Hugging Face Trainer: how do I add label smoothing, ALiBi and EMA?"::

    from algorithms import EMA, Alibi, LabelSmoothing
    from algorithms.integrations.transformers import MethodsTrainer
    from algorithms.models import lm_loss  # next-token cross entropy, labels shifted by the dataset

    trainer = MethodsTrainer(
        model,  # e.g. GPT2LMHeadModel: ALiBi changes it here, before the optimizer is built
        args,  # TrainingArguments, as for transformers.Trainer
        train_dataset=train, eval_dataset=valid,
        algorithms=[Alibi(max_sequence_length=1024), LabelSmoothing(0.1, target_key="labels"), EMA("100ba")],
        loss_fn=lm_loss,
    )
    trainer.train()  # resume_from_checkpoint=... puts the methods' state back too
    trainer.evaluate()  # on EMA's average; the training weights are back afterwards
    with trainer.evaluating():
        trainer.save_model("ema")  # EMA's average as a Hugging Face model

``examples/own_loop/hf_trainer.py`` runs it end to end.

Mechanism: a subclass of ``transformers.Trainer``, plus a ``TrainerCallback`` it installs itself.
A callback with ``compute_loss_func`` alone cannot reach every event: no callback sees the batch
before the model does (``on_step_begin`` comes before the Trainer has it), so CutMix's and MixUp's
mixed inputs at ``AFTER_DATALOADER``, ALiBi's shortened sequences and the ``BEFORE_FORWARD``
methods have nowhere to act; ``compute_loss_func`` is handed the outputs of a forward already
done, with nothing between the loss and the backward (``AFTER_LOSS``, ``BEFORE_BACKWARD``); and
no hook runs before an evaluation (``on_evaluate`` comes after it), so EMA's average could not be
swapped in for it. The subclass runs ``Event.INIT`` in its constructor before
``transformers.Trainer.__init__`` (so surgery changes the model before the Trainer places it and
builds an optimizer), drives each batch through :class:`~algorithms.core.Loop` in
:meth:`~MethodsTrainer.training_step`, wraps :meth:`~MethodsTrainer.evaluate` and
:meth:`~MethodsTrainer.predict` in :meth:`~MethodsTrainer.evaluating`, and writes and reads the
methods' state beside each checkpoint. The callback maps the Trainer's own hooks:

=========================  ===================================================================
Hugging Face               the methods' events
=========================  ===================================================================
``MethodsTrainer(...)``    ``INIT``
``on_train_begin``         ``FIT_START`` (the optimizer and scheduler exist: ``loop.optimizer``)
first batch of an epoch    ``EPOCH_START`` (not again in an epoch resumed part-way)
``training_step``          ``BATCH_START``, ``AFTER_DATALOADER``, ``BEFORE_FORWARD``,
                           ``AFTER_FORWARD``, ``BEFORE_LOSS``, ``AFTER_LOSS``,
                           ``BEFORE_BACKWARD``, ``AFTER_BACKWARD``
``on_pre_optimizer_step``  ``BEFORE_OPTIMIZER_STEP`` (after the Trainer's ``max_grad_norm``
                           clipping, which unscales ``fp16``'s gradients; without clipping they
                           are still scaled there under ``fp16``)
``on_step_end``            ``AFTER_TRAIN_BATCH``, ``BATCH_END`` (after the step and the scheduler)
``on_epoch_end``           ``EPOCH_END``, where the epoch's every batch was trained (a run that
                           stops part-way through an epoch leaves it open, as the project's
                           Trainer does)
``on_train_end``           ``FIT_END``
``evaluate``/``predict``   ``EVAL_START`` ... ``EVAL_END``, and per batch (``prediction_step``)
                           ``EVAL_BATCH_START``, ``EVAL_BATCH_END``
=========================  ===================================================================

With the same seed, initial weights, optimizer and batches in the same order, ``MethodsTrainer``
ends at the project's :class:`~algorithms.core.Trainer`'s weights and EMA average: both run the
same operations in the same order, and on the CPU they agree bit for bit
(tests/integrations/test_transformers_trainer.py).
"""

from __future__ import annotations

import contextlib
import math
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
import transformers
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint

from ..core.algorithm import Algorithm
from ..core.event import Event
from ..core.loop import MODEL_LOSS, Loop
from ..core.loss import total_loss
from ..core.method_log import MethodLog
from ..core.time import Duration

__all__ = ["METHODS_STATE_NAME", "MethodsTrainer"]

#: The file beside each Hugging Face checkpoint (``checkpoint-<step>/``) holding the methods' state
#: and counters (:meth:`Loop.state_dict <algorithms.core.Loop.state_dict>`), one per process.
METHODS_STATE_NAME = "methods-rank{rank}.pt"


class MethodsTrainer(transformers.Trainer):
    """``transformers.Trainer`` that runs ``algorithms`` at the methods' events (the table in the
    module's docstring) through a :class:`~algorithms.core.Loop`, ``trainer.loop``.

    It promises:

    - ``Event.INIT`` runs in the constructor, before ``transformers.Trainer.__init__``: a surgery
      method (ALiBi, Squeeze-Excite, low-precision LayerNorm...) changes ``model`` before the
      Trainer places it and before it builds its optimizer; an optimizer passed in
      ``optimizers=(optimizer, scheduler)`` has its parameter groups moved to the new modules.
    - Each training batch runs through the loop's calls: what the methods make of the batch
      (CutMix's mixed ``pixel_values``, label smoothing's ``labels``) is what the model and the loss
      see; the loss is ``loss_fn(logits, batch[target_key])`` on the float32 logits, as the
      project's Trainer computes it, or the model's own with ``loss_fn=MODEL_LOSS``.
    - :meth:`evaluate` and :meth:`predict` run with EMA's (or SWA's) average in the model, the
      training weights back afterwards, also when they run during training
      (``eval_strategy="steps"``); :meth:`evaluating` does the same around code of your own.
    - Each checkpoint folder also holds the methods' state and counters
      (:data:`METHODS_STATE_NAME`: EMA's average, the methods' generators...), and
      ``train(resume_from_checkpoint=...)`` puts them back, so a resumed run goes on as the
      uninterrupted one.

    It refuses, with a ValueError of one line before anything is done:

    - ``gradient_accumulation_steps > 1``: the methods' batch is the optimizer's step (EMA
      averages once per step, CutMix draws once per batch), and the Trainer's micro-batches would
      each fire ``BATCH_START`` without a step; accumulate by a larger batch instead.
    - SAM: it replaces the optimizer and takes a second forward and backward inside the step,
      which the Hugging Face Trainer makes itself; use the project's Trainer or a
      :class:`~algorithms.core.Loop` of your own.
    - ``args.deepspeed``: DeepSpeed steps inside its backward, before ``BEFORE_OPTIMIZER_STEP``.
    - ``model_init``: the Trainer builds a new model in ``train()``, after ``Event.INIT`` changed
      the first.
    - ``args.label_smoothing_factor`` and ``compute_loss_func``: the loss is ``loss_fn``'s; use
      :class:`~algorithms.LabelSmoothing` and ``loss_fn``.
    - what :class:`~algorithms.core.Loop` refuses (:func:`~algorithms.core.loop.check_algorithms`).

    Args:
        model: the model (a ``PreTrainedModel``, or any ``nn.Module`` called as ``model(**batch)``
            or ``model(batch[input_key])``).
        args: the ``TrainingArguments``; ``args.seed`` seeds torch before ``Event.INIT`` and the
            methods' generators, as ``Trainer(seed=...)`` does.
        algorithms: the methods, each given the batch's keys where it reads the batch
            (``LabelSmoothing(0.1, target_key="labels")``, ``CutMix(input_key="pixel_values",
            target_key="labels")``).
        loss_fn: ``loss_fn(logits, target)`` (default cross entropy: classification labels; for a
            language model, pass a next-token loss such as :func:`algorithms.models.lm_loss` with
            labels shifted in the data), or ``MODEL_LOSS`` for the model's own ``outputs.loss``.
            Evaluation's ``eval_loss`` is computed with it too.
        input_key: ``None`` (default) calls the model as ``model(**batch)`` without the target
            (with it, under ``MODEL_LOSS``); a key calls ``model(batch[input_key])``.
        target_key: where the target is in the batch (default ``"labels"``).
        logger: a :class:`~algorithms.core.MethodLog` (``trainer.method_log``).
        **kwargs: what ``transformers.Trainer`` takes (``train_dataset``, ``eval_dataset``,
            ``data_collator``, ``optimizers``, ``callbacks``, ``compute_metrics``...).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        args: transformers.TrainingArguments,
        *,
        algorithms: Sequence[Algorithm] = (),
        loss_fn: Callable[..., Any] | str = F.cross_entropy,
        input_key: str | None = None,
        target_key: str = "labels",
        logger: MethodLog | None = None,
        **kwargs: Any,
    ):
        _refuse(args, algorithms, kwargs)
        optimizer, _ = kwargs.get("optimizers", (None, None))
        # INIT before transformers.Trainer places the model and builds anything over its parameters.
        self.loop = Loop(
            model,
            algorithms,
            max_duration=_duration(args),
            optimizer=optimizer,
            loss_fn=loss_fn,
            device=args.device,
            seed=args.seed,
            input_key=input_key,
            target_key=target_key,
            logger=logger,
        )
        self.method_log = self.loop.method_log
        self._evaluations = 0  # evaluate() inside evaluate() (a dict of eval sets) swaps once
        super().__init__(model=self.loop.model, args=args, **kwargs)
        if args.label_names is None:  # the loss and the metrics read the target where the methods do
            self.label_names = [target_key]
        self.add_callback(_MethodEvents(self.loop))

    # -- training --------------------------------------------------------------------------------

    def train(self, resume_from_checkpoint: str | bool | None = None, **kwargs: Any) -> Any:
        """``transformers.Trainer.train``; resuming, the methods' state and counters are read from
        the checkpoint folder first (refused in one line where the folder holds none)."""
        if resume_from_checkpoint is True:
            resume_from_checkpoint = get_last_checkpoint(self.args.output_dir)
        if resume_from_checkpoint:
            path = os.path.join(resume_from_checkpoint, METHODS_STATE_NAME.format(rank=self.loop.state.rank))
            if not os.path.isfile(path):
                raise ValueError(
                    f"{resume_from_checkpoint}: no {os.path.basename(path)}: it was not written by MethodsTrainer; "
                    "resume from a checkpoint that MethodsTrainer saved"
                )
            self.loop.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
        return super().train(resume_from_checkpoint=resume_from_checkpoint or None, **kwargs)

    def training_step(
        self, model: torch.nn.Module, inputs: dict[str, Any], num_items_in_batch: Any = None
    ) -> torch.Tensor:
        """One batch through the loop: ``BATCH_START`` ... ``AFTER_BACKWARD`` (the step's events come
        from the Trainer's callbacks). Returns the loss, detached, as ``transformers.Trainer`` does."""
        loop = self.loop
        model.train()
        if callable(getattr(self.optimizer, "train", None)):
            self.optimizer.train()
        loop.batch(self._prepare_inputs(inputs))
        with self.compute_loss_context_manager():  # the Trainer's autocast (args.bf16, args.fp16)
            loop.forward(lambda batch: self._call(model, batch))
            loss = loop.loss()
        if self.args.n_gpu > 1:  # nn.DataParallel: a model's own loss comes per device
            loop.state.loss = loss = loss.mean()
        loop.backward(self.accelerator.backward)
        return loss.detach()

    def compute_loss(
        self,
        model: torch.nn.Module,
        inputs: dict[str, Any],
        return_outputs: bool = False,
        num_items_in_batch: Any = None,
    ) -> Any:
        """Evaluation's loss: ``loss_fn`` on the logits and the target, as in training (the model's
        own with ``MODEL_LOSS``)."""
        loop = self.loop
        if loop.state.loss_fn == MODEL_LOSS:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        outputs = self._call(model, inputs)
        loss = total_loss(loop.loss_of(outputs, loop.item(inputs, "target_key")))
        return (loss, outputs) if return_outputs else loss

    def _set_signature_columns_if_needed(self) -> None:
        """The columns ``remove_unused_columns`` keeps: the model's arguments and the labels, as
        ``transformers.Trainer`` keeps them, and the input key where the model is called on
        ``batch[input_key]`` (its name need not be an argument's, and dropped it would never reach
        the methods or the model)."""
        super()._set_signature_columns_if_needed()
        key = self.loop.input_key
        if isinstance(key, str) and key not in self._signature_columns:
            self._signature_columns.append(key)

    def _call(self, model: torch.nn.Module, batch: Mapping[str, Any]) -> Any:
        loop = self.loop
        if loop.input_key is not None:
            return model(loop.item(batch, "input_key"))
        if loop.state.loss_fn == MODEL_LOSS:
            return model(**batch)
        return model(**{k: v for k, v in batch.items() if k != loop.target_key})

    # -- evaluation ------------------------------------------------------------------------------

    @contextlib.contextmanager
    def evaluating(self) -> Iterator[torch.nn.Module]:
        """``EVAL_START``; the block, with EMA's (or SWA's) average in ``trainer.model``; then,
        even after an error, ``EVAL_END``: the training weights back. Nested, it swaps once."""
        self._evaluations += 1
        try:
            if self._evaluations > 1:
                yield self.loop.model
            else:
                with self.loop.evaluating() as model:
                    yield model
        finally:
            self._evaluations -= 1

    def evaluate(self, *args: Any, **kwargs: Any) -> dict[str, float]:
        """``transformers.Trainer.evaluate`` inside :meth:`evaluating`."""
        with self.evaluating():
            return super().evaluate(*args, **kwargs)

    def predict(self, *args: Any, **kwargs: Any) -> Any:
        """``transformers.Trainer.predict`` inside :meth:`evaluating`."""
        with self.evaluating():
            return super().predict(*args, **kwargs)

    def prediction_step(self, *args: Any, **kwargs: Any) -> Any:
        """``EVAL_BATCH_START``; ``transformers.Trainer.prediction_step``; ``EVAL_BATCH_END``."""
        self.loop.run_event(Event.EVAL_BATCH_START)
        outputs = super().prediction_step(*args, **kwargs)
        self.loop.run_event(Event.EVAL_BATCH_END)
        return outputs

    # -- checkpoints -----------------------------------------------------------------------------

    def _save_checkpoint(self, model: torch.nn.Module, trial: Any) -> None:
        """The Trainer's checkpoint, and beside it each process's methods' state and counters."""
        folder = os.path.join(self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
        super()._save_checkpoint(model, trial)
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, METHODS_STATE_NAME.format(rank=self.loop.state.rank))
        handle, partial = tempfile.mkstemp(dir=folder, suffix=".partial")
        with os.fdopen(handle, "wb") as file:
            torch.save(self.loop.state_dict(), file)
        os.replace(partial, path)


class _MethodEvents(transformers.TrainerCallback):
    """The events that the Hugging Face Trainer's own hooks reach (the module's table)."""

    def __init__(self, loop: Loop):
        self.loop = loop

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        loop, optimizer, scheduler = self.loop, kwargs.get("optimizer"), kwargs.get("lr_scheduler")
        loader = kwargs.get("train_dataloader")
        if optimizer is not None:
            loop.optimizer = getattr(optimizer, "optimizer", optimizer)  # the torch optimizer Accelerate wraps
        loop.state.schedulers = (scheduler,) if scheduler is not None else ()
        loop.state.max_duration = Duration.parse(f"{state.max_steps}ba")
        loop.state.train_dataloader = loader
        try:
            loop.state.dataloader_len = len(loader)
        except TypeError:
            loop.state.dataloader_len = None
        loop.start()

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.loop.run_event(Event.BEFORE_OPTIMIZER_STEP)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.loop.batch_end()

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        loop = self.loop
        trained = loop.timestamp.batch_in_epoch
        length = loop.state.dataloader_len
        if trained and (trained == length or (length is None and not control.should_training_stop)):
            loop.epoch_end()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.loop.end()


def _refuse(args: transformers.TrainingArguments, algorithms: Sequence[Algorithm], kwargs: Mapping[str, Any]) -> None:
    """Refuse, in one line, what the adapter cannot run correctly (the class's docstring)."""
    from ..sam import SAM

    if args.gradient_accumulation_steps > 1:
        raise ValueError(
            f"gradient_accumulation_steps={args.gradient_accumulation_steps}: MethodsTrainer runs the methods once per "
            "optimizer step and batch; use gradient_accumulation_steps=1 with a larger per_device_train_batch_size"
        )
    for algo in algorithms:
        if isinstance(algo, SAM):
            raise ValueError(
                "SAM under MethodsTrainer: it replaces the optimizer and takes a second forward and backward inside "
                "the step, which the Hugging Face Trainer makes itself; use algorithms.core.Trainer or a Loop"
            )
    if args.deepspeed:
        raise ValueError(
            "args.deepspeed: DeepSpeed steps inside its backward, before BEFORE_OPTIMIZER_STEP; leave it out"
        )
    if kwargs.get("model_init") is not None:
        raise ValueError(
            "model_init: the Trainer would build a new model after Event.INIT changed this one; pass model"
        )
    if args.label_smoothing_factor:
        raise ValueError(
            f"label_smoothing_factor={args.label_smoothing_factor}: the loss is loss_fn's; pass "
            "algorithms=[LabelSmoothing(...)] and label_smoothing_factor=0"
        )
    if kwargs.get("compute_loss_func") is not None:
        raise ValueError("compute_loss_func: the loss is MethodsTrainer(loss_fn=...)'s; pass your loss as loss_fn")


def _duration(args: transformers.TrainingArguments) -> str:
    """What INIT sees as the run's length; the Trainer's ``max_steps`` replaces it at ``FIT_START``."""
    if args.max_steps > 0:
        return f"{args.max_steps}ba"
    return f"{max(1, math.ceil(args.num_train_epochs))}ep"
