"""Reference models for the training comparisons: ``from algorithms.models import get_model``.

The members of the model-family metadata (``algorithms/models/*.metadata.json``): the ResNets
for images and the causal transformer for language modelling, and torchvision's ResNet-18 and a
Hugging Face GPT-2 (:mod:`algorithms.models.external`, which import their library when built),
each built by name with :func:`get_model`.
"""

from __future__ import annotations

from torch import nn

from .external import hf_gpt2_tiny, torchvision_resnet18
from .resnet import ResNet, resnet18, resnet20, resnet20_gn, resnet50, resnet56
from .transformer import TransformerLM, lm_loss, transformer_small, transformer_tiny

__all__ = [
    "ResNet",
    "TransformerLM",
    "get_model",
    "hf_gpt2_tiny",
    "lm_loss",
    "resnet18",
    "resnet20",
    "resnet20_gn",
    "resnet50",
    "resnet56",
    "transformer_small",
    "torchvision_resnet18",
    "transformer_tiny",
]


def get_model(name: str, num_classes: int) -> nn.Module:
    """The reference model ``name`` (a member of the model-family metadata, see
    :func:`algorithms.models.names.model_names`) with ``num_classes`` outputs: the classes of an
    image model, the vocabulary size of a language model."""
    from .names import model_names

    names = model_names()
    if name not in names:
        raise ValueError(f"model {name!r} is not known — use one of {', '.join(names)}")
    return globals()[name](num_classes)
