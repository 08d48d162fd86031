"""SAM's own semantics, checked against its definition (Foret et al., 2021) and Composer's tests.

e(w) = rho * g / (||g|| + epsilon), ||g|| over the whole model's gradient; the step is the base
optimizer's with the gradient at w + e(w), from the weights w restored exactly. Composer's tests
assert that the SAM optimizer and its base share their parameter groups (the same objects) and so
the learning rate a scheduler sets; both are re-expressed here. Run as a script under torchrun,
this file is also the 2-rank DDP worker of ``test_two_ranks_take_the_single_process_steps``.
"""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import algorithms.functional as cf
from algorithms import SAM
from algorithms.core import Algorithm, Event, Trainer
from algorithms.sam.sam import SAMOptimizer

REPO = Path(__file__).resolve().parents[2]


def _global_norm(grads):
    return torch.sqrt(sum((g.double() ** 2).sum() for g in grads))


def test_the_perturbation_is_rho_times_the_gradient_over_its_global_norm():
    g = torch.Generator().manual_seed(0)
    grads = [torch.randn(4, 3, generator=g), torch.randn(5, generator=g), torch.randn(2, 2, 3, generator=g)]
    before = [t.clone() for t in grads]
    out = cf.sam_perturbation(grads, rho=0.2)
    norm = _global_norm(grads)
    for e, t in zip(out, grads, strict=True):
        assert e.shape == t.shape and e.dtype == t.dtype
        torch.testing.assert_close(e.double(), 0.2 * t.double() / norm, rtol=1e-6, atol=0)
    assert float(_global_norm(out)) == pytest.approx(0.2, rel=1e-6)  # a step of length rho
    assert all(torch.equal(a, b) for a, b in zip(grads, before, strict=True))  # not modified
    # epsilon is added to the norm; the defaults are the paper's rho and Composer's epsilon.
    [e] = cf.sam_perturbation([torch.tensor([3.0, 4.0], dtype=torch.float64)], rho=1.0, epsilon=5.0)
    torch.testing.assert_close(e, torch.tensor([0.3, 0.4], dtype=torch.float64))
    [e] = cf.sam_perturbation([torch.tensor([3.0, 4.0])])
    torch.testing.assert_close(e, 0.05 * torch.tensor([3.0, 4.0]) / (5 + 1e-12))


def test_zero_and_non_finite_gradients_give_no_perturbation():
    [e] = cf.sam_perturbation([torch.zeros(3)])
    assert torch.equal(e, torch.zeros(3))
    out = cf.sam_perturbation([torch.tensor([float("inf"), 1.0]), torch.tensor([float("nan")])])
    assert all(torch.equal(e, torch.zeros_like(e)) for e in out)
    assert cf.sam_perturbation([]) == []
    [e] = cf.sam_perturbation([torch.tensor([1.0, 1.0], dtype=torch.bfloat16)], rho=0.0)
    assert e.dtype == torch.bfloat16 and torch.equal(e, torch.zeros(2, dtype=torch.bfloat16))
    # epsilon=0 is allowed: a zero gradient still gives no step (not 0 * rho / 0), a non-zero one
    # a step of exactly rho.
    for rho in (0.05, 0.0):
        assert all(torch.equal(e, torch.zeros(2)) for e in cf.sam_perturbation([torch.zeros(2)] * 2, rho, 0.0))
    [e] = cf.sam_perturbation([torch.tensor([3.0, 4.0], dtype=torch.float64)], rho=0.5, epsilon=0)
    torch.testing.assert_close(e, torch.tensor([0.3, 0.4], dtype=torch.float64), rtol=1e-6, atol=0)


class _AtStep(Algorithm):
    """The weights and gradients the optimizer steps from, and how often the model ran forward."""

    def __init__(self, model):
        self.weights, self.grads, self.after, self.forwards = [], [], [], 0
        model.register_forward_hook(self._count)

    def _count(self, *args):
        self.forwards += 1

    def match(self, event, state):
        return event in (Event.BATCH_START, Event.BEFORE_OPTIMIZER_STEP, Event.AFTER_TRAIN_BATCH)

    def apply(self, event, state, logger=None):
        weights = [p.detach().clone() for p in state.model.parameters()]
        if event is Event.BATCH_START:
            self.after.append(weights)  # the weights the batch starts from
        elif event is Event.BEFORE_OPTIMIZER_STEP:
            self.weights.append(weights)
            self.grads.append([p.grad.detach().clone() for p in state.model.parameters()])
        else:
            self.after[-1] = weights


