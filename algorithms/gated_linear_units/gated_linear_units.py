"""Gated Linear Units: each feed-forward block ``down(act(up(x)))`` becomes ``down(act(gate(x)) * up(x))``.

Shazeer, "GLU Variants Improve Transformer", 2020. With a GELU activation the block is GEGLU, with
SiLU SwiGLU. The hidden width shrinks so the block keeps its parameter count, as in the paper's
comparisons (T5's 3072 becomes 2048).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

from ..core.algorithm import Algorithm
from ..core.event import Event
from ..core.parameters import Boolean, Other, Parameters
from ..core.state import State
from ..models.transformer import FeedForward
from ..surgery import Registry, recording_replacements

__all__ = [
    "GLUFeedForward",
    "GatedIntermediate",
    "GatedLinearUnits",
    "NarrowedOutput",
    "apply_gated_linear_units",
    "glu_hidden_width",
    "registry",
    "same_count_width",
]

PARAMETERS = Parameters(
    act_fn=Other(
        optional=True,
        requires="a function of a tensor, e.g. torch.nn.functional.silu",
        parse=lambda name, value: _activation(name, value),
        note="The activation on the gate; None keeps each block's own (GELU gives GEGLU).",
    ),
    gated_layer_bias=Boolean(note="Whether the gate layer has a bias."),
    non_gated_layer_bias=Boolean(note="Whether the up layer has a bias."),
)


class GLUFeedForward(nn.Module):
    """``drop(down(act(gate(x)) * up(x)))``: a gated feed-forward block (Shazeer, 2020).

    Args:
        d_model: width of the input and output.
        d_hidden: width of ``gate`` and ``up``, the input of ``down``.
        act: the activation applied to ``gate(x)`` (a module, or any function of a tensor).
        dropout: dropout after ``down``, where :class:`~algorithms.models.transformer.FeedForward`
            has it.
        gated_layer_bias: whether ``gate`` has a bias.
        non_gated_layer_bias: whether ``up`` has a bias.
        down_bias: whether ``down`` has a bias.
    """

    def __init__(
        self,
        d_model: int,
        d_hidden: int,
        act: nn.Module | Callable[[torch.Tensor], torch.Tensor],
        dropout: float = 0.0,
        gated_layer_bias: bool = False,
        non_gated_layer_bias: bool = False,
        down_bias: bool = True,
    ):
        super().__init__()
        self.gate = nn.Linear(d_model, d_hidden, bias=gated_layer_bias)
        self.up = nn.Linear(d_model, d_hidden, bias=non_gated_layer_bias)
        self.act = act if isinstance(act, nn.Module) else _Activation(act)
        self.down = nn.Linear(d_hidden, d_model, bias=down_bias)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.down(self.act(self.gate(x)) * self.up(x)))


class _Activation(nn.Module):
    """A plain function as a module, so the block's structure and ``repr`` show it."""

    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor]):
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)

    def extra_repr(self) -> str:
        return getattr(self.fn, "__qualname__", repr(self.fn))


class GatedIntermediate(nn.Module):
    """``act(gate(x)) * up(x)``: the first half of a gated feed-forward block, in place of a Hugging
    Face ``BertIntermediate`` (``act(dense(x))``); :class:`NarrowedOutput` is the second half.

    Args:
        d_model: width of the input.
        d_hidden: width of ``gate`` and ``up``, and of the output.
        act: the activation applied to ``gate(x)`` (a module, or any function of a tensor).
        gated_layer_bias: whether ``gate`` has a bias.
        non_gated_layer_bias: whether ``up`` has a bias.
    """

    def __init__(
        self,
        d_model: int,
        d_hidden: int,
        act: nn.Module | Callable[[torch.Tensor], torch.Tensor],
        gated_layer_bias: bool = False,
        non_gated_layer_bias: bool = False,
    ):
        super().__init__()
        self.gate = nn.Linear(d_model, d_hidden, bias=gated_layer_bias)
        self.up = nn.Linear(d_model, d_hidden, bias=non_gated_layer_bias)
        self.act = act if isinstance(act, nn.Module) else _Activation(act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.gate(x)) * self.up(x)


