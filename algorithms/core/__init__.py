"""The training loop the methods plug into.

``from algorithms.core import Algorithm, Event, State, Engine, Trainer``
"""

from .algorithm import Algorithm
from .distributed import PARALLELS
from .engine import Engine, Trace
from .event import Event
from .precision import PRECISIONS
from .state import State, batch_get_item, batch_set_item
from .time import Duration, Timestamp, TimeUnit
from .trainer import Trainer

__all__ = ["PARALLELS", "PRECISIONS", "Algorithm", "Duration", "Engine", "Event", "State", "TimeUnit",
           "Timestamp", "Trace", "Trainer", "batch_get_item", "batch_set_item"]
