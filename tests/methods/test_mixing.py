"""What the mixing methods (CutMix, MixUp) share through ``algorithms._mixing``: each runs only
at its own events, so calling ``apply`` at any other event changes nothing."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from trainer_support import image_batches, image_classifier

import algorithms.functional as cf
from algorithms import CutMix, MixUp
from algorithms._mixing import ROW_BY_ROW_BYTES, MixingAlgorithm, host_partners, permutation_cycles
from algorithms.core import Algorithm, Event, State, Trainer
from algorithms.core.time import Duration


class _ApplyEverywhere(Algorithm):
    """At every event ``algo`` does not match, applies it anyway and records the events at which
    that changed the batch, the outputs or the loss."""

    def __init__(self, algo):
        self.algo, self.changed, self.tried = algo, [], 0

    def match(self, event, state):
        return not self.algo.match(event, state)

    def apply(self, event, state, logger=None):
        before = (state.batch, state.outputs, state.loss)
        self.algo.apply(event, state, logger)
        self.tried += 1
        if any(a is not b for a, b in zip(before, (state.batch, state.outputs, state.loss), strict=True)):
            self.changed.append(event)


@pytest.mark.parametrize("interpolate_loss", [False, True])
@pytest.mark.parametrize("cls", [CutMix, MixUp])
def test_apply_changes_nothing_at_events_the_method_does_not_match(cls, interpolate_loss):
    algo = cls(interpolate_loss=interpolate_loss)
    probe = _ApplyEverywhere(algo)
    Trainer(image_classifier(), image_batches(n=1), "1ba", algorithms=[algo, probe], seed=0, device="cpu").fit()
    assert probe.tried > 10 and probe.changed == []


def _refusal(cls, targets: int, where: str, mixed: int) -> str:
    name = cls.__name__
    return re.escape(
        f"{name}: the batch has {targets} targets {where} but {mixed} examples were mixed after the "
        f"data loader: a method listed after {name} changed the batch size (list it before {name})"
    )


@pytest.mark.parametrize("cls", [CutMix, MixUp])
def test_targets_that_do_not_match_the_mixed_examples_are_refused_at_the_loss(cls):
    """Mixing targets needs the partners drawn after the data loader for as many examples: with
    none drawn, or a target with no batch dimension, each mode refuses with the counts."""
    state = State(model=torch.nn.Identity(), max_duration=Duration.parse("1ep"), loss_fn=F.cross_entropy, seed=0)
    state.batch, state.outputs = (torch.rand(4, 3, 8, 8), torch.tensor([0, 1, 2, 0])), torch.zeros(4, 3)
    state.loss_target = state.batch[1]
    with pytest.raises(ValueError, match=f"^{_refusal(cls, 4, 'before the loss', 0)}$"):
        cls().apply(Event.BEFORE_LOSS, state)
    with pytest.raises(ValueError, match=f"^{_refusal(cls, 4, 'at the loss', 0)}$"):
        cls(interpolate_loss=True).apply(Event.AFTER_LOSS, state)
    algo = cls()
    algo.apply(Event.AFTER_DATALOADER, state)
    state.batch = (state.batch[0], torch.tensor(1))
    with pytest.raises(ValueError, match=f"^{_refusal(cls, 0, 'before the loss', 4)}$"):
        algo.apply(Event.BEFORE_LOSS, state)


def test_a_mixing_method_mixes_the_targets_of_the_first_two_batch_items_by_default():
    """MixingAlgorithm's defaults, for a method written on it: the input is batch item 0, the target
    item 1, and the targets are mixed before the loss (not the losses after it)."""

    class Swap(MixingAlgorithm):
        def mix(self, input, target, state):
            return input.flip(0), torch.tensor([1, 0]), 0.25

    algo = Swap()
    state = State(model=torch.nn.Identity(), max_duration=Duration.parse("1ep"), loss_fn=F.cross_entropy, seed=0)
    state.batch = (torch.tensor([[1.0], [2.0]]), torch.tensor([0, 1]))
    assert algo.match(Event.BEFORE_LOSS, state) and not algo.match(Event.AFTER_LOSS, state)
    algo.apply(Event.AFTER_DATALOADER, state)
    assert state.batch[0].tolist() == [[2.0], [1.0]]
    state.outputs = torch.zeros(2, 2)
    algo.apply(Event.BEFORE_LOSS, state)
    assert state.batch[1].tolist() == [[0.75, 0.25], [0.25, 0.75]]


def test_examples_from_64_kib_on_the_cpu_are_mixed_one_at_a_time():
    """host_partners gives the partners as host integers from 64 KiB an example (of whatever is
    passed: the batch, or the boxes), and None below, for an empty batch or a batch of scalars;
    with permutation=True only for a permutation."""
    assert ROW_BY_ROW_BYTES == 64 * 1024
    at, below = torch.zeros(3, 16, 1024), torch.zeros(3, 16 * 1024 - 1)  # float32: 64 KiB, 4 bytes less
    indices = torch.tensor([2, 0, 1])
    assert host_partners(at, indices) == [2, 0, 1] and host_partners(at, indices, permutation=True) == [2, 0, 1]
    assert host_partners(below, indices) is None
    assert host_partners(at.double()[:, :8], indices) == [2, 0, 1]  # 8 x 1024 float64: 64 KiB
    assert host_partners(at.flatten(1), indices) == [2, 0, 1]  # rows of 16 x 1024 float32: 64 KiB an example
    assert host_partners(at, torch.tensor([0, 0, 1])) == [0, 0, 1]
    assert host_partners(at, torch.tensor([0, 0, 1]), permutation=True) is None
    assert host_partners(torch.zeros(0, 16, 1024), torch.zeros(0, dtype=torch.long)) is None
    assert host_partners(torch.zeros(3), indices) is None


@pytest.mark.parametrize("partners", [[0], [1, 0], [0, 1], [1, 2, 0], [2, 0, 1, 3], [3, 2, 1, 0]])
def test_permutation_cycles_follow_the_partners(partners):
    cycles = permutation_cycles(partners)
    assert sorted(i for cycle in cycles for i in cycle) == list(range(len(partners)))
    for cycle in cycles:
        assert [partners[i] for i in cycle] == cycle[1:] + cycle[:1]
    assert [cycle[0] for cycle in cycles] == sorted(cycle[0] for cycle in cycles)  # each from its smallest


# One weight convention: CutMix's ``area`` weighs the example's own target, MixUp's ``mixing`` the
# partner's. Both results, and both classes, also name each weight by what it weighs.


def test_cutmix_own_weight_is_the_fraction_of_each_image_it_keeps():
    """Images of distinct constants: the share of each mixed image still equal to its own value is
    ``own_weight`` (``area``), the share equal to its partner's is ``partner_weight``; the result
    still unpacks as Composer's four values."""
    x = torch.arange(4.0).view(4, 1, 1, 1).expand(4, 2, 8, 8).contiguous()
    y, indices = torch.tensor([0, 1, 2, 3]), torch.tensor([1, 2, 3, 0])
    result = cf.cutmix_batch(x, y, bbox=(0, 2, 4, 8), indices=indices)
    mixed, y_perm, area, bbox = result
    assert isinstance(result, tuple) and len(result) == 4 and bbox == (0, 2, 4, 8)
    assert (result.mixed, result.target_perm, result.area, result.bbox) == (mixed, y_perm, area, bbox)
    own_share = (mixed == x).float().mean(dim=(1, 2, 3))
    partner_share = (mixed == x[indices]).float().mean(dim=(1, 2, 3))
    assert own_share.tolist() == [result.own_weight] * 4 == [area] * 4 == [0.625] * 4
    assert partner_share.tolist() == [result.partner_weight] * 4 == [0.375] * 4


