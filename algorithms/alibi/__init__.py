"""ALiBi: see :mod:`algorithms.alibi.alibi`."""

from .alibi import Alibi, AlibiAttention, alibi_bias, alibi_slopes, apply_alibi, registry, shorten_sequences

__all__ = ["Alibi", "AlibiAttention", "alibi_bias", "alibi_slopes", "apply_alibi", "registry", "shorten_sequences"]
