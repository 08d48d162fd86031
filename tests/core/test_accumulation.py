"""Gradient accumulation (``Trainer(microbatch_size=...)``, ``Loop.accumulate``), held to its
definition: a batch trained as microbatches takes the step the whole batch takes.

- K microbatches of B/K examples end at the weights one batch of B ends at, to float tolerance
  (float32 sums in another order), for a model that treats examples alike (no batch norm): with
  equal and unequal microbatches, with CutMix, MixUp, LabelSmoothing and EMA (which act on the
  whole batch after the data loader, so they draw what they draw without accumulation), over a
  shuffled ``DataLoader`` with workers, and under ``amp_bf16`` (to bf16's tolerance).
- The events: once per batch where they are per optimizer step, once per microbatch from
  ``BEFORE_FORWARD`` to ``AFTER_BACKWARD``; the methods' counters count batches.
- What accumulation cannot make equal is refused with one line, before anything trains.
"""

from __future__ import annotations

import multiprocessing

import numpy as np
import pytest
import torch
from loop_support import image_data
from torch.utils.data import DataLoader

from algorithms import EMA, SAM, CutMix, LabelSmoothing, MixUp
from algorithms.core import Algorithm, Event, Loop, Trainer

multiprocessing.set_forkserver_preload(["torch"])  # as test_loop_correctness.py: workers fork from a server

B = 12


_data = image_data


def _batches(n=48):
    x, y = _data(n).tensors
    return [(x[i : i + B], y[i : i + B]) for i in range(0, n, B)]


def _model(seed=5):
    """Convolutions, a group norm and dropout-free layers: each example's output depends on it alone."""
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.GroupNorm(2, 8),
        torch.nn.ReLU(),
        torch.nn.Conv2d(8, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(8, 4),
    )


def _sgd(params):
    return torch.optim.SGD(params, lr=0.1, momentum=0.9)


def _train(data, microbatch_size=None, algorithms=(), precision="fp32", duration="2ep"):
    model = _model()
    trainer = Trainer(
        model,
        data,
        duration,
        optimizer=_sgd(model.parameters()),
        algorithms=list(algorithms),
        precision=precision,
        seed=3,
        microbatch_size=microbatch_size,
    )
    trainer.fit()
    return trainer


def _weights(trainer):
    return torch.cat([p.detach().flatten() for p in trainer.state.model.parameters()])


@pytest.mark.parametrize("microbatch_size", [3, 5, np.int64(6)])  # 12 as 4x3, 5+5+2, 2x6
def test_microbatches_end_where_the_whole_batch_ends(microbatch_size):
    whole = _weights(_train(_batches()))
    parts = _weights(_train(_batches(), microbatch_size))
    assert not torch.equal(whole, _weights(_train(_batches()[:2])))  # the comparison can tell runs apart
    torch.testing.assert_close(parts, whole, rtol=1e-5, atol=1e-6)


def test_a_microbatch_size_of_the_whole_batch_changes_nothing_at_all():
    assert torch.equal(_weights(_train(_batches(), B)), _weights(_train(_batches())))


def test_mixing_smoothing_and_an_average_take_the_whole_batchs_steps():
    """CutMix and MixUp mix the whole batch after the loader; each microbatch's targets mix with its
    partners' from the whole batch, then are smoothed: the same targets, so the same steps, and the
    same EMA average."""

    def methods():
        return [CutMix(alpha=1.0), LabelSmoothing(smoothing=0.1), EMA(half_life="2ba")]

    whole, parts = _train(_batches(), None, methods()), _train(_batches(), 5, methods())
    torch.testing.assert_close(_weights(parts), _weights(whole), rtol=1e-5, atol=1e-6)
    averaged = []
    for trainer in (parts, whole):
        with trainer.loop.evaluating():  # EMA's average in the model
            averaged.append(_weights(trainer))
    assert not torch.equal(averaged[1], _weights(whole))
    torch.testing.assert_close(averaged[0], averaged[1], rtol=1e-5, atol=1e-6)
    interpolated = [MixUp(alpha=0.4, interpolate_loss=True)]
    torch.testing.assert_close(
        _weights(_train(_batches(), 4, interpolated)),
        _weights(_train(_batches(), None, [MixUp(alpha=0.4, interpolate_loss=True)])),
        rtol=1e-5,
        atol=1e-6,
    )


@pytest.mark.slow  # two trainings with loader workers or a framework's setup: seconds
def test_a_shuffled_loader_with_workers_in_bf16_autocast():
    def loader():
        return DataLoader(
            _data(),
            batch_size=B,
            shuffle=True,
            generator=torch.Generator().manual_seed(1),
            num_workers=2,
            multiprocessing_context="forkserver",  # as test_loop_correctness.py's (it says why)
        )

    whole = _weights(_train(loader(), None, precision="amp_bf16"))
    parts = _weights(_train(loader(), 4, precision="amp_bf16"))
    assert not torch.equal(whole, _weights(_train(_batches(), None, precision="amp_bf16")))  # the order mattered
    # bf16 keeps 8 bits of mantissa: products summed in another order differ in the third digit
    torch.testing.assert_close(parts, whole, rtol=2e-2, atol=2e-3)


