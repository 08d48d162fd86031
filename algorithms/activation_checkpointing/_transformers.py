"""Activation checkpointing of Hugging Face transformers' layers (GPT-2, BERT, RoBERTa).

Imported by :data:`algorithms.activation_checkpointing.registry` only when a model holds one of
these layers, so transformers is already imported. A layer's forward may write a key/value cache;
run again in the backward pass it would write it a second time, so a checkpointed layer is given
no cache, as Hugging Face's own gradient checkpointing does (``GradientCheckpointingLayer``).
"""

from __future__ import annotations

from typing import Any

from transformers.cache_utils import Cache

from .activation_checkpointing import CheckpointedBlock


class CheckpointedLayer(CheckpointedBlock):
    """:class:`~algorithms.activation_checkpointing.CheckpointedBlock` for a Hugging Face layer:
    an empty cache it is given (the one GPT-2 makes when ``use_cache`` is on in training) is
    dropped and ``use_cache`` turned off, which changes no output. A cache that already holds
    positions (generation with gradients) is refused: without it the layer would attend to fewer
    keys."""

    def checkpoint_arguments(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple, dict]:
        def drop(name: str, value: Any) -> Any:
            if not isinstance(value, Cache):
                return value
            held = value.get_seq_length()
            if held:
                raise ValueError(
                    f"{name}: a checkpointed {type(self).__name__} cannot read a cache that holds {held} positions "
                    "(its recomputation would write it again); run it under torch.no_grad(), or without activation "
                    "checkpointing"
                )
            return None

        args = tuple(drop("cache", a) for a in args)
        kwargs = {k: drop(k, v) for k, v in kwargs.items()}
        if kwargs.get("use_cache"):
            kwargs["use_cache"] = False
        return args, kwargs
