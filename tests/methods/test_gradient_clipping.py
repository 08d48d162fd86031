"""Gradient clipping's own semantics, checked against its definitions and Composer's tests.

'norm': the total L2 norm becomes the threshold where it was above it, direction kept; 'value':
every element clamped; 'adaptive' (AGC, Brock et al., 2021): each unit's gradient scaled by
min(1, threshold * max(||W_u||, 1e-3) / ||G_u||). Composer's tests check that each type calls the
matching clipping routine, that the algorithm runs at its event, that FSDP refuses 'adaptive', and
AGC's coefficient on 1-D to 4-D examples; all are re-expressed here. Run under torchrun, this file
is also the worker of ``test_two_ranks_clip_the_same_averaged_gradients``.
"""

from __future__ import annotations

import contextlib
import copy
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import algorithms.functional as cf
from algorithms import GradientClipping
from algorithms.core import Algorithm, Event, Trainer
from algorithms.gradient_clipping.gradient_clipping import is_fsdp

REPO = Path(__file__).resolve().parents[2]


def _cnn_with_grads(scale=1.0, seed=0):
    """Composer's test model shape: a convolution, linear layers, biases; gradients from one batch."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(4, 6),
        torch.nn.ReLU(),
        torch.nn.Linear(6, 3),
    )
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(8, 3, 10, 10, generator=g), torch.randint(0, 3, (8,), generator=g)
    (F.cross_entropy(model(x), y) * scale).backward()
    return model


def _grads(model):
    return [p.grad.detach().clone() for p in model.parameters()]


def _norm(tensors):
    return float(torch.sqrt(sum((t.double() ** 2).sum() for t in tensors)))


def test_norm_clipping_scales_the_total_norm_down_to_the_threshold():
    model = _cnn_with_grads(scale=50.0)
    before = _grads(model)
    threshold = _norm(before) / 4  # a threshold that clips
    cf.apply_gradient_clipping(model, "norm", threshold, fsdp_enabled=False)
    after = _grads(model)
    assert _norm(after) == pytest.approx(threshold, rel=1e-5)
    for a, b in zip(after, before, strict=True):
        torch.testing.assert_close(a, b * threshold / _norm(before), rtol=1e-5, atol=1e-7)  # direction kept
    cf.apply_gradient_clipping(model, "norm", 10 * threshold, fsdp_enabled=False)  # below: unchanged
    assert all(torch.equal(a, b) for a, b in zip(_grads(model), after, strict=True))


def test_value_clipping_clamps_every_element():
    model = _cnn_with_grads(scale=50.0)
    before = _grads(model)
    threshold = 0.25 * max(float(t.abs().max()) for t in before)
    cf.apply_gradient_clipping(model, "value", threshold, fsdp_enabled=False)
    after = _grads(model)
    assert max(float(t.abs().max()) for t in after) <= threshold
    assert sum(int((t.abs() > threshold).sum()) for t in before) > 0  # it clipped some
    for a, b in zip(after, before, strict=True):
        assert torch.equal(a, b.clamp(-threshold, threshold))


def _agc_by_hand(weight, grad, threshold):
    """Unit by unit with Python loops: rows (over all other dimensions) of a 2-D+ tensor, the whole
    of a 1-D one."""
    out = grad.clone().double()
    units = [slice(None)] if weight.ndim <= 1 else range(weight.shape[0])
    for u in units:
        w_norm = max(float(weight[u].double().norm()), 1e-3)
        g_norm = float(grad[u].double().norm())
        if g_norm > threshold * w_norm:
            out[u] = grad[u].double() * threshold * w_norm / g_norm
    return out


@pytest.mark.parametrize("threshold", [0.01, 0.05, 0.5])
def test_adaptive_clipping_is_agc_unit_by_unit(threshold):
    model = _cnn_with_grads(scale=5.0)
    before = _grads(model)
    cf.apply_gradient_clipping(model, "adaptive", threshold, fsdp_enabled=False)
    clipped = 0
    for p, b in zip(model.parameters(), before, strict=True):
        want = _agc_by_hand(p.detach(), b, threshold)
        torch.testing.assert_close(p.grad.double(), want, rtol=1e-5, atol=1e-8)
        clipped += int(not torch.equal(p.grad, b))
    assert clipped > 0


@pytest.mark.parametrize(
    ("weights", "grad", "threshold", "expected"),
    [
        # Composer's cases of _get_clipped_gradient_coeff, 1-D to 4-D.
        ([3.0, 4.0], [7.0, 24.0], 0.5, [0.7, 2.4]),
        ([[3.0, 4.0], [9.0, 40.0]], [[7.0, 24.0], [5.0, 12.0]], 0.5, [[0.7, 2.4], [5.0, 12.0]]),
        (
            [[[3.0, 8.0], [2.0, 2.0]], [[1.0, 3.0], [3.0, 9.0]]],
            [[[1.0, 1.0], [3.0, 5.0]], [[1.0, 1.0], [1.0, 1.0]]],
            1 / 3,
            [[[0.5, 0.5], [1.5, 2.5]], [[1.0, 1.0], [1.0, 1.0]]],
        ),
        (
            [[[[3.0], [8.0]], [[2.0], [2.0]]], [[[1.0], [3.0]], [[3.0], [9.0]]]],
            [[[[1.0], [1.0]], [[3.0], [5.0]]], [[[1.0], [1.0]], [[1.0], [1.0]]]],
            1 / 3,
            [[[[0.5], [0.5]], [[1.5], [2.5]]], [[[1.0], [1.0]], [[1.0], [1.0]]]],
        ),
        # A zero gradient stays zero; a zero weight is floored at the paper's 1e-3 (Composer's gives 0).
        ([1.0, 1.0], [0.0, 0.0], 1e-4, [0.0, 0.0]),
        ([0.0, 0.0], [1.0, 1.0], 0.5, [0.5e-3 / 2**0.5, 0.5e-3 / 2**0.5]),
    ],
)
def test_agc_on_composers_examples(weights, grad, threshold, expected):
    p = torch.nn.Parameter(torch.tensor(weights))
    p.grad = torch.tensor(grad)
    holder = torch.nn.Module()
    holder.p = p
    cf.apply_gradient_clipping(holder, "adaptive", threshold, fsdp_enabled=False)
    torch.testing.assert_close(p.grad, torch.tensor(expected))


def test_parameters_without_gradients_are_skipped():
    model = torch.nn.Linear(3, 2)
    for kind in ("norm", "value", "adaptive"):
        cf.apply_gradient_clipping(model, kind, 0.1)
        assert all(p.grad is None for p in model.parameters())


@pytest.mark.parametrize("kind", ["norm", "value", "adaptive"])
def test_a_parameter_without_a_gradient_does_not_stop_the_others_being_clipped(kind):
    """A frozen parameter listed first: the ones after it are still clipped (here each gradient is
    far above every kind's threshold, so clipping changes it)."""
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 2))
    model[0].requires_grad_(False)
    model[1].weight.grad, model[1].bias.grad = torch.full((2, 3), 50.0), torch.full((2,), 50.0)
    cf.apply_gradient_clipping(model, kind, 0.1)
    assert model[0].weight.grad is None
    for p in model[1].parameters():
        assert p.grad.abs().max() < 50.0 / 2


