"""Composer's tests of ALiBi (``tests/algorithms/test_alibi.py``), re-expressed with this
library's imports.

Composer's policies match Hugging Face GPT-2 and BERT; this library's match its reference
transformer, whose position embedding and causal attention are GPT-2's structure (its card says
so). Composer's tiny GPT-2 is therefore ``transformer_tiny`` here, with Composer's batches of
``input_ids``, ``attention_mask`` and ``labels`` (the collator's copy of the ids) and its loss
``lm_loss``; its BERT case, and its policy-registry test, are listed in ``differences.EXCLUDED``.
Composer reads its warnings from the ``logging`` records (``caplog``); this library warns with
Python's ``warnings``, which are recorded here instead.
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from copy import deepcopy

import pytest
import torch

import algorithms.functional as cf
from algorithms import Alibi
from algorithms.core import Event, State
from algorithms.core.time import Duration
from algorithms.models import lm_loss, transformer_tiny

VOCAB = 50


def configure_tiny_gpt2_model():
    return transformer_tiny(VOCAB)


def dummy_gpt_lm_dataloader(sequence_length=4, size=4):
    """Composer's: ``size`` random sequences in batches of 2, with an attention mask and labels."""
    ids = torch.randint(0, VOCAB, (size, sequence_length))
    return [
        {
            "input_ids": ids[i : i + 2],
            "attention_mask": torch.ones_like(ids[i : i + 2]),
            "labels": ids[i : i + 2].clone(),
        }
        for i in range(0, size, 2)
    ]


def _double_batch_sequence_length(batch):
    for k, v in batch.items():
        if v.ndim >= 2:
            batch[k] = torch.cat([v, v], dim=1)
    return batch


def check_position_embeddings(model, max_sequence_length):
    """Composer's: the position embedding has ``max_sequence_length`` rows, frozen and zero."""
    pos_embedding_weight = model.position.weight
    assert pos_embedding_weight.shape[0] == max_sequence_length
    assert not pos_embedding_weight.requires_grad
    assert torch.max(torch.abs(pos_embedding_weight)) == 0.0


def check_forward_backward(model, batch):
    model.zero_grad()
    lm_loss(model(batch["input_ids"]), batch["labels"]).backward()


def check_batch_reshaping(before, after, length):
    input_ids_after_shape = after["input_ids"].shape
    for k in before:
        assert k in after, "No keys should be removed during sequence reshaping."
        assert after[k].shape == input_ids_after_shape, (
            "All tensors should have the same size after sequence reshaping."
        )
        b_numel = before[k].shape[0] * before[k].shape[1]
        a_numel = after[k].shape[0] * after[k].shape[1]
        assert a_numel >= b_numel - length, "Sequence reshaping should throw away at most curr_sequence_length tokens."
        assert torch.all(after[k][0] == before[k][0, : input_ids_after_shape[1]]), (
            "Sequence reshaping should not change the token order."
        )
    for k in after:
        assert k in before, "No keys should be added during sequence reshaping."


@contextmanager
def recorded_warnings():
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        yield records


def encountered_alibi_warning(records) -> bool:
    """Whether a warning naming ALiBi was issued."""
    return any("alibi" in str(r.message).lower() for r in records)


def test_warning_is_triggered():
    """Test that Alibi triggers a warning when it has no effect."""
    with recorded_warnings() as records:
        cf.apply_alibi(
            model=torch.nn.Sequential(torch.nn.Linear(20, 10), torch.nn.Linear(10, 5)), max_sequence_length=64
        )
    assert encountered_alibi_warning(records), "A warning should be generated when Alibi has no effect."


@pytest.mark.parametrize("model,dataloader", [(configure_tiny_gpt2_model, dummy_gpt_lm_dataloader)])
class TestAlibi:
    def test_functional(self, model, dataloader):
        """Composer's ``TestAlibi.test_functional``: apply at the model's maximum length, check the
        position embedding, train a step at that length; again at twice the length."""
        model = model()
        max_sequence_length = model.max_seq_len
        dataloader = dataloader(sequence_length=max_sequence_length)

        with recorded_warnings() as records:
            cf.apply_alibi(model=model, max_sequence_length=max_sequence_length)
        assert not encountered_alibi_warning(records)
        check_position_embeddings(model, max_sequence_length)
        batch = next(iter(dataloader))
        assert batch["input_ids"].shape[1] == max_sequence_length
        check_forward_backward(model, batch)

        with recorded_warnings() as records:
            cf.apply_alibi(model=model, max_sequence_length=2 * max_sequence_length)
        assert not encountered_alibi_warning(records)
        check_position_embeddings(model, 2 * max_sequence_length)
        batch = _double_batch_sequence_length(next(iter(dataloader)))
        assert batch["input_ids"].shape[1] == 2 * max_sequence_length
        check_forward_backward(model, batch)

    @pytest.mark.parametrize("train_sequence_length_scaling", [0.25, 1.0])
    def test_algorithm(self, model, dataloader, train_sequence_length_scaling: float):
        """Composer's ``TestAlibi.test_algorithm``: the class at ``Event.INIT`` warns of nothing,
        at ``Event.AFTER_DATALOADER`` cuts the batch's rows in order, and the model trains on them."""
        model = model()
        dataloader = dataloader()
        state = State(model=model, max_duration=Duration.parse("1ep"), seed=0, dataloader_len=len(dataloader))
        max_sequence_length = state.model.max_seq_len
        alibi = Alibi(
            max_sequence_length=max_sequence_length, train_sequence_length_scaling=train_sequence_length_scaling
        )
        with recorded_warnings() as records:
            alibi.apply(Event.INIT, state, None)
        assert not encountered_alibi_warning(records)

        batch_before = next(iter(dataloader))
        state.batch = deepcopy(batch_before)
        alibi.apply(Event.AFTER_DATALOADER, state, None)
        check_batch_reshaping(batch_before, state.batch, int(train_sequence_length_scaling * max_sequence_length))
        check_forward_backward(state.model, state.batch)
