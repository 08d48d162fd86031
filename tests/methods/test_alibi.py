"""ALiBi, checked against its definition (Press et al., 2022): no position embedding; head h of H
adds ``-m_h * (i - j)`` to the logit of query i on key j <= i, with ``m_h = 2 ** (-8 h / H)`` for
H a power of 2 and the paper's interleaving rule otherwise.

Composer's tests of ``apply_alibi`` and ``Alibi`` assert: no warning when the model has ALiBi's
modules and one when it has none; the position embedding no longer acts; forward and backward at
the maximum length and, applied again with twice the length, at twice the length; the class's
batch reshaping keeps every key, gives every tensor the input's shape, throws away at most one
sequence length of tokens and keeps the order of the tokens (the first row is the start of the
first). All are re-expressed here on ``transformer_tiny``.
"""

from __future__ import annotations

import math
import re
import warnings
from collections import namedtuple

import pytest
import torch
import torch.nn.functional as F
from trainer_support import Observed

import algorithms.functional as cf
from algorithms import Alibi
from algorithms.alibi import AlibiAttention, alibi_bias, alibi_slopes, shorten_sequences
from algorithms.core import Event, Trainer
from algorithms.models import lm_loss, transformer_small, transformer_tiny
from algorithms.models.transformer import CausalSelfAttention, PositionEmbedding
from algorithms.surgery import NoModulesReplacedWarning

VOCAB = 50


def _model(seed=0, builder=transformer_tiny):
    torch.manual_seed(seed)
    return builder(VOCAB)