def _mse_grad(w, x, y):
    """d/dw of mean((x @ w - y)^2), by hand: 2/N x^T (x w - y)."""
    return 2 / len(x) * x.T @ (x @ w - y)


@pytest.mark.parametrize(("kwargs", "rho"), [({}, 0.05), ({"rho": 0.5}, 0.5)])  # the paper's rho by default
def test_the_step_takes_the_gradient_at_w_plus_e_from_w_restored(kwargs, rho):
    """Linear regression without bias, SGD without momentum, by hand: g1 = grad(w),
    e = rho g1 / ||g1||, g2 = grad(w + e), w' = w - lr g2; the optimizer sees w and g2."""
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(8, 3, generator=g), torch.randn(8, generator=g)) for _ in range(3)]
    model = torch.nn.Linear(3, 1, bias=False)
    probe = _AtStep(model)
    lr = 0.1
    trainer = Trainer(
        model,
        batches,
        "3ba",
        optimizer=torch.optim.SGD(model.parameters(), lr=lr),
        device="cpu",
        loss_fn=lambda out, y: F.mse_loss(out[:, 0], y),
        algorithms=[SAM(**kwargs), probe],
    )
    w = model.weight.detach().clone()[0]
    trainer.fit()
    for (x, y), seen_w, seen_g, after in zip(batches, probe.weights, probe.grads, probe.after, strict=True):
        assert torch.equal(seen_w[0][0], w)  # back at exactly w before the step
        x, y, w64 = x.double(), y.double(), w.double()
        g1 = _mse_grad(w64, x, y)
        e = rho * g1 / g1.norm()
        g2 = _mse_grad(w64 + e, x, y)
        torch.testing.assert_close(seen_g[0][0].double(), g2, rtol=1e-5, atol=1e-6)
        assert not torch.allclose(g2, g1, rtol=1e-3)  # the comparison distinguishes the two gradients
        torch.testing.assert_close(after[0][0].double(), w64 - lr * g2, rtol=1e-5, atol=1e-6)
        w = after[0][0]  # where the step went, and the next batch starts
    assert probe.forwards == 6  # one extra forward per step


def test_interval_takes_the_sam_gradient_every_interval_th_step_only():
    g = torch.Generator().manual_seed(2)
    batches = [(torch.randn(8, 3, generator=g), torch.randn(8, generator=g)) for _ in range(5)]
    model = torch.nn.Linear(3, 1, bias=False)
    probe = _AtStep(model)
    Trainer(
        model,
        batches,
        "5ba",
        optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
        device="cpu",
        loss_fn=lambda out, y: F.mse_loss(out[:, 0], y),
        algorithms=[SAM(rho=0.3, interval=2), probe],
    ).fit()
    for step, ((x, y), seen_w, seen_g) in enumerate(zip(batches, probe.weights, probe.grads, strict=True), start=1):
        x, y, w = x.double(), y.double(), seen_w[0][0].double()
        g1 = _mse_grad(w, x, y)
        want = _mse_grad(w + 0.3 * g1 / g1.norm(), x, y) if step % 2 == 0 else g1
        torch.testing.assert_close(seen_g[0][0].double(), want, rtol=1e-5, atol=1e-6)
    assert probe.forwards == 5 + 2  # steps 2 and 4


def _one_weight(**kwargs):
    """A SAMOptimizer around plain SGD on one weight w = (1, 2) whose gradient is (3, 4)."""
    w = torch.nn.Parameter(torch.tensor([1.0, 2.0], dtype=torch.float64))
    w.grad = torch.tensor([3.0, 4.0], dtype=torch.float64)
    return w, SAMOptimizer(torch.optim.SGD([w], lr=0.1), **kwargs)


def _closure(w, seen):
    """The Trainer's closure: forward, loss L = |w|^2 / 2 (so the gradient is w) and backward."""

    def closure():
        seen.append(w.detach().clone())
        (w**2).sum().div(2).backward()
        return "loss"

    return closure


