"""``Loop``: the methods in a training loop the user writes, held to its contract.

- N steps of a loop written with ``Loop`` end at the weights of N batches of the project's
  ``Trainer`` with the same seed, model, optimizer and data (a shuffled ``DataLoader`` with workers),
  bit for bit: the Trainer runs its batches through the same calls.
- What the methods change reaches the user's loop: CutMix's mixed batch is what ``loop.batch``
  returns, label smoothing's target is what ``loop.loss`` uses, surgery's model is ``loop.model``.
- ``with loop.evaluating():`` holds EMA's average inside the block and the training weights after it.
- Samples and tokens are counted as the loader gave them; ``state_dict`` resumes the methods.
- What cannot work is refused with one line: a list of methods the Trainer refuses, a step without
  an optimizer, a state of other methods.
"""

from __future__ import annotations

import multiprocessing

import pytest
import torch
from loop_support import conv_net, image_data, sgd
from torch.utils.data import DataLoader

from algorithms import EMA, SAM, CutMix, LabelSmoothing, MixUp, SqueezeExcite
from algorithms.core import MODEL_LOSS, Event, Loop, Trainer

multiprocessing.set_forkserver_preload(["torch"])  # as test_loop_correctness.py: workers fork from a server


_data = image_data


def _loader(workers=2):
    return DataLoader(
        _data(),
        batch_size=8,
        shuffle=True,
        generator=torch.Generator().manual_seed(1),
        num_workers=workers,
        drop_last=True,
        multiprocessing_context="forkserver" if workers else None,  # as test_loop_correctness.py's (it says why)
    )


_model = conv_net


def _methods():
    """A deterministic list for a given seed: surgery, mixing, smoothing and an average."""
    return [SqueezeExcite(latent_channels=4, min_channels=8), CutMix(alpha=1.0), LabelSmoothing(0.1), EMA("2ba")]


_sgd = sgd


def _trainer_run(duration, methods, workers=2, **options):
    trainer = Trainer(
        _model(), _loader(workers), duration, optimizer=_sgd, algorithms=methods, seed=0, device="cpu", **options
    )
    trainer.fit()
    return trainer


def _own_loop_run(epochs, batches, methods, workers=2, **options):
    """A user's loop: epochs of a DataLoader, each batch through the loop's five calls."""
    loader = _loader(workers)
    duration = f"{epochs}ep" if batches is None else f"{batches}ba"
    loop = Loop(_model(), methods, max_duration=duration, optimizer=_sgd, train_dataloader=loader, seed=0, **options)
    model = loop.model
    model.train()
    for _ in range(epochs):
        for batch in loader:
            loop.batch(batch)
            loop.forward()
            loop.loss()
            loop.backward()
            loop.step()
            if loop.done():
                break
        else:
            loop.epoch_end()
    loop.end()
    return loop


def test_a_loop_of_ones_own_ends_at_the_trainers_weights_bit_for_bit():
    trainer = _trainer_run("2ep", _methods())
    loop = _own_loop_run(2, None, _methods())
    assert loop.timestamp.epoch == trainer.state.timestamp.epoch == 2
    assert loop.timestamp.sample == trainer.state.timestamp.sample == 96
    for (name, a), (_, b) in zip(
        trainer.state.model.state_dict().items(), loop.model.state_dict().items(), strict=True
    ):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)
    ema_trainer, ema_loop = (x.state.algorithms[-1].state_dict() for x in (trainer, loop))
    for key in ema_trainer["ema_weights"]:
        torch.testing.assert_close(ema_trainer["ema_weights"][key], ema_loop["ema_weights"][key], rtol=0, atol=0)
    # every method acted in both, as often
    assert trainer.method_log.summary() == loop.method_log.summary()


