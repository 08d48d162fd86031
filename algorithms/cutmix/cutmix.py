"""CutMix: paste a box from another example of the batch, and mix the labels by area.

Yun et al., "CutMix: Regularization Strategy to Train Strong Classifiers with Localizable
Features", ICCV 2019.
"""

from __future__ import annotations

import itertools
import math
from typing import NamedTuple

import torch

from .._mixing import (
    MixingAlgorithm,
    check_batch_sizes,
    check_indices,
    host_partners,
    permutation_cycles,
    randints,
    sample_beta,
    sample_permutation,
)
from ..core.parameters import Boolean, Parameters, Real
from ..core.state import State

__all__ = ["CutMix", "CutMixResult", "cutmix_batch"]

PARAMETERS = Parameters(
    alpha=Real(low=0, note="The Beta(alpha, alpha) concentration of the kept area; 0 mixes nothing."),
    interpolate_loss=Boolean(note="Mix the two losses instead of the targets."),
    uniform_sampling=Boolean(note="Draw box centres so every pixel is equally likely cut."),
)

BBox = tuple[int, int, int, int]


class CutMixResult(NamedTuple):
    """What :func:`cutmix_batch` returns: a tuple that unpacks as Composer's
    ``(mixed, target_perm, area, bbox)``, whose weights are also named by what they weigh.

    ``area`` is the weight of each example's *own* target (the fraction of the image left
    unmixed), whereas MixUp's ``mixing`` is the partner's: :attr:`own_weight` and
    :attr:`partner_weight` mean the same for both methods.
    """

    mixed: torch.Tensor
    target_perm: torch.Tensor
    area: float
    bbox: BBox

    @property
    def own_weight(self) -> float:
        """The weight of each example's own target: ``area``."""
        return self.area

    @property
    def partner_weight(self) -> float:
        """The weight of the partner's target, ``target_perm``: ``1 - area``, the fraction of
        pixels taken from the partner."""
        return 1.0 - self.area


def cutmix_batch(
    input: torch.Tensor,
    target: torch.Tensor,
    length: float | None = None,
    alpha: float = 1.0,
    bbox: BBox | None = None,
    indices: torch.Tensor | None = None,
    uniform_sampling: bool = False,
    generator: torch.Generator | None = None,
    inplace: bool = False,
) -> CutMixResult:
    """Replace one box of every image with the same box of another image of the batch.

    ``mixed[i] = input[i]`` outside the box and ``input[indices[i]]`` inside it, where the box is
    ``bbox = (x1, y1, x2, y2)`` with ``x`` indexing the height axis (``dim=-2``) and ``y`` the
    width axis (``dim=-1``), end-exclusive, as in ``composer.functional.cutmix_batch``.

    Args:
        input: images ``(N, C, H, W)``; not modified unless ``inplace``.
        target: class indices ``(N,)`` or probabilities ``(N, K)``; not modified.
        length: side of the box as a fraction of the image's sides, in ``(0, 1]``. If ``None``,
            the box area is ``1 - lambda`` with ``lambda ~ Beta(alpha, alpha)``.
        alpha: Beta concentration, ``>= 0``; ``0`` cuts nothing.
        bbox: a fixed box; overrides ``alpha``. Give ``length`` or ``bbox``, not both.
        indices: which example each example takes its box from; default a random permutation.
        uniform_sampling: sample the box centre so every pixel is equally likely to be cut
            (the box may then be clipped by the border); otherwise the centre is uniform in the image.
        generator: torch generator for every random draw.
        inplace: write the boxes into ``input`` and return it, writing nothing outside the box
            (Composer's ``cutmix_batch`` has no such option); otherwise ``input`` is copied.

    Returns:
        A :class:`CutMixResult` ``(mixed, target_perm, area, bbox)``: the mixed images (same
        dtype, device and memory format; ``input`` itself with ``inplace=True``),
        ``target[indices]``, the fraction of each image left unmixed (the weight of each example's
        *own* target, also ``.own_weight``; ``.partner_weight`` is ``1 - area``), and the box
        used. The mixed and smoothed targets are :func:`~algorithms.functional.mixed_targets`
        ``(target, target_perm, own_weight=area, ...)``.

    Example::

        >>> import torch
        >>> from algorithms.functional import cutmix_batch
        >>> x, y = torch.zeros(2, 1, 4, 4), torch.tensor([0, 1])
        >>> x[1] = 1.0
        >>> mixed, y_perm, area, bbox = cutmix_batch(x, y, bbox=(0, 0, 2, 2), indices=torch.tensor([1, 0]))
        >>> area, y_perm.tolist(), mixed[0, 0, 0, 0].item()
        (0.75, [1, 0], 1.0)
    """
    if input.ndim != 4:
        raise ValueError(f"input: CutMix needs an image batch (N, C, H, W), got shape {tuple(input.shape)}")
    check_batch_sizes(input, target)
    PARAMETERS.check(alpha=alpha, uniform_sampling=uniform_sampling)
    if bbox is not None and length is not None:
        raise ValueError(f"length={length!r}, bbox={bbox!r}: give one of them, not both")
    n, height, width = input.shape[0], input.shape[-2], input.shape[-1]
    if indices is None:
        indices = sample_permutation(n, input.device, generator)
    else:
        check_indices(indices, n)

    if bbox is None:
        if length is not None:
            if not 0 < length <= 1:
                raise ValueError(f"length={length!r}: must be in (0, 1]")
            cut_area = length * length
        elif alpha == 0:
            cut_area = 0.0
        else:
            cut_area = 1.0 - sample_beta(alpha, generator)
        bbox = _sample_bbox(height, width, cut_area, uniform_sampling, generator)
    else:
        bbox = tuple(int(v) for v in bbox)
        x1, y1, x2, y2 = bbox
        if not (0 <= x1 <= x2 <= height and 0 <= y1 <= y2 <= width):
            raise ValueError(
                f"bbox={bbox}: need 0 <= x1 <= x2 <= {height} (height) and 0 <= y1 <= y2 <= {width} (width)"
            )

    x1, y1, x2, y2 = bbox
    if inplace:
        mixed = input
        _write_boxes_in_place(input[:, :, x1:x2, y1:y2], indices)
    else:
        # A copy of the batch, then each box read from the untouched input straight into place.
        mixed = torch.empty_like(input).copy_(input)
        torch.index_select(input[:, :, x1:x2, y1:y2], 0, indices, out=mixed[:, :, x1:x2, y1:y2])
    # The label weight is the exact pixel fraction, not the sampled lambda (the box is clipped).
    area = 1.0 - (x2 - x1) * (y2 - y1) / (height * width)
    return CutMixResult(mixed, target.index_select(0, indices), area, bbox)


