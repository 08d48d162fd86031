from __future__ import annotations

import inspect
import logging
import math
import re

import pytest
import torch

from algorithms.core import PRECISIONS, Algorithm, AlgorithmLog, Event, MethodLog, Trainer
from algorithms.core.algorithm import warn_from_callers_line


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
    t = Trainer(torch.nn.Linear(6, 3), data, "30ep", optimizer=None, seed=0)
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
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 3)
    )
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(4, 3, 8, 8, generator=g), torch.randint(0, 3, (4,), generator=g)) for _ in range(3)]
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
    assert got["loss"] == pytest.approx(torch.nn.functional.cross_entropy(t.state.model(x).detach(), y).item())


@pytest.mark.parametrize(
    ("keys", "pattern"),
    [
        (
            {"input_key": "inputs", "target_key": "labels"},
            r"Trainer\(input_key='inputs'\): batch has no item 'inputs' \(a dict with keys \['input_ids', 'labels', "
            r"'mask'\]\)",
        ),
        (
            {"input_key": "input_ids", "target_key": "label"},
            r"Trainer\(target_key='label'\): batch has no item 'label'.*target_key",
        ),
    ],
)
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


# -- the rest of the loop, against what it is defined to do ------------------------------------


class _LearningRates(Algorithm):
    """The learning rate each optimizer step runs with, and the parameters before and after it."""

    def __init__(self):
        self.rates, self.before, self.after, self.grads = [], [], [], []

    def match(self, event, state):
        return event in (Event.BEFORE_OPTIMIZER_STEP, Event.AFTER_TRAIN_BATCH)

    def apply(self, event, state, logger=None):
        params = [p.detach().clone() for p in state.model.parameters()]
        if event is Event.BEFORE_OPTIMIZER_STEP:
            self.rates.append(state.optimizer.param_groups[0]["lr"])
            self.before.append(params)
            self.grads.append([p.grad.detach().clone() for p in state.model.parameters()])
        else:
            self.after.append(params)


def test_schedulers_step_once_after_every_optimizer_step():
    """StepLR(step_size=1, gamma=0.5) halves the rate at each of its steps: the n-th optimizer
    step (counting from 0) runs with lr * 0.5**n over the epochs, and plain SGD moves every
    parameter by -lr_n * grad."""
    model = torch.nn.Linear(6, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    probe = _LearningRates()
    Trainer(model, _data(n=3), "2ep", optimizer=optimizer, schedulers=[scheduler], algorithms=[probe]).fit()
    assert probe.rates == [0.5**n for n in range(6)]
    assert optimizer.param_groups[0]["lr"] == 0.5**6
    for rate, before, after, grads in zip(probe.rates, probe.before, probe.after, probe.grads, strict=True):
        for p0, p1, grad in zip(before, after, grads, strict=True):
            torch.testing.assert_close(p1, p0 - rate * grad)


class _RecordingSampler(torch.utils.data.Sampler):
    """A stand-in for DistributedSampler: records set_epoch calls and the epoch each pass over
    the data was drawn for."""

    def __init__(self, n):
        self.n, self.epochs, self.passes = n, [], []

    def set_epoch(self, epoch):
        self.epochs.append(epoch)

    def __iter__(self):
        self.passes.append(self.epochs[-1] if self.epochs else None)
        return iter(range(self.n))

    def __len__(self):
        return self.n


@pytest.mark.parametrize(("duration", "epochs"), [("3ep", [0, 1, 2]), ("5ba", [0, 1, 2])])
def test_the_samplers_epoch_is_set_before_every_epoch(duration, epochs):
    x, y = torch.randn(8, 6), torch.randint(0, 3, (8,))
    sampler = _RecordingSampler(8)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=4, sampler=sampler)
    Trainer(torch.nn.Linear(6, 3), loader, duration).fit()
    assert sampler.epochs == epochs and sampler.passes == epochs


