"""The Trainer's loop as users run it: real DataLoaders (sequential and shuffled, with and without
workers), methods that change the loss together with SAM, two methods of one class, schedulers of
each kind, an error during evaluation, and models that return dicts or output objects.

Each test states the contract it holds the loop to; each failed on the loop before it was fixed.
"""

from __future__ import annotations

import dataclasses
import multiprocessing

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from algorithms import EMA, SAM, SWA, CutMix, LabelSmoothing, MixUp
from algorithms.core import Algorithm, Event, Trainer


def _dataset(n=40, features=6, classes=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(n, features, generator=g), torch.randint(0, classes, (n,), generator=g))


def _dropout_model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Dropout(0.3), torch.nn.Linear(16, 3))


#: How the loaders' workers start: from a fork server, Python 3.14's default on Linux. Forked from
#: the test process itself, after about a hundred tests have run DeepSpeed, Accelerate and gloo in
#: it, a worker segfaulted indexing its TensorDataset (torch 2.13, AMD EPYC, with transformers and
#: lightning installed beside them); alone, the same tests pass with forked workers.
WORKERS_START = "forkserver"
multiprocessing.set_forkserver_preload(["torch"])  # each worker forks from a server that imported torch once


def _loader(shuffle, workers, seed=0):
    generator = torch.Generator().manual_seed(seed) if shuffle == "seeded" else None
    return DataLoader(
        _dataset(),
        batch_size=8,
        shuffle=bool(shuffle),
        generator=generator,
        num_workers=workers,
        drop_last=False,
        multiprocessing_context=WORKERS_START if workers else None,
    )


# -- resume with a DataLoader -----------------------------------------------------------------------


@pytest.mark.parametrize("workers", [0, 2], ids=["no-workers", "2-workers"])
@pytest.mark.parametrize("shuffle", [False, "seeded", "global"], ids=["sequential", "seeded-shuffle", "torch-shuffle"])
@pytest.mark.parametrize("first", ["3ba", "5ba", "7ba"], ids=["mid-epoch", "epoch-end", "second-epoch"])
def test_a_run_resumed_from_a_dataloader_ends_where_the_uninterrupted_run_does(first, shuffle, workers, tmp_path):
    """The model draws dropout masks from torch's global generator, and ``iter(loader)`` draws its
    shuffling (unless the loader has its own generator) and its workers' seeds from it too. A
    resumed run restarts the interrupted epoch's loader from the generators that epoch's loader
    started from and puts the checkpoint's generators back just before its first batch, so it ends
    at the uninterrupted run's weights, bit for bit, with every kind of loader."""
    uninterrupted = Trainer(_dropout_model(), _loader(shuffle, workers), "2ep", seed=0, device="cpu")
    uninterrupted.fit()
    interrupted = Trainer(_dropout_model(), _loader(shuffle, workers), first, seed=0, device="cpu")
    interrupted.fit()
    path = interrupted.save_checkpoint(tmp_path / "run.ckpt")
    torch.randn(100)  # the process's generator moves on; the checkpoint decides what comes next
    resumed = Trainer(_dropout_model(seed=1), _loader(shuffle, workers), "2ep", seed=0, device="cpu", load_path=path)
    resumed.fit()
    assert resumed.state.timestamp == uninterrupted.state.timestamp
    expected = uninterrupted.state.model.state_dict()
    for name, value in resumed.state.model.state_dict().items():
        assert torch.equal(value, expected[name]), name


class _Stream(IterableDataset):
    """An unsized loader's data: 5 batches of 8 rows an epoch, as a stream without ``len()``."""

    def __iter__(self):
        data = _dataset()
        return iter(zip(data.tensors[0].split(8), data.tensors[1].split(8), strict=True))


class _Epochs(Algorithm):
    def __init__(self):
        self.ends = []

    def match(self, event, state):
        return event is Event.EPOCH_END

    def apply(self, event, state, logger=None):
        self.ends.append(state.timestamp.batch)


