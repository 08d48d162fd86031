"""The Trainer's parallel modes are strategy objects: one per mode, and a loop with no branch on
the mode; checkpoint files are written and read without the Trainer."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest
import torch

from algorithms.core import PARALLELS, Loop, Trainer
from algorithms.core.strategies import STRATEGIES, DeepSpeed, Single, Strategy, strategy

CORE = Path(inspect.getfile(Trainer)).parent


def test_one_strategy_per_parallel_mode():
    assert tuple(STRATEGIES) == PARALLELS
    for name, cls in STRATEGIES.items():
        assert issubclass(cls, Strategy) and cls.name == name
        assert isinstance(strategy(name), cls)
    given = STRATEGIES["deepspeed"](zero_stage=1)
    assert strategy(given) is given and repr(given) == "DeepSpeed(zero_stage=1)"
    with pytest.raises(ValueError, match=r"parallel='tp' is not supported — use one of single, dp, ddp"):
        strategy("tp")


@pytest.mark.parametrize(
    ("owner", "method"),
    [
        (Trainer, "fit"),
        (Trainer, "_train_batch"),
        *((Loop, m) for m in ("batch", "forward", "loss", "backward", "step")),
    ],
)
def test_fit_has_no_branch_on_the_parallel_mode(owner, method):
    """No name of a mode, of the mode's attribute, or of DeepSpeed's or SAM's special calls in fit()
    and the batch steps it calls (the Loop's)."""
    tree = ast.parse(inspect.getsource(getattr(owner, method)).replace("\n    ", "\n")[4:])
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    attributes = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    strings = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)}
    assert not (names | attributes) & {"parallel", "_deepspeed", "first_step", "scaler", "deepspeed"}
    assert not strings & set(PARALLELS)
    assert not any(
        isinstance(node, ast.Call) and getattr(node.func, "id", "") == "hasattr" for node in ast.walk(tree)
    ) or (
        # the one hasattr left asks the data loader's sampler for set_epoch, not the mode
        [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "hasattr"]
        == ["hasattr(sampler, 'set_epoch')"]
        and method == "fit"
    )


def test_trainer_and_checkpoint_do_not_import_each_other():
    def imports(module: str) -> set[str]:
        tree = ast.parse((CORE / f"{module}.py").read_text(encoding="utf-8"))
        return {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}

    assert "trainer" not in imports("checkpoint") and "trainer" not in imports("state")
    assert "checkpoint" not in imports("trainer")  # the strategies write and read the files
    assert "checkpoint" in imports("strategies") and "trainer" not in imports("strategies")


def test_the_state_holds_what_a_checkpoint_needs():
    algorithms = __import__("algorithms")
    trainer = Trainer(
        torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 2)),
        [(torch.randn(4, 3, 2, 2), torch.randint(0, 2, (4,)))],
        "2ba",
        algorithms=[algorithms.CutMix(alpha=1.0)],
        seed=0,
        device="cpu",
    )
    trainer.fit()
    saved = trainer.state.state_dict()
    assert set(saved) == {
        "model",
        "model_form",
        "adapter_config",
        "optimizers",
        "schedulers",
        "scaler",
        "timestamp",
        "algorithms",
        "rng",
    }
    assert saved["model_form"] == "full" and saved["adapter_config"] is None  # the whole model, not a peft adapter
    assert saved["timestamp"]["batch"] == 2 and saved["scaler"] is None
    assert [a["name"] for a in saved["algorithms"]] == ["CutMix"] and "generator" in saved["algorithms"][0]["state"]
    assert trainer.state.algorithms == trainer.engine.algorithms


def test_the_single_strategy_scales_steps_and_clips_as_torch_does():
    """amp_fp16's GradScaler: the backward runs on the scaled loss; prepare_step unscales and clips to
    the norm; step steps and clears the gradients."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    single = Single()
    single.bind("amp_fp16", torch.device("cpu"), grad_clip_norm=0.5)
    assert single.scaler.is_enabled()
    loss = model(torch.randn(8, 4)).square().sum()
    expected = torch.autograd.grad(loss, list(model.parameters()), retain_graph=True)
    single.backward(loss, optimizer, again=lambda: pytest.fail("no second pass without first_step"))
    scale = single.scaler.get_scale()
    assert all(torch.allclose(p.grad, g * scale) for p, g in zip(model.parameters(), expected, strict=True))
    single.prepare_step(model, optimizer)
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in expected]))
    clip = min(1.0, 0.5 / (float(norm) + 1e-6))
    assert all(torch.allclose(p.grad, g * clip, atol=1e-6) for p, g in zip(model.parameters(), expected, strict=True))
    before = [p.detach().clone() for p in model.parameters()]
    single.step(optimizer)
    assert all(p.grad is None for p in model.parameters())
    assert all(
        torch.allclose(p, b - 0.1 * g * clip, atol=1e-6)
        for p, b, g in zip(model.parameters(), before, expected, strict=True)
    )


def test_deepspeed_scales_its_own_loss():
    deepspeed = DeepSpeed()
    deepspeed.bind("amp_fp16", torch.device("cpu"))
    assert not deepspeed.scaler.is_enabled()