class _Mode(torch.nn.Module):
    """Records, at every forward, whether the module is in training mode and autograd is on."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(6, 3)
        self.modes = []

    def forward(self, x):
        self.modes.append((self.training, torch.is_grad_enabled()))
        return self.linear(x)


def test_eval_runs_its_events_in_eval_mode_without_autograd_and_training_goes_on_in_train_mode():
    data = _data(n=2)
    model = _Mode()
    t = Trainer(model, data, "1ep")
    start = len(t.engine.trace)
    t.eval(data)
    assert [tr.event for tr in t.engine.trace[start:]] == [
        Event.EVAL_START,
        Event.EVAL_BATCH_START,
        Event.EVAL_BATCH_END,
        Event.EVAL_BATCH_START,
        Event.EVAL_BATCH_END,
        Event.EVAL_END,
    ]
    t.fit()
    assert model.modes == [(False, False)] * 2 + [(True, True)] * 2


def test_eval_takes_probability_targets_and_weights_the_loss_by_samples():
    """A soft target's loss is the soft cross entropy; batches of different sizes count by their
    samples; the accuracy counts the outputs whose most likely class is the target's."""
    g = torch.Generator().manual_seed(2)
    data = [(torch.randn(n, 6, generator=g), torch.softmax(3 * torch.randn(n, 3, generator=g), dim=1)) for n in (3, 5)]
    torch.manual_seed(0)  # the model's initial weights: some outputs right and some wrong, whatever ran before
    t = Trainer(torch.nn.Linear(6, 3), data, "1ba")
    got = t.eval(data)
    with torch.no_grad():
        outputs = [t.state.model(x) for x, _ in data]
    losses = [-(p * out.log_softmax(1)).sum(1) for out, (_, p) in zip(outputs, data, strict=True)]
    hits = [(out.argmax(1) == p.argmax(1)) for out, (_, p) in zip(outputs, data, strict=True)]
    assert got["loss"] == pytest.approx(torch.cat(losses).mean().item())
    assert got["accuracy"] == pytest.approx(torch.cat(hits).double().mean().item())
    assert 0 < got["accuracy"] < 1


def test_dict_batches_flow_by_key_to_the_model_and_the_loss():
    """The model is called on batch[input_key] and the loss on batch[target_key], whatever else
    the batch holds (here a second input and a second target of the same shapes)."""
    g = torch.Generator().manual_seed(1)
    data = [
        {
            "other": torch.randn(4, 6, generator=g),
            "x": torch.randn(4, 6, generator=g),
            "y": torch.randint(0, 3, (4,), generator=g),
            "z": torch.randint(0, 3, (4,), generator=g),
        }
        for _ in range(2)
    ]
    model = _DictModel()

    class Losses(Algorithm):
        def __init__(self):
            self.pairs = []

        def match(self, event, state):
            return event is Event.BEFORE_BACKWARD

        def apply(self, event, state, logger=None):
            self.pairs.append((state.outputs.detach(), state.loss.detach()))

    losses = Losses()
    Trainer(model, data, "2ba", input_key="x", target_key="y", algorithms=[losses]).fit()
    for batch, seen, (out, loss) in zip(data, model.seen, losses.pairs, strict=True):
        assert torch.equal(seen, batch["x"])
        torch.testing.assert_close(loss, torch.nn.functional.cross_entropy(out, batch["y"]))


# -- arguments, defaults and the edges of the loop ---------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"precision": "fp8"}, "precision='fp8' is not supported — use one of fp32, fp16, bf16, amp_fp16, amp_bf16"),
        (
            {"max_duration": "0.5dur"},
            "max_duration='0.5dur': give epochs, batches, samples or tokens, e.g. '2ep' or '100ba'",
        ),
        ({"grad_clip_norm": 0}, "grad_clip_norm=0 must be positive"),
        ({"grad_clip_norm": -1.0}, "grad_clip_norm=-1.0 must be positive"),
        (
            {"parallel": "fsdp", "optimizer": "instance"},
            "parallel='fsdp' shards the parameters when it wraps the model: pass optimizer as a function of the "
            "parameters, e.g. lambda params: torch.optim.SGD(params, lr=0.1)",
        ),
    ],
)
def test_bad_arguments_are_refused_before_anything_starts_with_the_whole_message(kwargs, message):
    model = torch.nn.Linear(6, 3)
    if kwargs.get("optimizer") == "instance":
        kwargs["optimizer"] = torch.optim.SGD(model.parameters(), lr=0.1)
    kwargs = {"max_duration": "1ep", **kwargs}
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        Trainer(model, _data(), **kwargs)


