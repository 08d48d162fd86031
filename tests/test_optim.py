"""DecoupledSGDW and DecoupledAdamW against their definitions (Loshchilov and Hutter, 2019):
before each step ``p <- p * (1 - (lr / initial_lr) * weight_decay)``, then the plain SGD or Adam
step, computed here by hand; equal to torch's optimizers where the math says so; Composer's own
test (each builds over a parameter list and is an instance of its class)."""

from __future__ import annotations

import copy
import logging
import math
import re

import pytest
import torch

from algorithms.core import Trainer
from algorithms.optim import DecoupledAdamW, DecoupledSGDW

# lr at step t (t = 0, 1, ...), as a LambdaLR factor of the initial lr: changes every step.
SCHEDULE = (1.0, 0.5, 0.25, 2.0, 0.1)


def _params(seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return [
        torch.nn.Parameter(torch.randn(3, 4, generator=g, dtype=dtype)),
        torch.nn.Parameter(torch.randn(5, generator=g, dtype=dtype)),
    ]


def _grads(params, steps, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [[torch.randn(p.shape, generator=g, dtype=p.dtype) for p in params] for _ in range(steps)]


def _run(optimizer, params, grads, schedule=None):
    """Step ``optimizer`` with the given gradients, a LambdaLR following ``schedule`` stepping after
    each step (as the Trainer does); returns the parameters after each step."""
    scheduler = (
        torch.optim.lr_scheduler.LambdaLR(optimizer, lambda t: schedule[min(t, len(schedule) - 1)])
        if schedule is not None
        else None
    )
    after = []
    for step_grads in grads:
        for p, g in zip(params, step_grads, strict=True):
            p.grad = g.clone()
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        after.append([p.detach().clone() for p in params])
    return after


def _assert_close(got, want):
    for step, (a, b) in enumerate(zip(got, want, strict=True)):
        for x, y in zip(a, b, strict=True):
            torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-12, msg=f"step {step}")


# -- the definitions ---------------------------------------------------------------------------


def _sgdw_by_hand(params, grads, lr, momentum, dampening, weight_decay, nesterov, schedule):
    p = [x.detach().clone() for x in params]
    buf = [None] * len(p)
    out = []
    for t, step_grads in enumerate(grads):
        lr_t = lr * schedule[t]
        for i, g in enumerate(step_grads):
            d = g
            if momentum:
                buf[i] = g.clone() if buf[i] is None else momentum * buf[i] + (1 - dampening) * g
                d = g + momentum * buf[i] if nesterov else buf[i]
            p[i] = p[i] * (1 - (lr_t / lr) * weight_decay) - lr_t * d
        out.append([x.clone() for x in p])
    return out


def _adamw_by_hand(params, grads, lr, betas, eps, weight_decay, amsgrad, schedule):
    b1, b2 = betas
    p = [x.detach().clone() for x in params]
    m = [torch.zeros_like(x) for x in p]
    v = [torch.zeros_like(x) for x in p]
    v_max = [torch.zeros_like(x) for x in p]
    out = []
    for t, step_grads in enumerate(grads, start=1):
        lr_t = lr * schedule[t - 1]
        for i, g in enumerate(step_grads):
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            v_max[i] = torch.maximum(v_max[i], v[i])
            m_hat = m[i] / (1 - b1**t)
            v_hat = (v_max[i] if amsgrad else v[i]) / (1 - b2**t)
            p[i] = p[i] * (1 - (lr_t / lr) * weight_decay) - lr_t * m_hat / (v_hat.sqrt() + eps)
        out.append([x.clone() for x in p])
    return out


@pytest.mark.parametrize(
    ("momentum", "dampening", "nesterov"), [(0.0, 0.0, False), (0.9, 0.0, False), (0.9, 0.1, False), (0.9, 0.0, True)]
)
def test_sgdw_step_is_the_formula_under_a_changing_schedule(momentum, dampening, nesterov):
    params, lr, wd = _params(), 0.1, 0.01
    grads = _grads(params, len(SCHEDULE))
    want = _sgdw_by_hand(params, grads, lr, momentum, dampening, wd, nesterov, SCHEDULE)
    got = _run(
        DecoupledSGDW(params, lr=lr, momentum=momentum, dampening=dampening, weight_decay=wd, nesterov=nesterov),
        params,
        grads,
        SCHEDULE,
    )
    _assert_close(got, want)


@pytest.mark.parametrize("amsgrad", [False, True])
@pytest.mark.parametrize("betas", [(0.9, 0.95), (0.8, 0.999)])
def test_adamw_step_is_the_formula_under_a_changing_schedule(betas, amsgrad):
    params, lr, eps, wd = _params(), 0.01, 0.1, 0.02  # an eps large enough to matter
    grads = _grads(params, len(SCHEDULE))
    want = _adamw_by_hand(params, grads, lr, betas, eps, wd, amsgrad, SCHEDULE)
    got = _run(
        DecoupledAdamW(params, lr=lr, betas=betas, eps=eps, weight_decay=wd, amsgrad=amsgrad), params, grads, SCHEDULE
    )
    _assert_close(got, want)


def test_adamw_defaults_are_composers_in_the_formula():
    """lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=1e-5, no AMSGrad."""
    params = _params()
    grads = _grads(params, len(SCHEDULE))
    want = _adamw_by_hand(params, grads, 1e-3, (0.9, 0.95), 1e-8, 1e-5, False, SCHEDULE)
    _assert_close(_run(DecoupledAdamW(params), params, grads, SCHEDULE), want)


@pytest.mark.parametrize("cls", [DecoupledSGDW, DecoupledAdamW])
def test_step_hooks_run_once_per_step(cls):
    """torch runs an optimizer's step pre- and post-hooks around ``step()``; the torch optimizer's
    own step inside it runs them no second time, though torch hooks that class's ``step`` too once
    any plain optimizer of it exists, as here."""
    torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1)
    torch.optim.AdamW([torch.nn.Parameter(torch.ones(1))])
    params = _params()
    opt = cls(params, lr=0.01, weight_decay=1e-4)
    calls = []
    opt.register_step_pre_hook(lambda *args: calls.append("pre"))
    opt.register_step_post_hook(lambda *args: calls.append("post"))
    for p in params:
        p.grad = torch.ones_like(p)
    opt.step()
    assert calls == ["pre", "post"]


