"""What a model returns reaches the loss-changing methods as its logits: a tensor, a dict with
``"logits"``, or an object with ``.logits`` (a Hugging Face ``ModelOutput``). Each method's result
with a model's whole output is checked against the method's formula on the logits; anything else
is a one-line TypeError."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F

import algorithms.functional as cf
from algorithms import CutMix, LabelSmoothing, MixUp, SelectiveBackprop
from algorithms.core import Event, State
from algorithms.core.time import Duration

C = 5


@dataclass
class ModelOutput:
    """A stand-in for a Hugging Face ``ModelOutput``'s attribute access (``outputs.logits``)."""

    logits: torch.Tensor
    loss: torch.Tensor | None = None


def _hf_output(logits):
    transformers = pytest.importorskip("transformers", reason="transformers is not installed in the test venv")
    return transformers.modeling_outputs.SequenceClassifierOutput(logits=logits)


FORMS = {
    "tensor": lambda z: z,
    "dict": lambda z: {"logits": z, "hidden_states": z.detach() * 0},
    "ordered-dict": lambda z: OrderedDict(loss=z.sum() * 0, logits=z),
    "object": lambda z: ModelOutput(z),
    "hf-SequenceClassifierOutput": _hf_output,
}


def _one_hot(y):
    return F.one_hot(y, C).double()


def _logits(n=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, C, generator=g), torch.randint(0, C, (n,), generator=g)


@pytest.mark.parametrize("form", FORMS)
def test_smooth_labels_reads_the_logits_of_a_models_output(form):
    logits, y = _logits()
    got = cf.smooth_labels(FORMS[form](logits), y, smoothing=0.2)
    want = 0.8 * _one_hot(y) + 0.2 / C
    assert got.shape == logits.shape
    torch.testing.assert_close(got.double(), want)


@pytest.mark.parametrize("bad", [[torch.zeros(2, C)], {"scores": torch.zeros(2, C)}, ModelOutput(None)], ids=repr)
def test_an_output_without_logits_is_a_one_line_type_error(bad):
    with pytest.raises(TypeError) as raised:
        cf.smooth_labels(bad, torch.zeros(2, dtype=torch.long))
    message = str(raised.value)
    assert "\n" not in message and "logits" in message and "smooth_labels" in message, message


def _state(outputs=None, batch=None, loss_fn=F.cross_entropy, model=None):
    state = State(model=model or torch.nn.Identity(), max_duration=Duration.parse("1ep"), loss_fn=loss_fn, seed=0)
    state.outputs, state.batch = outputs, batch
    return state


@pytest.mark.parametrize("form", FORMS)
def test_label_smoothing_smooths_the_target_against_the_models_logits(form):
    logits, y = _logits()
    state = _state(FORMS[form](logits), (torch.randn(6, 3), y))
    algo = LabelSmoothing(smoothing=0.3)
    algo.apply(Event.BEFORE_LOSS, state)
    torch.testing.assert_close(state.batch[1].double(), 0.7 * _one_hot(y) + 0.3 / C)
    algo.apply(Event.AFTER_LOSS, state)
    assert torch.equal(state.batch[1], y)


def _mixed(cls, interpolate_loss, form):
    """The method mixes a batch after the data loader, then sees the model's ``form`` of the logits
    before the loss (target mixing) or after it (loss mixing); the Trainer's loss_fn takes tensors only."""
    logits, y = _logits()
    x = torch.randn(6, 3, 8, 8)
    algo = cls(interpolate_loss=interpolate_loss).manual_seed(1)
    state = _state(batch=(x, y))
    algo.apply(Event.AFTER_DATALOADER, state)
    state.outputs = FORMS[form](logits)
    m, partners = algo.mixing, y[algo.indices]
    assert 0 < m < 1 and not torch.equal(partners, y)
    return algo, state, logits, y, partners, m


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("cls", [MixUp, CutMix])
def test_mixing_the_target_reads_the_models_logits(cls, form):
    algo, state, logits, y, partners, m = _mixed(cls, False, form)
    algo.apply(Event.BEFORE_LOSS, state)
    torch.testing.assert_close(state.batch[1].double(), (1 - m) * _one_hot(y) + m * _one_hot(partners))


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("cls", [MixUp, CutMix])
def test_mixing_the_loss_calls_the_loss_on_the_models_logits(cls, form):
    algo, state, logits, y, partners, m = _mixed(cls, True, form)
    state.loss_target = y
    state.loss = F.cross_entropy(logits, y)
    algo.apply(Event.AFTER_LOSS, state)
    want = (1 - m) * F.cross_entropy(logits.double(), y) + m * F.cross_entropy(logits.double(), partners)
    torch.testing.assert_close(state.loss.double(), want)


class _Returns(torch.nn.Module):
    """A linear classifier that returns its logits in ``form``."""

    def __init__(self, form):
        super().__init__()
        torch.manual_seed(0)
        self.linear, self.form = torch.nn.Linear(4, C), form

    def forward(self, x):
        return FORMS[self.form](self.linear(x))


@pytest.mark.parametrize("form", FORMS)
def test_selective_backprop_scores_with_the_trainers_loss_on_the_models_logits(form):
    """Kept with keep=0.25 and 3 of 12 rows, the rows are the same as with a model that returns the
    tensor (one seed), and scoring calls a loss_fn that takes tensors only."""
    g = torch.Generator().manual_seed(2)
    x, y = torch.randn(12, 4, generator=g), torch.randint(0, C, (12,), generator=g)
    kept = {}
    for which in ("tensor", form):
        state = _state(batch=(x, y), model=_Returns(which))
        SelectiveBackprop(start=0, end=1, keep=0.25, interrupt=0).manual_seed(3).apply(Event.AFTER_DATALOADER, state)
        kept[which] = state.batch
    assert kept[form][0].shape == (3, 4)
    assert torch.equal(kept[form][0], kept["tensor"][0]) and torch.equal(kept[form][1], kept["tensor"][1])