class _Grads(Algorithm):
    def __init__(self):
        self.after_backward, self.at_step = [], []

    def match(self, event, state):
        return event in (Event.AFTER_BACKWARD, Event.AFTER_TRAIN_BATCH)

    def apply(self, event, state, logger=None):
        if event is Event.AFTER_BACKWARD:
            self.after_backward.append(_grads(state.model))


class _AtStep(Algorithm):
    """Put after GradientClipping: the gradients the optimizer steps with."""

    def __init__(self):
        self.grads = []

    def match(self, event, state):
        return event is Event.BEFORE_OPTIMIZER_STEP

    def apply(self, event, state, logger=None):
        self.grads.append(_grads(state.model))


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


@pytest.mark.parametrize("precision", ["fp32", "amp_fp16"])
def test_in_the_trainer_it_clips_the_unscaled_gradient_before_the_step(precision):
    """Under amp_fp16 backward runs on the scaled loss; the optimizer gets the unscaled gradient
    clipped to the threshold, computed here from the scaled gradient's norm and the scale."""
    g = torch.Generator().manual_seed(3)
    data = [(torch.randn(8, 16, generator=g) * 4, torch.randint(0, 4, (8,), generator=g))]
    seen, at_step = _Grads(), _AtStep()
    model = _mlp()
    reference = copy.deepcopy(model)
    F.cross_entropy(reference(data[0][0]), data[0][1]).backward()
    threshold = _norm([p.grad for p in reference.parameters()]) / 4
    trainer = Trainer(
        model,
        data,
        "1ba",
        precision=precision,
        device="cpu",
        algorithms=[seen, GradientClipping("norm", threshold), at_step],
        optimizer=lambda params: torch.optim.SGD(params, lr=0.5),
    )
    scale = trainer.scaler.get_scale() if precision == "amp_fp16" else 1.0
    start = [p.detach().clone() for p in trainer.state.model.parameters()]
    trainer.fit()
    unscaled = [t.double() / scale for t in seen.after_backward[0]]
    norm = _norm(unscaled)
    assert norm > 3 * threshold  # the threshold clips
    for got, want in zip(at_step.grads[0], unscaled, strict=True):
        torch.testing.assert_close(got.double(), want * threshold / norm, rtol=1e-5, atol=1e-8)
    for p0, p1, grad in zip(start, trainer.state.model.parameters(), at_step.grads[0], strict=True):
        torch.testing.assert_close(p1.detach(), p0 - 0.5 * grad)  # the step used them
    if precision == "amp_fp16":
        assert scale > 1


