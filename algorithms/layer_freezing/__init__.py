"""Layer freezing: see :mod:`algorithms.layer_freezing.layer_freezing`."""

from .layer_freezing import LayerFreezing, freeze_layers

__all__ = ["LayerFreezing", "freeze_layers"]
