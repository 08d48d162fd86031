"""The Trainer's parallel modes are strategy objects: one per mode, and a loop with no branch on
the mode; checkpoint files are written and read without the Trainer."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest
import torch

from algorithms.core import PARALLELS, Loop, Trainer
from algorithms.core.strategies import FSDP, STRATEGIES, DeepSpeed, Single, Strategy, strategy

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


def test_deepspeed_takes_a_zero_stage_and_offloads_and_refuses_what_it_cannot_do():
    """The ZeRO options as the constructor takes them (and a checkpoint records them), and one line
    for each option DeepSpeed cannot run: a stage other than 1, 2 or 3, parameter offload below
    stage 3 (only stage 3 partitions the parameters), an offload that is not a bool."""
    assert repr(DeepSpeed()) == "DeepSpeed(zero_stage=2)"
    full = DeepSpeed(zero_stage=3, offload_optimizer=True, offload_param=True)
    assert repr(full) == "DeepSpeed(zero_stage=3, offload_optimizer=True, offload_param=True)"
    assert full.options() == {"zero_stage": 3, "offload_optimizer": True, "offload_param": True}
    assert repr(DeepSpeed(zero_stage=1, offload_optimizer=True)) == "DeepSpeed(zero_stage=1, offload_optimizer=True)"
    refused = [
        ({"zero_stage": 0}, ValueError, r"^DeepSpeed\(zero_stage=0\): ZeRO stage 1, 2 or 3 is supported$"),
        ({"zero_stage": True}, ValueError, r"^DeepSpeed\(zero_stage=True\): ZeRO stage 1, 2 or 3 is supported$"),
        (
            {"zero_stage": 2, "offload_param": True},
            ValueError,
            r"^DeepSpeed\(zero_stage=2, offload_param=True\): only ZeRO stage 3 partitions the parameters, and so "
            r"can offload them — pass zero_stage=3, or offload the optimizer alone \(offload_optimizer=True\)$",
        ),
        ({"offload_optimizer": "cpu"}, TypeError, r"^DeepSpeed\(offload_optimizer='cpu'\): pass True or False$"),
        ({"zero_stage": 3, "offload_param": 1}, TypeError, r"^DeepSpeed\(offload_param=1\): pass True or False$"),
    ]
    for options, error, message in refused:
        with pytest.raises(error, match=message):
            DeepSpeed(**options)


@pytest.mark.slow  # DeepSpeed's engine, under the profiler: seconds
@pytest.mark.parametrize("zero_stage", [2, 3])
def test_deepspeeds_buckets_hold_no_more_than_the_model(zero_stage, one_rank_deepspeed):
    """One rank of ZeRO on a 4,000-parameter model: the peak tensor memory of a step is a few
    times the model's 16 KB (weights, gradients, their partitions, the reduce bucket), not the
    2 GB that DeepSpeed's default bucket of 5e8 float32 elements would take whatever the model."""
    from algorithms.core.distributed import deepspeed_initialize, destroy_process_group
    from algorithms.core.tensor_memory import TensorMemory

    x = torch.randn(8, 40, generator=torch.Generator().manual_seed(0))
    try:
        with TensorMemory("cpu") as memory:
            model = torch.nn.Sequential(torch.nn.Linear(40, 80), torch.nn.ReLU(), torch.nn.Linear(80, 10))
            parameters = sum(p.numel() for p in model.parameters())
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            engine = deepspeed_initialize(model, optimizer, "fp32", zero_stage, 8, None)

            def step() -> None:
                engine.backward(engine(x).square().mean())
                engine.step()

            step()
            with memory.window():
                step()
    finally:
        destroy_process_group()
    assert parameters == 40 * 80 + 80 + 80 * 10 + 10
    assert memory.peak_bytes is not None and 0 < memory.peak_bytes < 50 * 4 * parameters, memory.figures()


def test_fsdp_takes_cpu_offload_as_a_bool():
    assert repr(FSDP()) == "FSDP()" and repr(FSDP(cpu_offload=True)) == "FSDP(cpu_offload=True)"
    assert strategy("fsdp").cpu_offload is False
    with pytest.raises(TypeError, match=r"^FSDP\(cpu_offload='cpu'\): pass True or False$"):
        FSDP(cpu_offload="cpu")


def test_fsdp_cpu_offload_gives_every_shard_torchs_policy_and_trains_as_one_process(monkeypatch):
    """A one-process torchrun world (gloo): every fully_shard call gets torch's CPUOffloadPolicy,
    unpinned (pinning needs an accelerator, and torch refuses it without one); the shards and their
    gradients are in CPU memory, where on this machine everything is; two SGD steps give the
    weights of one process without FSDP."""
    from torch.distributed.fsdp import CPUOffloadPolicy

    from algorithms.core.distributed import destroy_process_group

    for name, value in {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "0", "RANK": "0", "WORLD_SIZE": "1"}.items():
        monkeypatch.setenv(name, value)
    data = [(torch.randn(4, 3, generator=torch.Generator().manual_seed(i)), torch.arange(4) % 2) for i in range(2)]

    def train(parallel):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
        optimizer = lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9)  # noqa: E731
        return Trainer(model, data, "2ba", optimizer=optimizer, parallel=parallel, device="cpu", seed=0)

    try:
        with train(FSDP(cpu_offload=True)) as trainer:
            model = trainer.state.model
            groups = [m._get_fsdp_state()._fsdp_param_group for m in (model[0], model[2])]  # torch's record
            assert [g.offload_policy for g in groups] == [CPUOffloadPolicy(pin_memory=False)] * 2
            trainer.fit()
            assert {p.to_local().device.type for p in model.parameters()} == {"cpu"}
            params = {n: p.full_tensor() for n, p in model.named_parameters()}
    finally:
        destroy_process_group()
    single = train("single")
    single.fit()
    for name, expected in single.state.model.named_parameters():
        torch.testing.assert_close(params[name], expected, rtol=1e-6, atol=1e-7, msg=name)
