"""DDP, FSDP (and with CPU offload) and DeepSpeed ZeRO-1/2/3 (and with CPU offload) on the CPU
(gloo, 2 processes under torchrun) against one process."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from algorithms import CutMix
from algorithms.core import PARALLELS, Trainer
from algorithms.core.checkpoint import CheckpointError
from algorithms.core.distributed import check_parallel, deepspeed_unavailable_reason, destroy_process_group
from algorithms.core.strategies import DeepSpeed

sys.path.insert(0, str(Path(__file__).parent))
import distributed_script as script  # noqa: E402

pytestmark = pytest.mark.slow  # torchrun launches of two ranks

REPO = Path(__file__).resolve().parents[2]
DEEPSPEED_MISSING = deepspeed_unavailable_reason()
needs_deepspeed = pytest.mark.skipif(DEEPSPEED_MISSING is not None, reason=str(DEEPSPEED_MISSING))


def _single_process_params() -> dict[str, torch.Tensor]:
    trainer = Trainer(
        script.make_model(),
        script.global_batches(),
        f"{script.STEPS}ba",
        optimizer=script.optimizer,
        device="cpu",
        seed=0,
    )
    trainer.fit()
    return script.full_state(trainer.state.model)


@pytest.fixture(scope="module")
def reference() -> dict[str, torch.Tensor]:
    return _single_process_params()


@pytest.fixture(scope="module")
def two_rank_run(tmp_path_factory):
    """``run(mode)``: distributed_script's results for ``mode`` (two ranks under torchrun), launched
    once per mode for the tests of this module that read them."""
    results: dict[str, dict] = {}

    def run(parallel: str) -> dict:
        if parallel not in results:
            out = tmp_path_factory.mktemp("two-ranks") / "params.pt"
            _torchrun(Path(script.__file__), parallel, str(out))
            results[parallel] = torch.load(out)
        return results[parallel]

    return run


# What a mode leaves where, as the engine or FSDP reports it (distributed_script.offloaded): on the
# CPU the offloads move nothing, everything being in CPU memory already, but they run their own paths.
OFFLOADED = {
    "deepspeed:1": {"optimizer": False, "param": False, "partitions_device": "cpu"},
    "deepspeed:2": {"optimizer": False, "param": False, "partitions_device": "cpu"},
    "deepspeed:3": {"optimizer": False, "param": False, "partitions_device": "cpu"},
    "deepspeed:2+offload": {"optimizer": True, "param": False, "partitions_device": "cpu"},
    "deepspeed:3+offload": {"optimizer": True, "param": True, "partitions_device": "cpu"},
    # three Conv2d/Linear layers, each its own fully_shard call (the root's holds no parameter)
    "fsdp": {"policies": ["OffloadPolicy"], "sharded_calls": 3, "shards_device": ["cpu"]},
    "fsdp:offload": {"policies": ["CPUOffloadPolicy"], "sharded_calls": 3, "shards_device": ["cpu"]},
    "ddp": {},
}


@pytest.mark.parametrize(
    "parallel",
    [
        "ddp",
        "fsdp",
        "fsdp:offload",
        pytest.param("deepspeed:1", marks=needs_deepspeed),
        pytest.param("deepspeed:2", marks=needs_deepspeed),
        pytest.param("deepspeed:3", marks=needs_deepspeed),
        pytest.param("deepspeed:2+offload", marks=needs_deepspeed),
        pytest.param("deepspeed:3+offload", marks=needs_deepspeed),
    ],
)
def test_two_ranks_match_one_process_on_the_same_global_batch(parallel, reference, two_rank_run):
    result = two_rank_run(parallel)
    # Each rank's mean loss over half the batch, gradients averaged over the ranks, equals the
    # mean over the whole batch: the same SGD steps up to float32 summation order. ZeRO averages
    # the same two gradients (reduce-scattered into partitions; each rank steps its partition and
    # the updated parameters are all-gathered), so it needs no looser tolerance, at any stage and
    # offloaded or not: measured on the earlier, smaller model, its largest difference was about
    # 1.5e-8.
    assert result["offloaded"] == OFFLOADED[parallel]
    assert result["params"].keys() == reference.keys()
    for name, expected in reference.items():
        torch.testing.assert_close(result["params"][name], expected, rtol=1e-5, atol=1e-6, msg=name)
    # Algorithms saw their rank and the world size at INIT, on the model before it was wrapped,
    # and each rank's generator draws differently.
    seen = result["seen"]
    assert [s["rank"] for s in seen] == [0, 1]
    assert {s["world_size"] for s in seen} == {2}
    assert {s["model_type"] for s in seen} == {"Sequential"}
    assert seen[0]["draw"] != seen[1]["draw"]
    # DDP keeps the whole optimizer state on every rank; FSDP and ZeRO (every stage) each keep a
    # part (ZeRO pads its partitions to an alignment), and the parts cover every parameter.
    numel = sum(p.numel() for p in reference.values())
    held = result["optimizer_state_numel"]
    if parallel == "ddp":
        assert held == [numel, numel]
    else:
        assert all(0 < h < numel for h in held) and sum(held) >= numel, held


@needs_deepspeed
@pytest.mark.parametrize("parallel", ["deepspeed:3", "deepspeed:3+offload"])
def test_zero3_partitions_each_large_parameter_over_the_ranks(parallel, two_rank_run):
    """ZeRO stage 3, by DeepSpeed's own attributes after training: each rank's partition
    (``ds_tensor``) of the hidden layer's weight, above DeepSpeed's persistence threshold, is half
    of its ``ds_numel`` elements (rounded up), the two halves cover it, and the parameter tensor
    itself holds nothing outside a forward pass; the parameters below the threshold are kept whole
    on every rank as well as partitioned. Trained, the weights are ZeRO-2's and DDP's to float32
    rounding (the same three SGD steps; rtol 1e-5, atol 1e-6)."""
    held = two_rank_run(parallel)["zero3_holdings"]
    model = script.make_model()
    large = {name for name, p in model.named_parameters() if p.numel() > 1e5}
    assert large == {"3.weight"}  # 144 x 1024, partitioned; the rest stay whole on every rank
    assert [set(rank) for rank in held] == [{name for name, _ in model.named_parameters()}] * 2
    for name, p in model.named_parameters():
        partitions = [rank[name]["partition"] for rank in held]
        assert [rank[name]["ds_numel"] for rank in held] == [p.numel()] * 2, name
        assert partitions == [math.ceil(p.numel() / 2)] * 2 and sum(partitions) >= p.numel(), name
        assert [rank[name]["resident"] for rank in held] == [0 if name in large else p.numel()] * 2, name
    zero3 = two_rank_run(parallel)["params"]
    for other in ("deepspeed:2", "ddp"):
        for name, expected in two_rank_run(other)["params"].items():
            torch.testing.assert_close(zero3[name], expected, rtol=1e-5, atol=1e-6, msg=f"{name} against {other}")


def _torchrun(script_path: Path, *args: str, timeout: int = 240) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "1",
        "DS_ACCELERATOR": "cpu",  # DeepSpeed on the CPU also where CUDA is
    }
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script_path), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.parametrize(
    "parallel",
    [
        "ddp",
        "fsdp",
        "fsdp:offload",
        pytest.param("deepspeed", marks=needs_deepspeed),
        pytest.param("deepspeed:3", marks=needs_deepspeed),
        pytest.param("deepspeed:2+offload", marks=needs_deepspeed),
        pytest.param("deepspeed:3+offload", marks=needs_deepspeed),
    ],
)
def test_a_two_rank_run_interrupted_and_resumed_ends_where_the_uninterrupted_run_ends(parallel, tmp_path):
    """6 batches straight, against 3 batches, a checkpoint, and 3 more in fresh processes (mid-epoch:
    an epoch is 4 batches), each rank with dropout (torch's generator) and CutMix (its own): the
    same parameters bit for bit, and every rank's generator where the uninterrupted run left it.
    FSDP's checkpoint is its full state dict, gathered to rank 0 and scattered back on resume (with
    CPU offload too); DeepSpeed's is its own folder, at stage 3 each rank's partitions."""
    import resume_script

    _torchrun(Path(resume_script.__file__), parallel, "first", str(tmp_path))
    _torchrun(Path(resume_script.__file__), parallel, "rest", str(tmp_path))
    whole, resumed = torch.load(tmp_path / "whole.pt"), torch.load(tmp_path / "resumed.pt")
    assert whole["batch"] == resumed["batch"] == resume_script.TOTAL
    assert whole["params"].keys() == resumed["params"].keys()
    for name, expected in whole["params"].items():
        assert torch.equal(resumed["params"][name], expected), name
    assert len(whole["generators"]) == 2 and not torch.equal(*whole["generators"])  # the ranks draw apart
    for mine, expected in zip(resumed["generators"], whole["generators"], strict=True):
        assert torch.equal(mine, expected)
    shapes = {k: (torch.Tensor, v.shape) for k, v in whole["params"].items()}
    if parallel.startswith("deepspeed"):
        files = sorted(p.name for p in (tmp_path / "run.ckpt" / "checkpoint").iterdir())
        zero3 = parallel.startswith("deepspeed:3")
        if zero3:  # each rank's model states (its own generators' client state) and its partitions
            assert files == [
                f"zero_pp_rank_{r}_mp_rank_00_{kind}_states.pt" for r in (0, 1) for kind in ("model", "optim")
            ], files
        else:  # the weights once, each rank's ZeRO partition apart
            assert files == [
                "mp_rank_00_model_states.pt",
                "zero_pp_rank_0_mp_rank_00_optim_states.pt",
                "zero_pp_rank_1_mp_rank_00_optim_states.pt",
            ], files
        checkpoint = torch.load(tmp_path / "run.ckpt" / "checkpoint" / files[0], weights_only=False)
        checkpoint["model"] = checkpoint["module"]
        assert checkpoint["deepspeed"] == script.parallel_of(parallel).options()
        if zero3:  # the model states hold empty placeholders: the weights are in the partitions only
            shapes = {k: (torch.Tensor, torch.Size([0])) for k in shapes}
    else:
        checkpoint = torch.load(tmp_path / "run.ckpt", weights_only=True)
    assert len(checkpoint["ranks"]) == 2
    # plain, whole tensors (FSDP's gathered from the shards), of the parameters' full shapes
    assert {k: (type(v), v.shape) for k, v in checkpoint["model"].items()} == shapes


def test_a_distributed_checkpoint_is_refused_by_a_run_of_another_size(tmp_path):
    """A file two ranks wrote holds two ranks' generators: one process cannot go on with them."""
    import resume_script

    _torchrun(Path(resume_script.__file__), "ddp", "first", str(tmp_path))
    with pytest.raises(CheckpointError, match=r"saved by 2 process\(es\), this run has 1 — resume with as many"):
        Trainer(
            resume_script.make_model(),
            [(torch.randn(8, 3, 8, 8), torch.randint(0, 5, (8,)))],
            "6ba",
            algorithms=[CutMix(alpha=1.0)],
            device="cpu",
            load_path=tmp_path / "run.ckpt",
        )