def test_the_class_runs_the_functional_form_at_before_optimizer_step(monkeypatch):
    """Composer's test_gradient_clipping_algorithm: the algorithm calls the functional form with
    its arguments at its event, and not FSDP's path for an unsharded model."""
    import algorithms.gradient_clipping.gradient_clipping as module

    calls = []
    monkeypatch.setattr(module, "apply_gradient_clipping", lambda *a, **k: calls.append((a, k)))
    model = _mlp()
    algo = GradientClipping("value", 0.25)
    assert algo.match(Event.BEFORE_OPTIMIZER_STEP, None) and not algo.match(Event.AFTER_BACKWARD, None)
    Trainer(model, [(torch.randn(4, 16), torch.randint(0, 4, (4,)))], "2ba", algorithms=[algo], device="cpu").fit()
    assert len(calls) == 2
    assert calls[0][0][1:] == ("value", 0.25) and calls[0][1] == {"fsdp_enabled": False}
    assert not is_fsdp(model)


def test_it_changes_the_weights_the_run_ends_with():
    g = torch.Generator().manual_seed(4)
    data = [(torch.randn(8, 16, generator=g) * 4, torch.randint(0, 4, (8,), generator=g)) for _ in range(3)]
    runs = []
    for algos in ([], [GradientClipping("norm", 0.1)], [GradientClipping("adaptive", 0.01)]):
        t = Trainer(_mlp(), data, "3ba", algorithms=algos, device="cpu", seed=0)
        t.fit()
        runs.append([p.detach() for p in t.state.model.parameters()])
    for clipped in runs[1:]:
        assert any(not torch.allclose(a, b) for a, b in zip(runs[0], clipped, strict=True))