class NarrowedOutput(nn.Module):
    """``LayerNorm(dropout(dense(h)) + residual)``: a Hugging Face ``BertOutput``'s computation, with
    ``dense`` the gated block's down projection (its input as wide as :class:`GatedIntermediate`'s
    output); ``dropout`` and ``LayerNorm`` are the original's modules."""

    def __init__(self, dense: nn.Linear, dropout: nn.Module, layer_norm: nn.Module):
        super().__init__()
        self.dense = dense
        self.dropout = dropout
        self.LayerNorm = layer_norm  # BertOutput's name: its weights keep their state-dict keys

    def forward(self, hidden_states: torch.Tensor, input_tensor: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(hidden_states)) + input_tensor)


def glu_hidden_width(block: FeedForward, gated_layer_bias: bool = False, non_gated_layer_bias: bool = False) -> int:
    """The hidden width at which the GLU block has the parameter count of ``block``, or the closest.

    ``FeedForward(d, f)`` holds ``2 d f + f + d`` parameters (its biases included); the GLU block
    holds ``3 d h + d`` plus ``h`` per biased ``gate`` or ``up``. Without biases this is the
    paper's ``h = 2 f / 3``; ``transformer_tiny``'s ``f = 256`` gives ``h = 172``, the same count.
    """
    d_model, d_hidden = block.up.in_features, block.up.out_features
    return same_count_width(d_model, d_hidden, block.up.bias is not None, gated_layer_bias, non_gated_layer_bias)


def same_count_width(
    d_model: int, d_hidden: int, up_bias: bool, gated_layer_bias: bool, non_gated_layer_bias: bool
) -> int:
    """The hidden width ``h`` at which ``gate``, ``up`` (``d_model -> h``) and ``down``
    (``h -> d_model``) hold as many parameters as a feed-forward block ``d_model -> d_hidden ->
    d_model`` whose up projection has a bias where ``up_bias``, or the closest (at least 1);
    ``down``'s bias, the same in both, does not count."""
    total = 2 * d_model * d_hidden + d_hidden * int(up_bias)
    return max(1, round(total / (3 * d_model + int(gated_layer_bias) + int(non_gated_layer_bias))))


def start_gate_and_up(gate: nn.Linear, up: nn.Linear, original_up: nn.Linear) -> None:
    """Start a GLU block's ``gate`` and ``up`` from a feed-forward block's up projection, without
    gradient: ``up`` takes the first rows of ``original_up`` (and of its bias; zero where it has
    none); ``gate`` is drawn from torch's global generator, normal with the spread of
    ``original_up``'s weights, with a zero bias."""
    width = up.out_features
    with torch.no_grad():
        nn.init.normal_(gate.weight, std=float(original_up.weight.detach().float().std()))
        if gate.bias is not None:
            nn.init.zeros_(gate.bias)
        up.weight.copy_(original_up.weight[:width])
        if up.bias is not None:
            if original_up.bias is not None:
                up.bias.copy_(original_up.bias[:width])
            else:
                nn.init.zeros_(up.bias)


def start_down(down: nn.Linear, original_down: nn.Linear) -> None:
    """Start a GLU block's ``down`` from a feed-forward block's down projection, without gradient:
    its first columns, and its bias."""
    with torch.no_grad():
        down.weight.copy_(original_down.weight[:, : down.in_features])
        if down.bias is not None:
            down.bias.copy_(original_down.bias)


def gate_activation(act_fn: Callable[[torch.Tensor], torch.Tensor] | None, own: Any) -> Any:
    """The activation a GLU block gets: ``act_fn`` (a copy where it is a module), else a copy of the
    block's own ``own``."""
    if act_fn is None:
        return copy.deepcopy(own)
    return copy.deepcopy(act_fn) if isinstance(act_fn, nn.Module) else act_fn


