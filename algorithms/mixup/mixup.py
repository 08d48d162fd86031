"""MixUp: train on convex combinations of pairs of examples and of their labels.

Zhang et al., "mixup: Beyond Empirical Risk Minimization", ICLR 2018.
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

import torch

from .._mixing import (
    MixingAlgorithm,
    check_batch_sizes,
    check_indices,
    host_partners,
    permutation_cycles,
    sample_beta,
    sample_permutation,
)
from ..core.parameters import Boolean, Parameters, Real
from ..core.state import State

__all__ = ["MixUp", "MixUpResult", "mixup_batch"]

PARAMETERS = Parameters(
    alpha=Real(low=0, note="The Beta(alpha, alpha) concentration of the mixing weight; 0 mixes nothing."),
    interpolate_loss=Boolean(note="Mix the two losses instead of the targets."),
)


class MixUpResult(NamedTuple):
    """What :func:`mixup_batch` returns: a tuple that unpacks as Composer's
    ``(mixed, target_perm, mixing)``, whose weights are also named by what they weigh.

    ``mixing`` is the weight of the *partner* (``target_perm``), whereas CutMix's ``area`` is the
    example's own: :attr:`own_weight` and :attr:`partner_weight` mean the same for both methods.
    """

    mixed: torch.Tensor
    target_perm: torch.Tensor
    mixing: float

    @property
    def own_weight(self) -> float:
        """The weight of each example's own input and target: ``1 - mixing``."""
        return 1.0 - self.mixing

    @property
    def partner_weight(self) -> float:
        """The weight of the partner's input and target, ``target_perm``: ``mixing``."""
        return self.mixing


def mixup_batch(
    input: torch.Tensor,
    target: torch.Tensor,
    mixing: float | None = None,
    alpha: float = 0.2,
    indices: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    inplace: bool = False,
) -> MixUpResult:
    """Mix every example with another one of the batch.

    ``mixed = (1 - mixing) * input + mixing * input[indices]``, as in
    ``composer.functional.mixup_batch``.

    Args:
        input: a batch ``(N, ...)`` of any shape; not modified unless ``inplace``.
        target: class indices ``(N,)`` or probabilities ``(N, K)``; not modified.
        mixing: weight of the mixed-in examples, in ``[0, 1]``. If ``None``, drawn as
            ``min(z, 1 - z)`` with ``z ~ Beta(alpha, alpha)`` so the original example dominates.
        alpha: Beta concentration, ``>= 0``; ``0`` mixes nothing.
        indices: the partner of each example; default a random permutation.
        generator: torch generator for every random draw.
        inplace: write the mixed batch into ``input`` (a floating tensor) and return it
            (Composer's ``mixup_batch`` has no such option); otherwise ``input`` is not modified.

    Returns:
        A :class:`MixUpResult` ``(mixed, target_perm, mixing)``: the mixed batch (same dtype,
        device and memory format; ``input`` itself with ``inplace=True``), ``target[indices]``
        and the weight of the partners used (also ``.partner_weight``; ``.own_weight`` is
        ``1 - mixing``). The mixed target is ``(1 - mixing) * onehot(target) + mixing *
        onehot(target_perm)``: :func:`~algorithms.functional.mixed_targets`
        ``(target, target_perm, partner_weight=mixing, ...)``, smoothed too if asked.

    Example::

        >>> import torch
        >>> from algorithms.functional import mixup_batch
        >>> x = torch.tensor([[0.0], [10.0]])
        >>> mixed, y_perm, m = mixup_batch(x, torch.tensor([0, 1]), mixing=0.25, indices=torch.tensor([1, 0]))
        >>> mixed.flatten().tolist(), y_perm.tolist(), m
        ([2.5, 7.5], [1, 0], 0.25)
    """
    check_batch_sizes(input, target)
    PARAMETERS.check(alpha=alpha)
    if inplace and not input.is_floating_point():
        raise ValueError(
            f"inplace=True: the mixed batch is floating point and cannot be written into the "
            f"{input.dtype} input; pass a floating batch or leave inplace=False"
        )
    n = input.shape[0]
    if indices is None:
        indices = sample_permutation(n, input.device, generator)
    else:
        check_indices(indices, n)
    if mixing is None:
        z = sample_beta(alpha, generator) if alpha > 0 else 0.0
        mixing = min(z, 1.0 - z)
    elif not 0 <= mixing <= 1:
        raise ValueError(f"mixing={mixing!r}: must be in [0, 1]")
    target_perm = target.index_select(0, indices)
    if not input.is_floating_point():  # integer inputs mix into floats, as the formula does
        return MixUpResult(input * (1.0 - mixing) + input[indices] * mixing, target_perm, float(mixing))
    partners = host_partners(input, indices, permutation=inplace)
    if partners is not None:
        return MixUpResult(_mix_one_at_a_time(input, partners, mixing, inplace), target_perm, float(mixing))
    # One gather of the partners into a tensor of the input's layout, then one fused interpolation
    # input + m * (partner - input), written over the partners (or, in place, over the input):
    # two passes, no other temporary, and the same values either way.
    partners = torch.index_select(input, 0, indices, out=torch.empty_like(input))
    mixed = torch.lerp(input, partners, mixing, out=input if inplace else partners)
    return MixUpResult(mixed, target_perm, float(mixing))


