"""State: the run's length and progress as the docs define them, and batch items by key."""

from __future__ import annotations

import collections
import types

import pytest
import torch

from algorithms.core import Algorithm, Duration, Event, State, Trainer
from algorithms.core.state import batch_get_item, batch_set_item


def _state(duration, dataloader_len=None, **timestamp):
    state = State(model=torch.nn.Identity(), max_duration=Duration.parse(duration), dataloader_len=dataloader_len)
    for name, value in timestamp.items():
        setattr(state.timestamp, name, value)
    return state


@pytest.mark.parametrize(
    ("duration", "dataloader_len", "batches"),
    [("7ba", None, 7), ("7ba", 3, 7), ("3ep", 4, 12), ("3ep", None, None), ("64sp", 4, None), ("0ep", 4, 0)],
)
def test_max_batches_is_known_for_batches_and_for_epochs_of_known_length(duration, dataloader_len, batches):
    assert _state(duration, dataloader_len).max_batches() == batches


@pytest.mark.parametrize(
    ("duration", "dataloader_len", "timestamp", "progress"),
    [
        ("10ba", None, {"batch": 3}, 0.3),
        ("10ba", None, {"batch": 12}, 1.0),  # capped
        ("40sp", None, {"sample": 10, "batch": 9}, 0.25),
        ("4ep", 5, {"epoch": 1, "batch_in_epoch": 2, "batch": 7}, (1 + 2 / 5) / 4),
        ("4ep", None, {"epoch": 1, "batch_in_epoch": 2, "batch": 7}, 1 / 4),  # unknown length: whole epochs
        ("2ep", 5, {"epoch": 2, "batch_in_epoch": 5}, 1.0),
        ("0ba", None, {}, 1.0),
    ],
)
def test_progress_is_the_fraction_of_max_duration_done(duration, dataloader_len, timestamp, progress):
    assert _state(duration, dataloader_len, **timestamp).progress() == pytest.approx(progress)


def test_reached_compares_with_the_timestamp_or_the_progress():
    state = _state("4ep", 5, epoch=1, batch_in_epoch=3, batch=8, sample=64)
    assert state.reached("1ep") and not state.reached("2ep")
    assert state.reached("8ba") and not state.reached("9ba")
    assert state.reached("64sp") and not state.reached("65sp")
    assert state.reached("0.4dur") and not state.reached("0.41dur")  # (1 + 3/5) / 4 = 0.4
    assert state.reached(Duration.parse("0.4dur"))


def test_a_run_measured_as_a_fraction_of_itself_is_refused():
    with pytest.raises(ValueError, match="^max_duration cannot itself be a fraction of the run$"):
        _state("0.5dur").progress()


def test_in_the_trainer_progress_counts_batches_of_epochs():
    seen = []

    class Progress(Algorithm):
        def match(self, event, state):
            return event is Event.BATCH_END

        def apply(self, event, state, logger=None):
            seen.append(state.progress())

    g = torch.Generator().manual_seed(0)
    data = [(torch.randn(2, 3, generator=g), torch.randint(0, 2, (2,), generator=g)) for _ in range(3)]
    Trainer(torch.nn.Linear(3, 2), data, "2ep", algorithms=[Progress()]).fit()
    assert seen == pytest.approx([k / 6 for k in range(1, 7)])


def test_batch_items_are_read_by_index_or_key():
    assert batch_get_item((1, 2), 1) == 2 and batch_get_item([1, 2], 0) == 1
    assert batch_get_item({"x": 1}, "x") == 1
    assert batch_get_item(types.MappingProxyType({"x": 1}), "x") == 1


@pytest.mark.parametrize(
    ("batch", "key", "words"),
    [
        ({"x": 1, "y": 2}, "z", r"batch has no item 'z' \(a dict with keys \['x', 'y'\]\)"),
        ((1, 2), 2, r"batch has no item 2 \(a tuple of 2 items\)"),
        ([1], "x", r"batch has no item 'x' \(a list of 1 items\)"),
        (7, 0, r"batch has no item 0 \(batch type int\)"),
    ],
)
def test_a_missing_item_is_a_key_error_describing_the_batch(batch, key, words):
    with pytest.raises(KeyError, match=words):
        batch_get_item(batch, key)


def test_setting_an_item_returns_a_new_batch_and_leaves_the_old_one():
    pair = collections.namedtuple("Pair", "x y")(1, 2)
    for batch, key, expected in [
        ((1, 2), 0, (9, 2)),
        ([1, 2], 1, [1, 9]),
        ({"x": 1}, "x", {"x": 9}),
        (pair, 1, pair._replace(y=9)),
        (types.MappingProxyType({"x": 1, "y": 2}), "y", {"x": 1, "y": 9}),
    ]:
        before = type(batch)(batch) if not isinstance(batch, tuple) else batch
        new = batch_set_item(batch, key, 9)
        assert new == expected and type(new) is type(expected)
        assert batch == before  # not mutated
    with pytest.raises(TypeError, match="cannot set item 0 on a batch of type int"):
        batch_set_item(7, 0, 9)


def test_the_state_sets_items_on_its_batch():
    state = _state("1ba")
    state.batch = (torch.zeros(2), torch.ones(2))
    state.batch_set_item(1, torch.full((2,), 5.0))
    assert torch.equal(state.batch_get_item(1), torch.full((2,), 5.0)) and isinstance(state.batch, tuple)
    assert state.optimizer is None and state.scheduler is None