def test_sam_through_the_loop_takes_the_trainers_steps():
    """SAM's second gradient runs the loop's forward and loss again from the loaded batch."""
    trainer = _trainer_run("5ba", [SAM(rho=0.05), MixUp(alpha=0.5)], workers=0)
    loop = _own_loop_run(1, 5, [SAM(rho=0.05), MixUp(alpha=0.5)], workers=0)
    for a, b in zip(trainer.state.model.parameters(), loop.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("precision", ["amp_bf16", "amp_fp16"])
def test_mixed_precision_through_the_loop_takes_the_trainers_steps(precision):
    trainer = _trainer_run("2ba", [LabelSmoothing(0.1)], workers=0, precision=precision)
    loop = _own_loop_run(1, 2, [LabelSmoothing(0.1)], workers=0, precision=precision)
    assert loop.state.outputs.dtype == (torch.bfloat16 if precision == "amp_bf16" else torch.float16)
    for a, b in zip(trainer.state.model.parameters(), loop.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_the_batch_the_loop_returns_is_the_batch_the_methods_made():
    """CutMix with alpha so large every image is mixed: ``loop.batch`` returns the mixed images and
    ``loop.loss`` is computed on the mixed target, which is back as the loader's after the loss."""
    x, y = torch.randn(8, 3, 8, 8), torch.arange(8) % 4
    loop = Loop(_model(), [CutMix(alpha=1000.0, interpolate_loss=False)], max_duration="1ba", optimizer=_sgd, seed=0)
    mixed, target = loop.batch((x, y))
    assert not torch.equal(mixed, x)
    outputs = loop.forward()
    torch.testing.assert_close(outputs, loop.model(mixed))
    loss = loop.loss()
    soft = loop.state.loss_target
    assert soft.shape == (8, 4) and soft.is_floating_point()  # the mixed soft target the loss got
    by_hand = -(soft * outputs.float().log_softmax(1)).sum(1).mean()
    torch.testing.assert_close(loss, by_hand)


def test_surgery_changes_the_model_the_loop_gives_and_the_optimizer_holds_its_parameters():
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loop = Loop(model, [SqueezeExcite(latent_channels=4, min_channels=8)], max_duration="1ba", optimizer=optimizer)
    added = [m for m in loop.model.modules() if type(m).__name__ == "SqueezeExcite2d"]
    assert added, "Squeeze-Excite added no block"
    held = {id(p) for group in optimizer.param_groups for p in group["params"]}
    assert {id(p) for p in loop.model.parameters()} == held


def test_evaluating_holds_emas_average_inside_the_block_and_the_training_weights_after():
    loop = _own_loop_run(1, 3, [EMA("1ba")], workers=0)
    training = {k: v.clone() for k, v in loop.model.state_dict().items()}
    average = loop.state.algorithms[0].state_dict()["ema_weights"]
    with loop.evaluating() as model:
        assert not model.training
        inside = {k: v.clone() for k, v in model.state_dict().items()}
    for key, value in average.items():
        torch.testing.assert_close(inside[key], value.to(inside[key].dtype))
    assert any(not torch.equal(inside[k], training[k]) for k in average)
    for key, value in loop.model.state_dict().items():
        assert torch.equal(value, training[key]), key
    assert loop.model.training


def test_evaluating_puts_the_training_weights_back_after_an_error():
    loop = _own_loop_run(1, 3, [EMA("1ba")], workers=0)
    training = {k: v.clone() for k, v in loop.model.state_dict().items()}
    with pytest.raises(RuntimeError, match="an evaluation that fails"), loop.evaluating():
        raise RuntimeError("an evaluation that fails")
    for key, value in loop.model.state_dict().items():
        assert torch.equal(value, training[key]), key


def test_the_first_batch_starts_the_run_and_the_epoch_and_each_event_fires_in_order():
    loop = Loop(torch.nn.Linear(3, 2), [], max_duration="2ba", optimizer=_sgd)
    data = [(torch.randn(4, 3), torch.tensor([0, 1, 0, 1]))] * 2
    for batch in data:
        loop.train_step(batch)
    loop.epoch_end()
    loop.end()
    events = [t.event for t in loop.engine.trace]
    assert events == [
        Event.INIT,
        Event.FIT_START,
        Event.EPOCH_START,
        *Event.batch_events(),
        *Event.batch_events(),
        Event.EPOCH_END,
        Event.FIT_END,
    ]


def test_tokens_and_samples_are_counted_as_the_loader_gave_them():
    class LM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed, self.head = torch.nn.Embedding(10, 8), torch.nn.Linear(8, 10)

        def forward(self, input_ids, labels):
            logits = self.head(self.embed(input_ids))
            return {"logits": logits, "loss": torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten())}

    loop = Loop(LM(), [], max_duration="3ba", optimizer=_sgd, loss_fn=MODEL_LOSS, input_key=None, target_key="labels")
    for _ in range(3):
        ids = torch.randint(0, 10, (2, 5))
        loop.train_step({"input_ids": ids, "labels": ids})
    assert (loop.timestamp.batch, loop.timestamp.sample, loop.timestamp.token) == (3, 6, 30)
    assert loop.done()


def test_a_loop_resumed_from_its_state_dict_draws_what_the_uninterrupted_loop_draws():
    """The methods' generators (CutMix's) and EMA's average come back with ``state_dict``."""
    data = [(torch.randn(8, 3, 8, 8), torch.randint(0, 4, (8,))) for _ in range(6)]

    def run(batches, resume=None):
        model = _model()
        loop = Loop(model, [CutMix(alpha=1.0), EMA("1ba")], max_duration="6ba", optimizer=_sgd, seed=0)
        if resume is not None:
            model.load_state_dict(resume["model"])
            loop.optimizer.load_state_dict(resume["optimizer"])
            loop.load_state_dict(resume["loop"])
        for batch in batches:
            loop.train_step(batch)
        return loop, {"model": model.state_dict(), "optimizer": loop.optimizer.state_dict(), "loop": loop.state_dict()}

    whole, _ = run(data)
    _, saved = run(data[:3])
    resumed, _ = run(data[3:], resume=saved)
    assert resumed.timestamp.batch == 6
    for a, b in zip(whole.model.parameters(), resumed.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    averages = [x.state.algorithms[1].state_dict()["ema_weights"] for x in (whole, resumed)]
    for key in averages[0]:
        torch.testing.assert_close(averages[0][key], averages[1][key], rtol=0, atol=0)


def test_a_state_of_other_methods_is_refused_before_anything_changes():
    loop = Loop(torch.nn.Linear(3, 2), [LabelSmoothing(0.1)], max_duration="1ba", optimizer=_sgd)
    other = Loop(torch.nn.Linear(3, 2), [EMA("1ba")], max_duration="1ba", optimizer=_sgd).state_dict()
    other["timestamp"]["batch"] = 7
    with pytest.raises(ValueError, match=r"holds methods \['EMA'\], this loop runs \['LabelSmoothing'\]"):
        loop.load_state_dict(other)
    assert loop.timestamp.batch == 0


def test_a_step_without_an_optimizer_says_how_to_give_one():
    loop = Loop(torch.nn.Linear(3, 2), [], max_duration="1ba")
    loop.batch((torch.randn(2, 3), torch.tensor([0, 1])))
    loop.forward()
    loop.loss()
    loop.backward()
    with pytest.raises(RuntimeError, match=r"Loop\(optimizer=\.\.\.\) or set loop.optimizer"):
        loop.step()
    loop.optimizer = torch.optim.SGD(loop.model.parameters(), lr=0.1)
    loop.step()
    assert loop.timestamp.batch == 1


@pytest.mark.parametrize(
    ("methods", "options", "message"),
    [
        ([CutMix(interpolate_loss=True), MixUp(interpolate_loss=True)], {}, "two methods interpolate the loss"),
        ([EMA(), __import__("algorithms").SWA()], {}, "EMA and SWA"),
        ([LabelSmoothing(0.1)], {"loss_fn": MODEL_LOSS}, "LabelSmoothing with loss_fn='model'"),
        ([], {"loss_fn": "mse"}, "loss_fn='mse': pass a function"),
        ([], {"max_duration": "0.5dur"}, "give epochs, batches, samples or tokens"),
    ],
    ids=["two-interpolations", "ema-swa", "smoothing-model-loss", "loss-name", "fractional-duration"],
)
def test_what_the_trainer_refuses_the_loop_refuses_with_the_same_line(methods, options, message):
    options = {"max_duration": "1ba", **options}
    with pytest.raises(ValueError, match=message):
        Loop(torch.nn.Linear(3, 2), methods, **options)


def test_a_custom_backward_and_step_are_the_ones_called():
    calls = []
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loop = Loop(model, [], max_duration="1ba", optimizer=optimizer)

    def backward(loss):
        calls.append("backward")
        loss.backward()

    def step():
        calls.append("step")
        optimizer.step()
        optimizer.zero_grad()

    before = model.weight.detach().clone()
    loop.train_step((torch.randn(4, 3), torch.tensor([0, 1, 0, 1])), backward=backward, step=step)
    assert calls == ["backward", "step"]
    assert not torch.equal(before, model.weight) and model.weight.grad is None


def test_the_loop_reads_no_metadata():
    """The loop and the Trainer import nothing that reads the workloads' or methods' JSON: the
    names of models and data sets live with them (``algorithms.models.names``, ``algorithms.data.names``)."""
    import subprocess
    import sys

    code = (
        "import sys, torch; from algorithms.core import Loop, Trainer; from algorithms import EMA, CutMix; "
        "loop = Loop(torch.nn.Linear(2, 2), [CutMix(), EMA()], max_duration='1ba'); "
        "print(sorted(m for m in sys.modules if m == 'algorithms.metadata' or m.endswith('.names')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout
