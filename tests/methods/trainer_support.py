"""What the methods' Trainer-path tests share: an algorithm that records what the model and the
loss were given, the generator a method class draws from, and one-hot targets and soft
cross-entropy written from their definitions.

A method class draws from ``Algorithm.generator(state)``, which the docs define as seeded from
the Trainer's seed, the rank and the class name. A fresh instance of the class asked for its
generator with a State of the same seed therefore holds the same stream, and a test replays the
class's draws from it, batch after batch, without reading anything back from the instance.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

import torch

from algorithms.core import Algorithm, Event, State
from algorithms.core.time import Duration


class Observed(Algorithm):
    """Put last in ``algorithms``: records, per batch, the input the model is called on, its
    outputs, the target the loss is given and the loss backward runs on."""

    def __init__(self, input_key: int | str = 0, target_key: int | str = 1):
        self.input_key, self.target_key = input_key, target_key
        self.inputs, self.outputs, self.targets, self.losses = [], [], [], []

    def match(self, event, state):
        return event in (Event.BEFORE_FORWARD, Event.AFTER_FORWARD, Event.BEFORE_LOSS, Event.BEFORE_BACKWARD)

    def apply(self, event, state, logger=None):
        if event is Event.BEFORE_FORWARD:
            self.inputs.append(state.batch_get_item(self.input_key).detach().clone())
        elif event is Event.AFTER_FORWARD:
            self.outputs.append(state.outputs.detach().clone())
        elif event is Event.BEFORE_LOSS:
            self.targets.append(state.batch_get_item(self.target_key).detach().clone())
        else:
            self.losses.append(state.loss.detach().clone())


def replayed_generator(cls: type[Algorithm], seed: int, rank: int = 0) -> torch.Generator:
    """The generator an instance of ``cls`` draws from in a Trainer with ``seed``, on ``rank``."""
    state = State(model=torch.nn.Identity(), max_duration=Duration.parse("1ep"), seed=seed, rank=rank)
    return cls().generator(state)


def one_hot(y: torch.Tensor, num_classes: int) -> torch.Tensor:
    """Class indices ``(N, ...)`` to float one-hot vectors ``(N, C, ...)``, the classes on dim 1."""
    return torch.movedim(torch.nn.functional.one_hot(y, num_classes), -1, 1).float()


def soft_cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The mean over examples of ``-sum_c target_c * log softmax(logits)_c``."""
    return -(target * logits.float().log_softmax(dim=1)).sum(dim=1).mean()


def image_batches(n: int = 3, bs: int = 6, k: int = 4, size: int = 8, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(bs, 3, size, size, generator=g), torch.randint(0, k, (bs,), generator=g)) for _ in range(n)]


def image_classifier(k: int = 4) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(4, k)
    )


@contextlib.contextmanager
def no_host_sync() -> Iterator[None]:
    """Inside it, a CUDA operation that makes the host wait for the device raises (torch's sync
    debug mode ``"error"``): what runs there is shown to make no host synchronisation."""
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode("default")


def line_that_called_into(path, call):
    """Run ``call()``; the (file, line) of the frame that made the first call into the source file
    ``path``: where a warning with ``stacklevel=2`` from there is reported."""
    target, calls = os.path.realpath(path), []

    def profile(frame, event, arg):
        if event == "call" and not calls and os.path.realpath(frame.f_code.co_filename) == target:
            calls.append((frame.f_back.f_code.co_filename, frame.f_back.f_lineno))

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(previous)
    return calls[0]


def assert_warns_at_the_calling_line(path, call, category) -> None:
    """``call()`` warns once, with ``category``, at the line that called into the source file
    ``path`` (``stacklevel=2`` from there): the caller's own line, not one frame further out."""
    import pytest

    with pytest.warns(category) as record:
        caller = line_that_called_into(path, call)
    assert len(record) == 1 and (record[0].filename, record[0].lineno) == caller
