"""SqueezeExcite: see :mod:`algorithms.squeeze_excite.squeeze_excite`."""

from .squeeze_excite import SqueezeExcite, apply_squeeze_excite

__all__ = ["SqueezeExcite", "apply_squeeze_excite"]