@pytest.mark.parametrize(
    ("kwargs", "e"),
    [
        ({}, [0.03, 0.04]),  # the defaults, rho=0.05 and epsilon=1e-12: 0.05 * (3, 4) / 5
        ({"rho": 1.0, "epsilon": 5.0}, [0.3, 0.4]),  # 1.0 * (3, 4) / (5 + 5)
    ],
)
def test_first_step_runs_the_closure_at_w_plus_e_and_puts_w_back(kwargs, e):
    w, opt = _one_weight(**kwargs)
    seen = []
    assert opt.first_step(_closure(w, seen)) == "loss"
    w0 = torch.tensor([1.0, 2.0], dtype=torch.float64)
    torch.testing.assert_close(seen[0], w0 + torch.tensor(e, dtype=torch.float64), rtol=1e-6, atol=0)  # scale: fp32
    assert torch.equal(w.detach(), w0)
    assert torch.equal(w.grad, seen[0])  # the gradient at w + e(w) alone, the one at w cleared


@pytest.mark.parametrize(
    ("global_step", "sam_steps"), [(0, [False, True, False, True]), (1, [True, False, True, False])]
)
def test_first_step_keeps_the_intervals_phase_from_the_steps_already_taken(global_step, sam_steps):
    """interval=2: every second call is a SAM step; the others change nothing and return None."""
    w, opt = _one_weight(interval=2, **({"global_step": global_step} if global_step else {}))  # 0 by default
    for sam_step in sam_steps:
        w.grad = torch.tensor([3.0, 4.0], dtype=torch.float64)
        seen = []
        assert opt.first_step(_closure(w, seen)) == ("loss" if sam_step else None)
        assert len(seen) == sam_step
        assert torch.equal(w.grad, seen[0] if sam_step else torch.tensor([3.0, 4.0], dtype=torch.float64))


def test_zero_grad_add_param_group_and_load_state_dict_act_on_the_base_optimizer():
    w, opt = _one_weight()
    opt.zero_grad()
    assert w.grad is None  # set_to_none=True by default, as torch's optimizers
    w.grad = torch.ones(2, dtype=torch.float64)
    opt.zero_grad(set_to_none=False)
    assert torch.equal(w.grad, torch.zeros(2, dtype=torch.float64))
    v = torch.nn.Parameter(torch.zeros(3))
    opt.add_param_group({"params": [v]})
    group = opt.base_optimizer.param_groups[-1]
    assert group["params"][0] is v and group["lr"] == 0.1  # with the base optimizer's defaults
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    trained = SAMOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))
    model(torch.randn(4, 3)).sum().backward()
    trained.step()
    fresh = SAMOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))
    fresh.load_state_dict(trained.state_dict())
    for p in model.parameters():
        assert torch.equal(fresh.base_optimizer.state[p]["momentum_buffer"], trained.state[p]["momentum_buffer"])


def test_a_copy_is_a_sam_optimizer_around_a_copy_of_the_base_optimizer():
    w, opt = _one_weight(rho=0.3, interval=2, global_step=5)
    opt.step()
    twin = copy.deepcopy(opt)
    assert isinstance(twin, SAMOptimizer) and (twin.rho, twin.interval, twin.global_step) == (0.3, 2, 5)
    assert twin.base_optimizer is not opt.base_optimizer and twin.param_groups is twin.base_optimizer.param_groups
    assert torch.equal(twin.param_groups[0]["params"][0], w) and twin.param_groups[0]["params"][0] is not w


def _image_run(algorithms, precision="fp32", steps=3, data=None):
    g = torch.Generator().manual_seed(3)
    data = data or [
        (torch.randn(8, 3, 8, 8, generator=g), torch.randint(0, 4, (8,), generator=g)) for _ in range(steps)
    ]
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3),
        torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(8, 4),
    )
    trainer = Trainer(
        model,
        data,
        f"{len(data)}ba",
        algorithms=algorithms,
        precision=precision,
        device="cpu",
        seed=0,
        optimizer=lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9),
    )
    trainer.fit()
    return trainer