def test_the_messages_of_a_loop_without_data():
    with pytest.raises(ValueError, match="^train_dataloader yielded no batches — check the data set$"):
        Trainer(torch.nn.Linear(6, 3), [], "1ep").fit()
    t = Trainer(torch.nn.Linear(6, 3), _data(), "1ep")
    with pytest.raises(
        ValueError,
        match=r"^eval\(\) needs a dataloader: pass one or give the Trainer "
        r"eval_dataloader$",
    ):
        t.eval()
    with pytest.raises(ValueError, match="^the eval dataloader yielded no samples$"):
        t.eval([])


def test_a_wrong_key_names_what_to_pass():
    with pytest.raises(KeyError, match=r"; pass the target_key that names the batch's target\"?$"):
        Trainer(torch.nn.Linear(6, 3), _dict_data(1), "1ba", input_key="input_ids", target_key="y").fit()


def test_a_strategy_object_serves_one_trainer():
    """``parallel=`` takes a strategy object (its mode's own options); bound to one Trainer, it is
    refused by a second with one line, before anything is done."""
    from algorithms.core.strategies import Single

    mode = Single()
    first = Trainer(torch.nn.Linear(6, 3), _data(1), "1ba", parallel=mode)
    assert first.strategy is mode and first.parallel == "single"
    first.fit()
    with pytest.raises(ValueError, match=r"^parallel=Single\(\) already serves another Trainer: give each"):
        Trainer(torch.nn.Linear(6, 3), _data(1), "1ba", parallel=mode)


def test_eval_defaults_to_the_eval_dataloader():
    data = _data(2)
    t = Trainer(torch.nn.Linear(6, 3), _data(1), "1ba", eval_dataloader=data)
    assert t.eval() == t.eval(data)


def test_one_process_is_rank_0_of_1_whatever_the_environment_says(monkeypatch):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    seen = []

    class Where(Algorithm):
        def match(self, event, state):
            return event is Event.INIT

        def apply(self, event, state, logger=None):
            seen.append((state.rank, state.world_size))

    Trainer(torch.nn.Linear(6, 3), _data(1), "1ba", algorithms=[Where()])
    assert seen == [(0, 1)]


def test_at_init_the_optimizer_is_the_one_given_or_none_yet_when_it_is_built_later():
    seen = []

    class Optimizers(Algorithm):
        def match(self, event, state):
            return event is Event.INIT

        def apply(self, event, state, logger=None):
            seen.append(tuple(state.optimizers))

    model = torch.nn.Linear(6, 3)
    given = torch.optim.SGD(model.parameters(), lr=0.1)
    Trainer(model, _data(1), "1ba", optimizer=given, algorithms=[Optimizers()])
    t = Trainer(
        torch.nn.Linear(6, 3), _data(1), "1ba", optimizer=lambda p: torch.optim.Adam(p), algorithms=[Optimizers()]
    )
    Trainer(torch.nn.Linear(6, 3), _data(1), "1ba", algorithms=[Optimizers()])
    assert seen == [(given,), (), ()]
    assert isinstance(t.state.optimizer, torch.optim.Adam)


def test_the_default_optimizer_is_sgd_with_lr_0_01_and_momentum_0_9():
    t = Trainer(torch.nn.Linear(6, 3), _data(1), "1ba")
    (group,) = t.state.optimizer.param_groups
    assert type(t.state.optimizer) is torch.optim.SGD and (group["lr"], group["momentum"]) == (0.01, 0.9)


def test_gradients_are_freed_after_every_step():
    freed = []

    class Grads(Algorithm):
        def match(self, event, state):
            return event is Event.AFTER_TRAIN_BATCH

        def apply(self, event, state, logger=None):
            freed.append(all(p.grad is None for p in state.model.parameters()))

    Trainer(torch.nn.Linear(6, 3), _data(2), "2ba", algorithms=[Grads()]).fit()
    assert freed == [True, True]


