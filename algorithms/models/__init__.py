"""Reference models for the training comparisons: ``from algorithms.models import get_model``."""

from .resnet import INPUT_SIZE, MODELS, ResNet, get_model, resnet18, resnet20, resnet50, resnet56

__all__ = ["INPUT_SIZE", "MODELS", "ResNet", "get_model", "resnet18", "resnet20", "resnet50", "resnet56"]
