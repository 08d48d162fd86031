"""CutMix, label smoothing and EMA in a Hugging Face Accelerate loop: `python` for one process, or
`accelerate launch examples/own_loop/accelerate_loop.py` for several.

The loop is made before `accelerator.prepare`, so a method that changes the model does so first;
the loop is then given the prepared optimizer, calls the prepared model, and backpropagates with
`accelerator.backward`. Samples are counted over every process.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).parent))
from _digits import accuracy, digits, small_cnn  # noqa: E402

from algorithms import EMA, CutMix, LabelSmoothing  # noqa: E402
from algorithms.core import Loop  # noqa: E402

accelerator = Accelerator(cpu=True)
torch.manual_seed(0)
train = DataLoader(digits(train=True), batch_size=64, shuffle=True)
test = DataLoader(digits(train=False), batch_size=256)
loop = Loop(small_cnn(), [CutMix(alpha=1.0), LabelSmoothing(0.1), EMA(half_life="10ba")], max_duration="3ep", seed=0)
optimizer = torch.optim.SGD(loop.model.parameters(), lr=0.1, momentum=0.9)
model, loop.optimizer, train = accelerator.prepare(loop.model, optimizer, train)

for _ in range(3):
    model.train()
    for batch in train:
        loop.batch(batch)
        loop.forward(lambda batch: model(batch[0]))  # the prepared model
        loop.loss()
        loop.backward(accelerator.backward)
        loop.step()
    loop.epoch_end()
loop.end()
with loop.evaluating():
    print(f"samples trained (all processes): {loop.timestamp.sample}")
    print(f"test accuracy (EMA weights): {accuracy(accelerator.unwrap_model(model), test):.3f}")
