"""A small causal transformer language model: the reference model of the language-model methods.

A pre-norm decoder in the GPT-2 layout (Radford et al., 2019), small enough to train on two CPU
cores:

- ``embed``: token embedding, then ``position``, a :class:`PositionEmbedding` that adds a
  learned vector per position (ALiBi replaces it with ``nn.Identity`` and biases the attention
  instead), then ``drop`` (``nn.Dropout``);
- ``blocks``: a ``ModuleList`` of :class:`TransformerBlock`, each ``x + attn(ln1(x))`` then
  ``x + ffn(ln2(x))``, where ``attn`` is :class:`CausalSelfAttention` (one ``qkv`` linear,
  :func:`torch.nn.functional.scaled_dot_product_attention`, an ``out`` linear) and ``ffn`` is
  :class:`FeedForward` (``up``, GELU, ``down``, dropout: the block GLU replaces);
- ``ln_f`` (``nn.LayerNorm``) and ``head``, a linear layer to the vocabulary.

``model(input_ids)`` maps token ids ``(N, T)`` to logits ``(N, T, vocab_size)``; :func:`lm_loss`
is the cross entropy of logits against next-token ``labels`` ``(N, T)`` (``-100`` is ignored),
the loss the Trainer is given for dict batches ``{"input_ids", "labels"}``.

Example::

    >>> import torch
    >>> from algorithms.models import transformer_tiny
    >>> model = transformer_tiny(vocab_size=50)
    >>> model(torch.randint(0, 50, (2, 16))).shape
    torch.Size([2, 16, 50])
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "CausalSelfAttention",
    "FeedForward",
    "PositionEmbedding",
    "TransformerBlock",
    "TransformerLM",
    "lm_loss",
    "transformer_small",
    "transformer_tiny",
]


class PositionEmbedding(nn.Module):
    """Adds a learned vector per position to ``x`` ``(N, T, d)``; ``T`` may not exceed ``max_seq_len``."""

    def __init__(self, max_seq_len: int, d_model: int):
        super().__init__()
        self.max_seq_len = max_seq_len
        self.weight = nn.Parameter(torch.empty(max_seq_len, d_model))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        length = x.shape[1]
        if length > self.max_seq_len:
            raise ValueError(
                f"input_ids: {length} positions, but the learned position embedding has "
                f"max_seq_len={self.max_seq_len} (ALiBi lifts this limit)"
            )
        return x + self.weight[:length]


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention through ``scaled_dot_product_attention``.

    :meth:`attention_bias` is ``None`` here (plain causal attention); a subclass that returns an
    additive ``(heads, T, T)`` bias (ALiBi) gets it applied with the causal mask folded in.
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"n_heads={n_heads}: must divide d_model={d_model}")
        self.n_heads = n_heads
        self.dropout = dropout
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def attention_bias(self, length: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor | None:
        """An additive bias ``(n_heads, length, length)`` on the attention logits, or None."""
        return None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, length, d = x.shape
        q, k, v = self.qkv(x).view(n, length, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        drop = self.dropout if self.training else 0.0
        bias = self.attention_bias(length, x.device, q.dtype)
        if bias is None:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=drop, is_causal=True)
        else:
            causal = torch.ones(length, length, dtype=torch.bool, device=x.device).tril()
            mask = bias.masked_fill(~causal, float("-inf"))
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=drop)
        return self.out(y.transpose(1, 2).reshape(n, length, d))


class FeedForward(nn.Module):
    """``down(GELU(up(x)))`` then dropout: the position-wise feed-forward block."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0):
        super().__init__()
        self.up = nn.Linear(d_model, d_ff)
        self.act = nn.GELU()
        self.down = nn.Linear(d_ff, d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.down(self.act(self.up(x))))


class TransformerBlock(nn.Module):
    """Pre-norm block: ``x + attn(ln1(x))``, then ``x + ffn(ln2(x))``."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.0):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads, dropout)
        self.ln2 = nn.LayerNorm(d_model)
        self.ffn = FeedForward(d_model, d_ff, dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.ffn(self.ln2(x))


class TransformerLM(nn.Module):
    """A causal transformer language model; see the module docstring for its layout.

    Args:
        vocab_size: number of token ids (the logits' last dimension).
        d_model: width of the residual stream.
        n_heads: attention heads per block (must divide ``d_model``).
        n_layers: number of blocks.
        d_ff: hidden width of the feed-forward blocks (default ``4 * d_model``).
        max_seq_len: positions the learned position embedding covers.
        dropout: dropout after the embeddings, in attention and after each feed-forward block.
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int = 64,
        n_heads: int = 4,
        n_layers: int = 2,
        d_ff: int | None = None,
        max_seq_len: int = 128,
        dropout: float = 0.1,
    ):
        super().__init__()
        for name, value in (
            ("vocab_size", vocab_size),
            ("d_model", d_model),
            ("n_heads", n_heads),
            ("n_layers", n_layers),
            ("max_seq_len", max_seq_len),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r}: must be a positive integer")
        if not 0 <= dropout < 1:
            raise ValueError(f"dropout={dropout!r}: must be in [0, 1)")
        d_ff = 4 * d_model if d_ff is None else d_ff
        self.vocab_size = vocab_size
        self.max_seq_len = max_seq_len
        self.embed = nn.Embedding(vocab_size, d_model)
        self.position = PositionEmbedding(max_seq_len, d_model)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(TransformerBlock(d_model, n_heads, d_ff, dropout) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self._init_weights(n_layers)

    def _init_weights(self, n_layers: int) -> None:
        # GPT-2's: normal(0, 0.02), with residual projections scaled by 1/sqrt(2 * n_layers).
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
                if getattr(module, "bias", None) is not None:
                    nn.init.zeros_(module.bias)
        for block in self.blocks:
            for proj in (block.attn.out, block.ffn.down):
                nn.init.normal_(proj.weight, std=0.02 / math.sqrt(2 * n_layers))

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        if input_ids.ndim != 2:
            raise ValueError(f"input_ids: expected token ids (N, T), got shape {tuple(input_ids.shape)}")
        x = self.drop(self.position(self.embed(input_ids)))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross entropy of ``logits`` ``(N, T, V)`` against ``labels`` ``(N, T)``,
    labels equal to ``-100`` ignored; or against class probabilities ``(N, T, V)`` (such as label
    smoothing's), a position whose probabilities are all zero (an ignored one) ignored, so one-hot
    probabilities give the same loss as their indices."""
    flat = logits.reshape(-1, logits.shape[-1]).float()
    if labels.shape == logits.shape:
        probabilities = labels.reshape(-1, logits.shape[-1]).float()
        kept = (probabilities.sum(-1) > 0).sum()  # a tensor: no host sync on a GPU
        return F.cross_entropy(flat, probabilities, reduction="sum") / kept
    return F.cross_entropy(flat, labels.reshape(-1), ignore_index=-100)


def transformer_tiny(vocab_size: int) -> TransformerLM:
    """2 blocks, width 64, 4 heads, 128 positions: the CPU reference workload's model."""
    return TransformerLM(vocab_size, d_model=64, n_heads=4, n_layers=2, max_seq_len=128)


def transformer_small(vocab_size: int) -> TransformerLM:
    """4 blocks, width 128, 4 heads, 256 positions."""
    return TransformerLM(vocab_size, d_model=128, n_heads=4, n_layers=4, max_seq_len=256)
