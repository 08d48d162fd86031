"""Sequence Length Warmup against its definition: the batch's shapes at each length, no token lost
when reshaping, labels aligned with the inputs, the schedule computed here from its formula, the
Trainer on the reference transformer, and Composer's own checks (its test_seq_length_warmup)."""

from __future__ import annotations

import copy
import math
import re
from fractions import Fraction

import pytest
import torch

import algorithms.functional as cf
from algorithms import SeqLengthWarmup
from algorithms.core import Algorithm, Event, State, Trainer
from algorithms.core.time import Duration
from algorithms.models import lm_loss, transformer_tiny

VOCAB = 50


def _lm_batch(n=4, length=32, seed=0, padded=False):
    """Token dict batch as the reference workload builds it: labels are the next tokens."""
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, VOCAB, (n, length + 1), generator=g)
    batch = {"input_ids": tokens[:, :-1].clone(), "labels": tokens[:, 1:].clone()}
    if padded:  # right padding: row i has length - 3 * i real tokens
        lengths = torch.tensor([length - 3 * i for i in range(n)])
        batch["attention_mask"] = (torch.arange(length) < lengths[:, None]).long()
    return batch


# -- Composer's checks (tests/algorithms/test_seq_length_warmup.py), re-expressed ----------------


def _check_truncation(before, after, length, preserve_end_of_sequence):
    assert set(after) == set(before)  # no key removed or added
    lengths = (
        [int(m.sum()) for m in before["attention_mask"]]
        if "attention_mask" in before
        else [before["input_ids"].shape[1]] * before["input_ids"].shape[0]
    )
    for k in before:
        assert after[k].shape[0] == before[k].shape[0]  # batch size unchanged
        assert after[k].shape[1] == min(before[k].shape[1], length)
        if preserve_end_of_sequence:  # the last valid token is still the last valid token
            for seq_before, seq_after, n in zip(before[k], after[k], lengths, strict=True):
                assert seq_after[min(length, n) - 1] == seq_before[n - 1]


def _check_reshaping(before, after, length):
    assert set(after) == set(before)
    shape = after["input_ids"].shape
    for k in before:
        assert after[k].shape == shape  # every tensor the same shape
        assert after[k].numel() >= before[k].numel() - length  # at most one row's worth dropped
        assert torch.equal(after[k][0], before[k][0, : shape[1]])  # order kept


@pytest.mark.parametrize(("truncate", "preserve"), [(True, True), (True, False), (False, False)])
@pytest.mark.parametrize("curr_seq_len", [8, 64])
def test_composers_functional_checks(curr_seq_len, truncate, preserve):
    before = _lm_batch(length=48, padded=True)
    after = cf.set_batch_sequence_length(copy.deepcopy(before), curr_seq_len, truncate, preserve)
    if truncate:
        _check_truncation(before, after, curr_seq_len, preserve)
    else:
        _check_reshaping(before, after, curr_seq_len)
    model = transformer_tiny(VOCAB)
    lm_loss(model(after["input_ids"]), after["labels"]).backward()  # forward and backward run


@pytest.mark.parametrize(("truncate", "preserve"), [(True, True), (True, False), (False, False)])
def test_composers_algorithm_checks(truncate, preserve):
    """Two batches, duration 0.5, lengths 8 then 16: the minimum at the first batch, the maximum at
    the second."""
    warmup = SeqLengthWarmup(
        duration=0.5, min_seq_length=8, max_seq_length=16, truncate=truncate, preserve_end_of_sequence=preserve
    )
    state = State(model=torch.nn.Identity(), max_duration=Duration.parse("2ba"), dataloader_len=2)
    for length in (8, 16):
        before = _lm_batch(length=32, padded=True)
        state.batch = copy.deepcopy(before)
        assert warmup.match(Event.AFTER_DATALOADER, state)
        warmup.apply(Event.AFTER_DATALOADER, state)
        if truncate:
            _check_truncation(before, state.batch, length, preserve)
        else:
            _check_reshaping(before, state.batch, length)
        state.timestamp.batch += 1


# -- the functional form against its definition ------------------------------------------------