def _lm_batches(n=2, bs=4, length=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        ids = torch.randint(0, VOCAB, (bs, length + 1), generator=g)
        out.append({"input_ids": ids[:, :-1], "labels": ids[:, 1:]})
    return out


def test_slopes_for_powers_of_two_are_the_paper_s_geometric_sequence():
    """H = 8: 1/2, 1/4, ..., 1/256 (the paper's example); H = 4: 1/4, 1/16, 1/64, 1/256."""
    assert alibi_slopes(8) == [2.0**-k for k in range(1, 9)]
    assert alibi_slopes(4) == [1 / 4, 1 / 16, 1 / 64, 1 / 256]
    for h in (1, 2, 16, 32):
        assert alibi_slopes(h) == pytest.approx([2 ** (-8 * k / h) for k in range(1, h + 1)], rel=1e-15)


def test_slopes_for_other_head_counts_follow_the_paper_s_rule():
    """The paper's code: the 2^floor(log2 H) slopes, then every other slope of twice as many heads."""
    s8, s16 = alibi_slopes(8), alibi_slopes(16)
    assert alibi_slopes(12) == s8 + s16[0::2][:4]
    assert alibi_slopes(12)[8:] == [2 ** (-8 * k / 16) for k in (1, 3, 5, 7)]
    assert alibi_slopes(6) == alibi_slopes(4) + [2**-1, 2**-3]
    assert alibi_slopes(3) == [2**-4, 2**-8, 2**-2]
    assert len(alibi_slopes(24)) == 24 and len(set(alibi_slopes(24))) == 24


@pytest.mark.parametrize("n_heads", [0, -4, True, 4.0, "4"])
def test_a_head_count_that_is_not_a_positive_integer_is_refused(n_heads):
    with pytest.raises(ValueError, match=f"^{re.escape(f'n_heads={n_heads!r}: must be an integer in [1, inf)')}$"):
        alibi_slopes(n_heads)


@pytest.mark.parametrize("n_heads", [4, 8, 6])
def test_the_bias_matrix_is_minus_slope_times_distance(n_heads):
    length = 9
    bias = alibi_bias(torch.tensor(alibi_slopes(n_heads)), length)
    assert bias.shape == (n_heads, length, length) and bias.dtype == torch.float32
    for h in range(n_heads):
        m = alibi_slopes(n_heads)[h]
        for i in range(length):
            for j in range(i + 1):
                assert bias[h, i, j].item() == pytest.approx(-m * (i - j), rel=1e-6, abs=0)
    # float64 slopes: still computed in float32 and returned as float32 (the default dtype)
    wide = alibi_bias(torch.tensor(alibi_slopes(n_heads), dtype=torch.float64), length)
    assert wide.dtype == torch.float32 and torch.equal(wide, bias)


def test_the_attention_is_softmax_of_scaled_scores_plus_the_bias():
    """AlibiAttention from its own weights: softmax(q k^T / sqrt(d_head) - m_h (i - j)), causal."""
    model = _model().eval()
    cf.apply_alibi(model, max_sequence_length=64)
    attn = model.blocks[0].attn
    n, t, d, h = 2, 11, 64, 4
    x = torch.randn(n, t, d, generator=torch.Generator().manual_seed(1))
    q, k, v = (x @ attn.qkv.weight.T + attn.qkv.bias).view(n, t, 3, h, d // h).permute(2, 0, 3, 1, 4)
    scores = q @ k.transpose(-1, -2) / math.sqrt(d // h)
    i, j = torch.arange(t)[:, None], torch.arange(t)[None, :]
    slopes = torch.tensor(alibi_slopes(h))[:, None, None]
    scores = (scores - slopes * (i - j)).masked_fill(j > i, float("-inf"))
    y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(n, t, d)
    torch.testing.assert_close(attn(x), y @ attn.out.weight.T + attn.out.bias)


def test_the_position_embedding_is_gone_and_the_attention_replaced():
    model = _model()
    replaced = cf.apply_alibi(model, max_sequence_length=256)
    assert sorted(replaced) == ["blocks.0.attn", "blocks.1.attn", "position"]
    assert isinstance(model.position, torch.nn.Identity)
    assert not any(isinstance(m, PositionEmbedding) for m in model.modules())
    assert sum(isinstance(m, AlibiAttention) for m in model.modules()) == 2
    assert not any(type(m) is CausalSelfAttention for m in model.modules())
    assert "position.weight" not in dict(model.named_parameters())
    assert len(cf.apply_alibi(_model(builder=transformer_small), 512)) == 5


def test_the_attention_keeps_its_parameters():
    model = _model()
    layers = [(b.attn.qkv, b.attn.out) for b in model.blocks]
    cf.apply_alibi(model, max_sequence_length=128)
    assert [(b.attn.qkv, b.attn.out) for b in model.blocks] == layers
    assert all(b.attn.dropout == 0.1 and b.attn.n_heads == 4 for b in model.blocks)
    assert "slopes" not in "".join(model.state_dict())  # derived, not state


def test_the_model_runs_beyond_its_learned_positions_up_to_the_new_maximum():
    model = _model()
    with pytest.raises(ValueError, match="max_seq_len=128"):
        model(torch.randint(0, VOCAB, (1, 129)))
    cf.apply_alibi(model, max_sequence_length=300)
    for length in (129, 300):
        logits = model(torch.randint(0, VOCAB, (2, length)))
        assert logits.shape == (2, length, VOCAB) and torch.isfinite(logits).all()
    with pytest.raises(
        ValueError, match="^input_ids: 301 positions, but ALiBi was applied with max_sequence_length=300"
    ):
        model(torch.randint(0, VOCAB, (1, 301)))


def test_applied_again_it_takes_the_new_maximum_length():
    """Composer's functional test: apply at the maximum, run; apply at twice it, run at twice it."""
    model = _model()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cf.apply_alibi(model, max_sequence_length=128)
        batch = _lm_batches(1, length=128)[0]
        lm_loss(model(batch["input_ids"]), batch["labels"]).backward()
        qkv = model.blocks[0].attn.qkv
        assert sorted(cf.apply_alibi(model, max_sequence_length=256)) == ["blocks.0.attn", "blocks.1.attn"]
    assert model.blocks[0].attn.qkv is qkv and model.blocks[0].attn.max_sequence_length == 256
    long = {k: torch.cat([v, v], dim=1) for k, v in batch.items()}
    model.zero_grad()
    lm_loss(model(long["input_ids"]), long["labels"]).backward()
    assert all(p.grad is not None for p in model.parameters())


def test_it_is_causal():
    """Changing a later token changes no earlier position's logits."""
    model = _model().eval()
    cf.apply_alibi(model, max_sequence_length=200)
    ids = torch.randint(0, VOCAB, (2, 150), generator=torch.Generator().manual_seed(3))
    changed = ids.clone()
    changed[:, 140] = (changed[:, 140] + 1) % VOCAB
    a, b = model(ids), model(changed)
    torch.testing.assert_close(a[:, :140], b[:, :140], rtol=0, atol=1e-6)
    assert (a[:, 140:] - b[:, 140:]).abs().max() > 1e-3


def test_a_head_prefers_near_keys_by_its_slope():
    """With equal scores (zero query weights), head h's attention on key j is proportional to
    exp(-m_h (i - j)): the bias alone decides."""
    model = _model().eval()
    cf.apply_alibi(model, max_sequence_length=64)
    attn = model.blocks[0].attn
    with torch.no_grad():
        attn.qkv.weight[:64].zero_()
        attn.qkv.bias.zero_()
    bias = attn.attention_bias(6, torch.device("cpu"), torch.float32)
    weights = bias.masked_fill(torch.ones(6, 6, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)
    m = alibi_slopes(4)
    expected = torch.tensor([math.exp(-m[0] * (5 - j)) for j in range(6)])
    torch.testing.assert_close(weights[0, 5], expected / expected.sum())


def test_an_optimizer_built_before_surgery_drops_the_position_embedding():
    model = _model()
    position = model.position.weight
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    batch = _lm_batches(1)[0]
    lm_loss(model(batch["input_ids"]), batch["labels"]).backward()
    optimizer.step()
    qkv = model.blocks[0].attn.qkv.weight
    moments = optimizer.state[qkv]["exp_avg"].clone()
    cf.apply_alibi(model, 256, optimizer)
    held = [p for g in optimizer.param_groups for p in g["params"]]
    assert {id(p) for p in held} == {id(p) for p in model.parameters()}
    assert all(p is not position for p in held) and position not in optimizer.state
    assert torch.equal(optimizer.state[qkv]["exp_avg"], moments)  # the same parameter keeps its state
    optimizer.zero_grad()
    lm_loss(model(batch["input_ids"]), batch["labels"]).backward()
    before = qkv.detach().clone()
    optimizer.step()
    assert not torch.equal(qkv, before)


def test_the_model_s_dtype_is_kept():
    model = _model().double()
    cf.apply_alibi(model, 256)
    assert model.blocks[0].attn.slopes.dtype == torch.float64
    out = model(torch.randint(0, VOCAB, (2, 140)))
    assert out.dtype == torch.float64


def test_under_bfloat16_autocast_the_bias_is_computed_in_float32_then_cast():
    slopes = torch.tensor(alibi_slopes(4))
    bias = alibi_bias(slopes, 300, torch.bfloat16)
    assert bias.dtype == torch.bfloat16
    torch.testing.assert_close(bias.float(), alibi_bias(slopes, 300).bfloat16().float())
    model = _model()
    cf.apply_alibi(model, 512)
    for dtype in (torch.bfloat16, torch.float64):  # the attention asks for its query's dtype
        attn_bias = model.blocks[0].attn.attention_bias(300, torch.device("cpu"), dtype)
        assert attn_bias.dtype == dtype and torch.equal(attn_bias, alibi_bias(slopes, 300).to(dtype))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.isfinite(model(torch.randint(0, VOCAB, (1, 300)))).all()


def test_shorter_sequences_keep_the_tokens_in_order():
    """Composer's reshaping checks: same keys, every tensor the input's shape, at most one new
    sequence length of tokens thrown away, the first row the start of the first sequence."""
    batch = _lm_batches(1, bs=4, length=32)[0]
    for scaling, length in ((0.25, 8), (0.5, 16), (1.0, 32)):
        out = shorten_sequences(batch, scaling)
        assert set(out) == set(batch) and all(v.shape == out["input_ids"].shape for v in out.values())
        assert out["input_ids"].shape == (4 * 32 // length, length)
        assert out["input_ids"].numel() >= batch["input_ids"].numel() - length
        assert torch.equal(out["input_ids"][0], batch["input_ids"][0, :length])
        # every row is a piece of one row: labels stay the next token of the same text
        assert torch.equal(out["input_ids"].reshape(4, -1), batch["input_ids"])
        assert torch.equal(out["labels"].reshape(4, -1), batch["labels"])


def test_a_length_that_does_not_divide_drops_each_row_s_remainder():
    ids = torch.arange(2 * 10).reshape(2, 10)
    out = shorten_sequences((ids, ids + 100), 0.3)  # pieces of 3: positions 0-2, 3-5, 6-8 of each row
    assert isinstance(out, tuple) and out[0].shape == (6, 3)
    assert torch.equal(
        out[0], torch.tensor([[0, 1, 2], [3, 4, 5], [6, 7, 8], [10, 11, 12], [13, 14, 15], [16, 17, 18]])
    )
    assert torch.equal(out[1], out[0] + 100)
    with pytest.raises(ValueError, match="^batch: its sequence tensors differ"):
        shorten_sequences({"a": ids, "b": ids[:, :5]}, 0.5)


def test_only_tensors_of_two_or_more_dimensions_are_cut():
    """A ``(N, T, D)`` tensor is cut along T like the ``(N, T)`` ones; a per-example ``(N,)``
    tensor and an item that is no tensor are kept as they are."""
    ids, embeds = torch.arange(2 * 8).reshape(2, 8), torch.randn(2, 8, 3)
    lengths = torch.tensor([8, 6])
    out = shorten_sequences({"input_ids": ids, "embeds": embeds, "lengths": lengths, "source": "wiki"}, 0.5)
    assert torch.equal(out["input_ids"], torch.tensor([[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]))
    assert out["embeds"].shape == (4, 4, 3) and torch.equal(out["embeds"].reshape(2, 8, 3), embeds)
    assert out["lengths"] is lengths and out["source"] == "wiki"
    batch = {"lengths": lengths, "source": "wiki"}  # nothing to cut
    assert shorten_sequences(batch, 0.5) is batch


def test_each_piece_has_at_least_one_position():
    """``max(1, int(T * scaling))``: 10 positions at 0.1 give pieces of 1, and so do 4 (0.4 rounds down to 0)."""
    for t in (10, 4):
        ids = torch.arange(2 * t).reshape(2, t)
        out = shorten_sequences([ids], 0.1)
        assert isinstance(out, list) and torch.equal(out[0], ids.reshape(2 * t, 1))


def test_with_scaling_1_the_batch_itself_is_returned():
    batch = {"input_ids": torch.arange(12).reshape(2, 6)}
    assert shorten_sequences(batch, 1) is batch and shorten_sequences(batch, 1.0) is batch


def test_a_named_tuple_batch_stays_a_named_tuple():
    Batch = namedtuple("Batch", ["input_ids", "labels", "lengths"])
    ids = torch.arange(2 * 6).reshape(2, 6)
    out = shorten_sequences(Batch(ids, ids + 1, torch.tensor([6, 6])), 0.5)
    assert type(out) is Batch
    assert torch.equal(out.input_ids, ids.reshape(4, 3)) and torch.equal(out.labels, ids.reshape(4, 3) + 1)
    assert torch.equal(out.lengths, torch.tensor([6, 6]))


def test_in_the_trainer_the_model_trains_on_shorter_rows_without_positions():
    seen = Observed(input_key="input_ids", target_key="labels")
    batches = _lm_batches(2, bs=4, length=32)
    trainer = Trainer(
        _model(),
        batches,
        "2ba",
        loss_fn=lm_loss,
        input_key="input_ids",
        target_key="labels",
        algorithms=[Alibi(max_sequence_length=256), seen],
        seed=0,
        device="cpu",
    )
    model = trainer.state.model
    assert isinstance(model.position, torch.nn.Identity) and isinstance(model.blocks[1].attn, AlibiAttention)
    held = {id(p) for p in trainer.state.optimizers[0].param_groups[0]["params"]}
    assert held == {id(p) for p in model.parameters()}
    trainer.fit()
    for batch, ids, labels, out, loss in zip(
        batches, seen.inputs, seen.targets, seen.outputs, seen.losses, strict=True
    ):
        assert ids.shape == (16, 8) and torch.equal(ids.reshape(4, 32), batch["input_ids"])
        assert torch.equal(labels.reshape(4, 32), batch["labels"])
        torch.testing.assert_close(loss, lm_loss(out, labels))
    assert trainer.state.timestamp.sample == 8  # the loader's rows, counted before ALiBi cut them
    long = model(torch.randint(0, VOCAB, (1, 200)))
    assert long.shape == (1, 200, VOCAB)


def test_with_scaling_1_the_batches_are_left_as_they_are():
    seen = Observed(input_key="input_ids", target_key="labels")
    batches = _lm_batches(1, bs=3, length=20)
    algo = Alibi(max_sequence_length=64, train_sequence_length_scaling=1.0)
    trainer = Trainer(
        _model(),
        batches,
        "1ba",
        loss_fn=lm_loss,
        input_key="input_ids",
        target_key="labels",
        algorithms=[algo, seen],
        seed=0,
        device="cpu",
    )
    trainer.fit()
    assert torch.equal(seen.inputs[0], batches[0]["input_ids"])
    assert [t.event for t in trainer.engine.trace if "Alibi" in t.algorithms] == [Event.INIT]  # no per-batch work


def test_in_the_trainer_an_optimizer_given_to_it_drops_the_position_embedding():
    model = _model()
    position = model.position.weight
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    trainer = Trainer(
        model,
        _lm_batches(1),
        "1ba",
        loss_fn=lm_loss,
        input_key="input_ids",
        target_key="labels",
        optimizer=optimizer,
        algorithms=[Alibi(max_sequence_length=64)],
        seed=0,
        device="cpu",
    )
    held = [p for g in optimizer.param_groups for p in g["params"]]
    assert all(p is not position for p in held)
    assert {id(p) for p in held} == {id(p) for p in trainer.state.model.parameters()}
    trainer.fit()


def test_the_smallest_maximum_is_one_position():
    model = _model().eval()
    Alibi(max_sequence_length=1)
    cf.apply_alibi(model, max_sequence_length=1)
    assert model(torch.randint(0, VOCAB, (3, 1))).shape == (3, 1, VOCAB)
    with pytest.raises(ValueError, match="^input_ids: 2 positions"):
        model(torch.randint(0, VOCAB, (3, 2)))


def test_attention_built_directly_has_no_dropout_by_default():
    torch.manual_seed(0)
    attn = AlibiAttention(16, 2, max_sequence_length=8).train()
    x = torch.randn(2, 5, 16)
    assert attn.dropout == 0.0 and torch.equal(attn(x), attn(x))


MAX_LENGTH = "must be an integer in [1, inf)"
SCALING = "must be a number in (0, 1]"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_sequence_length": 0}, f"max_sequence_length=0: {MAX_LENGTH}"),
        ({"max_sequence_length": 12.5}, f"max_sequence_length=12.5: {MAX_LENGTH}"),
        ({"max_sequence_length": True}, f"max_sequence_length=True: {MAX_LENGTH}"),
        ({"max_sequence_length": 8, "train_sequence_length_scaling": 0}, f"train_sequence_length_scaling=0: {SCALING}"),
        ({"max_sequence_length": 8, "train_sequence_length_scaling": 2}, f"train_sequence_length_scaling=2: {SCALING}"),
        (
            {"max_sequence_length": 8, "train_sequence_length_scaling": float("nan")},
            f"train_sequence_length_scaling=nan: {SCALING}",
        ),
        (
            {"max_sequence_length": 8, "train_sequence_length_scaling": True},
            f"train_sequence_length_scaling=True: {SCALING}",
        ),
        (
            {"max_sequence_length": 8, "train_sequence_length_scaling": "0.5"},
            f"train_sequence_length_scaling='0.5': {SCALING}",
        ),
    ],
)
def test_bad_arguments_fail_naming_the_argument(kwargs, message):
    whole = f"^{re.escape(message)}$"
    with pytest.raises(ValueError, match=whole):
        Alibi(**kwargs)
    if "train_sequence_length_scaling" not in kwargs:
        model = _model()
        with pytest.raises(ValueError, match=whole):
            cf.apply_alibi(model, **kwargs)
        assert isinstance(model.position, PositionEmbedding)  # nothing changed
    else:
        with pytest.raises(ValueError, match=whole):
            shorten_sequences({"input_ids": torch.zeros(2, 8)}, kwargs["train_sequence_length_scaling"])


def test_a_model_without_attention_or_positions_warns_and_is_unchanged():
    """Composer's: a warning when ALiBi has no effect (a model of two linear layers)."""
    model = torch.nn.Sequential(torch.nn.Linear(20, 10), torch.nn.Linear(10, 5))
    message = (
        "apply_alibi: Sequential holds none of the module classes it knows (PositionEmbedding, CausalSelfAttention, "
        "GPT2Model, GPT2Attention, BertEmbeddings, BertSelfAttention, RobertaEmbeddings, RobertaSelfAttention); "
        "the model is unchanged. Register your own class with algorithms.alibi.registry.register"
    )
    with pytest.warns(NoModulesReplacedWarning, match=f"^{re.escape(message)}"):
        assert cf.apply_alibi(model, max_sequence_length=64) == {}


@pytest.mark.cuda
def test_on_cuda_the_bias_is_made_on_the_device():
    model = _model().cuda()
    cf.apply_alibi(model, 512)
    assert model.blocks[0].attn.slopes.is_cuda
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(torch.randint(0, VOCAB, (2, 300), device="cuda"))
    assert out.is_cuda and torch.isfinite(out).all()
    assert F.softmax(out.float(), -1).sum(-1).allclose(torch.ones(2, 300, device="cuda"))


def test_a_model_in_eval_mode_gets_attention_in_eval_mode():
    model = _model().eval()
    cf.apply_alibi(model, 64)
    assert not any(m.training for m in model.modules())
    x = torch.randint(0, VOCAB, (2, 8))
    assert torch.equal(model(x), model(x))  # no attention dropout


@pytest.mark.parametrize(("scaling", "shortened"), [(0.25, 2), (1.0, 0)])
def test_it_reports_the_modules_it_replaced_and_the_batches_it_shortened(scaling, shortened):
    trainer = Trainer(
        _model(),
        _lm_batches(2),
        "1ep",
        loss_fn=lm_loss,
        input_key="input_ids",
        target_key="labels",
        algorithms=[Alibi(max_sequence_length=64, train_sequence_length_scaling=scaling)],
        seed=0,
        device="cpu",
    )
    trainer.fit()
    # transformer_tiny: the position embedding and two attention layers
    assert trainer.method_log.records["Alibi"]["activity"] == {"modules_replaced": 3, "batches_shortened": shortened}
