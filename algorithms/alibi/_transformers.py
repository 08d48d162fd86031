"""ALiBi's policies for Hugging Face transformers' GPT-2, BERT and RoBERTa (as of transformers 5.25).

Imported by :data:`algorithms.alibi.registry` only when a model holds one of these classes, so
transformers is already imported. Each self-attention layer becomes a subclass of its own class that
adds ALiBi's bias to the attention mask it is given and then runs its class's own forward, so the
attention interface (``"eager"`` or ``"sdpa"``), the cache and the projections stay Hugging Face's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from transformers.models.bert.modeling_bert import BertSelfAttention
from transformers.models.gpt2.modeling_gpt2 import GPT2Attention
from transformers.models.roberta.modeling_roberta import RobertaSelfAttention

from .alibi import alibi_bias, alibi_slopes

#: The attention implementations that add a float attention mask to the attention logits.
_ADDS_THE_MASK = ("eager", "sdpa")


class ZeroPositions(nn.Module):
    """In place of a position embedding: its output for any ``position_ids`` is zero (a broadcast
    view of one zero of the original's dtype, so it costs no memory), and it has no parameters."""

    def __init__(self, embedding_dim: int, like: torch.Tensor):
        super().__init__()
        self.embedding_dim = embedding_dim
        self.register_buffer("zero", torch.zeros((), dtype=like.dtype, device=like.device), persistent=False)

    def forward(self, position_ids: torch.Tensor) -> torch.Tensor:
        return self.zero.expand(*position_ids.shape, self.embedding_dim)

    def extra_repr(self) -> str:
        return f"embedding_dim={self.embedding_dim}"


class _AlibiSelfAttention(nn.Module):
    """What the ALiBi subclasses add to a Hugging Face self-attention class: the heads' slopes, the
    longest sequence accepted, and the attention mask with ALiBi's bias added."""

    slopes: torch.Tensor
    max_sequence_length: int
    is_causal: bool
    layer_idx: int | None
    config: Any

    def alibi_mask(self, attention_mask: torch.Tensor | None, hidden_states: torch.Tensor, cache: Any) -> torch.Tensor:
        """``attention_mask`` (``None``, a boolean mask where True attends, or an additive float
        mask, ``(batch, 1, queries, keys)``) as one additive float mask that also holds the bias
        (:func:`~algorithms.alibi.alibi_bias`; symmetric unless the layer is causal)."""
        implementation = self.config._attn_implementation
        if implementation not in _ADDS_THE_MASK:
            raise ValueError(
                f"attn_implementation={implementation!r}: ALiBi adds its bias to the attention mask, which only "
                f"{' and '.join(map(repr, _ADDS_THE_MASK))} attention take; load the model with one of them"
            )
        queries = hidden_states.shape[-2]
        if isinstance(attention_mask, torch.Tensor):
            keys = attention_mask.shape[-1]
        else:  # no mask: all of the cache's keys and this call's
            past = getattr(cache, "self_attention_cache", cache)
            keys = queries + (past.get_seq_length(self.layer_idx) if past is not None else 0)
        if keys > self.max_sequence_length:
            raise ValueError(
                f"input_ids: {keys} positions, but ALiBi was applied with max_sequence_length="
                f"{self.max_sequence_length}; apply it with a larger one"
            )
        floating = isinstance(attention_mask, torch.Tensor) and attention_mask.is_floating_point()
        dtype = attention_mask.dtype if floating else hidden_states.dtype
        bias = alibi_bias(self.slopes, queries, dtype, keys=keys, symmetric=not self.is_causal)[None]
        lowest = torch.finfo(dtype).min
        if attention_mask is None:
            if not self.is_causal:
                return bias
            position = torch.arange(keys - queries, keys, device=bias.device)
            attention_mask = torch.arange(keys, device=bias.device)[None, :] <= position[:, None]
        if attention_mask.dtype == torch.bool:
            return torch.where(attention_mask, bias, lowest)
        return (attention_mask + bias).clamp_(min=lowest)

    def extra_repr(self) -> str:
        return f"max_sequence_length={self.max_sequence_length}"


class AlibiGPT2Attention(_AlibiSelfAttention, GPT2Attention):
    """GPT-2's self-attention with ALiBi's causal bias ``-m_h (i - j)`` on its logits."""

    def forward(self, hidden_states: torch.Tensor, cache: Any = None, attention_mask: Any = None, *args, **kwargs):
        mask = self.alibi_mask(attention_mask, hidden_states, cache)
        return super().forward(hidden_states, cache, mask, *args, **kwargs)


class AlibiBertSelfAttention(_AlibiSelfAttention, BertSelfAttention):
    """BERT's self-attention with ALiBi's bias on its logits: ``-m_h |i - j|``, or ``-m_h (i - j)``
    where the layer is causal (a BERT decoder)."""

    def forward(self, hidden_states: torch.Tensor, attention_mask: Any = None, cache: Any = None, **kwargs):
        mask = self.alibi_mask(attention_mask, hidden_states, cache)
        return super().forward(hidden_states, mask, cache, **kwargs)


class AlibiRobertaSelfAttention(_AlibiSelfAttention, RobertaSelfAttention):
    """RoBERTa's self-attention with ALiBi's bias on its logits, as :class:`AlibiBertSelfAttention`."""

    def forward(self, hidden_states: torch.Tensor, attention_mask: Any = None, cache: Any = None, **kwargs):
        mask = self.alibi_mask(attention_mask, hidden_states, cache)
        return super().forward(hidden_states, mask, cache, **kwargs)


def _with_alibi(
    module: nn.Module, alibi_class: type, init: dict[str, Any], heads: int, max_sequence_length: int
) -> nn.Module:
    """An ``alibi_class`` built as ``module`` was (``alibi_class(module.config, **init)``, on the
    meta device, so no weights are drawn), then given ``module``'s own layers."""
    with torch.device("meta"):
        new = alibi_class(module.config, **init)
    for name, child in module.named_children():
        setattr(new, name, child)
    for name, parameter in module.named_parameters(recurse=False):
        setattr(new, name, parameter)
    new.max_sequence_length = max_sequence_length
    new.register_buffer("slopes", torch.tensor(alibi_slopes(heads)), persistent=False)
    return new


def _extend_config(config: Any, positions: int) -> None:
    if config.max_position_embeddings < positions:
        config.max_position_embeddings = positions  # GPT-2's n_positions is this attribute


def gpt2_attention(module: nn.Module, index: int, max_sequence_length: int) -> nn.Module | None:
    """``GPT2Attention`` -> :class:`AlibiGPT2Attention`; cross-attention is kept."""
    if module.is_cross_attention:
        return None
    _extend_config(module.config, max_sequence_length)
    init = {"is_cross_attention": False, "layer_idx": module.layer_idx}
    return _with_alibi(module, AlibiGPT2Attention, init, module.num_heads, max_sequence_length)


def _bert_style(alibi_class: type, offset: Callable[[Any], int]) -> Callable[[nn.Module, int, int], nn.Module]:
    def policy(module: nn.Module, index: int, max_sequence_length: int) -> nn.Module:
        _extend_config(module.config, max_sequence_length + offset(module.config))
        init = {"is_causal": module.is_causal, "layer_idx": module.layer_idx}
        return _with_alibi(module, alibi_class, init, module.num_attention_heads, max_sequence_length)

    return policy


def _roberta_offset(config: Any) -> int:
    """RoBERTa numbers positions from ``pad_token_id + 1``: 512 tokens need 514 positions."""
    return config.pad_token_id + 1


bert_attention = _bert_style(AlibiBertSelfAttention, lambda config: 0)
roberta_attention = _bert_style(AlibiRobertaSelfAttention, _roberta_offset)


def _without_positions(holder: nn.Module, attribute: str, positions: int) -> None:
    """Swap ``holder.<attribute>`` for :class:`ZeroPositions` (its weight frozen, as it is no longer
    used) and extend ``holder``'s ``position_ids`` and ``token_type_ids`` buffers to ``positions``."""
    embedding = getattr(holder, attribute)
    if not isinstance(embedding, ZeroPositions):
        embedding.weight.requires_grad_(False)
        setattr(holder, attribute, ZeroPositions(embedding.embedding_dim, embedding.weight))
    for name in ("position_ids", "token_type_ids"):
        buffer = getattr(holder, name, None)
        if isinstance(buffer, torch.Tensor) and buffer.shape[-1] < positions:
            extended = torch.arange(positions, device=buffer.device) if name == "position_ids" else None
            if extended is None:
                extended = torch.zeros(positions, dtype=buffer.dtype, device=buffer.device)
            setattr(holder, name, extended.expand(1, -1))  # a registered buffer stays one


def gpt2_without_positions(holder: nn.Module, index: int, max_sequence_length: int) -> None:
    """``GPT2Model``: its ``wpe`` adds nothing; the model, changed in place, is kept."""
    _without_positions(holder, "wpe", max_sequence_length)
    _extend_config(holder.config, max_sequence_length)


def bert_embeddings_without_positions(holder: nn.Module, index: int, max_sequence_length: int) -> None:
    """``BertEmbeddings``: its ``position_embeddings`` add nothing; the module, changed in place, is kept."""
    _without_positions(holder, "position_embeddings", max_sequence_length)


def roberta_embeddings_without_positions(holder: nn.Module, index: int, max_sequence_length: int) -> None:
    """``RobertaEmbeddings``: as BERT's, with positions numbered from ``padding_idx + 1``."""
    _without_positions(holder, "position_embeddings", max_sequence_length + holder.padding_idx + 1)
