"""Activation Checkpointing: see :mod:`algorithms.activation_checkpointing.activation_checkpointing`."""

from .activation_checkpointing import (
    ActivationCheckpointing,
    CheckpointedBlock,
    apply_activation_checkpointing,
    checkpoint_block,
    checkpointed_class,
    registry,
)

__all__ = [
    "ActivationCheckpointing",
    "CheckpointedBlock",
    "apply_activation_checkpointing",
    "checkpoint_block",
    "checkpointed_class",
    "registry",
]