def test_a_loader_without_a_length_still_counts_epochs():
    class Stream:
        """Re-iterable, with no ``len``: the epoch ends when the iterator does."""

        def __iter__(self):
            return iter(_data(3))

    count = Count()
    t = Trainer(torch.nn.Linear(6, 3), Stream(), "2ep", algorithms=[count])
    t.fit()
    assert (t.state.timestamp.epoch, t.state.timestamp.batch, count.counts[Event.EPOCH_END]) == (2, 6, 2)


def test_each_epoch_is_logged(caplog):
    with caplog.at_level(logging.INFO, logger="algorithms.core.trainer"):
        Trainer(torch.nn.Linear(6, 3), _data(3), "2ep").fit()
    assert [r.getMessage() for r in caplog.records] == ["epoch 1 done (3 batches)", "epoch 2 done (6 batches)"]


def test_the_engine_gives_algorithms_the_state_and_their_part_of_the_trainers_log():
    logger, calls = MethodLog(), []

    class Seen(Algorithm):
        def match(self, event, state):
            calls.append(("match", state))
            return event is Event.FIT_START

        def apply(self, event, state, logger=None):
            calls.append(("apply", state, logger))

    seen = Seen()
    t = Trainer(torch.nn.Linear(6, 3), _data(1), "1ba", algorithms=[seen], logger=logger)
    t.fit()
    assert t.method_log is logger
    assert all(call[1] is t.state for call in calls)
    [(_, state, given)] = [call for call in calls if call[0] == "apply"]
    assert isinstance(given, AlgorithmLog) and given.algorithm is seen and given.label == "Seen"


def test_fp32_casts_the_model_to_float32():
    t = Trainer(torch.nn.Linear(6, 3).double(), _data(1), "1ba")
    assert {p.dtype for p in t.state.model.parameters()} == {torch.float32}


def test_the_events_run_in_the_documented_order():
    """INIT, FIT_START; per epoch EPOCH_START, the batch events of every batch, EPOCH_END; FIT_END."""
    t = Trainer(torch.nn.Linear(6, 3), _data(2), "2ep")
    t.fit()
    epoch = [Event.EPOCH_START, *Event.batch_events(), *Event.batch_events(), Event.EPOCH_END]
    assert [tr.event for tr in t.engine.trace] == [Event.INIT, Event.FIT_START, *epoch, *epoch, Event.FIT_END]


def test_dp_wraps_the_model_in_data_parallel_and_trains_as_one_device_does_on_the_cpu():
    torch.manual_seed(0)
    single, dp = torch.nn.Linear(6, 3), torch.nn.Linear(6, 3)
    dp.load_state_dict(single.state_dict())
    a = Trainer(single, _data(2), "2ba")
    b = Trainer(dp, _data(2), "2ba", parallel="dp")
    assert isinstance(b.state.model, torch.nn.DataParallel) and b.state.model.module is dp
    a.fit()
    b.fit()
    assert torch.equal(single.weight, dp.weight) and torch.equal(single.bias, dp.bias)


# -- the optimizer hooks SAM and gradient clipping use -------------------------------------------


class _TwoPassOptimizer(torch.optim.SGD):
    """An SGD whose ``first_step(closure)`` records the gradient the Trainer's backward left, moves
    the weights by ``shift``, clears the gradients and calls the closure there."""

    def __init__(self, params, shift):
        super().__init__(params, lr=0.1)
        self.shift, self.first, self.closure_losses = shift, [], []

    def first_step(self, closure):
        params = [p for group in self.param_groups for p in group["params"]]
        self.first.append([p.grad.clone() for p in params])
        with torch.no_grad():
            for p in params:
                p.add_(self.shift)
                p.grad = None
        self.closure_losses.append(closure().detach())
        with torch.no_grad():
            for p in params:
                p.sub_(self.shift)