TYPES = "must be one of 'adaptive', 'norm', 'value'"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("scale", 1.0), f"clipping_type='scale': {TYPES}"),
        (("Norm", 1.0), f"clipping_type='Norm': {TYPES}"),
        (("norm", 0.0), "clipping_threshold=0.0: must be a number in (0, inf)"),
        (("norm", -1.0), "clipping_threshold=-1.0: must be a number in (0, inf)"),
        (("value", float("inf")), "clipping_threshold=inf: must be a number in (0, inf)"),
        (("value", "1"), "clipping_threshold='1': must be a number in (0, inf)"),
    ],
)
def test_bad_arguments_fail_naming_the_argument(args, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        GradientClipping(*args)
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        cf.apply_gradient_clipping(torch.nn.Linear(2, 2), *args, fsdp_enabled=False)


def test_adaptive_clipping_is_refused_with_fsdp():
    message = (
        "clipping_type='adaptive': not with fsdp_enabled (a unit's gradient may span shards) — use 'norm' or 'value'"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        cf.apply_gradient_clipping(torch.nn.Linear(2, 2), "adaptive", 0.01, fsdp_enabled=True)


@contextlib.contextmanager
def _fsdp1_on_one_rank():
    """FullyShardedDataParallel (FSDP1) needs a process group: here one of this process alone, so no
    torchrun is needed (with one rank FSDP keeps every parameter whole). Yields the wrapper."""
    import torch.distributed as dist

    if not dist.is_available() or dist.is_initialized():
        pytest.skip("needs torch.distributed and no process group already")
    from torch.distributed.fsdp import FullyShardedDataParallel

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # FSDP's own: NO_SHARD on one rank
            yield lambda module: FullyShardedDataParallel(module, device_id=torch.device("cpu"), use_orig_params=True)
    finally:
        from algorithms.core.distributed import destroy_process_group

        destroy_process_group()


def _fsdp1_layout(layout, wrap):
    """The same network with FSDP1 wrappers: on the model, on a child of it, or on two siblings;
    each with a wrapped layer inside. ``wrap`` the identity gives the plain network."""
    torch.manual_seed(0)
    first, last = torch.nn.Linear(6, 8), torch.nn.Linear(8, 3)
    if layout == "model":
        return wrap(torch.nn.Sequential(wrap(first), torch.nn.ReLU(), last))
    if layout == "child":
        return torch.nn.Sequential(wrap(torch.nn.Sequential(wrap(first), torch.nn.ReLU(), last)))
    return torch.nn.Sequential(wrap(torch.nn.Sequential(wrap(first), torch.nn.ReLU())), wrap(last))


@pytest.mark.parametrize(("layout", "roots"), [("model", [""]), ("child", ["0"]), ("siblings", ["0", "1"])])
def test_an_fsdp1_model_is_clipped_by_fsdps_own_clip_grad_norm_on_each_root(monkeypatch, layout, roots):
    """As Composer: FSDP's clip_grad_norm_ (whose norm covers every rank's shards) runs once on
    each outermost FullyShardedDataParallel module, never on one inside another (FSDP refuses
    that); with one root the whole model's norm becomes the threshold, direction kept."""
    from torch.distributed.fsdp import FullyShardedDataParallel

    calls = []
    clip = FullyShardedDataParallel.clip_grad_norm_
    monkeypatch.setattr(
        FullyShardedDataParallel,
        "clip_grad_norm_",
        lambda self, *args, **kwargs: calls.append(self) or clip(self, *args, **kwargs),
    )
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(1))
    plain = _fsdp1_layout(layout, lambda module: module)
    (plain(x).sum() * 10).backward()
    before = _grads(plain)
    threshold = _norm(before) / 4
    with _fsdp1_on_one_rank() as wrap:
        model = _fsdp1_layout(layout, wrap)
        (model(x).sum() * 10).backward()
        cf.apply_gradient_clipping(model, "norm", threshold, fsdp_enabled=True)
        names = {id(module): name for name, module in model.named_modules()}
        assert [names[id(module)] for module in calls] == roots
        if len(roots) == 1:
            for got, want in zip(_grads(model), before, strict=True):
                torch.testing.assert_close(got, want * threshold / _norm(before), rtol=1e-5, atol=1e-7)


# -- two ranks: DDP and FSDP ---------------------------------------------------------------------

GLOBAL_BATCH = 8


def _global_batch():
    g = torch.Generator().manual_seed(5)
    return torch.randn(GLOBAL_BATCH, 16, generator=g) * 4, torch.randint(0, 4, (GLOBAL_BATCH,), generator=g)


@pytest.mark.parametrize("clipping_type", ["norm", "value"])
@pytest.mark.slow
def test_two_ranks_clip_the_same_averaged_gradients(tmp_path, clipping_type):
    """Two ranks with half the global batch each: after clipping both hold the same gradients,
    those of one process clipping the whole batch's gradient (DDP averages before the clipping);
    FSDP's sharded run steps to the same weights."""
    out = tmp_path / "grads.pt"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "1",
    }
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            __file__,
            clipping_type,
            str(out),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = torch.load(out)
    x, y = _global_batch()
    at_step = _AtStep()
    single = Trainer(
        _mlp(),
        [(x, y)],
        "1ba",
        algorithms=[GradientClipping(clipping_type, 0.05), at_step],
        optimizer=lambda params: torch.optim.SGD(params, lr=0.5),
        device="cpu",
    )
    single.fit()
    names = [n for n, _ in single.state.model.named_parameters()]
    for rank in (0, 1):
        for name, want in zip(names, at_step.grads[0], strict=True):
            torch.testing.assert_close(got["ddp_grads"][rank][name], want, rtol=1e-5, atol=1e-7, msg=name)
    for name, p in single.state.model.named_parameters():
        torch.testing.assert_close(got["ddp_params"][name], p.detach(), rtol=1e-5, atol=1e-7, msg=name)
        torch.testing.assert_close(got["fsdp_params"][name], p.detach(), rtol=1e-5, atol=1e-6, msg=name)


