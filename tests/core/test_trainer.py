from __future__ import annotations

import math

import pytest
import torch

from algorithms.core import PRECISIONS, Algorithm, Event, Trainer


def _data(n=3, bs=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(bs, 6, generator=g), torch.randint(0, 3, (bs,), generator=g)) for _ in range(n)]


class Count(Algorithm):
    def __init__(self):
        self.counts = {}

    def match(self, event, state):
        return True

    def apply(self, event, state, logger=None):
        self.counts[event] = self.counts.get(event, 0) + 1


@pytest.mark.parametrize(("duration", "batches", "epochs"), [("2ep", 6, 2), ("4ba", 4, 1), ("16sp", 2, 0)])
def test_durations(duration, batches, epochs):
    count = Count()
    t = Trainer(torch.nn.Linear(6, 3), _data(), duration, algorithms=[count])
    t.fit()
    assert t.state.timestamp.batch == batches
    assert t.state.timestamp.epoch == epochs
    assert count.counts[Event.BATCH_START] == batches
    assert count.counts.get(Event.EPOCH_END, 0) == epochs
    assert count.counts[Event.INIT] == count.counts[Event.FIT_START] == count.counts[Event.FIT_END] == 1


def test_algorithms_run_in_the_order_given():
    order = []

    class Named(Algorithm):
        def __init__(self, tag):
            self.tag = tag

        def match(self, event, state):
            return event is Event.BEFORE_LOSS

        def apply(self, event, state, logger=None):
            order.append(self.tag)

    Trainer(torch.nn.Linear(6, 3), _data(1), "1ba", algorithms=[Named("b"), Named("a")]).fit()
    assert order == ["b", "a"]


def test_training_reduces_loss_and_eval_reports_accuracy():
    torch.manual_seed(0)
    data = _data(n=4, bs=16)
    t = Trainer(torch.nn.Linear(6, 3), data, "30ep",
                optimizer=None, seed=0)
    before = t.eval(data)
    t.fit()
    after = t.eval(data)
    assert after["loss"] < before["loss"]
    assert 0.0 <= after["accuracy"] <= 1.0
    # accuracy is the fraction of argmax hits, by definition
    with torch.no_grad():
        hits = sum(int((t.state.model(x).argmax(1) == y).sum()) for x, y in data)
    assert after["accuracy"] == pytest.approx(hits / 64)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_every_precision_trains_on_cpu_without_nans(precision):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(4 * 6 * 6, 3))
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(4, 3, 8, 8, generator=g), torch.randint(0, 3, (4,), generator=g))
            for _ in range(3)]
    t = Trainer(model, data, "3ba", precision=precision, device="cpu", grad_clip_norm=1.0)
    t.fit()
    expected_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision, torch.float32)
    for p in t.state.model.parameters():
        assert p.dtype == expected_dtype
        assert torch.isfinite(p).all()
    assert math.isfinite(t.eval(data)["loss"])
    assert t.scaler.is_enabled() == (precision == "amp_fp16")


def test_bad_arguments():
    with pytest.raises(ValueError, match="precision='fp8'"):
        Trainer(torch.nn.Linear(6, 3), _data(), "1ep", precision="fp8")
    with pytest.raises(ValueError, match="max_duration"):
        Trainer(torch.nn.Linear(6, 3), _data(), "0.5dur")
    with pytest.raises(ValueError, match="no batches"):
        Trainer(torch.nn.Linear(6, 3), [], "1ep").fit()
    with pytest.raises(TypeError, match="not an Algorithm"):
        Trainer(torch.nn.Linear(6, 3), _data(), "1ep", algorithms=[object()])
