"""Pieces shared by the methods that mix examples (CutMix, MixUp): argument checks, sampling
from torch generators, and the mixing Algorithm base class.

Private: the public forms are in :mod:`algorithms.functional` and the method classes; the
target utilities are in :mod:`algorithms.targets`.
"""

from __future__ import annotations

import random
from abc import abstractmethod
from typing import Any

import torch

from .core.algorithm import Algorithm
from .core.event import Event
from .core.loss import total_loss
from .core.outputs import model_logits
from .core.state import State
from .targets import interpolate_targets, target_dtype

__all__ = [
    "MixingAlgorithm",
    "ROW_BY_ROW_BYTES",
    "check_batch_sizes",
    "check_indices",
    "host_partners",
    "permutation_cycles",
    "randint",
    "randints",
    "sample_beta",
    "sample_permutation",
]


def check_batch_sizes(input: torch.Tensor, target: torch.Tensor) -> None:
    if input.ndim == 0 or target.ndim == 0 or input.shape[0] != target.shape[0]:
        raise ValueError(
            f"input and target must have the same batch size: input shape "
            f"{tuple(input.shape)}, target shape {tuple(target.shape)}"
        )


def check_indices(indices: torch.Tensor, n: int) -> None:
    if not isinstance(indices, torch.Tensor):
        raise ValueError(f"indices must be an integer tensor of shape ({n},), got {type(indices).__name__}")
    if indices.shape != (n,) or indices.is_floating_point():
        raise ValueError(
            f"indices must be an integer tensor of shape ({n},), got {indices.dtype} of shape {tuple(indices.shape)}"
        )


def sample_beta(alpha: float, generator: torch.Generator | None = None) -> float:
    """One draw of Beta(alpha, alpha), reproducible from a torch generator.

    torch's Beta distribution takes no generator, so a seed drawn from ``generator`` drives the
    standard library's Beta sampler (a host scalar: no device work, no sync).
    """
    seed = int(torch.randint(0, 2**62, (1,), generator=generator))
    return random.Random(seed).betavariate(alpha, alpha)


def sample_permutation(n: int, device: torch.device, generator: torch.Generator | None) -> torch.Tensor:
    """A random permutation of ``range(n)`` on ``device``, drawn with a CPU generator."""
    perm = torch.randperm(n, generator=generator)
    return perm.to(device, non_blocking=True) if device.type != "cpu" else perm


def randint(low: int, high: int, generator: torch.Generator | None) -> int:
    """A host integer in ``[low, high)`` drawn from a torch generator."""
    return int(torch.randint(low, high, (1,), generator=generator))


def randints(ranges: tuple[tuple[int, int], ...], generator: torch.Generator | None) -> list[int]:
    """Host integers, one in each ``[low, high)`` of ``ranges``: the draws of successive
    :func:`randint` calls. Equal ranges take one call, as torch's CPU sampler draws the elements of
    a tensor one after another from the generator's stream."""
    if all(r == ranges[0] for r in ranges):
        return torch.randint(*ranges[0], (len(ranges),), generator=generator).tolist()
    return [randint(low, high, generator) for low, high in ranges]


# From about this size of one example, a call per example costs less on the CPU than the extra
# pass over the batch that gathering the partners first takes (measured at 3x32x32 and 3x224x224
# float32 on one thread: 12 KiB examples are faster gathered, 588 KiB ones one at a time).
ROW_BY_ROW_BYTES = 64 * 1024


def host_partners(input: torch.Tensor, indices: torch.Tensor, permutation: bool = False) -> list[int] | None:
    """The partners as host integers where mixing one example at a time is cheaper: examples of at
    least ``ROW_BY_ROW_BYTES`` in ``input`` (the batch, or the part of it that is written) on the
    CPU (reading CPU indices makes no device sync). With ``permutation``, only when the indices
    are one; otherwise ``None``."""
    if (
        input.device.type != "cpu"
        or indices.device.type != "cpu"
        or input.ndim < 2
        or input.shape[0] == 0
        or input[0].numel() * input.element_size() < ROW_BY_ROW_BYTES
    ):
        return None
    partners = indices.tolist()
    if permutation and sorted(partners) != list(range(len(partners))):
        return None
    return partners


def permutation_cycles(partners: list[int]) -> list[list[int]]:
    """The cycles of a permutation, each as ``[i, partners[i], partners[partners[i]], ...]``: written
    in that order, in place, each example is overwritten after the one that reads it, so only each
    cycle's first example needs saving (its last example reads it)."""
    done, cycles = [False] * len(partners), []
    for start in range(len(partners)):
        cycle, i = [], start
        while not done[i]:
            done[i] = True
            cycle.append(i)
            i = partners[i]
        if cycle:
            cycles.append(cycle)
    return cycles


class MixingAlgorithm(Algorithm):
    """Mixes inputs after the data loader, then mixes targets or losses to match.

    With ``interpolate_loss=False`` the target becomes the mixed class distribution before the
    loss; with ``True`` the loss is recomputed as ``(1 - m) * loss(target) + m * loss(target_perm)``
    where ``m`` is the weight of the mixed-in examples. Subclasses only sample and call their
    functional form in :meth:`mix`.

    Both modes mix the target as the other methods leave it, not the data loader's: before the
    loss, the batch's target as it is then (already smoothed, say, by a LabelSmoothing listed
    first); after the loss, the target the Trainer's loss was computed on (``state.loss_target``,
    smoothed by a LabelSmoothing listed before or after). Every per-example target transform
    commutes with taking rows ``target[indices]``, so the order of the algorithms does not matter.

    The model may return a tensor of logits, a dict with ``"logits"`` or an object with
    ``.logits`` (:func:`~algorithms.core.outputs.model_logits`): the target is mixed against the
    logits, and the interpolated loss calls the Trainer's ``loss_fn`` on the logits.

    Under gradient accumulation (``Trainer(microbatch_size=...)``) it mixes the whole batch after
    the data loader, as without it, and each microbatch's targets are mixed with its examples'
    partners' targets from the whole batch (the loader's, as the methods left them after it): the
    same targets as the whole batch's. A method that changes the target before the loss
    (LabelSmoothing) must then run after it (listed after it), and ``interpolate_loss=True``, which
    mixes the losses of targets another method changed, is refused with it
    (:func:`~algorithms.core.check_algorithms`).

    It counts ``batches_mixed``: the batches of two or more examples mixed with a weight above 0
    (``alpha=0`` draws no mixing); none means it did not act.
    """

    needs_loss_fn = True
    activity = {"batches_mixed": "batches mixed"}

    def __init__(self, interpolate_loss: bool = False, input_key: int | str = 0, target_key: int | str = 1):
        self.interpolate_loss = bool(interpolate_loss)
        self.input_key = input_key
        self.target_key = target_key
        self.reset()

    def reset(self) -> None:
        """Forget the last batch's mix (:attr:`indices`, :attr:`mixing`, :attr:`permuted_target`) and
        the generator."""
        super().reset()
        self._indices: torch.Tensor | None = None
        self._weight_perm = 0.0
        self._mixed_target: torch.Tensor | None = None

    # The last batch's mix, under Composer's names (MixUp.indices, .mixing, .permuted_target).
    @property
    def indices(self) -> torch.Tensor | None:
        """The partners of the last batch mixed: example ``i`` was mixed with ``indices[i]`` (None before
        the first batch)."""
        return self._indices

    @property
    def mixing(self) -> float:
        """The partners' weight in the last batch mixed: ``mixed = (1 - mixing) * x + mixing * x[indices]``
        for MixUp, the fraction of pixels taken from the partner for CutMix (0.0 before the first batch)."""
        return self._weight_perm

    @property
    def own_weight(self) -> float:
        """The weight of each example's own target in the last batch mixed, ``1 - mixing``: for
        CutMix the fraction of pixels left unmixed, the ``area`` of
        :func:`~algorithms.functional.cutmix_batch` (1.0 before the first batch)."""
        return 1.0 - self._weight_perm

    @property
    def partner_weight(self) -> float:
        """The weight of the partners' targets in the last batch mixed: :attr:`mixing`, named by what
        it weighs, as on the results of :func:`~algorithms.functional.cutmix_batch` and
        :func:`~algorithms.functional.mixup_batch` (0.0 before the first batch)."""
        return self._weight_perm

    @property
    def permuted_target(self) -> torch.Tensor | None:
        """The partners' targets in the last batch mixed, ``target[indices]`` as the data loader gave
        them (None before the first batch)."""
        if self._mixed_target is None or self._indices is None:
            return None
        return self._mixed_target[self._indices]

    @abstractmethod
    def mix(self, input: torch.Tensor, target: torch.Tensor, state: State) -> tuple[torch.Tensor, torch.Tensor, float]:
        """Return ``(mixed_input, indices of the partners, weight of the mixed-in examples)``."""

    def match(self, event: Event, state: State) -> bool:
        if event is Event.AFTER_DATALOADER:
            return True
        if event is Event.BEFORE_LOSS:
            return not self.interpolate_loss
        return event is Event.AFTER_LOSS and self.interpolate_loss

    def _partners(self, target: torch.Tensor, where: str, state: State) -> torch.Tensor:
        indices = self._indices
        rows = state.microbatch_rows
        if rows is not None and indices is not None and self._mixed_target is not None:
            # A microbatch (gradient accumulation): its examples' partners may lie in other
            # microbatches, so their targets come from the whole batch as it was mixed.
            partners = self._mixed_target[indices[rows]]
            if target.ndim and partners.shape[0] == target.shape[0]:
                return partners
        if indices is None or target.ndim == 0 or target.shape[0] != indices.shape[0]:
            raise ValueError(
                f"{self.name}: the batch has {target.shape[0] if target.ndim else 0} targets {where} "
                f"but {0 if indices is None else indices.shape[0]} examples were mixed after the data "
                f"loader: a method listed after {self.name} changed the batch size (list it before "
                f"{self.name})"
            )
        return target[indices]

    def apply(self, event: Event, state: State, logger: Any | None = None) -> None:
        if event is Event.AFTER_DATALOADER:
            input, target = state.batch_get_item(self.input_key), state.batch_get_item(self.target_key)
            check_batch_sizes(input, target)
            mixed, self._indices, self._weight_perm = self.mix(input, target, state)
            self._mixed_target = target  # read only by permuted_target, on demand
            state.batch_set_item(self.input_key, mixed)
            if self._weight_perm > 0 and input.shape[0] > 1:
                self.report(logger, "batches_mixed")
            return
        if event is Event.BEFORE_LOSS and not self.interpolate_loss:
            outputs, target = model_logits(state.outputs), state.batch_get_item(self.target_key)
            state.batch_set_item(
                self.target_key,
                interpolate_targets(
                    target,
                    self._partners(target, "before the loss", state),
                    self._weight_perm,
                    dtype=target_dtype(outputs.dtype),
                    logits_shape=outputs.shape,
                ),
            )
        elif event is Event.AFTER_LOSS and self.interpolate_loss:
            outputs, target = model_logits(state.outputs).float(), state.loss_target
            state.loss = (
                total_loss(state.loss_fn(outputs, target)) * (1.0 - self._weight_perm)
                + total_loss(state.loss_fn(outputs, self._partners(target, "at the loss", state))) * self._weight_perm
            )