def test_in_the_trainer_it_wraps_the_built_optimizer_and_changes_the_weights():
    plain, sam = _image_run([]), _image_run([SAM(rho=0.05)])
    assert type(plain.state.optimizer) is torch.optim.SGD
    opt = sam.state.optimizer
    assert isinstance(opt, SAMOptimizer) and type(opt.base_optimizer) is torch.optim.SGD
    assert all(torch.isfinite(p).all() for p in sam.state.model.parameters())
    assert any(
        not torch.allclose(a, b)
        for a, b in zip(plain.state.model.parameters(), sam.state.model.parameters(), strict=True)
    )
    # The state (momentum) and the state dict are the base optimizer's own.
    assert opt.state is opt.base_optimizer.state and len(opt.state) == len(list(sam.state.model.parameters()))
    assert opt.state_dict().keys() == opt.base_optimizer.state_dict().keys()
    # A second fit() does not wrap the wrapper.
    sam.fit()
    assert type(sam.state.optimizer.base_optimizer) is torch.optim.SGD


def test_rho_zero_takes_the_plain_steps():
    plain, sam = _image_run([]), _image_run([SAM(rho=0.0)])
    for a, b in zip(plain.state.model.parameters(), sam.state.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)  # the second pass at w gives the same gradient


def test_the_sam_optimizer_shares_the_base_param_groups_and_the_schedulers_rate():
    """Composer's test_param_groups_id_matching and test_params_value_close_after_updating."""
    model = torch.nn.Linear(4, 2)
    base = torch.optim.SGD(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.StepLR(base, step_size=1, gamma=0.5)
    data = [(torch.randn(4, 4), torch.randint(0, 2, (4,))) for _ in range(3)]
    trainer = Trainer(model, data, "3ba", optimizer=base, schedulers=[scheduler], algorithms=[SAM()], device="cpu")
    trainer.fit()
    sam = trainer.state.optimizer
    assert sam.param_groups is base.param_groups and id(sam.param_groups[0]) == id(base.param_groups[0])
    assert sam.param_groups[0]["lr"] == base.param_groups[0]["lr"] == 0.5**3
    assert "rho" not in base.param_groups[0]  # SAM adds nothing to the base optimizer's groups


def test_amp_fp16_takes_nearly_the_fp32_steps_and_an_overflow_leaves_the_weights_finite():
    fp32 = _image_run([SAM(rho=0.05)])
    amp = _image_run([SAM(rho=0.05)], precision="amp_fp16")
    for a, b in zip(fp32.state.model.parameters(), amp.state.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=2e-2, atol=2e-3)
    g = torch.Generator().manual_seed(4)
    x, y = torch.randn(8, 3, 8, 8, generator=g), torch.randint(0, 4, (8,), generator=g)
    overflowed = _image_run([SAM(rho=0.05)], precision="amp_fp16", data=[(x * 1e6, y), (x, y)])
    assert all(torch.isfinite(p).all() for p in overflowed.state.model.parameters())


def test_a_resumed_run_ends_where_the_uninterrupted_one_does(tmp_path):
    """The checkpoint holds the base optimizer's state; the interval's phase comes from the batch count."""
    g = torch.Generator().manual_seed(6)
    data = [(torch.randn(8, 6, generator=g), torch.randint(0, 3, (8,), generator=g)) for _ in range(4)]

    def trainer(duration, **kwargs):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
        return Trainer(
            model,
            data,
            duration,
            algorithms=[SAM(rho=0.3, interval=2)],
            device="cpu",
            seed=0,
            optimizer=lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9),
            **kwargs,
        )

    whole = trainer("4ba")
    whole.fit()
    first = trainer("3ba")
    first.fit()
    first.save_checkpoint(tmp_path / "ckpt.pt")
    resumed = trainer("4ba", load_path=tmp_path / "ckpt.pt")
    resumed.fit()
    assert resumed.state.optimizer.global_step == whole.state.optimizer.global_step == 4
    for a, b in zip(whole.state.model.parameters(), resumed.state.model.parameters(), strict=True):
        assert torch.equal(a, b)