class _Events(Algorithm):
    def __init__(self):
        self.seen: list[tuple[Event, int | None]] = []

    def match(self, event, state):
        return True

    def apply(self, event, state, logger=None):
        rows = state.microbatch_rows
        self.seen.append((event, None if rows is None else rows.stop - rows.start))


def test_events_per_step_and_per_microbatch_and_counters_per_batch():
    events = _Events()
    smoothing = LabelSmoothing(smoothing=0.1)
    trainer = _train(_batches(24), 5, [smoothing, events], duration="1ep")
    seen = events.seen
    one_batch = seen[seen.index((Event.BATCH_START, None)) : seen.index((Event.BATCH_END, None)) + 1]
    per_micro = [Event.BEFORE_FORWARD, Event.AFTER_FORWARD, Event.BEFORE_LOSS, Event.AFTER_LOSS]
    per_micro += [Event.BEFORE_BACKWARD, Event.AFTER_BACKWARD]
    assert one_batch == [
        (Event.BATCH_START, None),
        (Event.AFTER_DATALOADER, None),
        *((e, n) for n in (5, 5, 2) for e in per_micro),
        (Event.BEFORE_OPTIMIZER_STEP, None),
        (Event.AFTER_TRAIN_BATCH, None),
        (Event.BATCH_END, None),
    ]
    assert trainer.state.timestamp.batch == 2 and trainer.state.timestamp.sample == 24
    assert trainer.method_log.records["LabelSmoothing"]["activity"]["batches_smoothed"] == 2


def test_a_users_loop_accumulates_as_the_trainer_does():
    trainer = _train(_batches(), 5, duration="1ep")
    model = _model()
    torch.manual_seed(3)
    loop = Loop(model, max_duration="1ep", optimizer=_sgd(model.parameters()), seed=3)
    losses = []
    for batch in _batches():
        loop.batch(batch)
        losses.append(loop.accumulate(5))
        loop.step()
    assert torch.equal(_weights(trainer), torch.cat([p.detach().flatten() for p in model.parameters()]))
    # the batch's loss: its microbatches' mean losses weighted by their shares, the whole batch's mean
    assert losses[-1].shape == () and not losses[-1].requires_grad
    x, y = _batches()[-1]
    model_before = _model()
    check = Loop(model_before, max_duration="1ep", optimizer=_sgd(model_before.parameters()), seed=3)
    for batch in _batches()[:-1]:
        check.batch(batch)
        check.accumulate(5)
        check.step()
    with torch.no_grad():
        expected = torch.nn.functional.cross_entropy(model_before(x), y)
    torch.testing.assert_close(losses[-1], expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    ("algorithms", "message"),
    [
        (lambda: [SAM(rho=0.05)], "SAM with microbatch_size=4: its second gradient"),
        (
            lambda: [LabelSmoothing(0.1), CutMix(alpha=1.0)],
            "LabelSmoothing listed before CutMix with microbatch_size=4",
        ),
        (
            lambda: [MixUp(alpha=0.2, interpolate_loss=True), LabelSmoothing(0.1)],
            "MixUp(interpolate_loss=True) with LabelSmoothing and microbatch_size=4",
        ),
    ],
)
def test_what_accumulation_cannot_make_equal_is_refused(algorithms, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _train(_batches(), 4, algorithms())


@pytest.mark.parametrize("bad", [0, -2, True, 2.5, "4"])
def test_a_microbatch_size_that_is_not_a_count_of_examples_is_refused(bad):
    with pytest.raises(ValueError, match=r"Trainer\(microbatch_size=\.\.\.\): .* give a whole number of examples"):
        _train(_batches(), bad)


@pytest.mark.slow  # DeepSpeed's engine, four times: seconds
@pytest.mark.parametrize("zero_stage", [1, 2])
def test_deepspeed_microbatches_end_where_its_whole_batches_end(zero_stage, one_rank_deepspeed):
    """One rank of DeepSpeed on the CPU: only the last microbatch's backward is an accumulation
    boundary, where ZeRO reduces the gradients into its partitions; the step after it updates."""
    from algorithms.core.strategies import DeepSpeed

    def run(microbatch_size):
        model = _model()
        with Trainer(
            model,
            _batches(),
            "1ep",
            optimizer=_sgd,
            parallel=DeepSpeed(zero_stage=zero_stage),
            seed=3,
            device="cpu",
            microbatch_size=microbatch_size,
        ) as trainer:
            trainer.fit()
            return _weights(trainer)

    whole, parts = run(None), run(5)
    assert not torch.equal(whole, torch.cat([p.detach().flatten() for p in _model().parameters()]))
    torch.testing.assert_close(parts, whole, rtol=1e-5, atol=1e-6)


@pytest.mark.slow  # two trainings with loader workers or a framework's setup: seconds
def test_accelerate_microbatches_end_where_its_whole_batches_end():
    """One process of Accelerate: its backward (``accelerator.backward``) and its ``no_sync`` around
    the microbatches before the last."""
    pytest.importorskip("accelerate", reason="accelerate is not installed: nox -s tests installs it")

    def run(microbatch_size):
        with Trainer(
            _model(), _batches(), "1ep", optimizer=_sgd, parallel="accelerate", seed=3, microbatch_size=microbatch_size
        ) as trainer:
            trainer.fit()
            return _weights(trainer)

    torch.testing.assert_close(run(5), run(None), rtol=1e-5, atol=1e-6)
