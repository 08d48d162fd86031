"""Composer's tests of sequence length warmup (``tests/algorithms/test_seq_length_warmup.py``),
re-expressed with this library's imports; Composer's ``empty_logger`` is ``None`` (an algorithm
given no log counts nothing).

Composer's models and data here are a tiny Hugging Face BERT and GPT-2, each with a loader of
four sequences of four tokens made by ``transformers``' language-modelling collator, and a
``SimpleTransformerClassifier`` whose case Composer itself marks as an expected failure. The
stand-ins: :class:`TinyLM`, which takes the dict batch and returns ``{"loss": ...}`` as a Hugging
Face model does (all that ``check_forward_backward`` asks of it), and :func:`lm_dataloader`, the
collator's output (``input_ids``, ``attention_mask``, ``labels``; 15% of the tokens masked for
BERT, the labels the inputs for GPT-2). Composer's ``State`` takes the loader; this one takes its
length, and Composer's ``timestamp.to_next_batch`` is the next batch's ``Timestamp``.
"""

from __future__ import annotations

from copy import deepcopy

import pytest
import torch
import torch.nn.functional as F
from composer_support import SimpleTransformerClassifier
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from algorithms.core import Event, State, Timestamp
from algorithms.core.time import Duration
from algorithms.seq_length_warmup import SeqLengthWarmup, set_batch_sequence_length

BERT_VOCAB, GPT2_VOCAB, BERT_MASK_ID = 30522, 50257, 103


class TinyLM(nn.Module):
    """Stand-in for Composer's tiny Hugging Face language models: embeds ``input_ids``, predicts
    a token at each position, and returns the cross-entropy with ``labels`` (-100 ignored)."""

    def __init__(self, vocab_size: int):
        super().__init__()
        self.embedding, self.head = nn.Embedding(vocab_size, 4), nn.Linear(4, vocab_size)

    def forward(self, batch):
        logits = self.head(self.embedding(batch["input_ids"]))
        return {"logits": logits, "loss": F.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten())}


def configure_tiny_bert_hf_model():
    return TinyLM(BERT_VOCAB)


def configure_tiny_gpt2_hf_model():
    return TinyLM(GPT2_VOCAB)


def lm_dataloader(vocab_size: int, mlm: bool, sequence_length: int = 4, size: int = 4) -> DataLoader:
    """Stand-in for Composer's ``dummy_hf_lm_dataloader`` with ``transformers``' collator."""
    input_ids = torch.randint(vocab_size, (size, sequence_length))
    labels = input_ids.clone()
    if mlm:
        masked = torch.rand(size, sequence_length) < 0.15
        masked[:, 0] = True  # at least one label per row, so the loss is defined
        labels[~masked] = -100
        input_ids[masked] = BERT_MASK_ID
    samples = [
        {
            "input_ids": input_ids[i],
            "attention_mask": torch.ones(sequence_length, dtype=torch.long),
            "labels": labels[i],
        }
        for i in range(size)
    ]
    return DataLoader(samples, batch_size=2)


def dummy_bert_lm_dataloader(sequence_length=4, size=4):
    return lm_dataloader(BERT_VOCAB, mlm=True, sequence_length=sequence_length, size=size)


def dummy_gpt_lm_dataloader(sequence_length=4, size=4):
    return lm_dataloader(GPT2_VOCAB, mlm=False, sequence_length=sequence_length, size=size)


def dummy_text_classification_dataloader():
    """Stand-in for Composer's: 8 sequences of tokens and their labels, in batches of 4."""
    return DataLoader(TensorDataset(torch.randint(0, 10, (8, 32)), torch.randint(0, 2, (8,))), batch_size=4)


def _state(model, dataloader) -> State:
    """Composer's ``State(model=model, rank_zero_seed=0, run_name='run_name', device=DeviceCPU(),
    dataloader=dataloader, dataloader_label='train', max_duration='1ep')``."""
    return State(model=model, max_duration=Duration.parse("1ep"), seed=0, dataloader_len=len(dataloader))


def check_batch_truncation(before, after, length, preserve_end_of_sequence=False):
    before_lengths = [int(m.sum()) for m in before["attention_mask"]]

    # Just make sure the lengths are correct
    for k in before.keys():
        assert k in after, "No keys should be removed during sequence truncation."

        assert before[k].shape[0] == after[k].shape[0], (
            "The batch size should not be changed during sequence truncation."
        )

        if before[k].ndim >= 2:
            assert after[k].shape[1] == min(before[k].shape[1], length), "Incorrect sequence length after truncation."

            if preserve_end_of_sequence:
                # The last valid token before truncation should still be the last valid token
                for seq_before, seq_after, before_length in zip(before[k], after[k], before_lengths, strict=False):
                    assert seq_after[min(length, before_length) - 1] == seq_before[before_length - 1]

    for k in after.keys():
        assert k in before, "No keys should be added during sequence truncation"


