"""The base class every method's class form derives from."""

from __future__ import annotations

import operator
import sys
import warnings
import zlib
from abc import ABC, abstractmethod
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeVar

import torch

from .parameters import plain_number

if TYPE_CHECKING:
    from .event import Event
    from .method_log import AlgorithmLog
    from .state import State

__all__ = ["Algorithm", "warn_from_callers_line"]

_PACKAGE = Path(__file__).resolve().parents[1]  # the algorithms package's folder
_RANK_STEP = 0x9E3779B97F4A7C15  # 2**64 over the golden ratio (SplitMix64's step): ranks' seeds lie far apart
_A = TypeVar("_A", bound="Algorithm")


def warn_from_callers_line(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn`` naming the line that called into this package: the user's ``trainer.fit()``
    where a method warns from inside the training loop, however deep the Trainer's engine calls it.

    That line is the caller of the outermost frame in the package's folder, so code that the
    package calls back (a wrapper around a method, a user's loss) does not stop the search."""
    frames, frame = [], sys._getframe(1)
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    inside = [i for i, f in enumerate(frames) if Path(f.f_code.co_filename).resolve().is_relative_to(_PACKAGE)]
    # frames[i] is stacklevel i + 2 for warnings.warn; the outermost package frame's caller is one further out
    stacklevel = min(inside[-1] + 3, len(frames) + 1) if inside else 2
    warnings.warn(message, category, stacklevel=stacklevel)


class Algorithm(ABC):
    """A method that runs inside the training loop.

    ``unused_parameters``: set True on a class whose steps may leave some of the model's
    parameters without a gradient (Stochastic Depth's dropped blocks), so that under DDP the
    Trainer wraps the model with ``find_unused_parameters=True``.

    ``unsupported_parallel``: the parallel modes (``Trainer(parallel=...)`` names, e.g. ``"fsdp"``)
    this method cannot run under, each with a one-line reason that says what to use instead; the
    Trainer refuses such a combination when it is built, before any training.

    ``activity``: the counters of what the method does, each with a phrase a reader understands,
    e.g. ``{"batches_mixed": "batches mixed"}``. Every method of the library declares them so that
    all of them at 0 after a run means the method did not act (or overrides :meth:`acted`).

    The :class:`~algorithms.core.Engine` calls :meth:`apply` at every event for which
    :meth:`match` is true, with this algorithm's own :class:`~algorithms.core.AlgorithmLog` as
    ``logger``; ``apply`` counts what it did with :meth:`report`. Subclasses sample their random
    parameters in ``apply`` and call their functional form; the math lives only there.

    Hyperparameters are plain Python values: a NumPy scalar or a 0-d tensor that a declaration
    accepts as a number (``CutOut(num_holes=np.int64(2))``) is stored, as every public attribute
    is, as the ``int`` or ``float`` it holds (:func:`~algorithms.core.parameters.plain_number`),
    so :func:`repr`, the log and checkpoints show plain numbers.

    Randomness: each algorithm draws from its own generator (:meth:`generator`), seeded from the
    Trainer's ``seed``, the rank and which instance of its class it is in the Trainer's list; or,
    after :meth:`manual_seed`, from the seed given to it and the rank alone, whatever the
    Trainer's seed and the algorithm's place in the list. A checkpoint keeps the generator's state,
    so a resumed run draws what the uninterrupted one would.
    """

    unused_parameters: bool = False
    #: Whether the method computes or changes the loss from the model's logits and the target with
    #: the Trainer's ``loss_fn`` (Label Smoothing, the mixing methods, Selective Backprop's scoring):
    #: the Trainer refuses it with ``loss_fn="model"``, where the model computes its own loss.
    needs_loss_fn: bool = False
    unsupported_parallel: Mapping[str, str] = MappingProxyType({})
    activity: Mapping[str, str] = MappingProxyType({})

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value if name.startswith("_") else plain_number(value))

    @abstractmethod
    def match(self, event: Event, state: State) -> bool:
        """Whether to run at ``event``."""

    @abstractmethod
    def apply(self, event: Event, state: State, logger: AlgorithmLog | None = None) -> None:
        """Run: read and change ``state``, and count what was done with :meth:`report`. ``logger``
        is this algorithm's log in the run (``None`` where ``apply`` is called by hand)."""

    def report(self, logger: AlgorithmLog | None, activity: str, n: int = 1) -> None:
        """Add ``n`` to the declared counter ``activity`` of ``logger`` (nothing with ``None``)."""
        if logger is not None:
            logger.count(activity, n)

    def acted(self, activity: Mapping[str, int]) -> bool:
        """Whether the counters of a run, ``{counter: count}``, show that this method did something:
        by default any counter above 0. A class whose counters cannot say it alone overrides it."""
        return any(n > 0 for n in activity.values())

    def hyperparameters(self) -> dict[str, Any]:
        """What the log records once per run and :func:`repr` shows: the public instance attributes
        (``vars(self)`` without names starting with ``_``), and ``seed`` where :meth:`manual_seed`
        gave one."""
        params = {k: v for k, v in vars(self).items() if not k.startswith("_")}
        seed = getattr(self, "_seed", None)
        return params if seed is None else {**params, "seed": seed}

    def manual_seed(self: _A, seed: int) -> _A:
        """Give this algorithm a seed of its own and return the algorithm, as
        :meth:`torch.Generator.manual_seed` returns the generator: ``CutOut(length=0.5).manual_seed(7)``.

        Its draws then depend on ``seed`` and the rank alone, not on the Trainer's seed (or its
        absence) nor on the algorithm's place in the Trainer's list. Rank 0 draws what
        ``torch.Generator().manual_seed(seed)`` draws; rank ``r`` seeds with
        ``seed + r * 0x9E3779B97F4A7C15`` (mod 2**64), so the ranks of a distributed run still draw
        different numbers. Two algorithms given one seed draw alike, as two generators given one seed
        do. Called again, the stream starts anew from the new seed at the next draw; a checkpoint's
        generator state, loaded after it, takes over where the saved run stopped.

        ``seed``: an int from 0 to 2**64 - 1 (a bool or a float is a TypeError, a number outside
        the range a ValueError).

        >>> from algorithms import CutOut
        >>> cutout = CutOut(length=0.5).manual_seed(7)
        >>> cutout.hyperparameters()["seed"], repr(cutout).endswith(".manual_seed(7)")
        (7, True)
        """
        try:
            if isinstance(seed, bool):
                raise TypeError
            value = operator.index(seed)
        except TypeError:
            raise TypeError(
                f"{self.name}.manual_seed: seed must be an int from 0 to 2**64 - 1, got {type(seed).__name__} {seed!r}"
            ) from None
        if not 0 <= value < 2**64:
            raise ValueError(f"{self.name}.manual_seed: seed must be an int from 0 to 2**64 - 1, got {value}")
        self._seed = value
        self._generator = None  # made from the new seed at the next draw
        return self

    def reset(self) -> None:
        """Forget everything a previous run left: per-run state (an average, counters, the last
        batch's draws) and the random generator. A seed given by :meth:`manual_seed` stays: the
        generator is made again from it at the next draw. Hyperparameters stay as constructed.

        The :class:`~algorithms.core.Engine` calls it for every algorithm at ``Event.INIT``,
        before any algorithm runs, so an instance reused in another Trainer (a seed sweep that
        builds its list once) starts as a freshly built one would; state loaded by hand with
        :meth:`load_state_dict` before the Trainer is built is forgotten there too (resume through
        ``Trainer(load_path=...)``, which loads after ``INIT``). A subclass with state of its own
        overrides it and calls ``super().reset()``."""
        self._generator = None

    def generator(self, state: State) -> torch.Generator:
        """This algorithm's CPU random generator, created on first use.

        Given a seed by :meth:`manual_seed`, it is seeded from that seed and the rank alone.
        Otherwise, with ``state.seed`` set, it is seeded from the seed, the rank, the class name and
        which instance of its class this is in the Trainer's list (the first, the second...), so runs
        repeat, each rank of a distributed run draws different numbers, and two instances of one
        class draw independently; without a seed it draws fresh entropy. The first instance of a
        class draws what it always did, and adding another method to the list changes no other
        method's draws.
        """
        gen = getattr(self, "_generator", None)
        if gen is None:
            gen = torch.Generator()
            given = getattr(self, "_seed", None)
            if given is not None:
                gen.manual_seed((given + state.rank * _RANK_STEP) % 2**64)
            elif state.seed is None:
                gen.seed()
            else:
                instance = getattr(self, "_instance", 0)
                salt = zlib.crc32(self.name.encode() if instance == 0 else f"{self.name}#{instance}".encode())
                gen.manual_seed((state.seed * 1_000_003 + state.rank * 7919 + salt) % 2**63)
            self._generator = gen
        return gen

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps of this algorithm, so a resumed run goes on as this one would.

        The base keeps the random generator's state once :meth:`generator` has made it. A subclass
        with state of its own (averaged weights, a step counter) extends the dict and
        :meth:`load_state_dict`, calling ``super()``; hyperparameters are the constructor's, not
        state.
        """
        gen = getattr(self, "_generator", None)
        return {} if gen is None else {"generator": gen.get_state()}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned; a key this class does not keep is a ValueError."""
        unknown = sorted(set(state_dict) - self._state_keys())
        if unknown:
            raise ValueError(
                f"{self.name}.load_state_dict: unknown key(s) {', '.join(map(repr, unknown))} — "
                f"this class keeps {', '.join(map(repr, sorted(self._state_keys()))) or 'no state'}"
            )
        if "generator" in state_dict:
            gen = torch.Generator()
            gen.set_state(state_dict["generator"])
            self._generator = gen

    def _state_keys(self) -> set[str]:
        """The keys :meth:`load_state_dict` accepts (a subclass adds its own)."""
        return {"generator"}

    @property
    def name(self) -> str:
        return type(self).__name__

    def __repr__(self) -> str:
        params = self.hyperparameters()
        seed = getattr(self, "_seed", None)
        if seed is not None:  # not a constructor argument: shown as the call that gave it
            params.pop("seed", None)
        text = f"{self.name}({', '.join(f'{k}={v!r}' for k, v in params.items())})"
        return text if seed is None else f"{text}.manual_seed({seed})"
