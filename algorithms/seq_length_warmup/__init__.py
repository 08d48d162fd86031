"""SeqLengthWarmup: see :mod:`algorithms.seq_length_warmup.seq_length_warmup`."""

from .seq_length_warmup import SeqLengthWarmup, set_batch_sequence_length

__all__ = ["SeqLengthWarmup", "set_batch_sequence_length"]
