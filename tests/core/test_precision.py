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
    trainer = Trainer(
        model,
        [(x, y)],
        "1ba",
        precision="amp_fp16",
        device="cpu",
        algorithms=[probe],
        optimizer=torch.optim.SGD(model.parameters(), lr=0.0),
        grad_clip_norm=1e9,
    )
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
    trainer = Trainer(_model(), data, "3ba", precision=precision, device="cuda", algorithms=[probe], grad_clip_norm=1e9)
    probe.scaler = trainer.scaler
    trainer.fit()
    assert all(torch.isfinite(p).all() for p in trainer.state.model.parameters())
    if precision == "amp_fp16":
        scale = probe.scale
        assert scale > 1
        for scaled, unscaled in zip(probe.after_backward, probe.before_step, strict=True):
            torch.testing.assert_close(scaled / scale, unscaled, rtol=1e-5, atol=0)


# -- what each mode does, observed from inside the loop ----------------------------------------

DTYPES = {
    "fp32": torch.float32,
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
    "amp_fp16": torch.float16,
    "amp_bf16": torch.bfloat16,
}
PARAMETER_DTYPES = {
    "fp32": torch.float32,
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
    "amp_fp16": torch.float32,
    "amp_bf16": torch.float32,
}


class DtypeProbe(Algorithm):
    """The dtypes of the model's input, its outputs, its parameters and the loss, per batch."""

    def __init__(self):
        self.seen = []

    def match(self, event, state):
        return event in (Event.BEFORE_FORWARD, Event.AFTER_FORWARD, Event.BEFORE_BACKWARD)

    def apply(self, event, state, logger=None):
        if event is Event.BEFORE_FORWARD:
            self.seen.append({"input": state.batch[0].dtype, "target": state.batch[1].dtype})
        elif event is Event.AFTER_FORWARD:
            self.seen[-1].update(outputs=state.outputs.dtype, parameters={p.dtype for p in state.model.parameters()})
        else:
            self.seen[-1]["loss"] = state.loss.dtype


@pytest.mark.parametrize("precision", list(DTYPES))
def test_the_forward_runs_in_the_dtype_of_the_mode(precision):
    """AMP modes keep float32 parameters and autocast the forward (outputs in float16 or
    bfloat16, on the CPU too); fp16 and bf16 cast the model and the float inputs; the loss is
    float32 in every mode. Evaluation runs the forward the same way."""
    g = torch.Generator().manual_seed(0)
    data = [(torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)) for _ in range(2)]
    probe, eval_outputs = DtypeProbe(), []
    trainer = Trainer(_model(), data, "2ba", precision=precision, device="cpu", algorithms=[probe])
    trainer.state.model.register_forward_hook(lambda module, args, out: eval_outputs.append(out.dtype))
    trainer.fit()
    assert (
        probe.seen
        == [
            {
                "input": DTYPES[precision] if precision in ("fp16", "bf16") else torch.float32,
                "target": torch.int64,
                "outputs": DTYPES[precision],
                "parameters": {PARAMETER_DTYPES[precision]},
                "loss": torch.float32,
            }
        ]
        * 2
    )
    assert {p.dtype for p in trainer.state.model.parameters()} == {PARAMETER_DTYPES[precision]}
    eval_outputs.clear()
    trainer.eval(data)
    assert eval_outputs == [DTYPES[precision]] * 2


def _total_norm(tensors):
    return torch.sqrt(sum((t.double() ** 2).sum() for t in tensors)).item()


# GradScaler's documented defaults; torch 2.13's torch.amp.GradScaler("cpu") scales on the CPU too.
INITIAL_SCALE, BACKOFF = 2.0**16, 0.5
CLIP_TOLERANCE = {"fp32": 1e-5, "fp16": 2e-2, "bf16": 5e-2, "amp_fp16": 1e-5, "amp_bf16": 1e-5}


@pytest.mark.parametrize("precision", list(DTYPES))
def test_gradients_are_clipped_to_the_norm_once_unscaled_and_the_step_uses_them(precision):
    """A clip norm a quarter of the true gradient norm clips: the optimizer sees the unscaled
    gradients times clip / norm (norm computed here from the unscaled gradients; under amp_fp16
    backward ran on the loss times GradScaler's initial scale), and SGD steps with exactly those."""
    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)
    model = _model()
    reference = copy.deepcopy(model)
    F.cross_entropy(reference(x), y).backward()
    clip = _total_norm([p.grad for p in reference.parameters()]) / 4
    probe = GradProbe()
    trainer = Trainer(
        model,
        [(x, y)],
        "1ba",
        precision=precision,
        device="cpu",
        algorithms=[probe],
        optimizer=lambda params: torch.optim.SGD(params, lr=0.5),
        grad_clip_norm=clip,
    )
    before = [p.detach().clone() for p in trainer.state.model.parameters()]
    trainer.fit()
    scale = INITIAL_SCALE if precision == "amp_fp16" else 1.0
    unscaled = [grad.double() / scale for grad in probe.after_backward]
    norm = _total_norm(unscaled)
    assert norm > 3 * clip  # the threshold clips, in every mode
    tol = CLIP_TOLERANCE[precision]
    for got, want in zip(probe.before_step, unscaled, strict=True):
        torch.testing.assert_close(got.double(), want * clip / norm, rtol=tol, atol=tol * clip / 10)
    assert _total_norm(probe.before_step) == pytest.approx(clip, rel=tol)
    for p0, p1, grad in zip(before, trainer.state.model.parameters(), probe.before_step, strict=True):
        torch.testing.assert_close(p1.detach(), (p0 - 0.5 * grad).to(p0.dtype), rtol=tol, atol=tol * 1e-2)