class _Wrap(Algorithm):
    """Replaces the Trainer-built optimizer at FIT_START, as SAM does; records what the step sees."""

    def __init__(self, shift):
        self.shift, self.opt, self.grads, self.loss = shift, None, [], []

    def match(self, event, state):
        return event in (Event.FIT_START, Event.BEFORE_OPTIMIZER_STEP)

    def apply(self, event, state, logger=None):
        if event is Event.FIT_START:
            self.opt = _TwoPassOptimizer(state.model.parameters(), self.shift)
            state.optimizers = (self.opt,)
        else:
            self.grads.append([p.grad.clone() for p in state.model.parameters()])
            self.loss.append(state.loss.detach())


def test_an_optimizer_with_first_step_gets_the_batch_again_at_the_weights_it_sets():
    """After the backward the Trainer calls first_step with a closure that runs the batch's forward,
    loss and backward at the weights the optimizer set (through the loss pass's events again); the step then sees that
    gradient, and state.loss stays the loss at the weights the batch started from. An optimizer
    an algorithm installs at FIT_START is the one the Trainer steps."""
    torch.manual_seed(0)
    model = torch.nn.Linear(6, 3)
    start = [p.detach().clone() for p in model.parameters()]
    data = _data(n=1)
    wrap, count = _Wrap(shift=0.5), Count()
    Trainer(model, data, "1ba", algorithms=[wrap, count], device="cpu").fit()
    x, y = data[0]

    def grads_at(shift):
        ref = torch.nn.Linear(6, 3)
        with torch.no_grad():
            for p, p0 in zip(ref.parameters(), start, strict=True):
                p.copy_(p0 + shift)
        loss = torch.nn.functional.cross_entropy(ref(x), y)
        loss.backward()
        return loss.detach(), [p.grad for p in ref.parameters()]

    loss0, g0 = grads_at(0.0)
    loss1, g1 = grads_at(0.5)
    for a, b, c, d in zip(wrap.opt.first[0], g0, wrap.grads[0], g1, strict=True):
        torch.testing.assert_close(a, b)
        torch.testing.assert_close(c, d)
    torch.testing.assert_close(wrap.opt.closure_losses[0], loss1)
    torch.testing.assert_close(wrap.loss[0], loss0)
    assert count.counts[Event.BEFORE_FORWARD] == 2  # the closure ran the loss pass's events again
    for p, p0, g in zip(model.parameters(), start, g1, strict=True):  # the wrapper's SGD stepped
        torch.testing.assert_close(p.detach(), p0 - 0.1 * g)


class _StepGrads(Algorithm):
    def __init__(self):
        self.after_backward, self.before_step = [], []

    def match(self, event, state):
        return event in (Event.AFTER_BACKWARD, Event.BEFORE_OPTIMIZER_STEP)

    def apply(self, event, state, logger=None):
        grads = [p.grad.detach().clone() for p in state.model.parameters()]
        (self.after_backward if event is Event.AFTER_BACKWARD else self.before_step).append(grads)


def test_before_optimizer_step_sees_unscaled_gradients_under_amp_fp16_without_clipping():
    """The Trainer unscales before BEFORE_OPTIMIZER_STEP whether or not it clips, so an algorithm
    there (gradient clipping) works on the true gradients; the step is unchanged."""
    probe = _StepGrads()
    model = torch.nn.Linear(6, 3)
    trainer = Trainer(model, _data(n=1), "1ba", precision="amp_fp16", device="cpu", algorithms=[probe])
    scale = trainer.scaler.get_scale()
    trainer.fit()
    assert scale > 1
    for scaled, unscaled in zip(probe.after_backward[0], probe.before_step[0], strict=True):
        torch.testing.assert_close(scaled / scale, unscaled)