RHO = "must be a number in [0, inf)"
EPSILON = "must be a number in [0, inf)"
INTERVAL = "must be an integer in [1, inf)"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rho": -0.1}, f"rho=-0.1: {RHO}"),
        ({"rho": float("nan")}, f"rho=nan: {RHO}"),
        ({"rho": "0.05"}, f"rho='0.05': {RHO}"),
        ({"rho": True}, f"rho=True: {RHO}"),
        ({"epsilon": -1.0}, f"epsilon=-1.0: {EPSILON}"),
        ({"epsilon": float("inf")}, f"epsilon=inf: {EPSILON}"),
        ({"epsilon": "1e-12"}, f"epsilon='1e-12': {EPSILON}"),
        ({"epsilon": True}, f"epsilon=True: {EPSILON}"),
        ({"interval": 0}, f"interval=0: {INTERVAL}"),
        ({"interval": 1.5}, f"interval=1.5: {INTERVAL}"),
        ({"interval": True}, f"interval=True: {INTERVAL}"),
    ],
)
def test_bad_hyperparameters_fail_naming_the_argument(kwargs, message):
    match = f"^{re.escape(message)}$"
    with pytest.raises(ValueError, match=match):
        SAM(**kwargs)
    with pytest.raises(ValueError, match=match):
        SAMOptimizer(torch.optim.SGD([torch.nn.Parameter(torch.ones(2))], lr=0.1), **kwargs)
    if "interval" not in kwargs:
        with pytest.raises(ValueError, match=match):
            cf.sam_perturbation([torch.ones(2)], **kwargs)


# -- two ranks under DDP ------------------------------------------------------------------------

STEPS, GLOBAL_BATCH = 3, 8


def _ddp_model():
    torch.manual_seed(0)  # no batch norm: DDP does not synchronise its statistics
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))


def _global_batches():
    g = torch.Generator().manual_seed(5)
    return [
        (torch.randn(GLOBAL_BATCH, 6, generator=g), torch.randint(0, 3, (GLOBAL_BATCH,), generator=g))
        for _ in range(STEPS)
    ]


def _sgd(params):
    return torch.optim.SGD(params, lr=0.5)


@pytest.mark.slow
def test_two_ranks_take_the_single_process_steps(tmp_path):
    """Under DDP both passes' gradients are averaged over the ranks, so e(w) is the global batch's:
    two ranks with half the batch each end where one process on the whole batch does."""
    out = tmp_path / "params.pt"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "1",
    }
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", __file__, str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = torch.load(out)
    single = Trainer(
        _ddp_model(), _global_batches(), f"{STEPS}ba", optimizer=_sgd, algorithms=[SAM(rho=0.5)], device="cpu", seed=0
    )
    single.fit()
    plain = Trainer(_ddp_model(), _global_batches(), f"{STEPS}ba", optimizer=_sgd, device="cpu", seed=0)
    plain.fit()
    for name, p in single.state.model.named_parameters():
        torch.testing.assert_close(got[0][name], p.detach(), rtol=1e-5, atol=1e-6, msg=name)
        torch.testing.assert_close(got[1][name], p.detach(), rtol=1e-5, atol=1e-6, msg=name)
    assert any(
        not torch.allclose(p, q)
        for p, q in zip(single.state.model.parameters(), plain.state.model.parameters(), strict=True)
    )


def _ddp_main(out_path: str) -> None:
    import torch.distributed as dist

    from algorithms.core.distributed import destroy_process_group, rank_and_world_size

    rank, world = rank_and_world_size()
    per_rank = GLOBAL_BATCH // world
    data = [
        (x[rank * per_rank : (rank + 1) * per_rank], y[rank * per_rank : (rank + 1) * per_rank])
        for x, y in _global_batches()
    ]
    trainer = Trainer(
        _ddp_model(),
        data,
        f"{STEPS}ba",
        optimizer=_sgd,
        algorithms=[SAM(rho=0.5)],
        parallel="ddp",
        device="cpu",
        seed=0,
    )
    trainer.fit()
    params = {name.removeprefix("module."): p.detach().clone() for name, p in trainer.state.model.named_parameters()}
    gathered = [None] * world
    dist.all_gather_object(gathered, params)
    if rank == 0:
        torch.save(gathered, out_path)
    destroy_process_group()


if __name__ == "__main__":
    _ddp_main(sys.argv[1])


@pytest.mark.parametrize(("interval", "steps"), [(1, 4), (2, 2)])
def test_it_reports_the_steps_taken_at_the_perturbed_weights(interval, steps):
    trainer = _image_run([SAM(rho=0.05, interval=interval)], steps=4)
    assert trainer.method_log.records["SAM"]["activity"] == {"sam_steps": steps}
    assert trainer.method_log.acted("SAM")


def test_with_rho_zero_its_steps_are_plain_ones_and_it_did_not_act():
    trainer = _image_run([SAM(rho=0.0)], steps=2)
    assert trainer.method_log.records["SAM"]["activity"] == {"sam_steps": 2}
    assert not trainer.method_log.acted("SAM")
