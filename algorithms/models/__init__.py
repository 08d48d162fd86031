"""Reference models for the training comparisons: ``from algorithms.models import get_model``."""

from .resnet import ResNet, get_model, resnet18, resnet20, resnet50, resnet56

__all__ = ["ResNet", "get_model", "resnet18", "resnet20", "resnet50", "resnet56"]