def test_an_unsized_loader_cut_off_by_a_batch_count_leaves_its_epoch_open(tmp_path):
    """A loader without ``len()`` ends its epoch only when it is exhausted: stopped after 3 of its 5
    batches by ``max_duration``, no EPOCH_END runs and the epoch is not counted, so a resumed run
    goes on with the epoch's 4th batch and ends where the uninterrupted run does."""
    stream = DataLoader(_Stream(), batch_size=None)
    epochs = _Epochs()
    interrupted = Trainer(_dropout_model(), stream, "3ba", seed=0, device="cpu", algorithms=[epochs])
    interrupted.fit()
    assert epochs.ends == [] and interrupted.state.timestamp.epoch == 0
    assert interrupted.state.timestamp.batch_in_epoch == 3
    path = interrupted.save_checkpoint(tmp_path / "run.ckpt")
    resumed_epochs = _Epochs()
    resumed = Trainer(
        _dropout_model(), stream, "7ba", seed=0, device="cpu", algorithms=[resumed_epochs], load_path=path
    )
    resumed.fit()
    whole_epochs = _Epochs()
    whole = Trainer(_dropout_model(), stream, "7ba", seed=0, device="cpu", algorithms=[whole_epochs])
    whole.fit()
    assert resumed_epochs.ends == whole_epochs.ends == [5]
    assert resumed.state.timestamp == whole.state.timestamp
    for a, b in zip(resumed.state.model.parameters(), whole.state.model.parameters(), strict=True):
        assert torch.equal(a, b)


# -- samples are counted before the methods change the batch ------------------------------------------


def test_samples_are_the_loaders_not_what_selective_backprop_kept():
    """``'32sp'`` with batches of 8 is 4 batches, whatever a method does to the batch afterwards
    (Selective Backprop keeping half of each batch trained 8 batches before)."""
    from algorithms import SelectiveBackprop

    trainer = Trainer(
        _dropout_model(),
        _loader(False, 0),
        "32sp",
        seed=0,
        device="cpu",
        algorithms=[SelectiveBackprop(start=0.0, end=1.0, keep=0.5, interrupt=0)],
    )
    trainer.fit()
    assert trainer.method_log.records["SelectiveBackprop"]["activity"]["batches_selected"] > 0  # it did cut them
    assert (trainer.state.timestamp.batch, trainer.state.timestamp.sample) == (4, 32)


# -- methods unwind in reverse order ------------------------------------------------------------------


def test_two_emas_leave_the_training_weights_in_the_model_after_evaluation():
    """Each EMA swaps its average in at EVAL_START and back out at EVAL_END. Run last-in first-out at
    EVAL_END, the second swaps out before the first, so the model holds its training weights again
    (in list order the model kept one EMA's average and the other EMA the training weights)."""
    first, second = EMA(half_life="2ba"), EMA(half_life="5ba")
    trainer = Trainer(_dropout_model(), _loader(False, 0), "1ep", seed=0, device="cpu", algorithms=[first, second])
    trainer.fit()
    training = {k: v.clone() for k, v in trainer.state.model.state_dict().items()}
    trainer.eval(_loader(False, 0))
    for name, value in trainer.state.model.state_dict().items():
        assert torch.equal(value, training[name]), name
    assert not torch.equal(first.ema_model.state_dict()["0.weight"], second.ema_model.state_dict()["0.weight"])


class _TargetAt(Algorithm):
    def __init__(self, event):
        self.event, self.seen = event, []

    def match(self, event, state):
        return event is self.event

    def apply(self, event, state, logger=None):
        self.seen.append(state.batch[1])


