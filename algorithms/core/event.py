"""The points of the training loop at which algorithms may run."""

from __future__ import annotations

from enum import Enum

__all__ = ["Event"]


class Event(str, Enum):
    """Training-loop events, in the order the :class:`~algorithms.core.Trainer` reaches them.

    Within each batch: BATCH_START, AFTER_DATALOADER, BEFORE_FORWARD, AFTER_FORWARD,
    BEFORE_LOSS, AFTER_LOSS, BEFORE_BACKWARD, AFTER_BACKWARD, BEFORE_OPTIMIZER_STEP,
    AFTER_TRAIN_BATCH, BATCH_END.
    """

    INIT = "init"
    FIT_START = "fit_start"
    EPOCH_START = "epoch_start"
    BATCH_START = "batch_start"
    AFTER_DATALOADER = "after_dataloader"
    BEFORE_FORWARD = "before_forward"
    AFTER_FORWARD = "after_forward"
    BEFORE_LOSS = "before_loss"
    AFTER_LOSS = "after_loss"
    BEFORE_BACKWARD = "before_backward"
    AFTER_BACKWARD = "after_backward"
    BEFORE_OPTIMIZER_STEP = "before_optimizer_step"
    AFTER_TRAIN_BATCH = "after_train_batch"
    BATCH_END = "batch_end"
    EPOCH_END = "epoch_end"
    FIT_END = "fit_end"
    EVAL_START = "eval_start"
    EVAL_BATCH_START = "eval_batch_start"
    EVAL_BATCH_END = "eval_batch_end"
    EVAL_END = "eval_end"

    @property
    def opens(self) -> Event | None:
        """The event this one closes (``AFTER_LOSS`` closes ``BEFORE_LOSS``, ``EVAL_END`` closes
        ``EVAL_START``), or None. At a closing event the Engine runs the algorithms last-in first-out,
        so what one changed at the opening event and restores at the closing one unwinds in order."""
        return _OPENS.get(self)

    @classmethod
    def batch_events(cls) -> tuple[Event, ...]:
        """The events of one training batch, in order."""
        return (
            cls.BATCH_START,
            cls.AFTER_DATALOADER,
            cls.BEFORE_FORWARD,
            cls.AFTER_FORWARD,
            cls.BEFORE_LOSS,
            cls.AFTER_LOSS,
            cls.BEFORE_BACKWARD,
            cls.AFTER_BACKWARD,
            cls.BEFORE_OPTIMIZER_STEP,
            cls.AFTER_TRAIN_BATCH,
            cls.BATCH_END,
        )


#: Each closing event and the event it closes. AFTER_DATALOADER and AFTER_TRAIN_BATCH close none:
#: the methods that act there transform the batch or the weights in list order.
_OPENS = {
    Event.AFTER_FORWARD: Event.BEFORE_FORWARD,
    Event.AFTER_LOSS: Event.BEFORE_LOSS,
    Event.AFTER_BACKWARD: Event.BEFORE_BACKWARD,
    Event.EVAL_BATCH_END: Event.EVAL_BATCH_START,
    Event.EVAL_END: Event.EVAL_START,
}
