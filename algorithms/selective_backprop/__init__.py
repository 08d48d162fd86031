"""Selective Backprop: see :mod:`algorithms.selective_backprop.selective_backprop`."""

from .selective_backprop import SelectiveBackprop, select_using_loss, should_selective_backprop

__all__ = ["SelectiveBackprop", "select_using_loss", "should_selective_backprop"]