def test_eval_leaves_the_models_mode_as_it_found_it_and_state_holds_the_train_loader():
    """An eval mid-run (an algorithm's, or the user's) does not leave the rest of training in eval
    mode: dropout still drops afterwards."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5), torch.nn.Linear(4, 2))
    data = [(torch.randn(8, 4), torch.randint(0, 2, (8,)))]
    trainer = Trainer(model, data, "1ba", device="cpu", seed=0)
    assert trainer.state.train_dataloader is data
    model.train()
    trainer.eval(data)
    assert model.training and all(m.training for m in model.modules())
    model.eval()
    trainer.eval(data)
    assert not model.training


def test_the_trace_keeps_the_latest_events_only(monkeypatch):
    """A long run does not keep an entry per event forever: the trace holds the last TRACE_LIMIT
    events, oldest first, and the older ones are gone."""
    from algorithms.core import engine

    monkeypatch.setattr(engine, "TRACE_LIMIT", 5)
    t = Trainer(torch.nn.Linear(6, 3), _data(2), "2ep")
    t.fit()
    epoch_end = [*Event.batch_events()[-3:], Event.EPOCH_END, Event.FIT_END]
    assert [tr.event for tr in t.engine.trace] == epoch_end
    assert len(Trainer(torch.nn.Linear(6, 3), _data(2), "1ba").engine.trace) == 1  # INIT only


class _Logits(torch.nn.Module):
    """The input is the logits: eval sees exactly the outputs a case gives (a weight of 1 to train)."""

    def __init__(self):
        super().__init__()
        self.one = torch.nn.Parameter(torch.ones(()))

    def forward(self, x):
        return x * self.one


@pytest.mark.parametrize(
    ("outputs", "targets", "classes_dim"),
    [
        ((4, 3), (4,), 1),  # a classifier
        ((4, 3, 5), (4, 5), 1),  # per position, classes on dim 1
        ((4, 5, 7), (4, 5), -1),  # a language model: (N, T, V) for labels (N, T)
        ((4, 6, 6), (4, 6), 1),  # both layouts fit: classes on dim 1, as torch's losses read it
        ((4, 3, 2, 5), (4, 2, 5), 1),  # dense, (N, C, H, W)
        ((4, 2, 5, 3), (4, 2, 5), -1),  # dense, classes last
        ((2, 4, 3), (2, 4, 3), 1),  # class probabilities of the outputs' shape
    ],
)
def test_eval_reads_the_classes_where_the_outputs_hold_them(outputs, targets, classes_dim):
    """Accuracy counts a position right when the largest logit on the classes' dimension is its
    label: dim 1 as torch's losses read it, or the last dim for logits (*labels.shape, V) that do
    not also fit the dim-1 layout."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(outputs, generator=g)
    num_classes = outputs[classes_dim]
    if len(targets) == len(outputs):
        y = torch.softmax(torch.randn(targets, generator=g), dim=1)
        labels = y.argmax(1)
    else:
        y = labels = torch.randint(0, num_classes, targets, generator=g)
    correct = (x.argmax(classes_dim) == labels).double().mean().item()

    def loss(out, target):
        return torch.nn.functional.cross_entropy(out.movedim(-1, 1) if classes_dim == -1 else out, target)

    t = Trainer(_Logits(), [(x, y)], "1ba", loss_fn=loss)
    assert t.eval([(x, y)])["accuracy"] == pytest.approx(correct)
    assert 0 < correct < 1  # a case where reading the wrong dimension would count differently


def test_a_closed_trainer_refuses_to_train_and_still_evaluates():
    data = [(torch.randn(4, 3), torch.randint(0, 2, (4,)))]
    with Trainer(torch.nn.Linear(3, 2), data, "2ba", device="cpu", seed=0) as trainer:
        trainer.fit()  # open inside the block: it trains
        assert trainer.state.timestamp.batch == 2
    with pytest.raises(
        RuntimeError,
        match=r"^fit\(\) after close\(\): this Trainer has released what it trained "
        r"with; build a new Trainer to train more$",
    ):
        trainer.fit()
    assert trainer.state.timestamp.batch == 2
    assert 0.0 <= trainer.eval(data)["accuracy"] <= 1.0
    trainer.close()  # again: nothing to release, no error


def test_close_alone_ends_training_without_a_with_block():
    data = [(torch.randn(4, 3), torch.randint(0, 2, (4,)))]
    trainer = Trainer(torch.nn.Linear(3, 2), data, "1ba", device="cpu", seed=0)
    trainer.close()
    with pytest.raises(RuntimeError, match=r"fit\(\) after close\(\)"):
        trainer.fit()
    assert trainer.state.timestamp.batch == 0


