"""amp_fp16 really scales the loss and unscales the gradients before clipping and stepping."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from algorithms.core import Algorithm, Event, Trainer


class GradProbe(Algorithm):
    """Copies the gradients right after backward and right before the optimizer step."""

    def __init__(self):
        self.after_backward = self.before_step = None
        self.scaler = None  # set to the Trainer's scaler to record the scale backward ran with
        self.scale = None

    def match(self, event, state):
        return event in (Event.AFTER_BACKWARD, Event.BEFORE_OPTIMIZER_STEP)

    def apply(self, event, state, logger=None):
        grads = [p.grad.detach().clone() for p in state.model.parameters()]
        if event is Event.AFTER_BACKWARD:
            self.after_backward = grads
            self.scale = self.scaler.get_scale() if self.scaler is not None else None
        else:
            self.before_step = grads


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def test_amp_fp16_scales_the_loss_and_unscales_before_clipping():
    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)
    model = _model()
    reference = copy.deepcopy(model)
    F.cross_entropy(reference(x), y).backward()  # float32 gradients, no autocast, no scaling
    fp32_grads = [p.grad for p in reference.parameters()]

    probe = GradProbe()
    # A clip norm this large never changes the gradients but makes the Trainer unscale first.
    trainer = Trainer(model, [(x, y)], "1ba", precision="amp_fp16", device="cpu", algorithms=[probe],
                      optimizer=torch.optim.SGD(model.parameters(), lr=0.0), grad_clip_norm=1e9)
    scale = trainer.scaler.get_scale()
    assert scale == 2.0**16  # GradScaler's documented initial scale
    trainer.fit()

    for scaled, unscaled, ref in zip(probe.after_backward, probe.before_step, fp32_grads, strict=True):
        # Backward ran on loss * scale: the raw gradients are the true ones times the scale ...
        torch.testing.assert_close(scaled / scale, unscaled, rtol=1e-6, atol=0)
        # ... and what the optimizer (and the clipping) sees are the true gradients, up to
        # float16 rounding in the autocast forward pass.
        torch.testing.assert_close(unscaled, ref, rtol=2e-2, atol=2e-3)
        assert ref.abs().max() > 1e-4  # the comparison is not between zeros


@pytest.mark.parametrize("precision", ["fp32", "bf16", "amp_bf16"])
def test_modes_without_scaling_leave_gradients_unscaled(precision):
    g = torch.Generator().manual_seed(4)
    x, y = torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)
    probe = GradProbe()
    trainer = Trainer(_model(), [(x, y)], "1ba", precision=precision, device="cpu", algorithms=[probe])
    trainer.fit()
    assert not trainer.scaler.is_enabled()
    for a, b in zip(probe.after_backward, probe.before_step, strict=True):
        assert torch.equal(a, b)


@pytest.mark.cuda
@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16", "amp_fp16", "amp_bf16"])
def test_every_precision_trains_on_cuda_without_nans(precision):
    g = torch.Generator().manual_seed(5)
    data = [(torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)) for _ in range(3)]
    probe = GradProbe()
    trainer = Trainer(_model(), data, "3ba", precision=precision, device="cuda", algorithms=[probe],
                      grad_clip_norm=1e9)
    probe.scaler = trainer.scaler
    trainer.fit()
    assert all(torch.isfinite(p).all() for p in trainer.state.model.parameters())
    if precision == "amp_fp16":
        scale = probe.scale
        assert scale > 1
        for scaled, unscaled in zip(probe.after_backward, probe.before_step, strict=True):
            torch.testing.assert_close(scaled / scale, unscaled, rtol=1e-5, atol=0)
