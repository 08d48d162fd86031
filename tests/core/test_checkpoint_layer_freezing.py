"""Layer Freezing resumes: a run saved after freezing began (its optimizer's parameter groups shrank,
its earliest layers stopped requiring gradients) and resumed by a fresh Trainer on a fresh model
ends with the uninterrupted run's weights, bit for bit."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from algorithms import LayerFreezing
from algorithms.core import Algorithm, Event, Trainer
from algorithms.surgery import replace_module_classes

EPOCHS = 6  # 4 batches an epoch; freezing from the end of epoch 2 (progress 1/3 > 1/4) on


class _Interrupted(Exception):
    pass


class _SaveAndDie(Algorithm):
    """Saves the Trainer's checkpoint at the end of batch ``batch`` and stops the run, as a crash would."""

    def __init__(self, batch, path):
        self.batch, self.path, self.trainer = batch, path, None

    def match(self, event, state):
        return self.batch is not None and event is Event.BATCH_END and state.timestamp.batch == self.batch

    def apply(self, event, state, logger=None):
        self.trainer.save_checkpoint(self.path)
        raise _Interrupted


class _RebuildLinears(Algorithm):
    """Module surgery at ``Event.INIT``, as the surgery methods run: every Linear becomes a new one
    with the same weights (the helper moves it into the optimizer's groups)."""

    def match(self, event, state):
        return event is Event.INIT

    def apply(self, event, state, logger=None):
        def rebuilt(module, index):
            new = torch.nn.Linear(module.in_features, module.out_features)
            new.load_state_dict(module.state_dict())
            return new

        replace_module_classes(state.model, {torch.nn.Linear: rebuilt}, optimizers=state.optimizers)


def _build(save_at=None, path=None, load_path=None, surgery=False):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16), torch.nn.ReLU(),
        torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3),
    )  # fmt: skip
    g = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randn(32, 6, generator=g), torch.randint(0, 3, (32,), generator=g))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=0.01)
    saver = _SaveAndDie(save_at, path)
    trainer = Trainer(
        model,
        DataLoader(data, batch_size=8),
        f"{EPOCHS}ep",
        optimizer=optimizer,
        algorithms=[
            *([_RebuildLinears()] if surgery else []),
            LayerFreezing(freeze_start=0.25, freeze_level=1.0),
            saver,
        ],
        grad_clip_norm=0.05,  # clipping acts: frozen layers with gradients again would change the norm
        seed=3,
        device="cpu",
        load_path=load_path,
    )
    saver.trainer = trainer
    return trainer


@pytest.mark.parametrize(
    ("save_at", "surgery"),
    [(16, False), (18, False), (22, False), (18, True)],
    ids=["at-an-epoch-end", "mid-epoch", "later-mid-epoch", "mid-epoch-after-surgery"],
)
def test_a_run_resumed_after_freezing_began_ends_with_the_uninterrupted_weights(save_at, surgery, tmp_path):
    """With surgery too: it runs at INIT, before anything is frozen, in the first run and in the
    resumed one (whose fresh model is frozen only when the checkpoint is loaded), so the surgery
    helper's refusal of frozen modules never concerns Layer Freezing."""
    uninterrupted = _build(surgery=surgery)
    uninterrupted.fit()
    expected = uninterrupted.state.model

    path = tmp_path / "run.ckpt"
    interrupted = _build(save_at=save_at, path=path, surgery=surgery)
    with pytest.raises(_Interrupted):
        interrupted.fit()
    frozen = [name for name, p in interrupted.state.model.named_parameters() if not p.requires_grad]
    held = len(interrupted.state.optimizer.param_groups[0]["params"])
    assert frozen and held < len(list(expected.parameters()))  # freezing had begun when it was saved

    resumed = _build(load_path=path, surgery=surgery)  # a fresh model, a fresh optimizer over all its parameters
    assert len(resumed.state.optimizer.param_groups[0]["params"]) == held
    resumed.fit()
    assert resumed.state.timestamp == uninterrupted.state.timestamp
    for (name, got), want in zip(resumed.state.model.state_dict().items(), expected.state_dict().values(), strict=True):
        assert torch.equal(got, want), name
    assert [p.requires_grad for p in resumed.state.model.parameters()] == [
        p.requires_grad for p in expected.parameters()
    ]
    # and the resumed part trained: the end is not where the checkpoint was
    assert not all(
        torch.equal(p, q) for p, q in zip(interrupted.state.model.parameters(), expected.parameters(), strict=True)
    )