@pytest.mark.parametrize("curr_seq_len", [1, 5, 16, 31])
def test_truncating_keeps_the_first_positions_of_every_tensor(curr_seq_len):
    batch = _lm_batch(length=32, padded=True)
    out = cf.set_batch_sequence_length(batch, curr_seq_len)
    for k, v in batch.items():
        assert out[k].shape == (4, curr_seq_len) and out[k].dtype == v.dtype
        assert torch.equal(out[k], v[:, :curr_seq_len])


def test_truncating_cuts_dimension_one_of_higher_dimensional_tensors():
    batch = {"input_ids": torch.arange(24).reshape(2, 12), "embeds": torch.randn(2, 12, 3)}
    out = cf.set_batch_sequence_length(batch, 4)
    assert out["embeds"].shape == (2, 4, 3) and torch.equal(out["embeds"], batch["embeds"][:, :4])


@pytest.mark.parametrize("curr_seq_len", [32, 40])
def test_a_length_not_shorter_than_the_batch_changes_nothing(curr_seq_len):
    batch = _lm_batch(length=32)
    for truncate in (True, False):
        out = cf.set_batch_sequence_length(batch, curr_seq_len, truncate)
        assert out is not batch and all(out[k] is batch[k] for k in batch)


@pytest.mark.parametrize("curr_seq_len", [8, 16, 4])
def test_reshaping_loses_no_token_when_the_length_divides_the_batch(curr_seq_len):
    batch = _lm_batch(n=3, length=32)
    out = cf.set_batch_sequence_length(batch, curr_seq_len, truncate=False)
    for k, v in batch.items():
        assert out[k].shape == (3 * 32 // curr_seq_len, curr_seq_len)
        assert torch.equal(out[k].reshape(-1), v.reshape(-1))  # every token, in row order


def test_reshaping_drops_only_the_remainder_that_fills_no_row():
    """3 x 32 = 96 tokens in rows of 10: 9 rows, the last 6 tokens of the stream dropped."""
    batch = _lm_batch(n=3, length=32)
    out = cf.set_batch_sequence_length(batch, 10, truncate=False)
    for k, v in batch.items():
        assert out[k].shape == (9, 10)
        assert torch.equal(out[k].reshape(-1), v.reshape(-1)[:90])


@pytest.mark.parametrize(("curr_seq_len", "truncate"), [(8, True), (13, True), (8, False), (10, False)])
def test_labels_stay_aligned_with_the_inputs(curr_seq_len, truncate):
    """Every position keeps its (input, next-token label) pair; truncated, each row's labels are still
    its inputs shifted by one."""
    batch = _lm_batch(length=32)
    pairs = set(zip(batch["input_ids"].reshape(-1).tolist(), batch["labels"].reshape(-1).tolist(), strict=True))
    out = cf.set_batch_sequence_length(batch, curr_seq_len, truncate)
    assert set(zip(out["input_ids"].reshape(-1).tolist(), out["labels"].reshape(-1).tolist(), strict=True)) <= pairs
    if truncate:
        assert torch.equal(out["labels"][:, :-1], out["input_ids"][:, 1:])
    flat_in, flat_lab = batch["input_ids"].reshape(-1), batch["labels"].reshape(-1)
    rows = out["input_ids"].shape[0] if not truncate else 0
    for r in range(rows):  # reshaped: row r is the stream's tokens r*L .. r*L+L-1, with their labels
        span = slice(r * curr_seq_len, (r + 1) * curr_seq_len)
        assert torch.equal(out["input_ids"][r], flat_in[span]) and torch.equal(out["labels"][r], flat_lab[span])


def test_preserve_end_of_sequence_is_composers_example():
    batch = {"input_ids": torch.tensor([[10, 11, 12, 13, 14, 15]])}
    assert cf.set_batch_sequence_length(batch, 3)["input_ids"].tolist() == [[10, 11, 12]]
    out = cf.set_batch_sequence_length(batch, 3, preserve_end_of_sequence=True)
    assert out["input_ids"].tolist() == [[10, 11, 15]]
    assert batch["input_ids"].tolist() == [[10, 11, 12, 13, 14, 15]]  # one row: still not written


def test_preserve_end_of_sequence_reads_the_end_from_the_attention_mask():
    batch = {
        "input_ids": torch.tensor([[1, 2, 3, 4, 5, 0], [6, 7, 0, 0, 0, 0]]),
        "attention_mask": torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 0, 0, 0, 0]]),
    }
    out = cf.set_batch_sequence_length(batch, 3, preserve_end_of_sequence=True)
    assert out["input_ids"].tolist() == [[1, 2, 5], [6, 7, 0]]  # a row already short is kept as it is
    assert out["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]


def test_preserve_end_of_sequence_is_ignored_when_reshaping():
    batch = _lm_batch(length=32)
    a = cf.set_batch_sequence_length(batch, 8, truncate=False, preserve_end_of_sequence=True)
    b = cf.set_batch_sequence_length(batch, 8, truncate=False)
    assert all(torch.equal(a[k], b[k]) for k in batch)


def test_keeps_dtype_and_device_of_every_tensor():
    batch = {
        "input_ids": torch.randint(0, 9, (2, 16), dtype=torch.int32),
        "weights": torch.rand(2, 16, dtype=torch.float64),
    }
    for truncate in (True, False):
        out = cf.set_batch_sequence_length(batch, 8, truncate)
        assert out["input_ids"].dtype == torch.int32 and out["weights"].dtype == torch.float64


NEEDS_A_MAPPING = (
    "batch: Sequence Length Warmup needs a mapping of tensors such as {'input_ids': (N, T), 'labels': (N, T)}"
)
DURATION = "must be a number in [0, 1]"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda b: cf.set_batch_sequence_length(b, 0), "curr_seq_len=0: must be an integer in [1, inf)"),
        (lambda b: cf.set_batch_sequence_length(b, 2.5), "curr_seq_len=2.5: must be an integer in [1, inf)"),
        (lambda b: cf.set_batch_sequence_length([b["input_ids"]], 4), f"{NEEDS_A_MAPPING}, got list"),
        (lambda b: cf.set_batch_sequence_length({"ids": [1, 2]}, 4), f"{NEEDS_A_MAPPING}, got dict"),
        (
            lambda b: cf.set_batch_sequence_length({**b, "class": torch.zeros(4)}, 4),
            "batch['class']: shape (4,); truncating needs every tensor to have a sequence dimension (N, T, ...)",
        ),
        (
            lambda b: cf.set_batch_sequence_length({"class": torch.zeros(4), **b}, 4),  # the 1-D tensor first
            "batch['class']: shape (4,); truncating needs every tensor to have a sequence dimension (N, T, ...)",
        ),
        (
            lambda b: cf.set_batch_sequence_length({"labels": b["labels"]}, 4, truncate=False),
            "batch: reshaping (truncate=False) needs 'input_ids', whose shape every tensor shares",
        ),
        (
            lambda b: cf.set_batch_sequence_length({**b, "labels": b["labels"][:, :5]}, 4, truncate=False),
            "batch['labels']: shape (4, 5); reshaping (truncate=False) needs every tensor to have "
            "input_ids' shape (4, 16)",
        ),
        (lambda b: SeqLengthWarmup(duration=1.5), f"duration=1.5: {DURATION}"),
        (lambda b: SeqLengthWarmup(duration=True), f"duration=True: {DURATION}"),
        (lambda b: SeqLengthWarmup(duration="0.5"), f"duration='0.5': {DURATION}"),
        (lambda b: SeqLengthWarmup(min_seq_length=0), "min_seq_length=0: must be an integer in [1, inf)"),
        (lambda b: SeqLengthWarmup(max_seq_length=0), "max_seq_length=0: must be an integer in [1, inf)"),
        (
            lambda b: SeqLengthWarmup(min_seq_length=64, max_seq_length=32),
            "min_seq_length=64, max_seq_length=32: max_seq_length must be >= min_seq_length",
        ),
        (lambda b: SeqLengthWarmup(step_size=0), "step_size=0: must be an integer in [1, inf)"),
    ],
)
def test_bad_input_is_a_value_error_naming_the_argument(call, message):
    batch = _lm_batch(length=16)
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        call(batch)


