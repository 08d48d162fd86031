"""``algorithms.integrations.lightning``: the methods in a real Lightning run, held to the Trainer.

- With the same seed, model, SGD optimizer and batches, a ``lightning.Trainer`` with
  :class:`MethodsCallback` ends at the project's Trainer's weights and EMA average, bit for bit,
  for surgery, CutMix, label smoothing and EMA together, and for the CutMix + EMA of the issue.
- Lightning's validation sees EMA's average; the training weights are back after it.
- A Lightning checkpoint holds the methods' state: ``fit(ckpt_path=...)`` ends where an
  uninterrupted run ends.
- What cannot work is refused with one line: SAM, gradient accumulation, a loss-changing method
  with a module whose training step does not compute the loss through the methods.
- The example ``examples/own_loop/lightning_loop.py`` runs.
"""

from __future__ import annotations

import functools
import runpy
from pathlib import Path

import pytest

pytest.importorskip(
    "lightning", reason="the Lightning adapter needs lightning (pip install 'methods-library[lightning]')"
)

import lightning as L  # noqa: E402
import torch  # noqa: E402
from loop_support import conv_net, image_data, sgd  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from algorithms import EMA, SAM, CutMix, LabelSmoothing, SqueezeExcite  # noqa: E402
from algorithms.core import Trainer  # noqa: E402
from algorithms.integrations.lightning import MethodsCallback, MethodsModule  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "own_loop" / "lightning_loop.py"
STEPS = 12  # two epochs of six batches


def _loader(n=48):
    return DataLoader(image_data(n), batch_size=8, shuffle=False)


_net = conv_net


_sgd = sgd


METHODS = {
    "surgery+cutmix+smoothing+ema": lambda: [
        SqueezeExcite(latent_channels=4, min_channels=8),
        CutMix(alpha=1.0),
        LabelSmoothing(0.1),
        EMA("2ba"),
    ],
    "cutmix+ema": lambda: [CutMix(alpha=1.0), EMA("2ba")],
}


class Net(MethodsModule):
    """The network, its optimizer, and what each validation saw."""

    def __init__(self):
        super().__init__()
        self.net = _net()
        self.seen: list[dict[str, torch.Tensor]] = []  # the weights at each validation's first batch

    def forward(self, x):
        return self.net(x)

    def validation_step(self, batch, batch_idx):
        if batch_idx == 0:
            self.seen.append({k: v.detach().clone() for k, v in self.net.state_dict().items()})

    def configure_optimizers(self):
        return _sgd(self.parameters())


class PlainNet(L.LightningModule):
    """A LightningModule that computes its own loss (not a MethodsModule)."""

    def __init__(self):
        super().__init__()
        self.net = _net()

    def training_step(self, batch, batch_idx):
        return torch.nn.functional.cross_entropy(self.net(batch[0]), batch[1])

    def configure_optimizers(self):
        return _sgd(self.parameters())


def _lightning(steps=STEPS, **options):
    options = {
        "accelerator": "cpu",
        "devices": 1,
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "num_sanity_val_steps": 0,
        "max_steps": steps,
        **options,
    }
    return L.Trainer(**options)


def _lightning_run(methods, steps=STEPS, module=Net, val=True, ckpt_path=None, **options):
    callback = MethodsCallback(methods, seed=0)
    model = module()
    _lightning(steps, callbacks=[callback], **options).fit(
        model, _loader(), _loader(16) if val else None, ckpt_path=ckpt_path
    )
    return model, callback


@functools.cache
def _trainer_run(name, steps=STEPS):
    trainer = Trainer(_net(), _loader(), f"{steps}ba", optimizer=_sgd, algorithms=METHODS[name](), seed=0, device="cpu")
    trainer.fit()
    return trainer


def _assert_same_weights(trainer_model, lightning_net):
    ours, theirs = trainer_model.state_dict(), lightning_net.state_dict()
    assert list(ours) == list(theirs)
    for name in ours:
        torch.testing.assert_close(theirs[name], ours[name], rtol=0, atol=0, msg=name)


def _ema_weights(algorithms):
    ema = next(a for a in algorithms if isinstance(a, EMA))
    return {k.removeprefix("net."): v for k, v in ema.state_dict()["ema_weights"].items()}