@pytest.mark.parametrize(
    "make",
    [
        lambda p: DecoupledSGDW(p, lr=0.1, momentum=0.9, weight_decay=0.01),
        lambda p: DecoupledAdamW(p, lr=0.01, weight_decay=0.01),
    ],
)
def test_the_decay_is_scaled_by_lr_over_initial_lr_not_by_lr(make):
    """With zero gradients only the decay moves a weight (Adam's update of a zero moment is zero):
    each step multiplies it by 1 - (lr_t / lr_0) * weight_decay, whatever lr_0 is."""
    params = _params()
    start = [p.detach().clone() for p in params]
    grads = [[torch.zeros_like(p) for p in params] for _ in SCHEDULE]
    got = _run(make(params), params, grads, SCHEDULE)
    for t, after in enumerate(got):
        factor = math.prod(1 - s * 0.01 for s in SCHEDULE[: t + 1])
        for p0, p in zip(start, after, strict=True):
            torch.testing.assert_close(p, p0 * factor, rtol=1e-12, atol=0)


def test_the_initial_lr_is_each_groups_own():
    a, b = _params()
    opt = DecoupledSGDW([{"params": [a], "lr": 0.1}, {"params": [b], "lr": 0.5}], lr=1.0, weight_decay=0.1)
    assert [g["initial_lr"] for g in opt.param_groups] == [0.1, 0.5]
    c = torch.nn.Parameter(torch.ones(2, dtype=torch.float64))
    opt.param_groups[0]["lr"] = 0.05  # a schedule halved the first group
    opt.add_param_group({"params": [c], "lr": 0.2})  # a group added later starts at its own lr
    assert opt.param_groups[2]["initial_lr"] == 0.2
    a0, b0 = a.detach().clone(), b.detach().clone()
    for p in (a, b, c):
        p.grad = torch.zeros_like(p)
    opt.step()
    torch.testing.assert_close(a.detach(), a0 * (1 - 0.5 * 0.1))
    torch.testing.assert_close(b.detach(), b0 * (1 - 0.1))
    torch.testing.assert_close(c.detach(), torch.full((2,), 0.9, dtype=torch.float64))