@pytest.mark.parametrize("truncate", [True, False])
def test_a_batch_without_a_sequence_dimension_is_left_as_it_is(truncate):
    """No tensor of two or more dimensions: no length to cut to, so a new dict of the same tensors."""
    for batch in ({}, {"lengths": torch.tensor([3, 4])}):
        out = cf.set_batch_sequence_length(batch, 2, truncate)
        assert out == batch and out is not batch and all(out[k] is batch[k] for k in batch)


# -- the schedule ------------------------------------------------------------------------------


def _formula(b, total, duration, low, high, step):
    """The length at batch b of total: linear from low at 0 to high at duration, in steps."""
    warm = duration * total  # batches of warmup
    if b >= warm:
        return high
    return min(low + step * math.floor(b * ((high - low) // step) / warm), high)


@pytest.mark.parametrize(
    ("total", "duration", "low", "high", "step"),
    [
        (100, 0.3, 8, 128, 8),
        (10, 0.5, 16, 128, 16),
        (7, 1.0, 8, 64, 8),
        (40, 0.25, 5, 100, 7),
        (6, 0.3, 8, 128, 8),
        (3, 0.3, 8, 1024, 8),
        (5, 0.0, 8, 128, 8),
        (8, 0.5, 32, 32, 8),
    ],
)
def test_the_length_at_each_batch_is_the_formula(total, duration, low, high, step):
    warmup = SeqLengthWarmup(duration=duration, min_seq_length=low, max_seq_length=high, step_size=step)
    got = [warmup.sequence_length(Fraction(b, total)) for b in range(total)]
    want = [_formula(Fraction(b), total, Fraction(str(duration)), low, high, step) for b in range(total)]
    assert got == want
    assert got[0] == (low if duration > 0 else high) and all(x <= y for x, y in zip(got[:-1], got[1:], strict=True))
    assert all((x - low) % step == 0 or x == high for x in got)


def test_a_float_progress_is_read_as_the_decimal_it_prints_as():
    """0.3 as a float is a little below 3/10; read as the decimal "0.3" it is the end of a 0.3 warmup.
    0.02 of a 0.1 warmup of ten steps is two steps exactly, where float division (0.02 / 0.1 =
    0.19999999999999998) would give one."""
    warmup = SeqLengthWarmup(duration=0.3, min_seq_length=8, max_seq_length=128, step_size=8)
    assert warmup.sequence_length(0.3) == 128 and warmup.sequence_length(Fraction(3, 10)) == 128
    assert warmup.sequence_length(0.15) == 8 + 8 * 7 and warmup.sequence_length(0.0) == 8  # floor(0.5 * 15) = 7
    warmup = SeqLengthWarmup(duration=0.1, min_seq_length=8, max_seq_length=88, step_size=8)
    assert warmup.sequence_length(0.02) == 8 + 8 * 2 == warmup.sequence_length(Fraction(1, 50))


def test_the_defaults_are_composers():
    """duration 0.3, lengths 8 to 1024 in steps of 8, truncating, the end of a sequence not kept."""
    warmup = SeqLengthWarmup()
    got = [warmup.sequence_length(Fraction(b, 100)) for b in range(100)]
    assert got == [_formula(Fraction(b), 100, Fraction(3, 10), 8, 1024, 8) for b in range(100)]
    state = State(model=torch.nn.Identity(), max_duration=Duration.parse("10ba"))
    state.batch = _lm_batch(n=2, length=32)
    warmup.apply(Event.AFTER_DATALOADER, state)
    assert torch.equal(state.batch["input_ids"], _lm_batch(n=2, length=32)["input_ids"][:, :8])


def _length_at(warmup, max_duration, done=0, epoch=0, batch_in_epoch=0, dataloader_len=None):
    state = State(model=torch.nn.Identity(), max_duration=Duration.parse(max_duration), dataloader_len=dataloader_len)
    state.timestamp.batch = state.timestamp.sample = done
    state.timestamp.epoch, state.timestamp.batch_in_epoch = epoch, batch_in_epoch
    state.batch = _lm_batch(n=2, length=64)
    warmup.apply(Event.AFTER_DATALOADER, state)
    return state.batch["input_ids"].shape[1]


def test_the_progress_is_exact_in_every_unit_of_the_run():
    """Duration 1 and three steps (8, 16, 24, 32): at a third of the run the length is 16, which a
    float progress (1/3 = 0.333...) would floor to 8."""
    warmup = SeqLengthWarmup(duration=1.0, min_seq_length=8, max_seq_length=32, step_size=8)
    assert [_length_at(warmup, "3ba", done=b) for b in range(3)] == [8, 16, 24]
    assert [_length_at(warmup, "3sp", done=b) for b in range(3)] == [8, 16, 24]
    assert [_length_at(warmup, "1ep", batch_in_epoch=b, dataloader_len=3) for b in range(3)] == [8, 16, 24]
    # a loader without a length: epochs done over epochs, as State.progress() gives it
    assert [_length_at(warmup, "4ep", epoch=e) for e in range(4)] == [8, 8, 16, 24]  # floor(e / 4 * 3) steps
    assert _length_at(warmup, "0ba") == 32  # a run of no batches is done: State.progress() is 1


def test_the_schedule_matches_composers_where_its_batches_divide_evenly():
    """Composer: step_size * (batch // (warmup // steps)) + min, clamped; the same when
    warmup batches are a multiple of the number of steps."""
    total, duration, low, high, step = 100, 0.3, 8, 128, 8
    warmup = SeqLengthWarmup(duration, low, high, step)
    every = int(total * duration) // ((high - low) // step)
    composer = [min(max(step * (b // every) + low, low), high) for b in range(total)]
    assert [warmup.sequence_length(Fraction(b, total)) for b in range(total)] == composer


class _Recorder(Algorithm):
    """The batch the model is given, after every other algorithm."""

    def __init__(self):
        self.seen = []

    def match(self, event, state):
        return event is Event.BEFORE_FORWARD

    def apply(self, event, state, logger=None):
        self.seen.append({k: v.clone() for k, v in state.batch.items()})


@pytest.mark.parametrize("truncate", [True, False])
def test_in_the_trainer_each_batch_has_the_schedules_length(truncate):
    batches = [_lm_batch(n=2, length=128, seed=s) for s in range(4)]
    kept = copy.deepcopy(batches)
    warmup = SeqLengthWarmup(duration=0.75, min_seq_length=16, max_seq_length=128, step_size=16, truncate=truncate)
    recorder = _Recorder()
    trainer = Trainer(
        transformer_tiny(VOCAB),
        batches,
        "4ba",
        loss_fn=lm_loss,
        input_key="input_ids",
        target_key="labels",
        algorithms=[warmup, recorder],
        seed=0,
    )
    trainer.fit()
    lengths = [_formula(b, 4, Fraction(3, 4), 16, 128, 16) for b in range(4)]
    assert lengths == [16, 48, 80, 128]  # 16 + 16 * floor(b * 7 / 3)
    for seen, length, given in zip(recorder.seen, lengths, batches, strict=True):
        assert seen["input_ids"].shape[1] == length
        assert seen["input_ids"].shape[0] == (2 if truncate else 2 * 128 // length)
        want = given["labels"][:, :length] if truncate else given["labels"].reshape(-1)[: seen["labels"].numel()]
        assert torch.equal(seen["labels"].reshape(-1), want.reshape(-1))
    assert all(torch.equal(a[k], b[k]) for a, b in zip(batches, kept, strict=True) for k in a)


def test_in_the_trainer_an_epoch_duration_counts_batches_of_the_loader():
    batches = [_lm_batch(n=2, length=64, seed=s) for s in range(2)]
    warmup = SeqLengthWarmup(duration=0.5, min_seq_length=16, max_seq_length=64, step_size=16)
    recorder = _Recorder()
    Trainer(
        transformer_tiny(VOCAB),
        batches,
        "2ep",
        loss_fn=lm_loss,
        input_key="input_ids",
        target_key="labels",
        algorithms=[warmup, recorder],
        seed=0,
    ).fit()
    assert [s["input_ids"].shape[1] for s in recorder.seen] == [
        _formula(b, 4, Fraction(1, 2), 16, 64, 16) for b in range(4)
    ]


def test_it_reports_the_batches_it_shortened():
    """Over 4 batches warming up over the first half: 8, then 16 tokens of 32, then the full 32."""
    batches = [_lm_batch(seed=i) for i in range(4)]
    warmup = SeqLengthWarmup(duration=0.5, min_seq_length=8, max_seq_length=32, step_size=8)
    trainer = Trainer(
        transformer_tiny(VOCAB),
        batches,
        "4ba",
        loss_fn=lm_loss,
        input_key="input_ids",
        target_key="labels",
        algorithms=[warmup],
        seed=0,
        device="cpu",
    )
    trainer.fit()
    assert trainer.method_log.records["SeqLengthWarmup"]["activity"] == {"batches_shortened": 2}