def _worker(clipping_type: str, out_path: str) -> None:
    import torch.distributed as dist

    from algorithms.core.distributed import destroy_process_group, rank_and_world_size

    rank, world = rank_and_world_size()
    x, y = _global_batch()
    per = GLOBAL_BATCH // world
    data = [(x[rank * per : (rank + 1) * per], y[rank * per : (rank + 1) * per])]
    result = {}
    for parallel in ("ddp", "fsdp"):
        at_step = _AtStep()
        trainer = Trainer(
            _mlp(),
            data,
            "1ba",
            algorithms=[GradientClipping(clipping_type, 0.05), at_step],
            optimizer=lambda params: torch.optim.SGD(params, lr=0.5),
            parallel=parallel,
            device="cpu",
        )
        trainer.fit()
        model = trainer.state.model
        params = {
            n.removeprefix("module."): (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().clone()
            for n, p in model.named_parameters()
        }
        result[f"{parallel}_params"] = params
        if parallel == "ddp":
            names = [n.removeprefix("module.") for n, _ in model.named_parameters()]
            grads = [None] * world
            dist.all_gather_object(grads, dict(zip(names, at_step.grads[0], strict=True)))
            result["ddp_grads"] = grads
    if rank == 0:
        torch.save(result, out_path)
    destroy_process_group()


if __name__ == "__main__":
    _worker(*sys.argv[1:])


def test_it_reports_the_steps_it_clipped():
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)) for _ in range(3)]
    trainer = Trainer(_mlp(), batches, "1ep", algorithms=[GradientClipping("norm", 1.0)], seed=0, device="cpu")
    trainer.fit()
    assert trainer.method_log.records["GradientClipping"]["activity"] == {"steps_clipped": 3}