def test_two_label_smoothings_give_the_loader_target_back_after_the_loss():
    """Each LabelSmoothing smooths at BEFORE_LOSS and restores what it found at AFTER_LOSS; last-in
    first-out, the batch holds the loader's class indices again at BATCH_END."""
    data = list(_loader(False, 0))
    seen = _TargetAt(Event.BATCH_END)
    Trainer(
        _dropout_model(), data, "2ba", seed=0, device="cpu", algorithms=[LabelSmoothing(0.1), LabelSmoothing(0.2), seen]
    ).fit()
    for target, (_, y) in zip(seen.seen, data, strict=False):
        assert torch.equal(target, y)


@pytest.mark.parametrize(
    "algorithms",
    [lambda: [MixUp(interpolate_loss=True), CutMix(interpolate_loss=True)], lambda: [EMA(), SWA()]],
    ids=["two-interpolated-losses", "ema-and-swa"],
)
def test_a_list_that_cannot_be_correct_is_refused_before_anything_is_done(algorithms):
    model = _dropout_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match=r"^algorithms \[.*\]: .*use one"):
        Trainer(model, _loader(False, 0), "1ep", seed=0, device="cpu", algorithms=algorithms())
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


# -- SAM's second pass runs the methods' loss path ----------------------------------------------------


def _final_weights(algorithms, seed=0):
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(48, 4))
    torch.manual_seed(3)
    model.apply(lambda m: m.reset_parameters() if isinstance(m, torch.nn.Linear) else None)
    g = torch.Generator().manual_seed(seed)
    batches = [(torch.randn(8, 3, 4, 4, generator=g), torch.randint(0, 4, (8,), generator=g)) for _ in range(4)]
    trainer = Trainer(model, batches, "4ba", seed=seed, device="cpu", algorithms=algorithms)
    trainer.fit()
    return [p.detach() for p in trainer.state.model.parameters()]


