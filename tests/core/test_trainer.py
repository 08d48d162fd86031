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


class _DictModel(torch.nn.Module):
    """A classifier over ``(N, 6)`` features that logs the inputs it was called on."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(6, 3)
        self.seen = []

    def forward(self, x):
        self.seen.append(x)
        return self.linear(x)


def _dict_data(n=3, bs=8):
    return [{"input_ids": x, "labels": y, "mask": torch.ones(bs)} for x, y in _data(n, bs)]


def test_dict_batches_train_and_eval_with_input_and_target_keys():
    data = _dict_data()
    model = _DictModel()
    t = Trainer(model, data, "2ep", input_key="input_ids", target_key="labels", seed=0)
    before = t.eval(data)
    t.fit()
    after = t.eval(data)
    assert t.state.timestamp.sample == 2 * 3 * 8  # samples are the input's batch size
    assert all(x.shape == (8, 6) for x in model.seen)
    assert after["loss"] < before["loss"]
    # the same data as tuples gives the same figures: the keys only say where things are
    tuples = Trainer(torch.nn.Linear(6, 3), _data(), "1ba")
    tuples.state.model.load_state_dict(model.linear.state_dict())
    assert tuples.eval(_data()) == pytest.approx(after)


def test_sample_count_is_the_input_batch_size_whatever_the_key_order():
    # the first dict value is not the input here: its length must not count the samples
    data = [{"labels": y, "extra": torch.zeros(100), "input_ids": x} for x, y in _data(2, bs=4)]
    t = Trainer(torch.nn.Linear(6, 3), data, "1ep", input_key="input_ids", target_key="labels")
    t.fit()
    assert t.state.timestamp.sample == 8


def test_eval_accuracy_counts_every_labelled_token_and_skips_ignored_ones():
    class PerToken(torch.nn.Module):  # (N, L, 6) features -> (N, 3, L) logits
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(6, 3)

        def forward(self, x):
            return self.linear(x).transpose(1, 2)

    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(4, 5, 6, generator=g), torch.randint(0, 3, (4, 5), generator=g)
    y[0, :2] = -100  # padding
    t = Trainer(PerToken(), [{"x": x, "y": y}], "1ba", input_key="x", target_key="y")
    got = t.eval([{"x": x, "y": y}])
    with torch.no_grad():
        pred = t.state.model(x).argmax(1)
    keep = y >= 0
    assert got["accuracy"] == pytest.approx(((pred == y) & keep).sum().item() / keep.sum().item())
    assert got["loss"] == pytest.approx(
        torch.nn.functional.cross_entropy(t.state.model(x).detach(), y).item())


@pytest.mark.parametrize(("keys", "pattern"), [
    ({"input_key": "inputs", "target_key": "labels"},
     r"Trainer\(input_key='inputs'\): batch has no item 'inputs' \(a dict with keys \['input_ids', 'labels', "
     r"'mask'\]\)"),
    ({"input_key": "input_ids", "target_key": "label"},
     r"Trainer\(target_key='label'\): batch has no item 'label'.*target_key"),
])
def test_a_wrong_key_is_a_key_error_naming_the_key(keys, pattern):
    data = _dict_data(1)
    with pytest.raises(KeyError, match=pattern):
        Trainer(torch.nn.Linear(6, 3), data, "1ba", **keys).fit()
    with pytest.raises(KeyError, match=pattern):
        Trainer(torch.nn.Linear(6, 3), data, "1ba", **keys).eval(data)


def test_tuple_batches_with_a_dict_key_name_the_tuple():
    with pytest.raises(KeyError, match=r"input_key='x'.*a list of 2 items"):
        Trainer(torch.nn.Linear(6, 3), [list(b) for b in _data(1)], "1ba", input_key="x").fit()


def test_eval_reads_one_hot_and_probability_targets_as_their_most_likely_class():
    data = _data(2)
    t = Trainer(torch.nn.Linear(6, 3), data, "1ba", seed=0)
    by_index = t.eval(data)
    one_hot = [(x, torch.nn.functional.one_hot(y, 3)) for x, y in data]  # integer one-hot
    assert t.eval([(x, oh.float()) for x, oh in one_hot]) == pytest.approx(by_index)
    # the default cross-entropy takes no integer one-hot, so compare accuracies through a loss that does
    t.state.loss_fn = lambda out, y: torch.nn.functional.cross_entropy(out, y.float() if y.ndim == 2 else y)
    assert t.eval(one_hot)["accuracy"] == by_index["accuracy"]
