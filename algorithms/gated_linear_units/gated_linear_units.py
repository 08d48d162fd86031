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
from ..surgery import recording_replacements, replace_module_classes

__all__ = ["GLUFeedForward", "GatedLinearUnits", "apply_gated_linear_units", "glu_hidden_width"]

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


def glu_hidden_width(block: FeedForward, gated_layer_bias: bool = False, non_gated_layer_bias: bool = False) -> int:
    """The hidden width at which the GLU block has the parameter count of ``block``, or the closest.

    ``FeedForward(d, f)`` holds ``2 d f + f + d`` parameters (its biases included); the GLU block
    holds ``3 d h + d`` plus ``h`` per biased ``gate`` or ``up``. Without biases this is the
    paper's ``h = 2 f / 3``; ``transformer_tiny``'s ``f = 256`` gives ``h = 172``, the same count.
    """
    d = block.up.in_features
    down_bias = block.down.out_features if block.down.bias is not None else 0
    per_unit = 3 * d + int(gated_layer_bias) + int(non_gated_layer_bias)
    total = sum(p.numel() for p in block.parameters())
    return max(1, round((total - down_bias) / per_unit))


def apply_gated_linear_units(
    model: nn.Module,
    optimizers: torch.optim.Optimizer | Iterable[torch.optim.Optimizer] | None = None,
    act_fn: Callable[[torch.Tensor], torch.Tensor] | None = None,
    gated_layer_bias: bool = False,
    non_gated_layer_bias: bool = False,
) -> dict[str, nn.Module]:
    """Replace each :class:`~algorithms.models.transformer.FeedForward` of ``model`` with a
    :class:`GLUFeedForward` of the same parameter count, in place, as
    ``composer.functional.apply_gated_linear_units``.

    The hidden width is :func:`glu_hidden_width`. ``up`` keeps the first rows of the original
    ``up`` (and of its bias, where ``non_gated_layer_bias``), ``down`` the first columns of the
    original ``down`` and its bias, so the block starts from the model's own initialisation;
    ``gate`` is drawn from torch's global generator, normal with the spread of the original ``up``
    weights and a zero bias. The function the block computes changes (it is a different one).

    Args:
        model: the model to change, e.g. :class:`~algorithms.models.TransformerLM`.
        optimizers: optimizers that already hold the model's parameters; they are given the new
            blocks' parameters instead of the old ones.
        act_fn: the activation on the gate; ``None`` keeps each block's own (GELU gives GEGLU).
        gated_layer_bias: whether ``gate`` has a bias.
        non_gated_layer_bias: whether ``up`` has a bias.

    Returns:
        ``{qualified name: new block}`` for every block replaced (a warning when there is none).

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

    def to_glu(block: nn.Module, index: int) -> GLUFeedForward:
        assert isinstance(block, FeedForward)
        width = glu_hidden_width(block, gated_layer_bias, non_gated_layer_bias)
        if act_fn is None:
            act = copy.deepcopy(block.act)
        else:
            act = copy.deepcopy(act_fn) if isinstance(act_fn, nn.Module) else act_fn
        glu = GLUFeedForward(
            block.up.in_features,
            width,
            act,
            block.drop.p,
            gated_layer_bias,
            non_gated_layer_bias,
            down_bias=block.down.bias is not None,
        )
        with torch.no_grad():
            up = block.up.weight.detach().float()
            nn.init.normal_(glu.gate.weight, std=float(up.std()))
            if glu.gate.bias is not None:
                nn.init.zeros_(glu.gate.bias)
            glu.up.weight.copy_(block.up.weight[:width])
            if glu.up.bias is not None:
                if block.up.bias is not None:
                    glu.up.bias.copy_(block.up.bias[:width])
                else:
                    nn.init.zeros_(glu.up.bias)
            glu.down.weight.copy_(block.down.weight[:, :width])
            if glu.down.bias is not None:
                glu.down.bias.copy_(block.down.bias)
        return glu.train(block.training)

    return replace_module_classes(model, {FeedForward: to_glu}, optimizers=optimizers, method="GatedLinearUnits")


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