def test_a_parameter_without_a_gradient_is_not_decayed():
    a, b = _params()
    opt = DecoupledAdamW([a, b], lr=0.01, weight_decay=0.1)
    b0 = b.detach().clone()
    a.grad = torch.ones_like(a)
    opt.step()
    assert torch.equal(b.detach(), b0)
    assert opt.param_groups[0]["weight_decay"] == 0.1  # the group keeps its decay after the step


# -- equal to torch's optimizers where the math says so ---------------------------------------


@pytest.mark.parametrize(("momentum", "nesterov"), [(0.0, False), (0.9, False), (0.9, True)])
def test_sgdw_without_decay_is_torch_sgd_under_any_schedule(momentum, nesterov):
    params, twin = _params(), _params()
    grads = _grads(params, len(SCHEDULE))
    got = _run(DecoupledSGDW(params, lr=0.1, momentum=momentum, nesterov=nesterov), params, grads, SCHEDULE)
    want = _run(torch.optim.SGD(twin, lr=0.1, momentum=momentum, nesterov=nesterov), twin, grads, SCHEDULE)
    _assert_close(got, want)


def test_sgdw_without_momentum_is_torch_sgd_with_decay_over_initial_lr_under_any_schedule():
    """p - lr_t (g + (wd / lr_0) p) = p (1 - (lr_t / lr_0) wd) - lr_t g: the same step."""
    params, twin = _params(), _params()
    lr, wd = 0.1, 0.01
    grads = _grads(params, len(SCHEDULE))
    got = _run(DecoupledSGDW(params, lr=lr, weight_decay=wd), params, grads, SCHEDULE)
    want = _run(torch.optim.SGD(twin, lr=lr, weight_decay=wd / lr), twin, grads, SCHEDULE)
    _assert_close(got, want)


def test_sgdw_with_momentum_is_not_torch_sgd_with_any_rescaled_decay():
    """SGD's decay term enters the momentum buffer, so it lingers over later steps; SGDW's does not.
    Even at a constant lr only the first step agrees."""
    params, twin = _params(), _params()
    lr, wd = 0.1, 0.01
    grads = _grads(params, 3)
    got = _run(DecoupledSGDW(params, lr=lr, momentum=0.9, weight_decay=wd), params, grads)
    want = _run(torch.optim.SGD(twin, lr=lr, momentum=0.9, weight_decay=wd / lr), twin, grads)
    torch.testing.assert_close(got[0], want[0], rtol=1e-12, atol=1e-12)
    assert not torch.allclose(got[-1][0], want[-1][0], rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("amsgrad", [False, True])
def test_adamw_is_torch_adamw_with_decay_over_initial_lr_under_any_schedule(amsgrad):
    """torch's AdamW shrinks by lr_t * weight_decay; with weight_decay / lr_0 that is
    (lr_t / lr_0) * weight_decay, this optimizer's shrink: the same step at every lr."""
    params, twin = _params(), _params()
    lr, wd, betas = 0.01, 1e-3, (0.9, 0.95)
    grads = _grads(params, len(SCHEDULE))
    got = _run(DecoupledAdamW(params, lr=lr, betas=betas, weight_decay=wd, amsgrad=amsgrad), params, grads, SCHEDULE)
    want = _run(
        torch.optim.AdamW(twin, lr=lr, betas=betas, weight_decay=wd / lr, amsgrad=amsgrad), twin, grads, SCHEDULE
    )
    _assert_close(got, want)


def test_adamw_with_torchs_own_decay_value_decays_lr_times_less():
    """The same number means another decay: torch's AdamW(weight_decay=wd) shrinks by lr * wd."""
    params, twin = _params(), _params()
    grads = [[torch.zeros_like(p) for p in params]]
    start = params[0].detach().clone()
    got = _run(DecoupledAdamW(params, lr=0.01, weight_decay=0.01), params, grads)
    want = _run(torch.optim.AdamW(twin, lr=0.01, weight_decay=0.01), twin, grads)
    torch.testing.assert_close(got[0][0], start * (1 - 0.01), rtol=1e-12, atol=0)
    torch.testing.assert_close(want[0][0], start * (1 - 0.01 * 0.01), rtol=1e-12, atol=0)


# -- state, signatures, bad input --------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda p: DecoupledSGDW(p, lr=0.1, momentum=0.9, weight_decay=0.01),
        lambda p: DecoupledAdamW(p, lr=0.01, weight_decay=0.01, amsgrad=True),
    ],
)
def test_state_dict_round_trip_continues_the_same_steps(make):
    """Saved after a scheduled step (lr no longer initial), loaded into a fresh optimizer: the next
    steps are the uninterrupted run's, so the moments and each group's initial_lr came along."""
    params = _params()
    grads = _grads(params, 4)
    opt = make(params)
    _run(opt, params, grads[:2])
    for group in opt.param_groups:
        group["lr"] *= 0.5
    saved = copy.deepcopy(opt.state_dict())
    twin = [torch.nn.Parameter(p.detach().clone()) for p in params]
    resumed = make(twin)
    resumed.load_state_dict(saved)
    assert [g["initial_lr"] for g in resumed.param_groups] == [g["initial_lr"] for g in opt.param_groups]
    _assert_close(_run(resumed, twin, grads[2:]), _run(opt, params, grads[2:]))


