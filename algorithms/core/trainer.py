"""An event-driven training loop that the methods plug into.

Example::

    >>> import torch
    >>> from algorithms import MixUp
    >>> from algorithms.core import Trainer
    >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 3))
    >>> data = [(torch.randn(4, 3, 2, 2), torch.randint(0, 3, (4,))) for _ in range(2)]
    >>> trainer = Trainer(model, data, max_duration="1ep", algorithms=[MixUp(alpha=0.2)], seed=0)
    >>> trainer.fit()
    >>> sorted(trainer.eval(data))
    ['accuracy', 'loss']
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from ..targets import class_indices
from .adapters import check_adapter_model, trainable_parameters
from .algorithm import Algorithm
from .distributed import all_reduce_sum, local_device
from .event import Event
from .loop import MODEL_LOSS, Loop, check_algorithms, check_microbatch_size
from .loss import total_loss
from .method_log import MethodLog, check_method_log
from .outputs import model_logits
from .precision import autocast, check_precision, model_dtype
from .state import rng_state, set_rng_state
from .strategies import Strategy, _default_optimizer, strategy
from .time import Duration, TimeUnit

__all__ = ["MODEL_LOSS", "Trainer"]


log = logging.getLogger(__name__)


class Trainer:
    """Train ``model`` on ``(input, target)`` batches, running ``algorithms`` at each event.

    Args:
        model: the network; moved to ``device`` (and cast for ``fp16``/``bf16``). A ``peft`` model
            (``peft.get_peft_model(model, LoraConfig(...))``) trains its adapter alone, and its
            checkpoints hold the adapter alone (:mod:`algorithms.core.adapters`); it is refused under
            ``fsdp`` and ``deepspeed``, whose checkpoints hold the whole model.
        train_dataloader: an iterable of batches: tuples, lists or dicts holding the input and
            the target at ``input_key`` and ``target_key``; re-iterated every epoch.
        max_duration: how long to train: ``"2ep"``, ``"100ba"``, ``"512sp"`` or ``"65536tok"``
            (samples and tokens as the loader gives them, before any method changes the batch,
            summed over the ranks).
        optimizer: an optimizer, or a function ``params -> optimizer`` that the Trainer calls
            after wrapping the model (required for ``fsdp``, whose sharded parameters exist only
            then) with the model's trainable parameters (``requires_grad=True``: a ``peft`` model's
            adapter); defaults to SGD (lr 0.01, momentum 0.9) over those.
        loss_fn: ``loss_fn(logits, targets)``, where ``logits`` are what the model returned (a
            tensor), its ``"logits"`` (a dict) or its ``.logits`` (an output object), in float32;
            ``"model"`` uses the loss the model computed itself (``outputs["loss"]`` or
            ``outputs.loss``: a Hugging Face model given its labels, with ``input_key=None``), and
            then refuses the methods that change the loss from the logits and the target
            (``Algorithm.needs_loss_fn``: Label Smoothing, CutMix, MixUp, Selective Backprop). The
            default cross-entropy takes class indices or class probabilities, so mixed (soft)
            targets work unchanged. It may return a tensor, a dict of tensors (its ``"total"``, or
            the sum of its values' means, is backpropagated, as in Composer) or a tuple of tensors
            (the sum of their means), in every parallel mode. Each part's mean is
            ``state.loss_parts[name]`` after the loss (a tuple's by position), logged at DEBUG by
            ``algorithms.core.trainer`` per batch.
        algorithms: run at every event where their ``match`` is true, in this order after the
            Engine's ordering rules (:data:`~algorithms.core.engine.ORDER_RULES`: Selective Backprop
            before the mixing methods, say), and last-in first-out at a closing event
            (``AFTER_LOSS``, ``EVAL_END``...), so what one method changed and restores unwinds in
            order. A list that cannot be correct (two methods that interpolate the loss; EMA with
            SWA), or a method the parallel mode cannot run (``Algorithm.unsupported_parallel``), is
            refused with a ValueError before anything is done. Each algorithm starts afresh at
            ``Event.INIT`` (:meth:`~algorithms.core.Algorithm.reset`), so a list reused for a second
            Trainer (a seed sweep) carries nothing over.
        eval_dataloader: batches for :meth:`eval` when it is called without any.
        precision: one of ``fp32``, ``fp16``, ``bf16``, ``amp_fp16``, ``amp_bf16``.
        device: defaults to CUDA where available (this process's own GPU under ``torchrun``),
            else the CPU.
        parallel: one of ``single``, ``dp``, ``ddp``, ``fsdp``, ``deepspeed``, ``accelerate``
            (Hugging Face Accelerate, configured by ``accelerate launch --config_file``), each a
            strategy (:mod:`algorithms.core.strategies`), or a strategy object with its mode's own
            options, e.g. ``DeepSpeed(zero_stage=1)`` (``"deepspeed"`` is ZeRO stage 2). Under
            ``torchrun`` the distributed modes create the process group when the process has
            none, and :meth:`close` leaves it again (a group the script made stays the script's);
            algorithms see this process's
            ``state.rank`` and ``state.world_size`` from ``Event.INIT`` on, and INIT runs before
            the model is wrapped, so a method that changes the model changes what gets wrapped.
            The data loader's batches are per process (use a ``DistributedSampler``; its epoch is
            set every epoch).
        seed: seeds torch's global generator and the algorithms' generators. Every rank seeds
            torch with ``seed`` before ``Event.INIT``, so modules a method adds there start alike
            on every rank; once the model is wrapped, rank ``r`` of a distributed run reseeds with
            ``seed + r``, so ranks draw different dropout masks and loader worker seeds (as
            Composer's Trainer seeds them).
        schedulers: learning-rate schedulers, stepped after every optimizer step, or at every
            epoch's end with ``step_schedulers_every_batch=False``. ``ReduceLROnPlateau``, which
            needs a metric at every step, is refused: step it yourself after :meth:`eval`.
        step_schedulers_every_batch: step the schedulers after every optimizer step (True, the
            default) or once at every epoch's end (False: ``StepLR(step_size=1)`` then halves the
            rate per epoch), as Composer's option of that name.
        grad_clip_norm: clip the gradient norm to this value (after unscaling under AMP). The
            algorithms at ``BEFORE_OPTIMIZER_STEP`` see these unscaled (and clipped) gradients,
            except under ``parallel="deepspeed"``, whose engine unscales, clips and steps inside its
            own step: there they see the gradients as its backward left them (in ``fp16``, scaled
            by DeepSpeed's loss scale).
        logger: a :class:`~algorithms.core.MethodLog` to record what each algorithm did (its
            hyperparameters, once, and its activity counters), or ``None`` for a new one; it is
            ``trainer.method_log``, read after :meth:`fit` (``records``, ``acted(label)``,
            ``summary()``). Anything else is a TypeError.
        input_key: where the model's input is in each batch: an index of a tuple or list
            batch, or a key of a dict batch such as ``"input_ids"``; the model is called on
            ``batch[input_key]`` and its batch size counts the samples. ``None`` calls the model on
            the whole batch, ``model(**batch)`` for a dict (a Hugging Face model given its
            ``input_ids``, ``attention_mask`` and ``labels``) or ``model(*batch)``, and counts
            the samples of its first tensor.
        target_key: where the target is in each batch, e.g. ``"labels"``; the loss is
            ``loss_fn(outputs, batch[target_key])``. Give the methods the same keys.
        microbatch_size: gradient accumulation, as Composer's ``device_train_microbatch_size``: each
            batch, as the methods left it after the data loader, is trained in microbatches of this
            many examples (the last may hold fewer), each forward and backward in turn, then one
            optimizer step on the summed gradients (each microbatch's loss weighted by its share
            of the batch's examples), so a batch needs the activation memory of a microbatch only.
            See :meth:`Loop.accumulate <algorithms.core.Loop.accumulate>`. What happens once per
            batch (optimizer step): ``BATCH_START``, ``AFTER_DATALOADER`` (the mixing, selecting and
            resizing methods act on the whole batch), ``BEFORE_OPTIMIZER_STEP``,
            ``AFTER_TRAIN_BATCH``, ``BATCH_END``, the schedulers, the timestamp's batches and samples;
            per microbatch: ``BEFORE_FORWARD`` to ``AFTER_BACKWARD`` (``state.batch`` is the
            microbatch, ``state.microbatch_rows`` its rows), the methods' counters counting each
            batch once. For methods that treat examples alike, K microbatches of B/K examples end
            where one batch of B does, up to float rounding (a batch norm normalizes each
            microbatch on its own). Under ``ddp``, ``fsdp`` and ``accelerate`` the gradients are
            synchronized in the last microbatch's backward only, and under ``deepspeed`` only that
            backward is an accumulation boundary (``set_gradient_accumulation_boundary``), where
            ZeRO reduces them. None (default): no accumulation. Refused: SAM, and LabelSmoothing
            before CutMix or MixUp (:func:`~algorithms.core.check_algorithms`).
        load_path: resume from a checkpoint that :meth:`save_checkpoint` wrote (a local path, or a
            URL read through fsspec), made with the same model, algorithms (in the same order),
            optimizers (with as many parameter groups), schedulers, precision, parallel mode and
            number of processes: :meth:`fit` then goes on where that run stopped, skipping the
            batches of its epoch already trained, exactly as the uninterrupted run would where the
            loader draws the same batches from the same generators: a list, or a ``DataLoader``,
            sequential or shuffled (by its own generator, torch's global one or a
            ``DistributedSampler``), with or without workers. The interrupted epoch's loader is
            started from the generators it started from, and the checkpoint's generators are put
            back just before the first batch trained. An epoch ends only where its loader is
            exhausted (or a sized loader's last batch is trained), so a run stopped mid-epoch by
            ``max_duration`` resumes within it. The optimizers' parameter groups and the parameters' ``requires_grad``
            flags are put back as saved (Layer Freezing's frozen layers stay frozen). Made with
            another setup, written by another checkpoint version, or not a complete checkpoint, it
            is refused with a ``ValueError`` of one line naming the file, before any weight,
            optimizer state or generator is changed. Every parallel mode resumes (each strategy
            writes and reads its own form: one file, or DeepSpeed's folder).
    """

    _closed = False  # until close()
    strategy: Strategy

    def __init__(
        self,
        model: torch.nn.Module,
        train_dataloader: Iterable[Any],
        max_duration: str | Duration,
        optimizer: torch.optim.Optimizer | None = None,
        loss_fn: Callable[..., torch.Tensor] | str = F.cross_entropy,
        algorithms: Sequence[Algorithm] = (),
        eval_dataloader: Iterable[Any] | None = None,
        precision: str = "fp32",
        device: str | torch.device | None = None,
        seed: int | None = None,
        schedulers: Sequence[Any] = (),
        step_schedulers_every_batch: bool = True,
        grad_clip_norm: float | None = None,
        logger: MethodLog | None = None,
        parallel: str | Strategy = "single",
        input_key: int | str | None = 0,
        target_key: int | str = 1,
        load_path: str | Path | None = None,
        microbatch_size: int | None = None,
    ):
        method_log = check_method_log(logger, "Trainer(logger=...)")
        check_precision(precision)
        duration = Duration.parse(max_duration)
        if duration.unit is TimeUnit.DURATION:
            raise ValueError(
                f"max_duration={max_duration!r}: give epochs, batches, samples or tokens, e.g. '2ep' or '100ba'"
            )
        if grad_clip_norm is not None and grad_clip_norm <= 0:
            raise ValueError(f"grad_clip_norm={grad_clip_norm!r} must be positive")
        mode = strategy(parallel)
        check_adapter_model(model, mode.name)
        if microbatch_size is not None:
            microbatch_size = check_microbatch_size(microbatch_size, "Trainer(microbatch_size=...)")
        self.microbatch_size = microbatch_size
        check_algorithms(algorithms, loss_fn, mode.refusal_modes, microbatch_size)
        for scheduler in schedulers:
            if isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
                raise ValueError(
                    "schedulers: ReduceLROnPlateau steps on a metric, which the Trainer does not compute "
                    "while training: leave it out and call scheduler.step(trainer.eval()['loss']) yourself"
                )
        device = torch.device(device) if device is not None else local_device()
        self.strategy: Strategy = mode
        mode.bind(precision, device, grad_clip_norm)
        self.strategy.check(optimizer)
        rank, world_size = self.strategy.connect()

        model = model.to(device=device, dtype=model_dtype(precision))
        self.train_dataloader = train_dataloader
        self.eval_dataloader = eval_dataloader
        self.grad_clip_norm = grad_clip_norm
        self.parallel = self.strategy.name
        self.input_key = input_key
        self.target_key = target_key
        # The batches run through a Loop, as a loop of the user's own does: seeds torch, runs INIT.
        self.loop = Loop(
            model,
            algorithms,
            max_duration=duration,
            optimizer=optimizer if isinstance(optimizer, torch.optim.Optimizer) else None,
            loss_fn=loss_fn,
            schedulers=schedulers,
            step_schedulers_every_batch=step_schedulers_every_batch,
            train_dataloader=train_dataloader,
            precision=precision,
            seed=seed,
            input_key=input_key,
            target_key=target_key,
            logger=method_log,
            strategy=self.strategy,
            ranks=(rank, world_size),
        )
        self.loop.label = "Trainer"
        self.state, self.engine, self.method_log = self.loop.state, self.loop.engine, method_log
        # Wrap the (possibly INIT-changed) model for the parallel mode, then build the optimizer over
        # its trainable parameters (a peft model's frozen base gets no optimizer state).
        if not isinstance(optimizer, torch.optim.Optimizer):
            optimizer = _over_trainable(optimizer or _default_optimizer)
        self.state.model, self.loop.forward_module, optimizer = self.strategy.wrap(
            self.state.model,
            optimizer,
            unused_parameters=any(a.unused_parameters for a in self.engine.algorithms),
            batch_size=getattr(train_dataloader, "batch_size", None),
        )
        self.state.optimizers = (optimizer,)
        if seed is not None and world_size > 1:  # the same weights on every rank; different draws from here
            torch.manual_seed(seed + rank)
        self._resume_batches = 0  # batches of the current epoch a resumed run has trained already
        if load_path is not None:
            self.load_checkpoint(load_path)

    @property
    def scaler(self) -> torch.amp.GradScaler:
        """The loss scaler: enabled under ``amp_fp16`` (not under DeepSpeed, which scales itself)."""
        return self.strategy.scaler

    def save_checkpoint(self, path: str | Path, overwrite: bool = False) -> str | Path:
        """Write everything a resumed run needs (``State.state_dict()`` and this run's precision,
        parallel mode and number of processes; see :mod:`algorithms.core.checkpoint`) to ``path``,
        atomically; an existing file is replaced only with ``overwrite``. ``path`` is a local path,
        or a ``str`` URL (``s3://``, ``gs://``, any ``<scheme>://``) written through fsspec
        (``pip install 'methods-library[fsspec]'``; refused in one line without it, before anything
        is written). Returns ``path`` as given. Resume with ``Trainer(..., load_path=path)``.

        Under a distributed mode every rank calls it: rank 0 writes one file holding once what is
        the same on every rank, and every rank's generators apart (DeepSpeed: a folder, DeepSpeed's
        own, each rank's ZeRO partition in a file of its own, on a local path only)."""
        return self.strategy.save(path, self.state, overwrite)

    def load_checkpoint(self, path: str | Path) -> None:
        """Go on from the checkpoint at ``path`` (what ``load_path`` does): read it, refuse it with a
        :class:`~algorithms.core.checkpoint.CheckpointError` naming the file before anything changes
        unless it fits this Trainer, then load it; :meth:`fit` then trains what is left."""
        self.strategy.load(path, self.state)
        self._resume_batches = self.state.timestamp.batch_in_epoch

    def close(self) -> None:
        """End this Trainer: its strategy releases what it holds beyond the reach of Python's
        garbage collector, and a process group the Trainer created is left (with the safeguards of
        :func:`~algorithms.core.distributed.destroy_process_group`); one the script made is left to
        the script. After it, :meth:`fit` is refused; :meth:`eval` still works, on this process's
        batches alone once the group is gone. Calling it again does nothing; ``with Trainer(...) as
        trainer:`` calls it at the end of the block.

        DeepSpeed's engine hooks every parameter's gradient, and those hooks hold the engine itself
        in a cycle the collector cannot free, so an engine left open lives until the interpreter
        shuts down and is destroyed there, with its process groups, where a rank can abort after it
        has finished its work. The engine's own ``destroy`` needs the process group, so it runs
        here, before the group is left.
        """
        self.strategy.close()
        self._closed = True

    def _refuse_if_closed(self) -> None:
        if self._closed:
            raise RuntimeError(
                "fit() after close(): this Trainer has released what it trained with; build a new Trainer to train more"
            )

    def __enter__(self) -> Trainer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -----------------------------------------------------------------------------------------

    def _to_device(self, batch: Any) -> Any:
        dtype = model_dtype(self.state.precision)

        def move(x: Any) -> Any:
            if isinstance(x, torch.Tensor):
                x = x.to(self.state.device, non_blocking=True)
                return x.to(dtype) if x.is_floating_point() and dtype != torch.float32 else x
            if isinstance(x, (list, tuple)):
                return type(x)(move(v) for v in x)
            if isinstance(x, dict):
                return {k: move(v) for k, v in x.items()}
            return x

        return move(batch)

    @property
    def step_schedulers_every_batch(self) -> bool:
        return self.loop.step_schedulers_every_batch

    def fit(self) -> None:
        """Train until ``max_duration``.

        Each batch: ``BATCH_START``; the batch is moved to the device and its samples counted (the
        loader's batch, before any method changes it, summed over the ranks); ``AFTER_DATALOADER``;
        the forward and loss pass (:meth:`_loss_pass`); the backward, where an optimizer with
        ``first_step`` (SAM's) takes its second gradient through the same loss pass; the optimizer
        step; the schedulers (with ``step_schedulers_every_batch``); ``BATCH_END``. An epoch ends
        when the loader is exhausted (or a sized loader's last batch is trained): then the
        schedulers step where they are stepped per epoch, and ``EPOCH_END`` runs.
        """
        self._refuse_if_closed()
        state, loop = self.state, self.loop
        loop.start()
        while not loop.done():
            skip, self._resume_batches = self._resume_batches, 0  # a resumed run's epoch, part done
            state.timestamp.batch_in_epoch = skip
            sampler = getattr(self.train_dataloader, "sampler", None)
            if hasattr(sampler, "set_epoch"):  # a DistributedSampler reshuffles per epoch
                sampler.set_epoch(state.timestamp.epoch)
            if not skip:
                state.restore_rng()  # resumed at an epoch's end: the checkpoint's generators, from here on
                loop.epoch_start()
            state.model.train()
            if skip and state.epoch_rng is not None:
                set_rng_state(state.epoch_rng, self.train_dataloader)  # the loader starts as the interrupted run's did
            else:
                state.epoch_rng = rng_state(self.train_dataloader)  # what iter(loader) draws its order and seeds from
            empty, exhausted = True, True
            batches = iter(self.train_dataloader)
            for i, batch in enumerate(batches):
                empty = False
                if i < skip:
                    continue
                state.restore_rng()  # resumed: the checkpoint's generators, once the loader has passed what was trained
                self._train_batch(batch)
                if state.max_duration.unit is not TimeUnit.EPOCH and loop.done():
                    exhausted = False
                    if state.timestamp.batch_in_epoch == state.dataloader_len:
                        next(batches, None)  # ended with the epoch: its loader finishes as in a longer run (a
                        # sampler of its own draws once more as it stops), so a resumed run's next epoch alike
                    break
            if empty:
                raise ValueError("train_dataloader yielded no batches — check the data set")
            # A duration reached mid-epoch leaves the epoch open: a resumed run goes on within it.
            if state.timestamp.batch_in_epoch == state.dataloader_len or (exhausted and state.dataloader_len is None):
                loop.epoch_end()
                log.info("epoch %d done (%d batches)", state.timestamp.epoch, state.timestamp.batch)
            elif exhausted:
                raise ValueError(
                    f"train_dataloader yielded {state.timestamp.batch_in_epoch} batches where its len() is "
                    f"{state.dataloader_len}: give a loader whose len() is the number of batches it yields"
                )
        loop.end()

    def _train_batch(self, batch: Any) -> None:
        """One batch through the Loop: moved to the device (floating tensors cast to ``fp16`` or
        ``bf16`` in those precisions), then :meth:`Loop.train_step <algorithms.core.Loop.train_step>`'s
        calls with the parallel mode's backward and step."""
        loop, state = self.loop, self.state
        loop.batch(self._to_device(batch))
        if self.microbatch_size is not None:
            loop.accumulate(self.microbatch_size)
            loop.step()
            return
        loop.forward()
        loop.loss()
        if state.loss_parts and log.isEnabledFor(logging.DEBUG):  # a host sync, only when asked
            parts = ", ".join(f"{name} {float(value):.6g}" for name, value in state.loss_parts.items())
            log.debug("batch %d: loss %.6g (%s)", state.timestamp.batch, float(state.loss.detach()), parts)
        loop.backward()
        loop.step()

    @torch.no_grad()
    def eval(self, dataloader: Iterable[Any] | None = None) -> dict[str, float]:
        """Accuracy (top-1) and mean loss over ``dataloader`` (default: ``eval_dataloader``).

        The loss is averaged over samples (the input's batch size). The accuracy is the fraction
        of labelled positions whose most likely class is right: one per example for targets
        ``(N,)``, one per pixel or token for dense targets; negative labels (ignored positions)
        are not counted.

        In a distributed run each process evaluates the batches its loader yields and the sums
        are all-reduced, so with a ``DistributedSampler`` every rank returns the global figures.
        """
        dataloader = dataloader if dataloader is not None else self.eval_dataloader
        if dataloader is None:
            raise ValueError("eval() needs a dataloader: pass one or give the Trainer eval_dataloader")
        state, loop = self.state, self.loop
        # Accumulate on the device; one host transfer at the end, not one per batch.
        correct, labelled, loss_sum = (torch.zeros((), device=state.device, dtype=torch.float64) for _ in range(3))
        count = 0
        with loop.evaluating():  # after an error too: the training mode back, and the methods' swaps undone
            for batch in dataloader:
                self.engine.run_event(Event.EVAL_BATCH_START)
                batch = self._to_device(batch)
                targets = loop.item(batch, "target_key")
                with autocast(state.precision, state.device):
                    returned = loop.call(state.model, batch)
                outputs = model_logits(returned).float()
                n = loop.batch_size(batch)
                loss_sum += total_loss(loop.loss_of(returned, targets)).double() * n
                if _classes_last(outputs, targets):  # a language model's logits (N, T, V) for labels (N, T)
                    outputs = outputs.movedim(-1, 1)
                labels = class_indices(targets, outputs.shape)
                counted = labels >= 0
                correct += ((outputs.argmax(dim=1) == labels) & counted).sum()
                labelled += counted.sum()
                count += n
                self.engine.run_event(Event.EVAL_BATCH_END)
        totals = torch.stack(
            [correct, labelled, loss_sum, torch.tensor(float(count), dtype=torch.float64, device=state.device)]
        )
        correct, labelled, loss_sum, count = all_reduce_sum(totals).tolist()
        if count == 0:
            raise ValueError("the eval dataloader yielded no samples")
        accuracy = correct / labelled if labelled else float("nan")
        return {"accuracy": accuracy, "loss": loss_sum / count}


def _over_trainable(make: Callable[[Any], torch.optim.Optimizer]) -> Callable[[Any], torch.optim.Optimizer]:
    """``make`` called with the trainable ones of the parameters a strategy passes (in their order)."""

    def over_trainable(params: Any) -> torch.optim.Optimizer:
        return make(trainable_parameters(params))

    return over_trainable


def _classes_last(outputs: torch.Tensor, targets: torch.Tensor) -> bool:
    """Whether ``outputs`` hold their classes on the last dim for class-index ``targets``: the
    shape ``(*targets.shape, C)``, and not also the classes-on-dim-1 shape ``(N, C, *rest)``."""
    if targets.is_floating_point() or outputs.ndim != targets.ndim + 1 or outputs.ndim < 3:
        return False
    dim1 = outputs.shape[0] == targets.shape[0] and outputs.shape[2:] == targets.shape[1:]
    return not dim1 and outputs.shape[:-1] == targets.shape
