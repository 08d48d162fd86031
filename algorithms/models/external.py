"""Reference models built from the classes users train, not the project's own: torchvision's
ResNet-18 and a Hugging Face GPT-2 from a config. Built without weights (nothing downloads), and
each imports its library only when it is built, so the project imports without them.

They exist so that the measured effects come from an architecture a user has, as well as from the
project's small models: ``tools/measure_methods.py --workload torchvision`` and ``--workload gpt2``.
"""

from __future__ import annotations

import importlib
from typing import Any

from torch import nn

__all__ = ["hf_gpt2_tiny", "torchvision_resnet18"]


def _library(name: str, extra: str) -> Any:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(
            f"{name} is not installed: pip install 'methods-library[{extra}]' ({exc})", name=exc.name
        ) from None


def torchvision_resnet18(num_classes: int) -> nn.Module:
    """``torchvision.models.resnet18(weights=None, num_classes=num_classes)``, unchanged: its 7x7
    stride-2 stem and max pooling, four stages of two basic blocks (64 to 512 channels), 11.2 M
    parameters at 10 classes. A ``ModuleNotFoundError`` naming the ``vision`` extra without torchvision."""
    return _library("torchvision.models", "vision").resnet18(weights=None, num_classes=num_classes)


def hf_gpt2_tiny(vocab_size: int) -> nn.Module:
    """A Hugging Face ``GPT2LMHeadModel`` from ``GPT2Config(vocab_size, n_positions=128, n_embd=64,
    n_layer=2, n_head=4)``: the size of :func:`~algorithms.models.transformer_tiny`, in GPT-2's own
    classes (``GPT2Attention``, ``GPT2MLP``, the head tied to the token embedding). Its beginning
    and end tokens are the vocabulary's last id. Called with token ids, it returns a
    ``CausalLMOutputWithCrossAttentions`` whose ``.logits`` are ``(N, T, vocab_size)``. An
    ``ModuleNotFoundError`` naming the ``transformers`` extra without transformers."""
    transformers = _library("transformers", "transformers")
    last = vocab_size - 1
    config = transformers.GPT2Config(
        vocab_size=vocab_size, n_positions=128, n_embd=64, n_layer=2, n_head=4, bos_token_id=last, eos_token_id=last
    )
    return transformers.GPT2LMHeadModel(config)
