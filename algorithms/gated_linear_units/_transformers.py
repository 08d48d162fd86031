"""Gated Linear Units' policies for Hugging Face transformers' BERT and RoBERTa (as of transformers 5.25).

Imported by :data:`algorithms.gated_linear_units.registry` only when a model holds one of these
classes. A BERT layer's feed-forward block is two modules, ``intermediate`` (``act(dense(x))``)
then ``output`` (``LayerNorm(dropout(dense(h)) + x)``); each is replaced on its own, and both
policies find the same gated width from their own layer's shapes, given that BERT's up projection
(``intermediate.dense``) has a bias, as it always does.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from .gated_linear_units import (
    GatedIntermediate,
    NarrowedOutput,
    gate_activation,
    same_count_width,
    start_down,
    start_gate_and_up,
)


def gated_intermediate(
    module: nn.Module,
    index: int,
    act_fn: Callable[[torch.Tensor], torch.Tensor] | None,
    gated_layer_bias: bool,
    non_gated_layer_bias: bool,
) -> GatedIntermediate:
    """``BertIntermediate`` / ``RobertaIntermediate`` -> :class:`GatedIntermediate`, its ``up``
    from the first rows of ``dense``, its activation ``act_fn`` or the layer's own."""
    dense = module.dense
    width = same_count_width(
        dense.in_features, dense.out_features, dense.bias is not None, gated_layer_bias, non_gated_layer_bias
    )
    act = gate_activation(act_fn, module.intermediate_act_fn)
    new = GatedIntermediate(dense.in_features, width, act, gated_layer_bias, non_gated_layer_bias)
    start_gate_and_up(new.gate, new.up, dense)
    return new


def narrowed_output(
    module: nn.Module,
    index: int,
    act_fn: Callable[[torch.Tensor], torch.Tensor] | None,
    gated_layer_bias: bool,
    non_gated_layer_bias: bool,
) -> NarrowedOutput:
    """``BertOutput`` / ``RobertaOutput`` -> :class:`NarrowedOutput`: the first columns of ``dense``,
    and the layer's own dropout and ``LayerNorm``."""
    dense = module.dense
    width = same_count_width(dense.out_features, dense.in_features, True, gated_layer_bias, non_gated_layer_bias)
    down = nn.Linear(width, dense.out_features, bias=dense.bias is not None)
    start_down(down, dense)
    return NarrowedOutput(down, module.dropout, module.LayerNorm)