def test_amp_fp16_steps_with_unscaled_gradients_and_skips_a_step_that_overflowed():
    """Without clipping the optimizer still gets the true gradients (the scaler unscales in its
    step). A batch whose float16 forward overflows leaves the parameters alone, and the scale
    backs off by GradScaler's factor for the next batch."""
    g = torch.Generator().manual_seed(5)
    x, y = torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)
    data = [(x * 1e6, y), (x, y)]  # 1e6 is beyond float16's range: the first forward gives NaN
    grads = []

    class Steps(Algorithm):
        """The gradients backward leaves and the parameters each step leaves."""

        def match(self, event, state):
            return event in (Event.AFTER_BACKWARD, Event.AFTER_TRAIN_BATCH)

        def apply(self, event, state, logger=None):
            grads.append(
                [
                    p.detach().clone() if event is Event.AFTER_TRAIN_BATCH else p.grad.detach().clone()
                    for p in state.model.parameters()
                ]
            )

    trainer = Trainer(
        _model(),
        data,
        "2ba",
        precision="amp_fp16",
        device="cpu",
        algorithms=[Steps()],
        optimizer=lambda params: torch.optim.SGD(params, lr=0.5),
    )
    start = [p.detach().clone() for p in trainer.state.model.parameters()]
    trainer.fit()
    (overflowed, after_first, scaled, after_second) = grads
    assert not all(torch.isfinite(t).all() for t in overflowed)
    assert all(torch.equal(a, b) for a, b in zip(after_first, start, strict=True))  # the step was skipped
    reference = copy.deepcopy(trainer.state.model)
    for p, p0 in zip(reference.parameters(), start, strict=True):
        p.data.copy_(p0)
    F.cross_entropy(reference(x), y).backward()
    for s, ref, p0, p1 in zip(scaled, reference.parameters(), start, after_second, strict=True):
        torch.testing.assert_close(s / (INITIAL_SCALE * BACKOFF), ref.grad, rtol=2e-2, atol=2e-3)
        torch.testing.assert_close(p1, p0 - 0.5 * s / (INITIAL_SCALE * BACKOFF), rtol=1e-5, atol=1e-6)


def _threaded_parallel_apply(modules, inputs, kwargs_tup=None, devices=None):
    """What ``torch.nn.parallel.parallel_apply`` does, on the CPU: each replica runs on its own
    thread, which re-enters autocast with ``enabled`` only (autocast's state is per thread)."""
    import threading

    enabled, results = torch.is_autocast_enabled("cpu"), {}
    kwargs_tup = kwargs_tup or ({},) * len(modules)

    def worker(i, module, args, kwargs):
        with torch.autocast("cpu", enabled=enabled):
            results[i] = module(*args, **kwargs)

    threads = [
        threading.Thread(target=worker, args=(i, m, a, k))
        for i, (m, a, k) in enumerate(zip(modules, inputs, kwargs_tup, strict=True))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [results[i] for i in range(len(modules))]


@pytest.mark.parametrize("precision", ["amp_fp16", "amp_bf16"])
def test_data_parallel_replicas_run_the_trainers_autocast_dtype_on_their_threads(precision, monkeypatch):
    """parallel='dp' on two or more GPUs runs each replica on a worker thread that re-enters
    autocast with ``enabled`` alone, which gives autocast's default dtype (float16 on CUDA, bfloat16
    on the CPU), not the Trainer's. The same per-thread behaviour shows on the CPU: a plain module
    called that way under amp_fp16 runs bfloat16; the Trainer's DataParallel replicas run the mode's
    own dtype."""
    import importlib

    from algorithms.core.distributed import wrap_model
    from algorithms.core.precision import autocast

    # the module, not the function torch.nn.parallel re-exports under the same name
    data_parallel = importlib.import_module("torch.nn.parallel.data_parallel")
    monkeypatch.setattr(data_parallel, "parallel_apply", _threaded_parallel_apply)
    model, x = _model(), torch.randn(4, 16)
    wrapped = wrap_model(model, "dp", torch.device("cpu"), precision)
    assert isinstance(wrapped, torch.nn.DataParallel)
    wanted = DTYPES[precision]
    with autocast(precision, torch.device("cpu")):
        plain = _threaded_parallel_apply([model, model], [(x[:2],), (x[2:],)])
        replicas = wrapped.parallel_apply([model, model], [(x[:2],), (x[2:],)], [{}, {}])
    assert {out.dtype for out in plain} == {torch.bfloat16}, "the worker threads' default autocast dtype"
    assert [out.dtype for out in replicas] == [wanted, wanted]


@pytest.mark.cuda
@pytest.mark.parametrize("precision", ["amp_fp16", "amp_bf16"])
def test_data_parallel_on_every_gpu_runs_the_trainers_autocast_dtype(precision):
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two or more CUDA devices: DataParallel runs the module on the Trainer's thread with one")
    seen = []

    class Probe(Algorithm):
        def match(self, event, state):
            return event is Event.AFTER_FORWARD

        def apply(self, event, state, logger=None):
            seen.append(state.outputs.dtype)

    data = [(torch.randn(8, 16), torch.randint(0, 4, (8,)))]
    Trainer(_model(), data, "1ba", parallel="dp", precision=precision, device="cuda", algorithms=[Probe()]).fit()
    assert seen == [DTYPES[precision]]
