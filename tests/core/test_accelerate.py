"""parallel="accelerate": Hugging Face Accelerate's DDP (MULTI_CPU, gloo) against one process, its
checkpoints, the process group and Accelerate's state it makes and leaves, and the configurations
it refuses."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from algorithms import SAM
from algorithms.core import Trainer
from algorithms.core.distributed import destroy_process_group

accelerate = pytest.importorskip("accelerate")  # the optional extra

sys.path.insert(0, str(Path(__file__).parent))
import distributed_script as script  # noqa: E402
from test_distributed import (  # noqa: E402
    _one_process_world,
    _single_process_params,
    check_the_scripts_process_group_stays,
)

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "configs" / "accelerate"


def _accelerate_launch(config: Path, script_path: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """``accelerate launch --config_file config script args``, as a user runs it. This machine has
    no GPU, so ``ACCELERATE_USE_CPU=true``: the launcher starts the file's processes through torchrun
    and Accelerate sets up its MULTI_CPU mode (DDP over gloo) in them (configs/accelerate/README.md)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "1",
        "ACCELERATE_USE_CPU": "true",
    }
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(config)]
    proc = subprocess.run(
        [*command, "--main_process_port", "0", str(script_path), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
    )
    if check:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.mark.slow
def test_two_ranks_match_one_process_on_the_same_global_batch(tmp_path):
    """As under parallel="ddp": each rank's half batch, gradients averaged, equals the whole batch."""
    out = tmp_path / "params.pt"
    _accelerate_launch(CONFIGS / "ddp.yaml", Path(script.__file__), "accelerate", str(out))
    result, reference = torch.load(out), _single_process_params()
    assert result["params"].keys() == reference.keys()
    for name, expected in reference.items():
        torch.testing.assert_close(result["params"][name], expected, rtol=1e-5, atol=1e-6, msg=name)
    seen = result["seen"]
    assert [s["rank"] for s in seen] == [0, 1] and {s["world_size"] for s in seen} == {2}
    assert {s["model_type"] for s in seen} == {"Sequential"}  # INIT saw the model before prepare
    numel = sum(p.numel() for p in reference.values())
    assert result["optimizer_state_numel"] == [numel, numel]  # DDP: the whole state on each rank


@pytest.mark.slow
def test_a_two_rank_run_interrupted_and_resumed_ends_where_the_uninterrupted_run_ends(tmp_path):
    """The single-file checkpoint of parallel="ddp", through Accelerate's DDP: bit for bit."""
    import resume_script

    _accelerate_launch(CONFIGS / "ddp.yaml", Path(resume_script.__file__), "accelerate", "first", str(tmp_path))
    _accelerate_launch(CONFIGS / "ddp.yaml", Path(resume_script.__file__), "accelerate", "rest", str(tmp_path))
    whole, resumed = torch.load(tmp_path / "whole.pt"), torch.load(tmp_path / "resumed.pt")
    assert whole["batch"] == resumed["batch"] == resume_script.TOTAL
    for name, expected in whole["params"].items():
        assert torch.equal(resumed["params"][name], expected), name
    for a, b in zip(whole["generators"], resumed["generators"], strict=True):
        assert torch.equal(a, b)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["fsdp", "deepspeed"])
def test_fsdp_and_deepspeed_files_are_refused_where_accelerate_sets_up_another_mode(mode, tmp_path):
    """On a machine without GPUs Accelerate sets up MULTI_CPU (plain DDP) for these files: the
    Trainer stops in every rank rather than train in a mode the file did not ask for (the reason
    tools/compare_training.py records for their rows here)."""
    if torch.cuda.is_available():
        pytest.skip("a GPU machine: Accelerate sets up the file's own mode there")
    script_path = tmp_path / "train.py"
    script_path.write_text(
        "import torch\n"
        "from algorithms.core import Trainer\n"
        "data = [(torch.randn(4, 3), torch.arange(4) % 2)]\n"
        "with Trainer(torch.nn.Linear(3, 2), data, '1ba', parallel='accelerate') as trainer:\n"
        "    trainer.fit()\n"
    )
    proc = _accelerate_launch(CONFIGS / f"{mode}.yaml", script_path, check=False)
    assert proc.returncode != 0
    message = f"the Accelerate configuration asks for {mode.upper()} but Accelerate set up MULTI_CPU here"
    assert proc.stderr.count(message) >= 2, proc.stderr[-3000:]  # each rank's own refusal