def _feed_forward_to_glu(
    block: nn.Module,
    index: int,
    act_fn: Callable[[torch.Tensor], torch.Tensor] | None,
    gated_layer_bias: bool,
    non_gated_layer_bias: bool,
) -> GLUFeedForward:
    assert isinstance(block, FeedForward)
    width = glu_hidden_width(block, gated_layer_bias, non_gated_layer_bias)
    glu = GLUFeedForward(
        block.up.in_features,
        width,
        gate_activation(act_fn, block.act),
        block.drop.p,
        gated_layer_bias,
        non_gated_layer_bias,
        down_bias=block.down.bias is not None,
    )
    start_gate_and_up(glu.gate, glu.up, block.up)
    start_down(glu.down, block.down)
    return glu


def _from_transformers(name: str) -> Callable[..., nn.Module | None]:
    """The policy ``name`` of :mod:`algorithms.gated_linear_units._transformers`, imported when a
    model first holds one of its classes (so transformers is imported by the model's owner)."""

    def policy(module: nn.Module, index: int, **options: Any) -> nn.Module | None:
        from . import _transformers

        return getattr(_transformers, name)(module, index, **options)

    policy.__qualname__ = f"_transformers.{name}"
    return policy


#: The module classes :func:`apply_gated_linear_units` changes, each with its policy, called as
#: ``policy(module, index, act_fn=..., gated_layer_bias=..., non_gated_layer_bias=...)``: it returns
#: the module's replacement, or ``None`` to keep it.
registry = Registry("apply_gated_linear_units", "algorithms.gated_linear_units.registry")
registry.register(FeedForward, _feed_forward_to_glu)
for _path, _name in (
    ("bert.modeling_bert.BertIntermediate", "gated_intermediate"),
    ("bert.modeling_bert.BertOutput", "narrowed_output"),
    ("roberta.modeling_roberta.RobertaIntermediate", "gated_intermediate"),
    ("roberta.modeling_roberta.RobertaOutput", "narrowed_output"),
):
    registry.register(f"transformers.models.{_path}", _from_transformers(_name))


def apply_gated_linear_units(
    model: nn.Module,
    optimizers: torch.optim.Optimizer | Iterable[torch.optim.Optimizer] | None = None,
    act_fn: Callable[[torch.Tensor], torch.Tensor] | None = None,
    gated_layer_bias: bool = False,
    non_gated_layer_bias: bool = False,
) -> dict[str, nn.Module]:
    """Replace each feed-forward block of ``model`` with a gated one of the same parameter count, in
    place, through the policies of :data:`registry`, as ``composer.functional.apply_gated_linear_units``.

    - This library's :class:`~algorithms.models.transformer.FeedForward` becomes a
      :class:`GLUFeedForward`.
    - Hugging Face BERT and RoBERTa: each ``BertIntermediate`` (``dense`` then the activation)
      becomes a :class:`GatedIntermediate`, ``act(gate(x)) * up(x)``, and the ``BertOutput`` after
      it keeps its dropout, residual and ``LayerNorm`` (the same module) with its ``dense`` narrowed
      to the gated width (:class:`NarrowedOutput`), so the layer computes
      ``LayerNorm(dropout(down(act(gate(x)) * up(x))) + x)``. (The same for ``Roberta*``.)
    - Another class: register it with ``registry.register(YourClass, policy)``.

    The hidden width is the one that keeps the block's parameter count (:func:`same_count_width`;
    :func:`glu_hidden_width` for ``FeedForward``). ``up`` keeps the first rows of the original up
    projection (and of its bias, where ``non_gated_layer_bias``), ``down`` the first columns of the
    original down projection and its bias, so the block starts from the model's own
    initialisation; ``gate`` is drawn from torch's global generator, normal with the spread of the
    original up weights and a zero bias (:func:`start_gate_and_up`, :func:`start_down`). The function the block computes
    changes (it is a different one).

    Args:
        model: the model to change, e.g. :class:`~algorithms.models.TransformerLM` or
            ``transformers.BertForMaskedLM``.
        optimizers: optimizers that already hold the model's parameters; they are given the new
            blocks' parameters instead of the old ones.
        act_fn: the activation on the gate; ``None`` keeps each block's own (GELU gives GEGLU).
        gated_layer_bias: whether ``gate`` has a bias.
        non_gated_layer_bias: whether ``up`` has a bias.

    Returns:
        ``{qualified name: new block}`` for every block replaced; a model holding none of the
        registered classes is left unchanged with one
        :class:`~algorithms.surgery.NoModulesReplacedWarning` naming them.

    Example::

        >>> import torch
        >>> import algorithms.functional as cf
        >>> from algorithms.models import transformer_tiny
        >>> model = transformer_tiny(vocab_size=50)
        >>> before = sum(p.numel() for p in model.parameters())
        >>> sorted(cf.apply_gated_linear_units(model))
        ['blocks.0.ffn', 'blocks.1.ffn']
        >>> sum(p.numel() for p in model.parameters()) == before
        True
    """
    PARAMETERS.check(act_fn=act_fn, gated_layer_bias=gated_layer_bias, non_gated_layer_bias=non_gated_layer_bias)
    options = {"act_fn": act_fn, "gated_layer_bias": gated_layer_bias, "non_gated_layer_bias": non_gated_layer_bias}
    return registry.apply(model, optimizers, **options)


