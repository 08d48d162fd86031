"""CutMix, label smoothing and EMA in a Lightning run: the EMA average validated and checkpointed.

    pip install 'methods-library[lightning]' scikit-learn
    python examples/own_loop/lightning_loop.py [--epochs 3]

A small CNN learns scikit-learn's bundled 8x8 digits on the CPU in a few seconds. The
:class:`~algorithms.integrations.lightning.MethodsCallback` runs the methods at Lightning's hooks;
the module derives from :class:`~algorithms.integrations.lightning.MethodsModule`, so its
training batches are CutMix's mixed ones and its loss is taken on their label-smoothed mixed target.
Lightning's validation sees EMA's average. The checkpoint holds the model's training weights and,
in the callback's state, the average: a fresh module validated from it sees the same average.
"""

from __future__ import annotations

import argparse
import time

import lightning as L
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, TensorDataset

from algorithms import EMA, CutMix, LabelSmoothing
from algorithms.integrations.lightning import MethodsCallback, MethodsModule

CHECKPOINT = "lightning_loop.ckpt"


def digits() -> tuple[DataLoader, DataLoader]:
    """The digits as (1, 8, 8) images in [0, 1]: a training and a validation loader."""
    images, labels = load_digits(return_X_y=True)
    x = torch.tensor(images, dtype=torch.float32).reshape(-1, 1, 8, 8) / 16
    y = torch.tensor(labels)
    train, val = TensorDataset(x[:1500], y[:1500]), TensorDataset(x[1500:], y[1500:])
    shuffled = torch.Generator().manual_seed(0)
    return DataLoader(train, batch_size=50, shuffle=True, generator=shuffled), DataLoader(val, batch_size=100)


class DigitsNet(MethodsModule):
    """Its ``training_step`` is MethodsModule's: ``self.methods.forward()``, ``self.methods.loss()``."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Conv2d(1, 32, 3, padding=1),
            torch.nn.BatchNorm2d(32),
            torch.nn.ReLU(),
            torch.nn.MaxPool2d(2),
            torch.nn.Flatten(),
            torch.nn.Linear(32 * 4 * 4, 10),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y))
        self.log("val_acc", (logits.argmax(1) == y).float().mean())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


@torch.no_grad()
def accuracy(model: torch.nn.Module, loader: DataLoader) -> float:
    model.eval()
    right = sum(int((model(x).argmax(1) == y).sum()) for x, y in loader)
    model.train()
    return right / len(loader.dataset)


def trainer(**options: object) -> L.Trainer:
    quiet = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False}
    return L.Trainer(accelerator="cpu", devices=1, enable_checkpointing=False, **quiet, **options)


def main(epochs: int = 3) -> None:
    L.seed_everything(0, verbose=False)
    train, val = digits()
    methods = MethodsCallback([CutMix(alpha=1.0), LabelSmoothing(0.1), EMA(half_life="5ba")], seed=0)
    model = DigitsNet()
    fit = trainer(max_epochs=epochs, callbacks=[methods], num_sanity_val_steps=0)
    started = time.perf_counter()
    fit.fit(model, train, val)
    print(f"trained {methods.loop.timestamp.batch} batches in {time.perf_counter() - started:.1f} s")
    print(f"training weights: val_acc {accuracy(model, val):.3f}")  # outside Lightning's hooks: no swap
    ema = fit.validate(model, val, verbose=False)[0]  # EMA's average is in the model while validating
    fit.save_checkpoint(CHECKPOINT)  # the training weights, and the average in the callback's state
    print(f"EMA average: val_acc {ema['val_acc']:.3f}, val_loss {ema['val_loss']:.3f}")
    for label, record in methods.method_log.records.items():
        print(f"{label}: {record['activity']}")

    # A fresh module and callback validated from the checkpoint see the same average.
    again = trainer(callbacks=[MethodsCallback([CutMix(alpha=1.0), LabelSmoothing(0.1), EMA(half_life="5ba")])])
    restored = again.validate(DigitsNet(), val, ckpt_path=CHECKPOINT, verbose=False)[0]
    print(f"from {CHECKPOINT}: val_acc {restored['val_acc']:.3f}")
    assert abs(restored["val_acc"] - ema["val_acc"]) < 1e-6, (restored, ema)
    assert ema["val_acc"] > 0.5, "the digits are learnt far above chance (0.1)"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    main(parser.parse_args().epochs)