def check_batch_non_truncation(before, after, length):
    # Make sure all the batch tensors have the same shape
    input_ids_after_shape = after["input_ids"].shape

    # Just make sure the lengths are correct
    for k in before.keys():
        assert k in after, "No keys should be removed during sequence reshaping."

        assert after[k].shape == input_ids_after_shape, (
            "All tensors should have the same size after sequence reshaping."
        )

        b_numel = before[k].shape[0] * before[k].shape[1]
        a_numel = after[k].shape[0] * after[k].shape[1]
        assert a_numel >= b_numel - length, "Sequence reshaping should throw away at most curr_sequence_length tokens."

        assert torch.all(
            after[k][0] == before[k][0, : input_ids_after_shape[1]],
        ), "Sequence reshaping should not change the token order."

    for k in after.keys():
        assert k in before, "No keys should be added during sequence reshaping."


def check_batch(before, after, length, truncate: bool, preserve_end_of_sequence: bool):
    if truncate:
        check_batch_truncation(before, after, length, preserve_end_of_sequence)
    else:
        check_batch_non_truncation(before, after, length)


def check_forward_backward(model, batch):
    model.zero_grad()
    output = model.forward(batch)
    output["loss"].backward()


@pytest.mark.parametrize(
    "model, dataloader",
    [
        (configure_tiny_bert_hf_model, dummy_bert_lm_dataloader),
        (configure_tiny_gpt2_hf_model, dummy_gpt_lm_dataloader),
        (
            pytest.param(
                SimpleTransformerClassifier,
                dummy_text_classification_dataloader,
                marks=pytest.mark.xfail(reason="Gated Linear Units does not currently support non-HuggingFace models"),
            )
        ),
    ],
)
@pytest.mark.parametrize("truncate,preserve_end_of_sequence", [(True, True), (True, False), (False, False)])
class TestSeqLengthWarmup:
    """Composer's ``TestSeqLengthWarmup`` (its third model's mark, Composer's own, kept)."""

    @pytest.mark.parametrize("curr_seq_length", [8, 64])
    def test_functional(self, model, dataloader, curr_seq_length: int, truncate: bool, preserve_end_of_sequence: bool):
        model = model()
        dataloader = dataloader()
        state = _state(model, dataloader)
        batch_before = next(iter(dataloader))
        batch_after = set_batch_sequence_length(
            deepcopy(batch_before),
            curr_seq_length,
            truncate,
            preserve_end_of_sequence,
        )

        check_batch(batch_before, batch_after, curr_seq_length, truncate, preserve_end_of_sequence)
        check_forward_backward(state.model, batch_after)

    def test_algorithm(self, model, dataloader, truncate: bool, preserve_end_of_sequence: bool):
        empty_logger = None
        model = model()
        dataloader = dataloader()
        state = _state(model, dataloader)

        # Synthetic dataset has a size of 2 batches per epoch (max duration = 1ep)
        seq_length_warmup = SeqLengthWarmup(
            duration=0.5,
            min_seq_length=8,
            max_seq_length=16,
            truncate=truncate,
            preserve_end_of_sequence=preserve_end_of_sequence,
        )
        seq_length_warmup.apply(Event.INIT, state, empty_logger)

        batch_before = next(iter(dataloader))
        state.batch = deepcopy(batch_before)
        seq_length_warmup.apply(Event.AFTER_DATALOADER, state, empty_logger)

        # At this point, we should see the MINIMUM sequence length after truncation
        check_batch(batch_before, state.batch, seq_length_warmup.min_seq_length, truncate, preserve_end_of_sequence)
        check_forward_backward(state.model, state.batch)

        # Note: max duration is 1 epoch
        # Composer: state.timestamp = state.timestamp.to_next_batch(samples=state.batch['input_ids'].shape[0])
        ts = state.timestamp
        state.timestamp = Timestamp(
            epoch=ts.epoch,
            batch=ts.batch + 1,
            sample=ts.sample + state.batch["input_ids"].shape[0],
            batch_in_epoch=ts.batch_in_epoch + 1,
        )
        batch_before = next(iter(dataloader))
        state.batch = deepcopy(batch_before)
        seq_length_warmup.apply(Event.AFTER_DATALOADER, state, empty_logger)

        # At this point, we should see the MAXIMUM sequence length after truncation
        check_batch(batch_before, state.batch, seq_length_warmup.max_seq_length, truncate, preserve_end_of_sequence)
        check_forward_backward(state.model, state.batch)
