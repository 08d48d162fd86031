"""Selective Backprop: train each step on the examples of the batch with the highest loss.

Jiang et al., "Accelerating Deep Learning by Focusing on the Biggest Losers", 2019.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
import torch.nn.functional as F

from ..core.algorithm import Algorithm
from ..core.distributed import unwrap_model
from ..core.event import Event
from ..core.outputs import model_logits
from ..core.parameters import Integer, Parameters, Real, Rule
from ..core.precision import autocast
from ..core.state import State

__all__ = ["SelectiveBackprop", "select_using_loss", "selection_probabilities", "should_selective_backprop"]

PARAMETERS = Parameters(
    Rule(lambda start, end: start < end, "the interval must end after it starts"),
    start=Real(low=0, high=1, high_open=True, note="The fraction of training at which selection begins."),
    end=Real(low=0, high=1, low_open=True, note="The fraction of training at which it stops."),
    keep=Real(low=0, high=1, low_open=True, note="The fraction of each selected batch kept for the step."),
    scale_factor=Real(
        low=0,
        high=1,
        low_open=True,
        note="The resize of the input for the scoring forward pass only; 1 scores at full size.",
    ),
    interrupt=Integer(
        low=2,
        also=(0,),
        note="A full batch every interrupt batches inside the interval; 0 never (1 would be every batch).",
    ),
)
#: should_selective_backprop's start and end: in any unit of time (Composer's tests use epochs).
_TIME = Real(note="A time in the caller's unit.")

#: ``F.interpolate``'s mode for an input of each rank when ``scale_factor < 1``.
_INTERPOLATION = {3: "linear", 4: "bilinear", 5: "trilinear"}


def should_selective_backprop(
    current_duration: float, batch_idx: int, start: float = 0.5, end: float = 0.9, interrupt: int = 2
) -> bool:
    """Whether to select on this batch, as ``composer.functional.should_selective_backprop``.

    True when ``start <= current_duration < end`` and the batch is not an interrupting one: with
    ``interrupt=0`` every batch in the interval selects; with ``interrupt=k`` every ``k``-th batch of
    the epoch (``batch_idx + 1`` a multiple of ``k``) is a full batch and the others select.

    Args:
        current_duration: how far training is, in the unit of ``start`` and ``end`` (the Trainer's
            class passes the fraction done, ``state.progress()``).
        batch_idx: the batch's index within its epoch, from 0.
        start: where the selection interval begins (included).
        end: where it ends (excluded); ``start <= end``.
        interrupt: a full batch every ``interrupt`` batches: an integer ``0`` (never) or ``>= 2``.

    Example::

        >>> from algorithms.selective_backprop import should_selective_backprop
        >>> [should_selective_backprop(0.6, i) for i in range(4)]
        [True, False, True, False]
        >>> should_selective_backprop(0.95, 0), should_selective_backprop(0.6, 1, interrupt=0)
        (False, True)
    """
    _check_interval(start, end)
    PARAMETERS.check(interrupt=interrupt)
    in_interval = start <= current_duration < end
    return in_interval and (interrupt == 0 or (batch_idx + 1) % interrupt != 0)


def select_using_loss(
    input: torch.Tensor | Mapping[str, Any],
    target: torch.Tensor,
    model: Callable[..., Any],
    loss_fun: Callable[..., torch.Tensor],
    keep: float = 0.5,
    scale_factor: float = 1,
    generator: torch.Generator | None = None,
    *,
    model_input: str | None = None,
) -> tuple[torch.Tensor | dict[str, Any], torch.Tensor]:
    """Keep the rows of a batch chosen by their loss, with the signature and the selection rule of
    ``composer.functional.select_using_loss``; unlike Composer, a module is scored in eval mode
    (below).

    Each example is scored by ``loss_fun(model(input), target, reduction="none")`` under
    ``torch.no_grad()`` (on ``input`` resized by ``scale_factor`` when it is below 1); where the
    model returns a dict with ``"logits"`` or an object with ``.logits`` (a Hugging Face
    ``ModelOutput``), ``loss_fun`` is given those logits (Composer gives it the output as it is).
    With the examples ranked from the lowest loss (``i = 0``) to the highest (``i = N - 1``), rank
    ``i`` has the percentile ``(i + 0.5) / N`` and is drawn with probability proportional to its
    percentile raised to ``1 / keep - 1``; ``round(keep * N)`` ranks (at least one) are drawn
    without replacement. When that is all ``N`` rows, the batch is returned as it is and the model
    is not called.

    A ``torch.nn.Module`` model is scored in eval mode, so its batch-norm running statistics are
    not updated and dropout does not perturb the ranking; each submodule's train/eval mode is
    restored afterwards.

    A batch may also be a mapping (a tokenizer's ``input_ids`` beside its ``attention_mask`` and
    ``token_type_ids``): the model is called as ``model(**input)``, as a Hugging Face model is, or
    on ``input[model_input]`` alone where ``model_input`` is given. Every tensor entry whose first
    dimension is the batch size ``N`` (``target.shape[0]``) is then kept at the same rows; any
    other entry (a scalar, a string, a tensor of another first dimension) is returned as it is.

    Args:
        input: the batch ``(N, ...)``; at least 3-D (``(N, C, L)``, ``(N, C, H, W)`` or
            ``(N, C, D, H, W)``) when ``scale_factor < 1``. Or a mapping of the batch's entries
            (above). Not modified.
        target: the targets ``(N, ...)``, row ``n`` belonging to ``input[n]``. Not modified.
        model: called on the (resized) input, or ``model(**input)`` for a mapping without
            ``model_input``; its outputs (their logits, above) go to ``loss_fun``.
        loss_fun: ``loss_fun(outputs, target, reduction="none")`` gives each example's loss,
            shape ``(N,)`` or ``(N, ...)`` (averaged per example), e.g.
            ``torch.nn.functional.cross_entropy``.
        keep: the fraction of the batch kept, in ``(0, 1]``.
        scale_factor: the spatial resize of the input for scoring only, in ``(0, 1]``; the kept
            rows are always the full-size input.
        generator: CPU torch generator for the draw of ranks (default: torch's global one).
        model_input: for a mapping ``input``, the entry the model is called on (and which
            ``scale_factor`` resizes); ``None`` calls ``model(**input)`` and needs
            ``scale_factor=1``. Only for mappings.

    Returns:
        ``(input[rows], target[rows])`` for the ``round(keep * N)`` selected rows, in the order
        drawn, with the input's and target's dtype and device; for a mapping, a ``dict`` of its
        entries in its order, those with ``N`` rows cut to the selected rows.

    Example::

        >>> import torch
        >>> import torch.nn.functional as F
        >>> from algorithms.functional import select_using_loss
        >>> model = torch.nn.Linear(4, 3)
        >>> x, y = torch.randn(10, 4), torch.randint(0, 3, (10,))
        >>> kept_x, kept_y = select_using_loss(x, y, model, F.cross_entropy, keep=0.3,
        ...                                    generator=torch.Generator().manual_seed(0))
        >>> kept_x.shape, kept_y.shape
        (torch.Size([3, 4]), torch.Size([3]))
    """
    PARAMETERS.check(keep=keep, scale_factor=scale_factor)
    check_loss_fun(loss_fun)
    batch = input if isinstance(input, Mapping) else None
    if batch is not None:
        if not isinstance(target, torch.Tensor) or target.ndim == 0:
            raise ValueError(
                f"target: a tensor with one row per example (N, ...) is needed, got "
                f"{tuple(target.shape) if isinstance(target, torch.Tensor) else type(target).__name__}"
            )
        if model_input is None:
            if scale_factor != 1:
                raise ValueError(
                    f"scale_factor={scale_factor!r}: resizing a mapping batch needs model_input, the entry "
                    "to resize and call the model on; or use scale_factor=1"
                )
            input = None
        elif model_input not in batch:
            raise KeyError(f"model_input={model_input!r}: the batch has no such entry (keys {list(batch)})")
        else:
            input = batch[model_input]
    elif model_input is not None:
        raise ValueError(
            f"model_input={model_input!r}: only for a mapping batch; the input is a {type(input).__name__}"
        )
    if input is not None and (not isinstance(input, torch.Tensor) or input.ndim == 0):
        where = f"input[{model_input!r}]" if batch is not None else "input"
        raise ValueError(
            f"{where}: a batch tensor (N, ...) is needed, got "
            f"{tuple(input.shape) if isinstance(input, torch.Tensor) else type(input).__name__}"
        )
    if input is not None and (
        not isinstance(target, torch.Tensor) or target.ndim == 0 or target.shape[0] != input.shape[0]
    ):
        raise ValueError(
            f"target: a tensor with one row per example of input ({input.shape[0]}) is needed, got "
            f"{tuple(target.shape) if isinstance(target, torch.Tensor) else type(target).__name__}"
        )
    if scale_factor != 1 and input.ndim not in _INTERPOLATION:
        raise ValueError(
            f"scale_factor={scale_factor!r}: resizing needs an input (N, C, L), (N, C, H, W) or "
            f"(N, C, D, H, W), got shape {tuple(input.shape)}; use scale_factor=1"
        )
    n = target.shape[0]
    kept = kept_count(n, keep)
    if kept == n:
        return (input if batch is None else dict(batch)), target
    with torch.no_grad(), _eval_mode(model):
        scored = input
        if scale_factor < 1:
            scored = F.interpolate(
                input,
                scale_factor=scale_factor,
                mode=_INTERPOLATION[input.ndim],
                align_corners=False,
                recompute_scale_factor=False,
            )
        outputs = model(**batch) if input is None else model(scored)
        losses = loss_fun(_logits_if_any(outputs), target, reduction="none")
        if not isinstance(losses, torch.Tensor) or losses.ndim == 0 or losses.shape[0] != n:
            shape = tuple(losses.shape) if isinstance(losses, torch.Tensor) else type(losses).__name__
            raise ValueError(
                f"loss_fun: with reduction='none' it must give one loss per example, shape ({n},) "
                f"or ({n}, ...), got {shape}"
            )
        if losses.ndim > 1:  # dense targets: an example's loss is the mean over its positions
            losses = losses.flatten(1).float().mean(dim=1)
        by_loss = torch.argsort(losses, stable=True)  # rank 0 is the lowest loss
        probabilities = selection_probabilities(n, keep)
        if generator is not None:
            probabilities = probabilities.to(generator.device)
        # The probabilities depend only on n and keep: draw the ranks on the host, not from the losses.
        ranks = torch.multinomial(probabilities, kept, replacement=False, generator=generator)
        if ranks.device.type == "cpu" and by_loss.device.type == "cuda":
            ranks = ranks.pin_memory()  # from pinned memory the copy is queued, with no sync
        rows = by_loss[ranks.to(by_loss.device, non_blocking=True)]
    if batch is not None:
        return {key: _rows(value, n, rows) for key, value in batch.items()}, target[rows]
    return input[rows], target[rows]  # indexing keeps the memory format (index_select does not)


def _rows(value: Any, n: int, rows: torch.Tensor) -> Any:
    """``value[rows]`` for a tensor of ``n`` rows (on the rows' device or the CPU); anything else as it is."""
    if isinstance(value, torch.Tensor) and value.ndim > 0 and value.shape[0] == n:
        return value[rows if rows.device == value.device else rows.to(value.device)]
    return value


def _logits_if_any(outputs: Any) -> Any:
    """A model's logits where its outputs hold them (a dict with ``"logits"``, an object with
    ``.logits``), else the outputs as they are."""
    if isinstance(outputs, torch.Tensor):
        return outputs
    try:
        return model_logits(outputs)
    except TypeError:
        return outputs


class SelectiveBackprop(Algorithm):
    """Selective Backprop as a training-loop algorithm: after the data loader, on the batches
    :func:`should_selective_backprop` picks, :func:`select_using_loss` scores the batch with the
    Trainer's model and loss and the batch is replaced by the rows it keeps. The loss is called as
    the Trainer calls it: on the logits of what the model returns (a tensor, a dict with
    ``"logits"`` or an object with ``.logits``), in float32.

    Args:
        start: the fraction of training at which selection begins, in ``[0, 1)``.
        end: the fraction of training at which it stops, in ``(start, 1]``.
        keep: the fraction of each selected batch kept for the step, in ``(0, 1]``.
        scale_factor: the resize of the input for the scoring forward pass only, in ``(0, 1]``.
        interrupt: a full batch every ``interrupt`` batches inside the interval: ``0`` (never)
            or ``>= 2``.
        input_key: where the input is in the batch. For a dict batch, the entry the model is
            called on, or ``None`` to call ``model(**batch)`` (as ``Trainer(input_key=None)``
            does for a Hugging Face model); every entry with a row per example is cut to the kept
            rows (an ``attention_mask`` with its ``input_ids``), others are left as they are.
        target_key: where the target is in the batch.

    It counts ``batches_selected`` (the batches it cut to the rows it kept) and
    ``examples_dropped`` (the rows those batches lost); none means it did not act.

    Example::

        >>> import torch
        >>> from algorithms import SelectiveBackprop
        >>> from algorithms.core import Trainer
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(48, 10))
        >>> batches = [(torch.randn(8, 3, 4, 4), torch.randint(0, 10, (8,))) for _ in range(4)]
        >>> Trainer(model, batches, "1ep", algorithms=[SelectiveBackprop(keep=0.5)], seed=0).fit()
    """

    needs_loss_fn = True
    activity = {
        "batches_selected": "batches cut to their selected examples",
        "examples_dropped": "examples dropped from those batches",
    }

    def __init__(
        self,
        start: float = 0.5,
        end: float = 0.9,
        keep: float = 0.5,
        scale_factor: float = 1.0,
        interrupt: int = 2,
        input_key: int | str | None = 0,
        target_key: int | str = 1,
    ):
        PARAMETERS.check(start=start, end=end, keep=keep, scale_factor=scale_factor, interrupt=interrupt)
        self.start, self.end = start, end
        self.keep = keep
        self.scale_factor = scale_factor
        self.interrupt = interrupt
        self.input_key, self.target_key = input_key, target_key

    def match(self, event: Event, state: State) -> bool:
        if event is Event.INIT:
            return True  # to check the Trainer's loss before training starts
        return (
            event is Event.AFTER_DATALOADER
            and self.keep < 1
            and should_selective_backprop(
                state.progress(), state.timestamp.batch_in_epoch, self.start, self.end, self.interrupt
            )
        )

    def apply(self, event: Event, state: State, logger: Any | None = None) -> None:
        check_loss_fun(state.loss_fn, "Trainer loss_fn")
        if event is Event.INIT:
            return
        trainer_loss = state.loss_fn

        def loss(outputs: Any, target: torch.Tensor, reduction: str) -> torch.Tensor:
            # as the Trainer calls it: on the logits of what the model returned, in float32
            return trainer_loss(model_logits(outputs).float(), target, reduction=reduction)

        # scored unwrapped: scoring needs neither DataParallel's scatter nor DDP's gradient hooks
        batch, target = state.batch, state.batch_get_item(self.target_key)
        mapping = isinstance(batch, Mapping)
        with autocast(state.precision, state.device):
            selected, kept_target = select_using_loss(
                batch if mapping else state.batch_get_item(self.input_key),
                target,
                unwrap_model(state.model),
                loss,
                self.keep,
                self.scale_factor,
                generator=self.generator(state),
                model_input=self.input_key if mapping else None,
            )
        if mapping:  # every entry with a row per example was cut to the kept rows
            for key, value in selected.items():
                if value is not batch[key]:
                    state.batch_set_item(key, value)
        else:
            state.batch_set_item(self.input_key, selected)
        state.batch_set_item(self.target_key, kept_target)
        dropped = target.shape[0] - kept_target.shape[0]
        if dropped:
            self.report(logger, "batches_selected")
            self.report(logger, "examples_dropped", dropped)


def kept_count(n: int, keep: float) -> int:
    """The number of rows kept of ``n``: ``round(keep * n)`` (ties to even), at least one."""
    return min(n, max(1, round(keep * n))) if n else 0


def selection_probabilities(n: int, keep: float) -> torch.Tensor:
    """The probability of drawing each loss rank first, float64 ``(n,)``, rank 0 the lowest loss:
    the percentile ``(i + 0.5) / n`` raised to ``1 / keep - 1``, normalized to sum to 1."""
    percentiles = (torch.arange(n, dtype=torch.float64) + 0.5) / n
    weights = percentiles ** (1.0 / keep - 1.0)
    return weights / weights.sum()


@contextlib.contextmanager
def _eval_mode(model: Any) -> Iterator[None]:
    """Run ``model`` in eval mode, then give each of its modules back the mode it had."""
    if not isinstance(model, torch.nn.Module):
        yield
        return
    modes = [(module, module.training) for module in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for module, training in modes:
            module.training = training


def check_loss_fun(loss_fun: Any, name: str = "loss_fun") -> None:
    """Raise a TypeError, naming ``name``, unless ``loss_fun`` can be called with ``reduction="none"``."""
    if not callable(loss_fun):
        raise TypeError(f"{name}={loss_fun!r}: the loss function must be callable")
    try:  # a module's __call__ takes anything: its forward says what it accepts
        signature = inspect.signature(loss_fun.forward if isinstance(loss_fun, torch.nn.Module) else loss_fun)
    except (TypeError, ValueError):
        return  # a builtin without a signature: its call will say
    try:
        signature.bind(None, None, reduction="none")
    except TypeError:
        raise TypeError(
            f"{name}={getattr(loss_fun, '__name__', type(loss_fun).__name__)}: the loss function must "
            "take a keyword argument `reduction`. Selective Backprop calls it as loss(outputs, target, "
            "reduction='none') for per-example losses (torch.nn.functional.cross_entropy does)"
        ) from None


def _check_interval(start: float, end: float) -> None:
    _TIME.check("start", start)
    _TIME.check("end", end)
    if start > end:
        raise ValueError(f"start={start!r}, end={end!r}: the interval must not end before it starts")
