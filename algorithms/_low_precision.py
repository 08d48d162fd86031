"""What Low Precision LayerNorm and Low Precision GroupNorm share as training-loop algorithms."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .core.algorithm import Algorithm
from .core.event import Event
from .core.state import State
from .surgery import recording_replacements

__all__ = ["AUTOCAST_PRECISIONS", "LowPrecisionNorm"]

#: The Trainer precisions under which a low precision norm acts: the autocast ones.
AUTOCAST_PRECISIONS = ("amp_fp16", "amp_bf16")


class LowPrecisionNorm(Algorithm):
    """Replaces the model's norms at ``Event.INIT`` with ``replace`` (the method's functional form,
    given the Trainer's precision and optimizers) and counts the training batches that then run
    under a 16-bit autocast. It acted only where both happened: outside autocast a low precision
    norm computes what the norm it replaced does."""

    activity = {
        "modules_replaced": "norms replaced by low precision ones",
        "batches_in_low_precision": "training batches run under a 16-bit autocast with them",
    }
    replace: Callable[..., Any]
    _replaced = 0  # the norms replaced at INIT

    def reset(self) -> None:
        """Forget how many norms the last run replaced (the next run replaces its own) and the generator."""
        super().reset()
        self._replaced = 0

    def match(self, event: Event, state: State) -> bool:
        return event is Event.INIT or (event is Event.AFTER_FORWARD and self._replaced > 0)

    def apply(self, event: Event, state: State, logger: Any | None = None) -> None:
        if event is Event.INIT:
            with recording_replacements() as replaced:
                type(self).replace(state.model, precision=state.precision, optimizers=state.optimizers)
            self._replaced = len(replaced)
            self.report(logger, "modules_replaced", self._replaced)
        elif state.precision in AUTOCAST_PRECISIONS:  # the Trainer ran this forward under autocast
            self.report(logger, "batches_in_low_precision")

    def acted(self, activity: Mapping[str, int]) -> bool:
        return activity.get("modules_replaced", 0) > 0 and activity.get("batches_in_low_precision", 0) > 0
