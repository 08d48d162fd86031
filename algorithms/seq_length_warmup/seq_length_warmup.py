"""Sequence Length Warmup: train a language model on short sequences first, lengthening them
linearly to the full length over the first part of training.

Li, Zhang and He, "The Stability-Efficiency Dilemma: Investigating Sequence Length Warmup for
Training GPT Models", NeurIPS 2022. Names and signatures are ``composer``'s.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

import torch

from ..core.algorithm import Algorithm
from ..core.event import Event
from ..core.parameters import Boolean, Integer, Parameters, Real, Rule
from ..core.state import State
from ..core.time import TimeUnit

__all__ = ["SeqLengthWarmup", "set_batch_sequence_length"]

PARAMETERS = Parameters(
    Rule(
        lambda min_seq_length, max_seq_length: max_seq_length >= min_seq_length,
        "max_seq_length must be >= min_seq_length",
    ),
    duration=Real(low=0, high=1, note="The fraction of training over which the length rises."),
    min_seq_length=Integer(low=1, note="The length at the start."),
    max_seq_length=Integer(low=1, note="The length from duration on, at least min_seq_length."),
    step_size=Integer(low=1, note="The length rises in multiples of this."),
    truncate=Boolean(note="Cut the sequences; False reshapes them into more, shorter rows."),
    preserve_end_of_sequence=Boolean(note="Keep each row's last token when truncating."),
)
#: set_batch_sequence_length's own argument.
_LENGTH = Integer(low=1, note="The sequence length to give the batch.")


def set_batch_sequence_length(
    batch: Mapping[str, torch.Tensor], curr_seq_len: int, truncate: bool = True, preserve_end_of_sequence: bool = False
) -> dict[str, torch.Tensor]:
    """A dict batch whose sequences are ``curr_seq_len`` long, as ``composer.functional.set_batch_sequence_length``.

    The batch's sequence length ``T`` is dimension 1 of its first tensor with two or more
    dimensions; with ``curr_seq_len >= T`` the batch is returned unchanged (as a new dict).

    - ``truncate=True``: every tensor ``(N, T, ...)`` keeps its first ``curr_seq_len`` positions.
      Labels that are the inputs shifted by one stay aligned with them position by position.
    - ``truncate=False``: every tensor, all of ``input_ids``' shape ``(N, T)``, is read as one
      stream of ``N * T`` tokens in row order and cut into rows of ``curr_seq_len``; the last
      ``(N * T) % curr_seq_len`` tokens (fewer than one row) are dropped, none when
      ``curr_seq_len`` divides ``N * T``. Rows may then start inside an original row.
    - ``preserve_end_of_sequence=True`` (with ``truncate``): each row's last token is written to its
      last kept position, so an end-of-sequence token survives. The last token is at
      ``attention_mask.sum(1) - 1`` where the batch has an ``attention_mask`` (right padding), else
      at ``T - 1``. Shifted labels are then no longer the next input at the position before it.

    Args:
        batch: a mapping of tensors such as ``{"input_ids": (N, T), "labels": (N, T)}``; not modified.
        curr_seq_len: the sequence length to give the batch, ``>= 1``.
        truncate: cut the sequences, or reshape them into more, shorter rows.
        preserve_end_of_sequence: keep each row's last token when truncating; ignored otherwise.

    Returns:
        A new dict with the same keys, its tensors on the batch's device with its dtypes.

    Example::

        >>> import torch
        >>> from algorithms.functional import set_batch_sequence_length
        >>> batch = {"input_ids": torch.tensor([[10, 11, 12, 13, 14, 15]])}
        >>> set_batch_sequence_length(batch, 3)["input_ids"]
        tensor([[10, 11, 12]])
        >>> set_batch_sequence_length(batch, 3, preserve_end_of_sequence=True)["input_ids"]
        tensor([[10, 11, 15]])
        >>> set_batch_sequence_length(batch, 3, truncate=False)["input_ids"]
        tensor([[10, 11, 12],
                [13, 14, 15]])
    """
    _LENGTH.check("curr_seq_len", curr_seq_len)
    PARAMETERS.check(truncate=truncate, preserve_end_of_sequence=preserve_end_of_sequence)
    if not isinstance(batch, Mapping) or not all(isinstance(v, torch.Tensor) for v in batch.values()):
        raise ValueError(
            f"batch: Sequence Length Warmup needs a mapping of tensors such as "
            f"{{'input_ids': (N, T), 'labels': (N, T)}}, got {type(batch).__name__}"
        )
    length = _sequence_length(batch)
    if curr_seq_len >= length:
        return dict(batch)
    if truncate:
        for key, value in batch.items():
            if value.ndim < 2:
                raise ValueError(
                    f"batch[{key!r}]: shape {tuple(value.shape)}; truncating needs every tensor "
                    "to have a sequence dimension (N, T, ...)"
                )
        if not preserve_end_of_sequence:
            return {k: v[:, :curr_seq_len].contiguous() for k, v in batch.items()}
        return _truncate_keeping_the_end(batch, curr_seq_len, length)
    if "input_ids" not in batch:
        raise ValueError("batch: reshaping (truncate=False) needs 'input_ids', whose shape every tensor shares")
    shape = batch["input_ids"].shape
    for key, value in batch.items():
        if value.shape != shape:
            raise ValueError(
                f"batch[{key!r}]: shape {tuple(value.shape)}; reshaping (truncate=False) needs every "
                f"tensor to have input_ids' shape {tuple(shape)}"
            )
    kept = (math.prod(shape) // curr_seq_len) * curr_seq_len
    return {k: v.reshape(-1)[:kept].reshape(-1, curr_seq_len) for k, v in batch.items()}


def _truncate_keeping_the_end(
    batch: Mapping[str, torch.Tensor], curr_seq_len: int, length: int
) -> dict[str, torch.Tensor]:
    mask = batch.get("attention_mask")
    n = next(iter(batch.values())).shape[0]
    device = next(iter(batch.values())).device
    rows = torch.arange(n, device=device)
    end = (
        mask.sum(dim=1).long() - 1
        if mask is not None
        else torch.full((n,), length - 1, dtype=torch.long, device=device)
    )
    kept_end = end.clamp(max=curr_seq_len - 1)
    out = {}
    for key, value in batch.items():
        cut = value[:, :curr_seq_len].clone()  # a copy: the caller's tensor is not written
        cut[rows, kept_end] = value[rows, end]
        out[key] = cut
    return out


class SeqLengthWarmup(Algorithm):
    """Sequence Length Warmup as a training-loop algorithm: after the data loader,
    :func:`set_batch_sequence_length` gives the batch the schedule's length (see
    :meth:`sequence_length`): ``min_seq_length`` at the start, rising linearly in steps of
    ``step_size`` to ``max_seq_length`` at ``duration`` of the run, then ``max_seq_length``.

    The batch must be a dict of ``(N, T)`` tensors (``input_ids``, ``labels``, ``attention_mask``);
    a batch already no longer than the length is left as it is.

    Args:
        duration: the fraction of training over which the length rises, in ``[0, 1]``.
        min_seq_length: the length at the start, ``>= 1``.
        max_seq_length: the length from ``duration`` on, ``>= min_seq_length``.
        step_size: the length rises in multiples of this, ``>= 1``.
        truncate: cut the sequences, or reshape them into more, shorter rows.
        preserve_end_of_sequence: keep each row's last token when truncating.

    It counts ``batches_shortened``, the batches it gave a shorter sequence length; none means it
    did not act.

    Example::

        >>> import torch
        >>> from algorithms import SeqLengthWarmup
        >>> from algorithms.core import Trainer
        >>> from algorithms.models import lm_loss, transformer_tiny
        >>> tokens = torch.randint(0, 50, (4, 65))
        >>> batches = [{"input_ids": tokens[:, :-1], "labels": tokens[:, 1:]}] * 4
        >>> warmup = SeqLengthWarmup(duration=0.5, min_seq_length=16, max_seq_length=64, step_size=16)
        >>> Trainer(transformer_tiny(50), batches, "4ba", loss_fn=lm_loss, input_key="input_ids",
        ...         target_key="labels", algorithms=[warmup], seed=0).fit()
    """

    activity = {"batches_shortened": "batches cut to a shorter sequence length"}

    def __init__(
        self,
        duration: float = 0.3,
        min_seq_length: int = 8,
        max_seq_length: int = 1024,
        step_size: int = 8,
        truncate: bool = True,
        preserve_end_of_sequence: bool = False,
    ):
        PARAMETERS.check(
            duration=duration,
            min_seq_length=min_seq_length,
            max_seq_length=max_seq_length,
            step_size=step_size,
            truncate=truncate,
            preserve_end_of_sequence=preserve_end_of_sequence,
        )
        self.duration = duration
        self.min_seq_length = min_seq_length
        self.max_seq_length = max_seq_length
        self.step_size = step_size
        self.truncate = truncate
        self.preserve_end_of_sequence = preserve_end_of_sequence

    def sequence_length(self, progress: Fraction | float) -> int:
        """The length at ``progress`` (the fraction of training done, in [0, 1]):
        ``min(min_seq_length + step_size * floor(progress / duration * n), max_seq_length)`` with
        ``n = (max_seq_length - min_seq_length) // step_size`` steps, and ``max_seq_length`` from
        ``progress >= duration`` on. Computed exactly (a float ``progress`` and ``duration`` are
        read as the decimals they print as), so a step lands on the batch the formula says."""
        progress = progress if isinstance(progress, Fraction) else Fraction(str(progress))
        duration = Fraction(str(self.duration))
        if progress >= duration:
            return self.max_seq_length
        steps = (self.max_seq_length - self.min_seq_length) // self.step_size
        length = self.min_seq_length + self.step_size * math.floor(progress / duration * steps)
        return min(length, self.max_seq_length)

    def match(self, event: Event, state: State) -> bool:
        return event is Event.AFTER_DATALOADER

    def apply(self, event: Event, state: State, logger: Any | None = None) -> None:
        if event is not Event.AFTER_DATALOADER:
            return  # at Event.INIT Composer's class runs a warm-up pass, which is not done here
        batch = state.batch
        state.batch = set_batch_sequence_length(
            batch, self.sequence_length(_progress(state)), self.truncate, self.preserve_end_of_sequence
        )
        if _sequence_length(state.batch) < _sequence_length(batch):
            self.report(logger, "batches_shortened")


def _sequence_length(batch: Mapping[str, torch.Tensor]) -> int:
    """Dimension 1 of the batch's first tensor with two or more dimensions (0 without one)."""
    return next((v.shape[1] for v in batch.values() if v.ndim > 1), 0)


def _progress(state: State) -> Fraction:
    """The fraction of training done before this batch, exactly where the duration is counted in
    batches, samples or (with a sized loader) epochs."""
    unit, total = state.max_duration.unit, int(state.max_duration.value)
    ts = state.timestamp
    if unit is TimeUnit.EPOCH and state.dataloader_len:
        done, total = ts.epoch * state.dataloader_len + ts.batch_in_epoch, total * state.dataloader_len
    elif unit in (TimeUnit.BATCH, TimeUnit.SAMPLE):
        done = ts.get(unit)
    else:
        return Fraction(str(state.progress()))
    return Fraction(min(done, total), total) if total else Fraction(1)