def test_composer_signatures_and_defaults():
    import inspect

    sgdw = inspect.signature(DecoupledSGDW).parameters
    assert list(sgdw) == ["params", "lr", "momentum", "dampening", "weight_decay", "nesterov"]
    assert sgdw["lr"].default is inspect.Parameter.empty  # required, as Composer's
    assert [sgdw[k].default for k in ("momentum", "dampening", "weight_decay", "nesterov")] == [0, 0, 0, False]
    adamw = inspect.signature(DecoupledAdamW).parameters
    assert list(adamw) == ["params", "lr", "betas", "eps", "weight_decay", "amsgrad"]
    assert [adamw[k].default for k in list(adamw)[1:]] == [1e-3, (0.9, 0.95), 1e-8, 1e-5, False]


@pytest.mark.parametrize(("cls", "kwargs"), [(DecoupledSGDW, {"lr": 0.001}), (DecoupledAdamW, {})])
def test_composer_initialization(cls, kwargs):
    """Composer's test: each builds over a list of tensors and is an instance of its class (and of
    the torch optimizer it extends)."""
    opt = cls([torch.rand(5, 5), torch.rand(10, 10)], **kwargs)
    assert isinstance(opt, cls) and isinstance(opt, torch.optim.Optimizer)


PAIR = "must be a pair (beta1, beta2), each in [0, 1)"


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: DecoupledSGDW(p, lr=-0.1), "lr=-0.1: must be a real number >= 0.0"),
        (lambda p: DecoupledSGDW(p, lr=0.1, weight_decay=-1e-4), "weight_decay=-0.0001: must be a real number >= 0.0"),
        (lambda p: DecoupledSGDW(p, lr=0.1, momentum=-0.9), "momentum=-0.9: must be a real number >= 0.0"),
        (lambda p: DecoupledSGDW(p, lr=0.1, dampening=-0.1), "dampening=-0.1: must be a real number >= 0.0"),
        (lambda p: DecoupledAdamW(p, lr=-1e-3), "lr=-0.001: must be a real number >= 0.0"),
        (lambda p: DecoupledAdamW(p, weight_decay=-1e-5), "weight_decay=-1e-05: must be a real number >= 0.0"),
        (lambda p: DecoupledAdamW(p, betas=(0.9, 1.0)), "betas[1]=1.0: must be a real number in [0.0, 1.0)"),
        (lambda p: DecoupledAdamW(p, betas=(-0.1, 0.9)), "betas[0]=-0.1: must be a real number in [0.0, 1.0)"),
        (lambda p: DecoupledAdamW(p, betas=(0.9, 0.95, 0.99)), f"betas=(0.9, 0.95, 0.99): {PAIR}"),
        (lambda p: DecoupledAdamW(p, betas=0.9), f"betas=0.9: {PAIR}"),
        (lambda p: DecoupledAdamW(p, eps=-1.0), "eps=-1.0: must be a real number >= 0.0"),
        (lambda p: DecoupledAdamW(p, lr=float("nan")), "lr=nan: must be a real number >= 0.0"),
    ],
)
def test_bad_arguments_are_value_errors_naming_them(make, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        make(_params())


def _high_decay(cls, weight_decay):
    return (
        f"{cls}(weight_decay={weight_decay}): decoupled decay is not scaled by lr, so every step multiplies the "
        f"weights by {1.0 - weight_decay} at the initial learning rate; a value meant for torch.optim is usually "
        "lr times too large"
    )


def test_a_decay_meant_for_torch_warns(caplog):
    """From 1e-3 on (Composer warns there too), the warning says what the value does and why it is suspect."""
    with caplog.at_level(logging.WARNING, logger="algorithms.optim"):
        DecoupledSGDW(_params(), lr=0.1, weight_decay=5e-4)
    assert not caplog.records
    with caplog.at_level(logging.WARNING, logger="algorithms.optim"):
        DecoupledSGDW(_params(), lr=0.1, weight_decay=1e-3)
        DecoupledAdamW(_params(), weight_decay=0.01)
    assert [r.getMessage() for r in caplog.records] == [
        _high_decay("DecoupledSGDW", 1e-3),
        _high_decay("DecoupledAdamW", 0.01),
    ]
    assert "multiplies the weights by 0.99 at" in caplog.records[1].getMessage()


@pytest.mark.parametrize("cls", [DecoupledSGDW, DecoupledAdamW])
def test_keeps_dtype_and_device(cls):
    model = torch.nn.Linear(4, 2).to(torch.float64)
    opt = cls(model.parameters(), lr=0.01, weight_decay=1e-4)
    model(torch.randn(3, 4, dtype=torch.float64)).sum().backward()
    opt.step()
    assert all(p.dtype == torch.float64 for p in model.parameters())


# -- through the Trainer -----------------------------------------------------------------------


def test_runs_through_the_trainer_as_the_formula_says():
    """Two batches: the Trainer steps the optimizer, then the scheduler (lr halves after step 1);
    the weights are the hand-computed SGDW steps on the same gradients."""
    torch.manual_seed(0)
    model = torch.nn.Linear(6, 3)
    g = torch.Generator().manual_seed(0)
    data = [(torch.randn(4, 6, generator=g), torch.randint(0, 3, (4,), generator=g)) for _ in range(2)]
    reference = copy.deepcopy(model)

    optimizer = DecoupledSGDW(model.parameters(), lr=0.1, weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    trainer = Trainer(model, data, "2ba", optimizer=optimizer, schedulers=[scheduler], device="cpu")
    trainer.fit()
    assert trainer.state.timestamp.batch == 2

    params = list(reference.parameters())
    for t, (x, y) in enumerate(data):
        reference.zero_grad()
        torch.nn.functional.cross_entropy(reference(x), y).backward()
        lr_t = 0.1 * 0.5**t
        with torch.no_grad():
            for p in params:
                p.mul_(1 - (lr_t / 0.1) * 1e-4).sub_(lr_t * p.grad)
    for got, want in zip(model.parameters(), params, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7)


def test_a_trainer_given_a_decoupled_optimizer_trains_with_it():
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 10))
    data = [(torch.randn(8, 16), torch.randint(0, 10, (8,))) for _ in range(2)]
    before = [p.detach().clone() for p in model.parameters()]
    trainer = Trainer(model, data, "2ba", optimizer=DecoupledSGDW(model.parameters(), lr=0.1, weight_decay=1e-4))
    trainer.fit()
    assert trainer.state.timestamp.batch == 2
    assert isinstance(trainer.state.optimizer, DecoupledSGDW)
    assert all(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_a_factory_builds_it_after_wrapping():
    model = torch.nn.Linear(5, 2)
    data = [(torch.randn(4, 5), torch.randint(0, 2, (4,)))]
    trainer = Trainer(model, data, "1ba", optimizer=lambda params: DecoupledAdamW(params, lr=1e-3))
    trainer.fit()
    assert isinstance(trainer.state.optimizer, DecoupledAdamW)
