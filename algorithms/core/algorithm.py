"""The base class every method's class form derives from."""

from __future__ import annotations

import zlib
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from .event import Event
    from .state import State

__all__ = ["Algorithm"]


class Algorithm(ABC):
    """A method that runs inside the training loop.

    The :class:`~algorithms.core.Engine` calls :meth:`apply` at every event for which
    :meth:`match` is true. Subclasses sample their random parameters in ``apply`` and call their
    functional form; the math lives only there.
    """

    @abstractmethod
    def match(self, event: Event, state: State) -> bool:
        """Whether to run at ``event``."""

    @abstractmethod
    def apply(self, event: Event, state: State, logger: Any | None = None) -> None:
        """Run: read and change ``state``."""

    def generator(self, state: State) -> torch.Generator:
        """This algorithm's CPU random generator, created on first use.

        With ``state.seed`` set it is seeded from the seed, the rank and the class name, so runs
        repeat and each rank of a distributed run draws different numbers; without a seed it
        draws fresh entropy.
        """
        gen = getattr(self, "_generator", None)
        if gen is None:
            gen = torch.Generator()
            if state.seed is None:
                gen.seed()
            else:
                salt = zlib.crc32(self.name.encode())
                gen.manual_seed((state.seed * 1_000_003 + state.rank * 7919 + salt) % 2**63)
            self._generator = gen
        return gen

    @property
    def name(self) -> str:
        return type(self).__name__

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{self.name}({params})"