@pytest.mark.parametrize("name", sorted(METHODS))
def test_a_lightning_run_ends_at_the_trainers_weights_and_validates_the_ema_average(name):
    trainer = _trainer_run(name)
    model, callback = _lightning_run(METHODS[name]())
    _assert_same_weights(trainer.state.model, model.net)
    average = _ema_weights(callback.loop.state.algorithms)
    for key, value in _ema_weights(trainer.state.algorithms).items():
        torch.testing.assert_close(average[key], value, rtol=0, atol=0, msg=key)
    # Lightning validated after each epoch: the EMA average, not the training weights
    assert len(model.seen) == 2
    for key, value in model.seen[-1].items():
        torch.testing.assert_close(value, average[key].to(value.dtype), rtol=0, atol=0, msg=key)
    assert any(not torch.equal(model.seen[-1][k], v) for k, v in model.net.state_dict().items())
    # the methods acted, as often as in the Trainer (Lightning's validations averaged twice more)
    assert callback.loop.timestamp.batch == STEPS and callback.loop.timestamp.epoch == 2
    lightning_log, trainer_log = callback.method_log.records, trainer.method_log.records
    for label, record in trainer_log.items():
        assert callback.method_log.acted(label), label
        activity = dict(lightning_log[label]["activity"])
        if "evaluations_averaged" in activity:
            assert activity.pop("evaluations_averaged") == 2
            activity["evaluations_averaged"] = record["activity"]["evaluations_averaged"]
        assert activity == record["activity"], label
    if name.startswith("surgery"):
        assert any(type(m).__name__ == "SqueezeExcite2d" for m in model.modules())


def test_a_lightning_checkpoint_resumes_the_methods(tmp_path):
    """One epoch, a Lightning checkpoint, a fresh module and callback resumed to two: the
    uninterrupted run's weights and EMA average (the methods' generators and the average came back).
    The first run stops at its epoch's end (``max_epochs``): Lightning resumes a run stopped by
    ``max_steps`` as one stopped mid-epoch, with a batch more from a restarted loader."""
    name = "surgery+cutmix+smoothing+ema"
    first, callback = _lightning_run(METHODS[name](), steps=-1, val=False, max_epochs=1)
    path = tmp_path / "methods.ckpt"
    first.trainer.save_checkpoint(path)
    saved = torch.load(path, weights_only=False)["callbacks"]["MethodsCallback"]
    assert saved["timestamp"]["batch"] == 6 and saved["algorithms"][-1]["state"]["ema_weights"]
    model, resumed = _lightning_run(METHODS[name](), steps=-1, val=False, max_epochs=2, ckpt_path=path)
    trainer = _trainer_run(name)
    _assert_same_weights(trainer.state.model, model.net)
    average = _ema_weights(resumed.loop.state.algorithms)
    for key, value in _ema_weights(trainer.state.algorithms).items():
        torch.testing.assert_close(average[key], value, rtol=0, atol=0, msg=key)
    assert resumed.loop.timestamp.batch == STEPS and resumed.loop.timestamp.epoch == 2


def test_validate_after_fit_sees_the_average_and_gives_the_training_weights_back():
    model, callback = _lightning_run([EMA("2ba")], steps=6, val=False)
    training = {k: v.clone() for k, v in model.net.state_dict().items()}
    model.trainer.validate(model, _loader(16), verbose=False)
    average = _ema_weights(callback.loop.state.algorithms)
    for key, value in model.seen[-1].items():
        torch.testing.assert_close(value, average[key].to(value.dtype), rtol=0, atol=0, msg=key)
    for key, value in model.net.state_dict().items():
        torch.testing.assert_close(value, training[key], rtol=0, atol=0, msg=key)


def test_a_plain_lightning_module_takes_the_methods_that_leave_the_batch_and_loss_alone():
    model, callback = _lightning_run([SqueezeExcite(latent_channels=4, min_channels=8), EMA("1ba")], 4, PlainNet, False)
    assert callback.method_log.acted("SqueezeExcite") and callback.method_log.acted("EMA")
    assert callback.loop.timestamp.batch == 4 and callback.loop.timestamp.sample == 32


def test_what_cannot_work_is_refused_with_one_line():
    with pytest.raises(ValueError, match="SAM under Lightning"):
        MethodsCallback([SAM(rho=0.05)])
    with pytest.raises(ValueError, match="derive it from MethodsModule"):
        _lightning_run([LabelSmoothing(0.1)], 1, PlainNet, False)
    with pytest.raises(ValueError, match="accumulate_grad_batches=2"):
        _lightning_run([EMA("1ba")], 1, val=False, accumulate_grad_batches=2)

    class OwnLoss(Net):
        def training_step(self, batch, batch_idx):
            return torch.nn.functional.cross_entropy(self(batch[0]), batch[1])

    with pytest.raises(RuntimeError, match=r"self\.methods\.loss\(\)"):
        _lightning_run([LabelSmoothing(0.1)], 1, OwnLoss, False)


def test_the_lightning_example_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", [str(EXAMPLE), "--epochs", "1"])
    runpy.run_path(str(EXAMPLE), run_name="__main__")
    assert (tmp_path / "lightning_loop.ckpt").is_file()