def _mix_one_at_a_time(input: torch.Tensor, partners: list[int], mixing: float, inplace: bool) -> torch.Tensor:
    """``lerp(input[i], input[partners[i]], mixing)`` for every example: one pass over the batch
    (in place, along each cycle of the permutation, its first example saved)."""
    if not inplace:
        mixed = torch.empty_like(input)
        for i, j in enumerate(partners):
            torch.lerp(input[i], input[j], mixing, out=mixed[i])
        return mixed
    for cycle in permutation_cycles(partners):
        first = input[cycle[0]].clone()
        for i, j in itertools.pairwise(cycle):
            input[i].lerp_(input[j], mixing)
        input[cycle[-1]].lerp_(first, mixing)
    return input


class MixUp(MixingAlgorithm):
    """MixUp as a training-loop algorithm.

    After the data loader it mixes the batch with :func:`mixup_batch`; before the loss it
    replaces the target with ``(1 - m) * onehot(y) + m * onehot(y[indices])`` (or, with
    ``interpolate_loss=True``, mixes the two losses by the same weights).

    Args:
        alpha: Beta concentration of the mixing weight; ``>= 0``.
        interpolate_loss: mix the losses instead of the targets.
        input_key: where the inputs are in the batch.
        target_key: where the targets are in the batch.

    Example::

        >>> from algorithms import MixUp
        >>> from algorithms.core import Trainer
        >>> import torch
        >>> model = torch.nn.Linear(5, 3)
        >>> batches = [(torch.randn(8, 5), torch.randint(0, 3, (8,)))]
        >>> Trainer(model, batches, "1ep", algorithms=[MixUp(alpha=0.2)], seed=0).fit()
    """

    def __init__(
        self, alpha: float = 0.2, interpolate_loss: bool = False, input_key: int | str = 0, target_key: int | str = 1
    ):
        PARAMETERS.check(alpha=alpha, interpolate_loss=interpolate_loss)
        super().__init__(interpolate_loss=interpolate_loss, input_key=input_key, target_key=target_key)
        self.alpha = float(alpha)

    def mix(self, input: torch.Tensor, target: torch.Tensor, state: State) -> tuple[torch.Tensor, torch.Tensor, float]:
        generator = self.generator(state)
        indices = sample_permutation(input.shape[0], input.device, generator)  # the draw mixup_batch makes first
        mixed, _, mixing = mixup_batch(input, target, alpha=self.alpha, indices=indices, generator=generator)
        return mixed, indices, mixing
