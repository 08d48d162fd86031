"""Reference models for the training comparisons: ``from algorithms.models import get_model``."""

from .resnet import ResNet, get_model, resnet18, resnet20, resnet50, resnet56
from .transformer import TransformerLM, lm_loss, transformer_small, transformer_tiny

__all__ = ["ResNet", "TransformerLM", "get_model", "lm_loss", "resnet18", "resnet20", "resnet50", "resnet56",
           "transformer_small", "transformer_tiny"]
