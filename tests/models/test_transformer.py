"""The reference causal transformer, against its definitions: causal attention equal to the
softmax formula, the learned position embedding and its limit, the loss, the layout the
language-model methods change, and evaluation through the Trainer on dict batches."""

from __future__ import annotations

import math

import pytest
import torch

from algorithms.core import Trainer
from algorithms.models import TransformerLM, lm_loss, transformer_small, transformer_tiny
from algorithms.models.transformer import CausalSelfAttention, FeedForward, PositionEmbedding


def _model(**kw):
    torch.manual_seed(0)
    return TransformerLM(17, d_model=16, n_heads=4, n_layers=2, max_seq_len=12, dropout=0.0, **kw).eval()


def test_logits_have_one_row_per_token_and_the_vocabulary():
    model = _model()
    assert model(torch.randint(0, 17, (3, 9))).shape == (3, 9, 17)
    assert transformer_tiny(50)(torch.randint(0, 50, (1, 128))).shape == (1, 128, 50)
    assert transformer_small(30).max_seq_len == 256


def test_attention_is_causal_a_later_token_never_changes_earlier_logits():
    model = _model()
    x = torch.randint(0, 17, (2, 10))
    y = x.clone()
    y[:, 6:] = (y[:, 6:] + 1) % 17
    with torch.no_grad():
        a, b = model(x), model(y)
    assert torch.allclose(a[:, :6], b[:, :6], atol=1e-6) and not torch.allclose(a[:, 6:], b[:, 6:])


def test_attention_equals_the_softmax_formula_and_a_bias_is_added_to_its_logits():
    torch.manual_seed(1)
    attn = CausalSelfAttention(8, 2).eval()
    x = torch.randn(2, 5, 8)

    def reference(bias=None):
        q, k, v = attn.qkv(x).view(2, 5, 3, 2, 4).permute(2, 0, 3, 1, 4)
        logits = q @ k.transpose(-1, -2) / math.sqrt(4)
        if bias is not None:
            logits = logits + bias
        logits = logits.masked_fill(~torch.ones(5, 5, dtype=torch.bool).tril(), float("-inf"))
        return attn.out((logits.softmax(-1) @ v).transpose(1, 2).reshape(2, 5, 8))

    with torch.no_grad():
        assert torch.allclose(attn(x), reference(), atol=1e-6)
        bias = torch.randn(2, 5, 5)
        attn.attention_bias = lambda length, device, dtype: bias  # what ALiBi's subclass overrides
        assert torch.allclose(attn(x), reference(bias), atol=1e-6)


def test_the_position_embedding_adds_one_learned_vector_per_position_up_to_its_limit():
    emb = PositionEmbedding(4, 3)
    x = torch.zeros(2, 3, 3)
    assert torch.equal(emb(x), emb.weight[:3].expand(2, 3, 3))
    with pytest.raises(ValueError, match="^input_ids: 5 positions.*max_seq_len=4"):
        emb(torch.zeros(1, 5, 3))
    with pytest.raises(ValueError, match="^input_ids: 13 positions"):
        _model()(torch.zeros(1, 13, dtype=torch.long))


def test_the_layout_the_language_model_methods_change():
    model = transformer_tiny(11)
    assert isinstance(model.position, PositionEmbedding)
    assert sum(isinstance(m, CausalSelfAttention) for m in model.modules()) == 2
    assert sum(isinstance(m, FeedForward) for m in model.modules()) == 2
    assert sum(isinstance(m, torch.nn.LayerNorm) for m in model.modules()) == 5
    assert sum(isinstance(m, torch.nn.Dropout) for m in model.modules()) == 3


def test_lm_loss_is_the_mean_next_token_cross_entropy_and_ignores_minus_100():
    logits = torch.randn(2, 3, 5)
    labels = torch.tensor([[1, 2, -100], [0, 4, 3]])
    keep = labels.reshape(-1) != -100
    expected = -logits.reshape(-1, 5).log_softmax(-1)[keep, labels.reshape(-1)[keep]].mean()
    assert torch.allclose(lm_loss(logits, labels), expected)


def test_lm_loss_against_probabilities_is_the_mean_soft_cross_entropy_over_the_kept_positions():
    """-sum_v p(v) log softmax(logits)(v), averaged over the positions whose probabilities are not
    all zero; one-hot probabilities give the loss of their indices."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 3, 5, generator=g)
    labels = torch.tensor([[1, 2, -100], [0, 4, 3]])
    one_hot = torch.nn.functional.one_hot(labels.clamp(min=0), 5).float() * (labels >= 0).unsqueeze(-1)
    torch.testing.assert_close(lm_loss(logits, one_hot), lm_loss(logits, labels))
    p = torch.rand(2, 3, 5, generator=g)
    p = p / p.sum(-1, keepdim=True)
    p[0, 2] = 0.0  # an ignored position
    log_p = logits.log_softmax(-1)
    rows = [-(p[n, t] * log_p[n, t]).sum() for n in range(2) for t in range(3) if (n, t) != (0, 2)]
    torch.testing.assert_close(lm_loss(logits, p), torch.stack(rows).mean())


def test_bad_sizes_are_refused_naming_the_argument():
    with pytest.raises(ValueError, match="^n_heads=3: must divide d_model=16"):
        TransformerLM(10, d_model=16, n_heads=3)
    with pytest.raises(ValueError, match="^vocab_size=0"):
        TransformerLM(0)
    with pytest.raises(ValueError, match="^dropout=1"):
        TransformerLM(10, dropout=1)
    with pytest.raises(ValueError, match="^input_ids: expected token ids"):
        _model()(torch.zeros(2, 3, 4, dtype=torch.long))


def test_it_trains_and_evaluates_through_the_trainer_on_dict_batches():
    """The loss falls on a repeated sequence, and eval's accuracy counts every token whose most
    likely next token is the label (the logits' classes are on their last dim)."""
    torch.manual_seed(0)
    model = TransformerLM(7, d_model=16, n_heads=2, n_layers=1, max_seq_len=16, dropout=0.0)
    tokens = torch.arange(9).remainder(7).repeat(4, 1)
    batch = {"input_ids": tokens[:, :-1], "labels": tokens[:, 1:]}
    trainer = Trainer(
        model,
        [batch] * 30,
        "30ba",
        optimizer=torch.optim.Adam(model.parameters(), lr=0.02),
        loss_fn=lm_loss,
        input_key="input_ids",
        target_key="labels",
        seed=0,
        device="cpu",
    )
    before = trainer.eval([batch])
    trainer.fit()
    after = trainer.eval([batch])
    assert after["loss"] < before["loss"] / 2
    with torch.no_grad():
        logits = trainer.state.model(batch["input_ids"])
    assert after["accuracy"] == pytest.approx(float((logits.argmax(-1) == batch["labels"]).double().mean()))
    assert after["loss"] == pytest.approx(float(lm_loss(logits, batch["labels"])))
