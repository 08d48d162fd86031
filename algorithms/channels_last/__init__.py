"""ChannelsLast: see :mod:`algorithms.channels_last.channels_last`."""

from .channels_last import ChannelsLast, apply_channels_last

__all__ = ["ChannelsLast", "apply_channels_last"]