def test_training_changed_the_reference(reference):
    # Guard for the comparison above: the steps moved the weights away from initialisation.
    initial = script.full_state(script.make_model())
    assert any(not torch.allclose(initial[n], reference[n]) for n in initial)


def test_distributed_modes_need_torchrun(monkeypatch):
    for var in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(RuntimeError, match="torchrun"):
        Trainer(torch.nn.Linear(3, 2), [], "1ba", parallel="ddp", device="cpu")


def test_parallel_modes_and_bad_values():
    assert PARALLELS == ("single", "dp", "ddp", "fsdp", "deepspeed", "accelerate")
    with pytest.raises(ValueError, match="parallel='tp'"):
        check_parallel("tp")
    with pytest.raises(ValueError, match="function of the parameters"):
        model = torch.nn.Linear(3, 2)
        Trainer(model, [], "1ba", parallel="fsdp", optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    with pytest.raises(ValueError, match=r"^DeepSpeed\(zero_stage=4\): ZeRO stage 1, 2 or 3 is supported$"):
        DeepSpeed(zero_stage=4)


@needs_deepspeed
@pytest.mark.parametrize("precision", ["amp_fp16", "fp16"])
def test_deepspeed_names_the_precisions_it_can_train_in(precision, monkeypatch):
    # Refused before anything starts: no process group, no torchrun environment needed.
    for var in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    from deepspeed.accelerator import get_accelerator

    if torch.float16 in get_accelerator().supported_dtypes() and precision == "fp16":
        pytest.skip("DeepSpeed's accelerator here has float16")
    with pytest.raises(ValueError, match=rf"precision='{precision}'.*use one of fp32.*bf16"):
        Trainer(torch.nn.Linear(3, 2), [], "1ba", parallel="deepspeed", precision=precision)


def test_deepspeed_without_the_package_or_a_compiler_says_why(monkeypatch):
    with monkeypatch.context() as hidden:
        hidden.setitem(sys.modules, "deepspeed", None)  # import deepspeed fails, find_spec finds nothing
        with pytest.raises(RuntimeError, match="deepspeed is not installed"):
            Trainer(torch.nn.Linear(3, 2), [], "1ba", parallel="deepspeed", device="cpu")
    if DEEPSPEED_MISSING is None:
        # The CPU accelerator builds its communication op with the compiler torch's builder calls.
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
        monkeypatch.setenv("CXX", "no-such-c++-compiler")
        monkeypatch.delenv("DS_ACCELERATOR", raising=False)
        assert "C++ compiler, and 'no-such-c++-compiler' is not on PATH" in deepspeed_unavailable_reason()


def test_data_parallel_wraps_and_trains():
    data = [(torch.randn(4, 3), torch.randint(0, 2, (4,))) for _ in range(2)]
    trainer = Trainer(torch.nn.Linear(3, 2), data, "2ba", parallel="dp", device="cpu", seed=0)
    assert isinstance(trainer.state.model, torch.nn.DataParallel)
    before = trainer.state.model.module.weight.detach().clone()
    trainer.fit()
    assert not torch.equal(before, trainer.state.model.module.weight)


@pytest.mark.cuda
def test_fsdp_on_cuda_matches_one_process(reference, tmp_path):
    """The same FSDP check with NCCL where one or more GPUs exist (run by ``nox -s gpu``)."""
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA devices for a 2-rank NCCL run")
    out = tmp_path / "params.pt"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            str(Path(script.__file__)),
            "fsdp",
            str(out),
            "auto",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = torch.load(out)["params"]
    for name, expected in reference.items():
        torch.testing.assert_close(got[name].cpu(), expected, rtol=1e-4, atol=1e-5, msg=name)


def _one_process_world(monkeypatch, **extra: str) -> None:
    """torchrun's environment for a world of this one process (MASTER_PORT=0: the store picks a free port)."""
    for name, value in dict(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT="0",
        RANK="0",
        WORLD_SIZE="1",
        LOCAL_RANK="0",
        LOCAL_WORLD_SIZE="1",
        **extra,
    ).items():
        monkeypatch.setenv(name, value)


@pytest.mark.parametrize("unused", [False, True])
def test_ddp_looks_for_unused_parameters_only_when_an_algorithm_says_it_leaves_some(unused, monkeypatch):
    """A one-process torchrun world: the DDP wrapper's find_unused_parameters follows the
    algorithms' ``unused_parameters`` (Stochastic Depth's dropped blocks get no gradient)."""
    from algorithms.core import Algorithm, Event

    class Leaves(Algorithm):
        unused_parameters = unused

        def match(self, event, state):
            return event is Event.INIT

        def apply(self, event, state, logger=None):
            pass

    _one_process_world(monkeypatch)
    try:
        trainer = Trainer(
            torch.nn.Linear(3, 2),
            [(torch.randn(4, 3), torch.randint(0, 2, (4,)))],
            "1ba",
            algorithms=[Leaves()],
            parallel="ddp",
            device="cpu",
            seed=0,
        )
        assert isinstance(trainer.state.model, torch.nn.parallel.DistributedDataParallel)
        assert trainer.state.model.find_unused_parameters is unused
        trainer.fit()
    finally:
        destroy_process_group()


@needs_deepspeed
def test_closing_a_deepspeed_trainer_frees_its_engine_and_ends_training(monkeypatch):
    """DeepSpeed hooks every parameter's gradient with closures that hold its engine, a cycle the
    garbage collector cannot free; an engine left so is destroyed, process groups and all, while
    the interpreter shuts down, where a rank can abort. close() has the engine remove the hooks
    while the process group is up, and then nothing holds it. A one-process torchrun world."""
    import gc
    import weakref

    _one_process_world(monkeypatch, DS_ACCELERATOR="cpu")
    try:
        data = [(torch.randn(4, 3), torch.randint(0, 2, (4,)))]
        with Trainer(
            torch.nn.Linear(3, 2), data, "1ba", parallel=DeepSpeed(zero_stage=1), device="cpu", seed=0
        ) as trainer:
            trainer.fit()
            engine = weakref.ref(trainer.strategy._engine)
            assert type(engine()).__name__ == "DeepSpeedEngine"
        with pytest.raises(RuntimeError, match=r"fit\(\) after close\(\)"):
            trainer.fit()
        assert trainer.eval(data)["accuracy"] is not None  # evaluation still works
        del trainer  # after the one close the with block made
        for _ in range(4):  # as the collection at exit does: until a pass frees nothing
            if not gc.collect():
                break
        assert engine() is None
    finally:
        destroy_process_group()  # DeepSpeed's: it drops the groups DeepSpeed cached from this world


@needs_deepspeed
def test_a_deepspeed_checkpoint_is_refused_by_a_trainer_with_other_zero_options(monkeypatch, tmp_path):
    """A one-process world: a ZeRO-2 folder, resumed at stage 3 (whose files DeepSpeed lays out
    otherwise) or with the optimizer offloaded, is refused in one line naming both, before DeepSpeed
    loads anything: the weights stay as they were."""
    _one_process_world(monkeypatch, DS_ACCELERATOR="cpu")
    data = [(torch.randn(4, 3), torch.randint(0, 2, (4,)))]
    path = tmp_path / "run.ckpt"

    def trainer(parallel):
        torch.manual_seed(1)  # weights other than the checkpoint's
        return Trainer(torch.nn.Linear(3, 2), data, "2ba", parallel=parallel, device="cpu", seed=0)

    try:
        with trainer(DeepSpeed(zero_stage=2)) as first:
            first.fit()
            first.save_checkpoint(path)
    finally:
        destroy_process_group()
    for other in (DeepSpeed(zero_stage=3), DeepSpeed(zero_stage=2, offload_optimizer=True)):
        try:
            with trainer(other) as second:
                before = {n: p.detach().clone() for n, p in second.state.model.named_parameters()}
                with pytest.raises(CheckpointError) as refused:
                    second.load_checkpoint(path)
                after = {n: p.detach().clone() for n, p in second.state.model.named_parameters()}
        finally:
            destroy_process_group()
        assert str(refused.value) == (
            f"{path}: saved with DeepSpeed(zero_stage=2), this Trainer has {other!r} — resume with the same ZeRO "
            "stage and offloads"
        )
        assert after.keys() == before.keys() and all(torch.equal(after[n], before[n]) for n in before)


@needs_deepspeed
@pytest.mark.parametrize("method", ["EMA", "SWA"])
def test_methods_that_copy_the_whole_model_are_refused_at_zero_stage_3(method, monkeypatch):
    """As under FSDP: at stage 3 the model's parameters are DeepSpeed's empty placeholders between
    steps, so EMA's and SWA's whole copy of the model is one of placeholders. By hand, two ranks:
    EMA's average held an empty weight, and evaluating with it failed; SWA loaded its mean into
    every parameter but the partitioned one, which it left as trained, silently. A one-process
    world."""
    import algorithms

    _one_process_world(monkeypatch, DS_ACCELERATOR="cpu")
    data = [(torch.randn(4, 3), torch.randint(0, 2, (4,)))]
    algorithm = algorithms.EMA(half_life="2ba") if method == "EMA" else algorithms.SWA(swa_start="1ba", swa_end="2ba")
    try:
        with (
            pytest.raises(ValueError, match=rf"^{method} under parallel='deepspeed:3': {method} keeps a whole copy"),
            Trainer(
                torch.nn.Linear(3, 2),
                data,
                "2ba",
                algorithms=[algorithm],
                parallel=DeepSpeed(zero_stage=3),
                device="cpu",
            ),
        ):
            pass
    finally:
        destroy_process_group()


@needs_deepspeed
def test_a_second_deepspeed_world_in_one_process_starts_clean(monkeypatch):
    """DeepSpeed caches groups made from the world; torch's destroy_process_group leaves them
    stale, so the next DeepSpeed world in the same process failed ("Group ... is not registered").
    The project's destroy_process_group clears them. Two one-process worlds, one after the other."""
    _one_process_world(monkeypatch, DS_ACCELERATOR="cpu")
    data = [(torch.randn(4, 3), torch.randint(0, 2, (4,)))]
    for _ in range(2):
        try:
            with Trainer(
                torch.nn.Linear(3, 2), data, "1ba", parallel=DeepSpeed(zero_stage=1), device="cpu", seed=0
            ) as trainer:
                trainer.fit()
                assert trainer.state.timestamp.batch == 1
        finally:
            destroy_process_group()
    assert not torch.distributed.is_initialized()


def test_a_trainer_that_made_the_process_group_leaves_it_when_closed(monkeypatch):
    """Under torchrun with no group yet, the Trainer makes one and close() leaves it: a script
    needs neither init nor destroy. A one-process world; the with block closes the Trainer."""
    _one_process_world(monkeypatch)
    data = [(torch.randn(4, 3), torch.randint(0, 2, (4,)))]
    try:
        with Trainer(torch.nn.Linear(3, 2), data, "1ba", parallel="ddp", device="cpu", seed=0) as trainer:
            assert torch.distributed.is_initialized() and trainer.strategy.owns_process_group
            trainer.fit()
        assert not torch.distributed.is_initialized()
        trainer.close()  # again: nothing more to do
        assert not torch.distributed.is_initialized()
        # a second Trainer in the same script makes a group of its own, and leaves it too
        trainer = Trainer(torch.nn.Linear(3, 2), data, "1ba", parallel="ddp", device="cpu", seed=0)
        trainer.fit()
        assert torch.distributed.is_initialized()
        trainer.close()
        assert not torch.distributed.is_initialized()
    finally:
        destroy_process_group()


@pytest.mark.parametrize("parallel", ["ddp", "fsdp", pytest.param("deepspeed", marks=needs_deepspeed)])
def test_a_dict_loss_trains_in_the_distributed_modes(parallel, monkeypatch):
    """A one-process torchrun world: the dict's values are summed, backpropagated through the
    wrapped model, and kept by name, as in one process."""
    _one_process_world(monkeypatch, DS_ACCELERATOR="cpu")
    data = [(torch.randn(4, 3, generator=torch.Generator().manual_seed(i)), torch.arange(4) % 2) for i in range(2)]

    def loss_fn(outputs, targets):
        return {"ce": torch.nn.functional.cross_entropy(outputs, targets), "l2": outputs.pow(2).mean()}

    def train(parallel):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(3, 2))  # FSDP shards the layer, then the root
        with Trainer(
            model, data, "2ba", loss_fn=loss_fn, optimizer=script.optimizer, parallel=parallel, device="cpu", seed=0
        ) as trainer:
            trainer.fit()
            params = {n.removeprefix("module."): p.detach() for n, p in trainer.state.model.named_parameters()}
            params = {n: p.full_tensor() if hasattr(p, "full_tensor") else p for n, p in params.items()}
            return params, sorted(trainer.state.loss_parts)

    try:
        params, parts = train(parallel)
    finally:
        destroy_process_group()
    single, _ = train("single")
    assert parts == ["ce", "l2"]
    for name, expected in single.items():
        torch.testing.assert_close(params[name], expected, rtol=1e-6, atol=1e-7, msg=name)


def check_the_scripts_process_group_stays(parallel: str) -> None:
    """In a launched process (its environment set): a group the script made before the Trainer
    is not the Trainer's, and is still there after the Trainer is closed."""
    torch.distributed.init_process_group("gloo")
    try:
        data = [(torch.randn(4, 3), torch.randint(0, 2, (4,)))]
        with Trainer(torch.nn.Linear(3, 2), data, "1ba", parallel=parallel, device="cpu", seed=0) as trainer:
            assert not trainer.strategy.owns_process_group
            trainer.fit()
        assert torch.distributed.is_initialized()
    finally:
        destroy_process_group()
    assert not torch.distributed.is_initialized()


def test_a_process_group_the_script_made_stays_the_scripts(monkeypatch):
    _one_process_world(monkeypatch)
    check_the_scripts_process_group_stays("ddp")


def test_destroy_process_group_outside_a_group_does_nothing():
    assert not torch.distributed.is_initialized()
    destroy_process_group()
    assert not torch.distributed.is_initialized()
