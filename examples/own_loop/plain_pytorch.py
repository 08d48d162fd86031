"""CutMix, label smoothing and EMA in a plain PyTorch loop; EMA's weights evaluated and checkpointed.

Run: python examples/own_loop/plain_pytorch.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).parent))
from _digits import accuracy, digits, small_cnn  # noqa: E402

from algorithms import EMA, CutMix, LabelSmoothing  # noqa: E402
from algorithms.core import Loop  # noqa: E402

torch.manual_seed(0)
train = DataLoader(digits(train=True), batch_size=64, shuffle=True, num_workers=2)
test = DataLoader(digits(train=False), batch_size=256)
model = small_cnn()

# The loop runs the methods at the points its calls mark. A method that changes the model would
# change it here (Event.INIT): build the optimizer over loop.model's parameters, or pass a function.
loop = Loop(
    model,
    [CutMix(alpha=1.0), LabelSmoothing(0.1), EMA(half_life="10ba")],
    max_duration="4ep",
    optimizer=lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9),
    train_dataloader=train,
    seed=0,
)
model = loop.model

for epoch in range(4):
    model.train()
    for batch in train:
        loss = loop.train_step(batch)  # = loop.batch, loop.forward, loop.loss, loop.backward, loop.step
    loop.epoch_end()
    model.eval()
    trained = accuracy(model, test)
    with loop.evaluating():  # EMA's average is in the model inside the block, the training weights after it
        averaged = accuracy(model, test)
    print(f"epoch {epoch + 1}: loss {loss.item():.3f}, test accuracy {trained:.3f} (EMA weights {averaged:.3f})")
loop.end()

# A checkpoint: your model and optimizer, and the methods' state (EMA's average, CutMix's generator).
with tempfile.TemporaryDirectory() as folder:
    path = Path(folder) / "checkpoint.pt"
    torch.save({"model": model.state_dict(), "optimizer": loop.optimizer.state_dict(), "loop": loop.state_dict()}, path)
    resumed = Loop(small_cnn(), [CutMix(alpha=1.0), LabelSmoothing(0.1), EMA(half_life="10ba")], max_duration="4ep")
    saved = torch.load(path, weights_only=False)
    resumed.model.load_state_dict(saved["model"])
    resumed.load_state_dict(saved["loop"])
    with resumed.evaluating():
        print(f"resumed from the checkpoint: test accuracy (EMA weights) {accuracy(resumed.model, test):.3f}")
