"""ALiBi: no position embeddings; each attention head's logits are biased by its slope times the distance.

Press, Smith and Lewis, "Train Short, Test Long: Attention with Linear Biases Enables Input Length
Extrapolation", ICLR 2022.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from torch import nn

from ..core.algorithm import Algorithm
from ..core.event import Event
from ..core.parameters import Integer, Parameters, Real
from ..core.state import State
from ..models.transformer import CausalSelfAttention, PositionEmbedding
from ..surgery import Registry, recording_replacements

__all__ = ["Alibi", "AlibiAttention", "alibi_bias", "alibi_slopes", "apply_alibi", "registry", "shorten_sequences"]

PARAMETERS = Parameters(
    max_sequence_length=Integer(low=1, note="The longest sequence the model accepts afterwards."),
    train_sequence_length_scaling=Real(
        low=0,
        high=1,
        low_open=True,
        note="The fraction of each sequence's length to train on; 1 leaves batches as they are.",
    ),
)
#: alibi_slopes's own argument.
_HEADS = Integer(low=1, note="The number of attention heads.")


def alibi_slopes(n_heads: int) -> list[float]:
    """The heads' slopes, steepest first: ``2 ** (-8 h / n_heads)`` for ``h = 1 .. n_heads`` when
    ``n_heads`` is a power of 2; otherwise, as the paper's code does, those of the largest power of
    2 below, ``n``, then every other slope of ``2 n`` heads (the 1st, 3rd, ...) for the rest."""
    _HEADS.check("n_heads", n_heads)
    if n_heads & (n_heads - 1) == 0:
        return [2.0 ** (-8 * h / n_heads) for h in range(1, n_heads + 1)]
    below = 2 ** math.floor(math.log2(n_heads))
    return alibi_slopes(below) + alibi_slopes(2 * below)[0::2][: n_heads - below]


def alibi_bias(
    slopes: torch.Tensor,
    length: int,
    dtype: torch.dtype | None = None,
    *,
    keys: int | None = None,
    symmetric: bool = False,
) -> torch.Tensor:
    """ALiBi's bias ``(heads, length, keys)`` for ``length`` queries, the last ``length`` of
    ``keys`` positions (default: ``keys = length``), so query ``i`` sits at ``p = keys - length + i``:

    - causal (default): ``-slopes[h] * (p - j)`` for key ``j <= p``, and 0 for ``j > p`` (which
      causal attention masks);
    - ``symmetric=True`` (bidirectional attention, as BERT's): ``-slopes[h] * |p - j|``.

    Computed in float32 on ``slopes``' device, then cast to ``dtype`` (default: float32).
    """
    keys = length if keys is None else keys
    if keys < length:
        raise ValueError(f"keys={keys}: fewer keys than the {length} queries, which are the last of the keys")
    queries = torch.arange(keys - length, keys, device=slopes.device, dtype=torch.float32)
    distance = queries[:, None] - torch.arange(keys, device=slopes.device, dtype=torch.float32)[None, :]
    distance = distance.abs_() if symmetric else distance.clamp_(min=0)  # p - j, or |p - j|
    bias = -slopes.to(torch.float32)[:, None, None] * distance
    return bias if dtype is None else bias.to(dtype)


class AlibiAttention(CausalSelfAttention):
    """Causal self-attention whose logits get ALiBi's bias (:func:`alibi_bias`); sequences up to
    ``max_sequence_length`` positions.

    Args:
        d_model: width of the residual stream.
        n_heads: attention heads, each with its slope from :func:`alibi_slopes`.
        max_sequence_length: the longest sequence it accepts.
        dropout: attention dropout while training.
    """

    def __init__(self, d_model: int, n_heads: int, max_sequence_length: int, dropout: float = 0.0):
        super().__init__(d_model, n_heads, dropout)
        self.max_sequence_length = max_sequence_length
        # Derived from n_heads, not learned or trained: not part of the state dict.
        self.register_buffer("slopes", torch.tensor(alibi_slopes(n_heads)), persistent=False)

    def attention_bias(self, length: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        if length > self.max_sequence_length:
            raise ValueError(
                f"input_ids: {length} positions, but ALiBi was applied with max_sequence_length="
                f"{self.max_sequence_length}; apply it with a larger one"
            )
        return alibi_bias(self.slopes, length, dtype)

    def extra_repr(self) -> str:
        return f"n_heads={self.n_heads}, max_sequence_length={self.max_sequence_length}"


def _positions_to_identity(position: nn.Module, index: int, max_sequence_length: int) -> nn.Module:
    return nn.Identity()


def _causal_to_alibi(attention: nn.Module, index: int, max_sequence_length: int) -> AlibiAttention:
    assert isinstance(attention, CausalSelfAttention)
    d_model = attention.qkv.in_features
    new = AlibiAttention(d_model, attention.n_heads, max_sequence_length, attention.dropout)
    new.qkv, new.out = attention.qkv, attention.out  # the same layers: trained weights and optimizer state kept
    return new


def _from_transformers(name: str) -> Callable[..., nn.Module | None]:
    """The policy ``name`` of :mod:`algorithms.alibi._transformers`, imported when a model first holds
    one of its classes (so transformers is imported by the model's owner, never by this package)."""

    def policy(module: nn.Module, index: int, max_sequence_length: int) -> nn.Module | None:
        from . import _transformers

        return getattr(_transformers, name)(module, index, max_sequence_length)

    policy.__qualname__ = f"_transformers.{name}"
    return policy


#: The module classes :func:`apply_alibi` changes, each with its policy, called as
#: ``policy(module, index, max_sequence_length=...)`` (Composer's ALiBi policies take the same
#: arguments): it returns the module's replacement, or ``None`` to keep the module (a policy may
#: change a module in place, as those of the position embeddings' holders do).
registry = Registry("apply_alibi", "algorithms.alibi.registry")
registry.register(PositionEmbedding, _positions_to_identity)
registry.register(CausalSelfAttention, _causal_to_alibi)
for _path, _name in (
    ("gpt2.modeling_gpt2.GPT2Model", "gpt2_without_positions"),
    ("gpt2.modeling_gpt2.GPT2Attention", "gpt2_attention"),
    ("bert.modeling_bert.BertEmbeddings", "bert_embeddings_without_positions"),
    ("bert.modeling_bert.BertSelfAttention", "bert_attention"),
    ("roberta.modeling_roberta.RobertaEmbeddings", "roberta_embeddings_without_positions"),
    ("roberta.modeling_roberta.RobertaSelfAttention", "roberta_attention"),
):
    registry.register(f"transformers.models.{_path}", _from_transformers(_name))


def apply_alibi(
    model: nn.Module,
    max_sequence_length: int,
    optimizers: torch.optim.Optimizer | Iterable[torch.optim.Optimizer] | None = None,
) -> dict[str, nn.Module]:
    """Give ``model`` ALiBi in place of its position embeddings, as ``composer.functional.apply_alibi``,
    through the policies of :data:`registry`; afterwards the model accepts sequences up to
    ``max_sequence_length``, beyond the length its position embeddings covered. Applied again, it
    sets a new ``max_sequence_length``.

    - This library's :class:`~algorithms.models.TransformerLM`: each
      :class:`~algorithms.models.transformer.PositionEmbedding` becomes ``nn.Identity`` and each
      :class:`~algorithms.models.transformer.CausalSelfAttention` an :class:`AlibiAttention` holding
      the same ``qkv`` and ``out`` layers (the same parameters).
    - Hugging Face GPT-2 (``GPT2Attention``, causal bias) and BERT and RoBERTa
      (``BertSelfAttention``, ``RobertaSelfAttention``: the symmetric bias ``-m_h |i - j|`` of
      bidirectional attention, the causal one where the layer is causal): each self-attention layer
      becomes a subclass of its own class, with the same layers, that adds the bias to the attention
      mask (with ``attn_implementation`` ``"eager"`` or ``"sdpa"``; another is refused when the layer
      runs). Cross-attention is kept. The position embedding (``wpe``, ``position_embeddings``) of
      its holder (``GPT2Model``, ``BertEmbeddings``, ``RobertaEmbeddings``) is swapped in place for
      one that adds zero: it has no parameters, so it is not trained, and the original weight, no
      longer used, is frozen (an optimizer that held it keeps it and never changes it). The holder's
      ``position_ids`` and ``token_type_ids`` buffers and the config's ``max_position_embeddings``
      (``n_positions``) are extended to ``max_sequence_length`` (plus RoBERTa's padding offset).
    - Another class: register it with ``registry.register(YourClass, policy)``.

    Args:
        model: the model to change, e.g. :class:`~algorithms.models.TransformerLM` or
            ``transformers.GPT2LMHeadModel``.
        max_sequence_length: the longest sequence the model will accept afterwards; the bias is
            computed for each call's length, so a large value costs nothing.
        optimizers: optimizers that already hold the model's parameters; the parameters of the
            modules replaced leave them, and their replacements' join them.

    Returns:
        ``{qualified name: new module}`` for every module replaced (position embeddings swapped in
        place inside their holder are not listed); a model holding none of the registered classes
        is left unchanged with one :class:`~algorithms.surgery.NoModulesReplacedWarning` naming them.

    Example::

        >>> import torch
        >>> import algorithms.functional as cf
        >>> from algorithms.models import transformer_tiny
        >>> model = transformer_tiny(vocab_size=50)  # learned positions for 128 tokens
        >>> sorted(cf.apply_alibi(model, max_sequence_length=512))
        ['blocks.0.attn', 'blocks.1.attn', 'position']
        >>> model(torch.randint(0, 50, (1, 300))).shape
        torch.Size([1, 300, 50])
    """
    PARAMETERS.check(max_sequence_length=max_sequence_length)
    return registry.apply(model, optimizers, max_sequence_length=max_sequence_length)


def shorten_sequences(batch: Any, train_sequence_length_scaling: float) -> Any:
    """The batch with every tensor of two or more dimensions ``(N, T, ...)`` cut into rows of
    ``max(1, int(T * train_sequence_length_scaling))`` positions: each row's consecutive pieces,
    in order, ``(N * (T // length), length, ...)``; a row's last ``T % length`` positions are
    dropped, so no piece joins the end of one row to the start of the next. Other items are kept.
    """
    PARAMETERS.check(train_sequence_length_scaling=train_sequence_length_scaling)
    items = batch.items() if isinstance(batch, Mapping) else enumerate(batch)
    shapes = {tuple(v.shape[:2]) for _, v in items if isinstance(v, torch.Tensor) and v.ndim >= 2}
    if len(shapes) > 1:
        raise ValueError(f"batch: its sequence tensors differ in (batch, length): {sorted(shapes)}")
    if not shapes or train_sequence_length_scaling == 1:
        return batch
    ((n, t),) = shapes
    length = max(1, int(t * train_sequence_length_scaling))
    pieces = t // length

    def cut(v: Any) -> Any:
        if not (isinstance(v, torch.Tensor) and v.ndim >= 2):
            return v
        return v[:, : pieces * length].reshape(n * pieces, length, *v.shape[2:])

    if isinstance(batch, Mapping):
        return {k: cut(v) for k, v in batch.items()}
    out = [cut(v) for v in batch]
    return type(batch)(*out) if hasattr(batch, "_fields") else type(batch)(out)


def _refuse_per_sequence_items(batch: Any, cut: Any, scaling: float) -> None:
    """A ValueError where cutting the sequences into more rows left a per-sequence tensor ``(N,)``
    behind (a sequence classifier's labels), which no longer lines up with the rows."""
    items = batch.items() if isinstance(batch, Mapping) else enumerate(batch)
    rows = {
        v.shape[0]
        for _, v in (cut.items() if isinstance(cut, Mapping) else enumerate(cut))
        if isinstance(v, torch.Tensor) and v.ndim >= 2
    }
    for key, value in items:
        if isinstance(value, torch.Tensor) and value.ndim == 1 and rows and value.shape[0] not in rows:
            raise ValueError(
                f"Alibi(train_sequence_length_scaling={scaling}): it cuts each sequence into several rows, but the "
                f"batch's {key!r} holds one value per sequence, shape {tuple(value.shape)}, which cannot follow the "
                "rows (a sequence classifier's labels): use train_sequence_length_scaling=1.0"
            )


class Alibi(Algorithm):
    """ALiBi as a training-loop algorithm: at ``Event.INIT``, :func:`apply_alibi` replaces the
    model's position embedding and attention; after each batch is loaded
    (``Event.AFTER_DATALOADER``), its sequences are cut to ``train_sequence_length_scaling`` of
    their length (the batch holds more, shorter rows of the same tokens), to train short and
    evaluate long.

    Args:
        max_sequence_length: the longest sequence the model will accept.
        train_sequence_length_scaling: the fraction of each sequence's length to train on, in
            ``(0, 1]``; 1 leaves the batches as they are.

    It counts ``modules_replaced`` (the position embeddings and attention layers it replaced; a
    Hugging Face model's position embeddings, swapped in place inside their holder, are not
    counted) and
    ``batches_shortened`` (the batches it cut into shorter rows); none means it did not act.

    Example::

        >>> import torch
        >>> from algorithms import Alibi
        >>> from algorithms.core import Trainer
        >>> from algorithms.models import lm_loss, transformer_tiny
        >>> ids = torch.randint(0, 50, (4, 33))
        >>> batches = [{"input_ids": ids[:, :-1], "labels": ids[:, 1:]}]
        >>> trainer = Trainer(transformer_tiny(50), batches, "1ba", loss_fn=lm_loss, input_key="input_ids",
        ...                   target_key="labels", algorithms=[Alibi(max_sequence_length=256)], seed=0, device="cpu")
        >>> trainer.fit()  # trains on 16 rows of 8 tokens
    """

    activity = {
        "modules_replaced": "position embeddings and attention layers replaced",
        "batches_shortened": "batches cut into shorter sequences",
    }

    def __init__(self, max_sequence_length: int, train_sequence_length_scaling: float = 0.25):
        PARAMETERS.check(
            max_sequence_length=max_sequence_length, train_sequence_length_scaling=train_sequence_length_scaling
        )
        self.max_sequence_length = max_sequence_length
        self.train_sequence_length_scaling = train_sequence_length_scaling

    def match(self, event: Event, state: State) -> bool:
        return event is Event.INIT or (event is Event.AFTER_DATALOADER and self.train_sequence_length_scaling != 1)

    def apply(self, event: Event, state: State, logger: Any | None = None) -> None:
        if event is Event.INIT:
            with recording_replacements() as replaced:
                apply_alibi(state.model, self.max_sequence_length, optimizers=state.optimizers)
            self.report(logger, "modules_replaced", len(replaced))
        else:
            batch = state.batch
            state.batch = shorten_sequences(batch, self.train_sequence_length_scaling)
            if state.batch is not batch:
                _refuse_per_sequence_items(batch, state.batch, self.train_sequence_length_scaling)
                self.report(logger, "batches_shortened")