@pytest.mark.parametrize(
    "method",
    [
        lambda: MixUp(alpha=1.0, interpolate_loss=True),
        lambda: MixUp(alpha=1.0, interpolate_loss=False),
        lambda: CutMix(alpha=1.0, interpolate_loss=True),
        lambda: CutMix(alpha=1.0, interpolate_loss=False),
        lambda: LabelSmoothing(0.2),
    ],
    ids=["mixup-interpolated", "mixup-targets", "cutmix-interpolated", "cutmix-targets", "label-smoothing"],
)
@pytest.mark.parametrize("sam_first", [True, False], ids=["sam-first", "sam-last"])
def test_sam_with_rho_0_takes_the_steps_of_the_run_without_sam(method, sam_first):
    """``SAM(rho=0)`` takes its second gradient at the weights themselves, through the same loss path
    (the methods' BEFORE_LOSS and AFTER_LOSS), so it steps as the run without SAM does, with every
    method that changes the loss, listed before or after it (its second pass used to recompute the
    loss on the unmixed labels: 0.07 off after a few steps)."""
    with_sam = [SAM(rho=0.0), method()] if sam_first else [method(), SAM(rho=0.0)]
    for a, b in zip(_final_weights(with_sam), _final_weights([method()]), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_sam_counts_each_batch_of_a_loss_method_once():
    """The second pass runs the events unlogged: Label Smoothing's counter is the batches trained."""
    model = torch.nn.Linear(6, 3)
    trainer = Trainer(model, _loader(False, 0), "3ba", seed=0, device="cpu", algorithms=[SAM(), LabelSmoothing(0.1)])
    trainer.fit()
    assert trainer.method_log.records["LabelSmoothing"]["activity"]["batches_smoothed"] == 3


# -- schedulers -----------------------------------------------------------------------------------


def test_an_epoch_scheduler_steps_once_an_epoch_when_asked():
    """``StepLR(step_size=1, gamma=0.5)`` over 2 epochs halves the rate twice with
    ``step_schedulers_every_batch=False`` (per batch, 10 steps, it ended at 2.4e-05 from 0.1)."""
    model = torch.nn.Linear(6, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    Trainer(
        model,
        _loader(False, 0),
        "2ep",
        optimizer=optimizer,
        schedulers=[scheduler],
        step_schedulers_every_batch=False,
        device="cpu",
    ).fit()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.025)


def test_reduce_lr_on_plateau_is_refused_with_one_line_before_anything_is_done():
    model = torch.nn.Linear(6, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    before = model.weight.detach().clone()
    with pytest.raises(ValueError, match=r"^schedulers: ReduceLROnPlateau .*scheduler\.step\(trainer\.eval"):
        Trainer(
            model,
            _loader(False, 0),
            "1ep",
            optimizer=optimizer,
            schedulers=[torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)],
        )
    assert torch.equal(model.weight, before)


# -- evaluation that fails ---------------------------------------------------------------------------


class _FailsInEval(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(6, 3)

    def forward(self, x):
        if not self.training:
            raise RuntimeError("broken evaluation")
        return self.linear(x)


def test_an_error_during_evaluation_puts_the_training_weights_and_mode_back():
    """EMA swaps its average in at EVAL_START; an error inside ``eval()`` still runs EVAL_END, so the
    model holds its training weights and is back in training mode when the error reaches the user."""
    ema = EMA(half_life="2ba")
    trainer = Trainer(_FailsInEval(), _loader(False, 0), "1ep", seed=0, device="cpu", algorithms=[ema])
    trainer.fit()
    training = {k: v.clone() for k, v in trainer.state.model.state_dict().items()}
    with pytest.raises(RuntimeError, match="broken evaluation"):
        trainer.eval(_loader(False, 0))
    assert trainer.state.model.training
    assert all(torch.equal(v, training[k]) for k, v in trainer.state.model.state_dict().items())


# -- what a model returns ------------------------------------------------------------------------------


@dataclasses.dataclass
class _Output:  # the shape of a Hugging Face ModelOutput: the logits as an attribute
    logits: torch.Tensor
    hidden: torch.Tensor | None = None


class _Returns(torch.nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.kind = kind
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(6, 3)

    def forward(self, x):
        logits = self.linear(x)
        if self.kind == "dict":
            return {"logits": logits, "hidden": x}
        if self.kind == "object":
            return _Output(logits, x)
        return logits


@pytest.mark.parametrize("kind", ["dict", "object"])
def test_a_model_returning_a_dict_or_an_output_object_trains_and_evaluates_as_one_returning_logits(kind):
    def run(kind):
        trainer = Trainer(_Returns(kind), _loader(False, 0), "1ep", seed=0, device="cpu")
        trainer.fit()
        return trainer.state.model.linear.weight.detach(), trainer.eval(_loader(False, 0))

    weights, metrics = run(kind)
    expected_weights, expected_metrics = run("tensor")
    assert torch.equal(weights, expected_weights) and metrics == expected_metrics


def test_a_model_returning_something_else_gets_one_line_that_says_what_to_return():
    class Pair(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(6, 3)

        def forward(self, x):
            return [self.linear(x)]

    with pytest.raises(TypeError, match=r"^the model returned a list: return a tensor of logits, a dict with"):
        Trainer(Pair(), _loader(False, 0), "1ba", device="cpu").fit()


# -- refusals by parallel mode -----------------------------------------------------------------------


class _NotUnderFSDP(Algorithm):
    unsupported_parallel = {"fsdp": "it keeps a copy of the model; use it under ddp"}

    def match(self, event, state):
        return False

    def apply(self, event, state, logger=None):
        raise AssertionError("never runs")


def test_a_method_a_parallel_mode_cannot_run_is_refused_before_the_mode_starts():
    """Refused with its reason before any process group or wrapping: no torchrun is needed to see it."""
    with pytest.raises(ValueError, match=r"^_NotUnderFSDP under parallel='fsdp': it keeps a copy"):
        Trainer(torch.nn.Linear(6, 3), _loader(False, 0), "1ep", parallel="fsdp", algorithms=[_NotUnderFSDP()])


@pytest.mark.parametrize("cls", [EMA, SWA])
def test_an_averaging_method_is_refused_under_fsdp_before_the_mode_starts(cls):
    """EMA and SWA keep a copy of the model, which FSDP's sharded model cannot give (it failed at the
    first BATCH_END with torch's "FSDP does not support deepcopy")."""
    with pytest.raises(ValueError, match=rf"^{cls.__name__} under parallel='fsdp': "):
        Trainer(torch.nn.Linear(6, 3), _loader(False, 0), "1ep", parallel="fsdp", algorithms=[cls()])


class _ComputesItsLoss(torch.nn.Module):
    """A Hugging Face-style model: called with keyword inputs, it returns logits and, given labels, its loss."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(6, 3)

    def forward(self, features, mask, labels=None):
        logits = self.linear(features * mask)
        loss = None if labels is None else torch.nn.functional.cross_entropy(logits, labels) * 2
        return _Output(logits) if loss is None else {"logits": logits, "loss": loss}


def _dict_loader():
    data = _dataset()
    rows = [
        {"features": x, "mask": torch.ones(6), "labels": y}
        for x, y in zip(data.tensors[0], data.tensors[1], strict=True)
    ]
    return DataLoader(rows, batch_size=8)


def test_the_loss_a_model_computes_is_trained_on_with_loss_fn_model():
    """``loss_fn="model"`` with ``input_key=None``: the model gets the whole dict batch as keywords and
    its own loss (twice the cross entropy here) is what the Trainer backpropagates and evaluates."""
    trainer = Trainer(_ComputesItsLoss(), _dict_loader(), "1ep", loss_fn="model", input_key=None, target_key="labels")
    trainer.fit()
    reference = _ComputesItsLoss()
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.01, momentum=0.9)
    for batch in _dict_loader():
        optimizer.zero_grad()
        (2 * torch.nn.functional.cross_entropy(reference.linear(batch["features"]), batch["labels"])).backward()
        optimizer.step()
    torch.testing.assert_close(trainer.state.model.linear.weight, reference.linear.weight)
    assert trainer.state.timestamp.sample == 40
    features = torch.cat([b["features"] for b in _dict_loader()])
    labels = torch.cat([b["labels"] for b in _dict_loader()])
    expected = 2 * torch.nn.functional.cross_entropy(reference.linear(features), labels).item()
    assert trainer.eval(_dict_loader())["loss"] == pytest.approx(expected, rel=1e-5)


def test_a_method_that_changes_the_loss_is_refused_with_the_models_own_loss():
    with pytest.raises(ValueError, match=r"^LabelSmoothing with loss_fn='model': .*pass a loss_fn$"):
        Trainer(
            _ComputesItsLoss(),
            _dict_loader(),
            "1ep",
            loss_fn="model",
            input_key=None,
            target_key="labels",
            algorithms=[LabelSmoothing(0.1, target_key="labels")],
        )


# -- tokens ------------------------------------------------------------------------------------------


def test_tokens_are_the_loaders_input_ids_counted_before_a_method_shortens_them():
    """A language model's batches of 4 sequences of 32 token ids are 128 tokens each: ``'256tok'`` is
    2 batches, and Sequence Length Warmup cutting the sequences it trains on does not change the count."""
    from algorithms import SeqLengthWarmup
    from algorithms.models import lm_loss, transformer_tiny

    g = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(4):
        ids = torch.randint(0, 50, (4, 33), generator=g)
        batches.append({"input_ids": ids[:, :-1], "labels": ids[:, 1:]})
    warmup = SeqLengthWarmup(duration=1.0, min_seq_length=8, max_seq_length=32, step_size=8)
    trainer = Trainer(
        transformer_tiny(vocab_size=50),
        batches,
        "256tok",
        loss_fn=lm_loss,
        input_key="input_ids",
        target_key="labels",
        algorithms=[warmup],
        seed=0,
        device="cpu",
    )
    trainer.fit()
    assert (trainer.state.timestamp.batch, trainer.state.timestamp.token) == (2, 256)
    assert trainer.method_log.acted("SeqLengthWarmup")