def test_a_warning_from_outside_the_library_names_its_callers_line():
    """Called from outside the package (no frame of the library between): the caller's own line.
    From inside the training loop, tests/methods/test_swa.py checks the user's call into the Trainer."""
    with pytest.warns(DeprecationWarning, match="^direct$") as record:
        line = inspect.currentframe().f_lineno + 1
        warn_from_callers_line("direct", DeprecationWarning)
    assert (record[0].filename, record[0].lineno) == (__file__, line)


def test_a_loss_fn_may_return_a_dict_or_a_tuple_whose_total_is_backpropagated():
    # Composer's rule: a dict's "total", else the sum of its values' means; a tuple's sum of means.
    def data():
        return [(torch.randn(4, 3, generator=torch.Generator().manual_seed(i)), torch.arange(4) % 2) for i in range(3)]

    def run(loss_fn):
        torch.manual_seed(0)
        trainer = Trainer(torch.nn.Linear(3, 2), data(), "1ep", loss_fn=loss_fn, seed=0)
        trainer.fit()
        return [p.detach().clone() for p in trainer.state.model.parameters()], trainer

    def ce(outputs, targets):
        return torch.nn.functional.cross_entropy(outputs, targets)

    def mse(outputs, targets):
        return (outputs**2).mean()

    reference, _ = run(lambda o, t: ce(o, t) + mse(o, t))
    for loss_fn in (
        lambda o, t: {"ce": ce(o, t), "l2": mse(o, t)},
        lambda o, t: {"total": ce(o, t) + mse(o, t), "ce": ce(o, t)},
        lambda o, t: (ce(o, t), mse(o, t)),
    ):
        params, trainer = run(loss_fn)
        assert all(torch.allclose(a, b) for a, b in zip(params, reference, strict=True))
        assert isinstance(trainer.state.loss, torch.Tensor) and trainer.state.loss.ndim == 0
        assert math.isfinite(trainer.eval(data())["loss"])


def test_each_part_of_a_dict_or_tuple_loss_is_kept_and_logged(caplog):
    """state.loss_parts holds each part's mean of the latest batch (a dict's by key, a tuple's by
    position), and the Trainer logs them per batch at DEBUG; a plain tensor has no parts."""
    g = torch.Generator().manual_seed(0)
    data = [(torch.randn(4, 3, generator=g), torch.arange(4) % 2) for _ in range(2)]

    def parts(outputs, targets):
        return {"ce": torch.nn.functional.cross_entropy(outputs, targets), "l2": outputs.pow(2)}

    trainer = Trainer(torch.nn.Linear(3, 2), data, "2ba", loss_fn=parts, seed=0)
    with caplog.at_level(logging.DEBUG, logger="algorithms.core.trainer"):
        trainer.fit()
    state = trainer.state
    assert sorted(state.loss_parts) == ["ce", "l2"] and all(v.ndim == 0 for v in state.loss_parts.values())
    outputs = trainer.state.outputs.detach()
    assert torch.allclose(state.loss_parts["l2"], outputs.float().pow(2).mean())
    assert torch.allclose(state.loss, state.loss_parts["ce"] + state.loss_parts["l2"])
    lines = [r.getMessage() for r in caplog.records if r.name == "algorithms.core.trainer" and "loss" in r.getMessage()]
    assert len(lines) == 2 and lines[0].startswith("batch 0: loss ") and "(ce " in lines[0] and ", l2 " in lines[0]

    pair = Trainer(torch.nn.Linear(3, 2), data, "1ba", loss_fn=lambda o, t: (o.sum(), o.mean()), seed=0)
    pair.fit()
    assert sorted(pair.state.loss_parts) == ["0", "1"]
    plain = Trainer(torch.nn.Linear(3, 2), data, "1ba", seed=0)
    plain.fit()
    assert plain.state.loss_parts == {}


def test_a_loss_fn_returning_something_else_is_a_type_error_saying_what_to_return():
    trainer = Trainer(
        torch.nn.Linear(3, 2), [(torch.randn(4, 3), torch.arange(4) % 2)], "1ep", loss_fn=lambda o, t: 1.0
    )
    with pytest.raises(TypeError, match=r"loss_fn: returned float; return a tensor, a dict of tensors"):
        trainer.fit()