def test_one_process_without_a_launcher_trains_as_single():
    """Clipping through the Accelerator, and SAM's second gradient through accelerator.backward."""
    data = [(torch.randn(4, 3, generator=torch.Generator().manual_seed(i)), torch.arange(4) % 2) for i in range(2)]

    def train(parallel):
        torch.manual_seed(0)
        with Trainer(
            torch.nn.Linear(3, 2),
            data,
            "2ba",
            algorithms=[SAM()],
            parallel=parallel,
            device="cpu",
            seed=0,
            grad_clip_norm=0.5,
        ) as trainer:
            trainer.fit()
            return {n: p.detach().clone() for n, p in trainer.strategy.unwrap(trainer.state.model).named_parameters()}

    got = train("accelerate")
    assert not accelerate.PartialState._shared_state  # close() forgot the state its Accelerator made
    for name, expected in train("single").items():
        assert torch.equal(got[name], expected), name


def _one_accelerate_process(monkeypatch) -> None:
    """A one-process MULTI_CPU world; OMP_NUM_THREADS set, or Accelerate resets torch's thread count."""
    _one_process_world(monkeypatch, ACCELERATE_USE_CPU="true", OMP_NUM_THREADS=str(torch.get_num_threads()))


def test_a_trainer_that_made_the_process_group_leaves_it_when_closed(monkeypatch):
    _one_accelerate_process(monkeypatch)
    data = [(torch.randn(4, 3), torch.randint(0, 2, (4,)))]
    try:
        for _ in range(2):  # a second Trainer in the same script makes a group of its own
            with Trainer(torch.nn.Linear(3, 2), data, "1ba", parallel="accelerate", device="cpu", seed=0) as trainer:
                assert torch.distributed.is_initialized() and trainer.strategy.owns_process_group
                assert isinstance(trainer.state.model, torch.nn.parallel.DistributedDataParallel)
                trainer.fit()
            assert not torch.distributed.is_initialized()
    finally:
        destroy_process_group()


def test_a_process_group_the_script_made_stays_the_scripts(monkeypatch):
    _one_accelerate_process(monkeypatch)
    check_the_scripts_process_group_stays("accelerate")


@pytest.mark.parametrize(
    ("env", "precision", "message"),
    [
        ({"ACCELERATE_GRADIENT_ACCUMULATION_STEPS": "4"}, "fp32", "gradient_accumulation_steps=4 is refused"),
        ({"ACCELERATE_MIXED_PRECISION": "bf16"}, "fp32", "pass precision='amp_bf16'"),
        ({"ACCELERATE_USE_FSDP": "true"}, "fp32", "asks for FSDP but Accelerate set up"),
    ],
)
def test_a_configuration_the_trainer_cannot_follow_is_refused_in_one_line(env, precision, message, monkeypatch):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises((ValueError, RuntimeError), match=message) as caught:
        Trainer(torch.nn.Linear(3, 2), [], "1ba", parallel="accelerate", precision=precision, device="cpu")
    assert "\n" not in str(caught.value)
    assert not torch.distributed.is_initialized() and not accelerate.PartialState._shared_state


def test_the_committed_configurations_are_accelerates():
    """Every file loads with Accelerate's own config loader (unknown keys are an error there)."""
    from accelerate.commands.config.config_args import load_config_from_file

    kinds = {path.stem: load_config_from_file(str(path)).distributed_type for path in CONFIGS.glob("*.yaml")}
    assert kinds == {"ddp": "MULTI_GPU", "fsdp": "FSDP", "deepspeed": "DEEPSPEED"}


@pytest.mark.parametrize("unused", [True, False])
def test_accelerates_ddp_looks_for_unused_parameters_only_when_an_algorithm_says_so(unused, monkeypatch):
    from algorithms.core import Algorithm

    class Declares(Algorithm):
        unused_parameters = unused

        def match(self, event, state):
            return False

        def apply(self, event, state, logger=None):
            pass

    _one_accelerate_process(monkeypatch)
    try:
        with Trainer(
            torch.nn.Linear(3, 2), [], "1ba", algorithms=[Declares()], parallel="accelerate", device="cpu"
        ) as trainer:
            assert trainer.state.model.find_unused_parameters is unused
    finally:
        destroy_process_group()