def _activation(name: str, act_fn: Any) -> Any:
    if not callable(act_fn):
        raise ValueError(
            f"{name}={act_fn!r}: must be None (keep each block's activation) or a function of a "
            "tensor, e.g. torch.nn.functional.silu"
        )
    return act_fn


class GatedLinearUnits(Algorithm):
    """Gated Linear Units as a training-loop algorithm: at ``Event.INIT``, before the Trainer wraps
    the model and builds its optimizer, :func:`apply_gated_linear_units` replaces each feed-forward
    block of the model with a gated one of the same parameter count.

    Args:
        act_fn: the activation on the gate; ``None`` keeps each block's own (GELU gives GEGLU).
        gated_layer_bias: whether ``gate`` has a bias.
        non_gated_layer_bias: whether ``up`` has a bias.

    It counts ``modules_replaced``, the feed-forward blocks it replaced; none means it did not act.

    Example::

        >>> import torch
        >>> from algorithms import GatedLinearUnits
        >>> from algorithms.core import Trainer
        >>> from algorithms.models import lm_loss, transformer_tiny
        >>> ids = torch.randint(0, 50, (4, 17))
        >>> batches = [{"input_ids": ids[:, :-1], "labels": ids[:, 1:]}]
        >>> trainer = Trainer(transformer_tiny(50), batches, "1ba", loss_fn=lm_loss, input_key="input_ids",
        ...                   target_key="labels", algorithms=[GatedLinearUnits()], seed=0, device="cpu")
        >>> type(trainer.state.model.blocks[0].ffn).__name__
        'GLUFeedForward'
        >>> trainer.fit()
    """

    activity = {"modules_replaced": "feed-forward blocks replaced by gated ones"}

    def __init__(
        self,
        act_fn: Callable[[torch.Tensor], torch.Tensor] | None = None,
        gated_layer_bias: bool = False,
        non_gated_layer_bias: bool = False,
    ):
        PARAMETERS.check(act_fn=act_fn, gated_layer_bias=gated_layer_bias, non_gated_layer_bias=non_gated_layer_bias)
        self.act_fn = act_fn
        self.gated_layer_bias = gated_layer_bias
        self.non_gated_layer_bias = non_gated_layer_bias

    def match(self, event: Event, state: State) -> bool:
        return event is Event.INIT

    def apply(self, event: Event, state: State, logger: Any | None = None) -> None:
        with recording_replacements() as replaced:
            apply_gated_linear_units(
                state.model,
                state.optimizers,
                act_fn=self.act_fn,
                gated_layer_bias=self.gated_layer_bias,
                non_gated_layer_bias=self.non_gated_layer_bias,
            )
        self.report(logger, "modules_replaced", len(replaced))