def _write_boxes_in_place(box: torch.Tensor, indices: torch.Tensor) -> None:
    """``box[i] = box[indices[i]]`` for every ``i``, each box read before it is written, with torch's ops."""
    if not box.numel():
        return
    partners = host_partners(box, indices, permutation=True)
    if partners is not None:
        # Large boxes, one at a time along each cycle of the permutation: one pass over the boxes.
        for cycle in permutation_cycles(partners):
            first = box[cycle[0]].clone()
            for i, j in itertools.pairwise(cycle):
                box[i].copy_(box[j])
            box[cycle[-1]].copy_(first)
    else:
        # Gather every partner's box before writing any: with a permutation each box written is
        # another example's source.
        box.copy_(box.index_select(0, indices))


def _sample_bbox(
    height: int, width: int, cut_area: float, uniform_sampling: bool, generator: torch.Generator | None
) -> BBox:
    ratio = math.sqrt(max(0.0, min(1.0, cut_area)))
    cut_h, cut_w = int(height * ratio), int(width * ratio)
    if uniform_sampling:
        ranges = ((-(cut_h // 2), height + cut_h // 2), (-(cut_w // 2), width + cut_w // 2))
    else:
        ranges = ((0, height), (0, width))
    cx, cy = randints(ranges, generator)
    x1, x2 = max(cx - cut_h // 2, 0), min(cx + cut_h - cut_h // 2, height)
    y1, y2 = max(cy - cut_w // 2, 0), min(cy + cut_w - cut_w // 2, width)
    return x1, y1, max(x1, x2), max(y1, y2)


class CutMix(MixingAlgorithm):
    """CutMix as a training-loop algorithm.

    After the data loader it mixes the image batch with :func:`cutmix_batch`; before the loss it
    replaces the target with ``area * onehot(y) + (1 - area) * onehot(y[indices])`` (or, with
    ``interpolate_loss=True``, mixes the two losses by the same weights).

    Args:
        alpha: Beta concentration for the kept area ``lambda ~ Beta(alpha, alpha)``; ``>= 0``.
        interpolate_loss: mix the losses instead of the targets.
        uniform_sampling: sample box centres so each pixel is cut with equal probability.
        input_key: where the images are in the batch.
        target_key: where the targets are in the batch.

    Example::

        >>> from algorithms import CutMix
        >>> from algorithms.core import Trainer
        >>> import torch
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(48, 10))
        >>> batches = [(torch.randn(8, 3, 4, 4), torch.randint(0, 10, (8,)))]
        >>> Trainer(model, batches, "1ep", algorithms=[CutMix(alpha=1.0)], seed=0).fit()
    """

    def __init__(
        self,
        alpha: float = 1.0,
        interpolate_loss: bool = False,
        uniform_sampling: bool = False,
        input_key: int | str = 0,
        target_key: int | str = 1,
    ):
        PARAMETERS.check(alpha=alpha, interpolate_loss=interpolate_loss, uniform_sampling=uniform_sampling)
        super().__init__(interpolate_loss=interpolate_loss, input_key=input_key, target_key=target_key)
        self.alpha = float(alpha)
        self.uniform_sampling = uniform_sampling

    @property
    def bbox(self) -> BBox | None:
        """The box of the last batch mixed, ``(x1, y1, x2, y2)`` as :func:`cutmix_batch` returns it
        (None before the first batch); with :attr:`indices` and :attr:`permuted_target`, Composer's
        ``_bbox``, ``_indices`` and ``_permuted_target``."""
        return self._bbox

    def reset(self) -> None:
        """Forget the last batch's mix, its box included, and the generator."""
        super().reset()
        self._bbox: BBox | None = None

    def mix(self, input: torch.Tensor, target: torch.Tensor, state: State) -> tuple[torch.Tensor, torch.Tensor, float]:
        if target.ndim > 2:
            raise ValueError(
                f"target: CutMix mixes one label per image, class indices (N,) or "
                f"probabilities (N, C); got shape {tuple(target.shape)} (dense targets "
                "such as segmentation masks are not supported)"
            )
        generator = self.generator(state)
        indices = sample_permutation(input.shape[0], input.device, generator)  # the draw cutmix_batch makes first
        mixed, _, area, self._bbox = cutmix_batch(
            input,
            target,
            alpha=self.alpha,
            indices=indices,
            uniform_sampling=self.uniform_sampling,
            generator=generator,
        )
        return mixed, indices, 1.0 - area