def test_mixup_own_weight_is_the_weight_of_each_example_itself():
    x, y, indices = torch.tensor([[0.0], [10.0], [30.0]]), torch.tensor([0, 1, 2]), torch.tensor([2, 0, 1])
    result = cf.mixup_batch(x, y, mixing=0.25, indices=indices)
    mixed, y_perm, mixing = result
    assert isinstance(result, tuple) and len(result) == 3 and mixing == 0.25
    assert (result.mixed, result.target_perm, result.mixing) == (mixed, y_perm, mixing)
    assert (result.own_weight, result.partner_weight) == (0.75, 0.25)
    torch.testing.assert_close(mixed, result.own_weight * x + result.partner_weight * x[indices])


@pytest.mark.parametrize("cls", [CutMix, MixUp])
def test_the_classes_name_each_weight_and_mix_targets_as_mixed_targets_defines(cls):
    """Before the first batch nothing is mixed (own weight 1); after it, the target before the loss
    is ``mixed_targets(y, y[indices], own_weight=algo.own_weight)``, and ``mixing`` stays the
    partner's weight for both classes."""
    algo = cls(alpha=1.0).manual_seed(0)
    assert (algo.own_weight, algo.partner_weight) == (1.0, 0.0)
    state = State(model=torch.nn.Identity(), max_duration=Duration.parse("1ep"), loss_fn=F.cross_entropy, seed=0)
    y = torch.tensor([0, 1, 2, 3, 4, 0])
    state.batch = (torch.rand(6, 3, 8, 8), y)
    algo.apply(Event.AFTER_DATALOADER, state)
    assert 0 < algo.partner_weight < 1 and algo.partner_weight == algo.mixing
    assert algo.own_weight == 1 - algo.partner_weight
    state.outputs = torch.zeros(6, 5)
    algo.apply(Event.BEFORE_LOSS, state)
    own, partner = F.one_hot(y, 5).double(), F.one_hot(y[algo.indices], 5).double()
    torch.testing.assert_close(state.batch[1].double(), algo.own_weight * own + algo.partner_weight * partner)
    torch.testing.assert_close(
        state.batch[1], cf.mixed_targets(y, y[algo.indices], own_weight=algo.own_weight, num_classes=5)
    )


def test_the_same_recipe_gives_the_same_targets_for_cutmix_and_mixup():
    """A loop written once for both methods, on the named weights, gets each method's definition:
    CutMix's target weighs the label of the pixels kept, MixUp's the example's own weight."""
    x, y, indices = torch.rand(4, 1, 4, 4), torch.tensor([0, 1, 2, 3]), torch.tensor([1, 0, 3, 2])
    cut = cf.cutmix_batch(x, y, bbox=(0, 0, 2, 4), indices=indices)  # half of each image from the partner
    mix = cf.mixup_batch(x, y, mixing=0.5, indices=indices)
    for result in (cut, mix):
        soft = cf.mixed_targets(y, result.target_perm, own_weight=result.own_weight, num_classes=4, smoothing=0.1)
        torch.testing.assert_close(soft, cf.mixed_targets(y, y[indices], own_weight=0.5, num_classes=4, smoothing=0.1))
    assert cut.area == 0.5 and mix.mixing == 0.5
    cut = cf.cutmix_batch(x, y, bbox=(0, 0, 1, 4), indices=indices)  # a quarter from the partner
    soft = cf.mixed_targets(y, cut.target_perm, own_weight=cut.own_weight, num_classes=4)
    torch.testing.assert_close(soft, 0.75 * F.one_hot(y, 4).float() + 0.25 * F.one_hot(y[indices], 4).float())
