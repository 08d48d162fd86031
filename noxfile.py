"""Sessions: ``nox -s tests``, ``nox -s docs``, ``nox -s check``, ``nox -s lint``, ``nox -s models``; ``nox -s matrix``,
``nox -s mutants``, ``nox -s minimums``, ``nox -s bench`` and ``nox -s bench_peers`` by hand.

Virtual environments are reused between runs (a second ``nox -s tests`` starts in seconds).
Torch is installed first, from ``$METHODS_TORCH_SPEC`` (default ``torch==2.13.0``, a CPU build),
so that resolving the project never pulls a multi-gigabyte CUDA build onto a CPU machine.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from pathlib import Path

import nox

nox.options.reuse_venv = "yes"
nox.options.sessions = ["tests", "lint"]

PYTHON = os.environ.get("METHODS_PYTHON") or None  # None: the interpreter running nox
TORCH_SPEC = os.environ.get("METHODS_TORCH_SPEC", "torch==2.13.0")


def install_project(session: nox.Session, *extras: str, torch_spec: str | None = None) -> None:
    """Torch from ``torch_spec`` (default TORCH_SPEC), then the project (editable) with ``extras``.

    A reused environment whose install inputs (pyproject.toml, the torch spec, extras) are unchanged
    skips pip altogether, so a second run starts in seconds.
    """
    torch_spec = TORCH_SPEC if torch_spec is None else torch_spec
    spec = f".[{','.join(extras)}]" if extras else "."
    inputs = "\n".join([Path("pyproject.toml").read_text(encoding="utf-8"), torch_spec, spec])
    stamp = Path(session.virtualenv.location) / ".methods-install-stamp"
    digest = hashlib.sha256(inputs.encode()).hexdigest()
    if stamp.exists() and stamp.read_text() == digest:
        session.log("environment up to date (pyproject.toml and METHODS_TORCH_SPEC unchanged): skipping pip")
        return
    session.install(*torch_spec.split())
    session.install("-e", spec)
    stamp.write_text(digest)


FAST = ["-m", "not slow"]


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """The fast tests (CUDA-marked tests skip without a GPU; DeepSpeed's and Accelerate's run on the CPU): every test
    but the slow end-to-end ones, in a few minutes. Arguments replace the selection:
    ``nox -s tests -- -m slow`` runs the end-to-end tests (site builds in Chromium, every card's
    code, torchrun launches, the composability sample), which CI runs too; ``nox -s tests -- tests``
    runs everything."""
    install_project(session, "dev", "deepspeed", "accelerate", "fsspec", "transformers", "lightning", "peft")
    session.run("pytest", "-q", *(session.posargs or FAST))


@nox.session(python=PYTHON)
def docs(session: nox.Session) -> None:
    """Build the Methods Library site into docs/build/html; any warning fails the build."""
    install_project(session, "docs")
    # the doctrees (Sphinx's pickled cache, about 10 MB) beside the site, not inside what is published
    session.run(
        "sphinx-build",
        "-W",
        "--keep-going",
        "-b",
        "html",
        "-d",
        "docs/build/doctrees",
        "docs/source",
        "docs/build/html",
        *session.posargs,
    )
    session.log(f"The site is at {Path('docs/build/html/index.html').resolve()}")


@nox.session(python=PYTHON)
def check(session: nox.Session) -> None:
    """Drift checks: metadata schemas, metadata against the code, every card against both, the
    committed effects as evidence (intervals, verdicts, no effect from a method that did not act,
    the workload's unit), and every generated page rendering from the metadata and results
    (written by ``nox -s docs``)."""
    install_project(session, "docs")
    session.run("python", "tools/validate_metadata.py")
    session.run("python", "tools/check_functional.py")
    session.run("python", "tools/check_cards.py")
    session.run("python", "tools/check_effects.py")
    session.run("python", "tools/generate_pages.py", "--check")


@nox.session(python=PYTHON)
def gpu(session: nox.Session) -> None:
    """On a CUDA machine: the CUDA-marked tests, the training comparison at reduced scale, then
    the effects sweeps at a GPU-sized workload.

    The comparison: ResNet-50 on synthetic 224-pixel data, 2 epochs of at most 50 batches of 64 (the
    first a warm-up, timed apart) per configuration, every precision in one process plus dp, ddp,
    fsdp and DeepSpeed ZeRO-1 and 2 over all visible GPUs, and the same DDP, FSDP and DeepSpeed
    through Hugging Face Accelerate (``accelerate launch`` with each file of configs/accelerate/;
    its DeepSpeed row is skipped, with the reason, unless ``transformers`` is installed, which
    Accelerate's DeepSpeed plugin reads), three rounds interleaved: sized to about five minutes on
    one current GPU (not yet timed there). Writes
    results/gpu-<device>-<date>.json. The effects: the vision sweep on the digits at 32 pixels
    (a fifth of them to train, 12 epochs) and the language-model sweep at 400 steps of 256-byte
    windows, 5 seeds each, into results/effects/<workload>-gpu-<device>.json (a run is mostly its
    process's start there: about 10 minutes for both). Commit what it writes; the docs render it.
    Set METHODS_TORCH_SPEC to a CUDA build of torch. Extra arguments go to
    tools/compare_training.py (e.g. --out).
    """
    install_project(session, "dev", "deepspeed", "accelerate")
    session.run(
        "python",
        "-c",
        "import torch, sys; sys.exit(0 if torch.cuda.is_available() else "
        "'nox -s gpu needs CUDA: torch.cuda.is_available() is False (set METHODS_TORCH_SPEC "
        "to a CUDA build of torch)')",
    )
    session.run("pytest", "-q", "-m", "cuda", "tests")
    nproc = session.run("python", "-c", "import torch; print(torch.cuda.device_count())", silent=True).strip()
    session.run(
        "python",
        "tools/compare_training.py",
        "--model",
        "resnet50",
        "--data",
        "synthetic",
        "--epochs",
        "2",
        "--batch-size",
        "64",
        "--max-batches",
        "50",
        "--workers",
        "4",
        "--repeats",
        "3",
        "--nproc",
        nproc,
        "--timeout",
        "300",
        "--force",
        "--configs",
        "fp32:single,fp16:single,bf16:single,amp_fp16:single,amp_bf16:single,"
        "fp32:dp,amp_bf16:ddp,amp_bf16:fsdp,bf16:deepspeed:1,bf16:deepspeed:2,"
        "amp_bf16:accelerate:ddp,amp_bf16:accelerate:fsdp,amp_bf16:accelerate:deepspeed",
        *session.posargs,
    )
    session.run("python", "tools/measure_methods.py", "--image-size", "32", "--seeds", "5", "--timeout", "300")
    session.run(
        "python",
        "tools/measure_methods.py",
        "--workload",
        "nlp",
        "--seq-len",
        "256",
        "--max-batches",
        "400",
        "--seeds",
        "5",
        "--timeout",
        "300",
    )


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """The benchmark suite, run by hand on a quiet machine (about 10 minutes on 2 CPU cores).

    Batch methods against their memory floors, the Trainer's own cost against a plain loop, the
    checks' and the docs build's times as the catalog grows: each figure measured side by side in
    one run, repeated, medians, printed beside its target. Rewrites
    results/bench/<cpu|gpu>-<hardware>.json (commit it) and fails when a target is missed. Extra
    arguments go to benchmarks/run.py (e.g. --only trainer_overhead --output /tmp/bench.json).
    The peers (torchvision, timm, Composer) run in their own session, ``nox -s bench_peers``.
    """
    install_project(session, "dev")
    session.run("python", "benchmarks/run.py", "--force", *session.posargs)


@nox.session(python=PYTHON)
def matrix(session: nox.Session) -> None:
    """The composability matrix: every method alone, with every other method of its domain in both
    orders, in every precision and in every distributed mode the machine runs (DeepSpeed included),
    a few batches each; writes results/composability/<cpu|gpu>-<hardware>.json, which the site and
    tests/tooling/test_composability.py read (commit it). About a minute on two CPU cores. Extra
    arguments go to tools/composability_matrix.py (e.g. --out with --kinds).
    """
    install_project(session, "dev", "deepspeed", "transformers", "lightning")  # the loops and real-models sections
    session.run("python", "tools/composability_matrix.py", "--force", *session.posargs)


# The fast tests: the methods, the Trainer in one process, the metadata (no torchrun, no docs).
TEST_TOOLS = ("pytest", "hypothesis", "numpy")  # what the fast tests import, from the dev extra
FAST_TESTS = ("tests/methods", "tests/core", "tests/test_metadata.py", "--ignore=tests/core/test_distributed.py")


def floors(requirements: list[str]) -> list[str]:
    """``name==X`` for every ``name>=X`` requirement (the lowest version each one allows)."""
    pinned = []
    for requirement in requirements:
        match = re.fullmatch(r"([A-Za-z0-9_.\-]+)(\[[^\]]*\])?>=([0-9][^,;\s]*)", requirement.strip())
        if match:
            pinned.append(f"{match[1]}=={match[3]}")
    return pinned


@nox.session(python=PYTHON)
def minimums(session: nox.Session) -> None:
    """The lowest versions pyproject.toml allows, against the fast tests; run by hand, not in CI.

    Installs every runtime dependency and the test tools at the floor its ``>=`` names (torch
    included), then the project without resolving again, and runs the fast tests and the
    two-process tests (DDP, FSDP; DeepSpeed's skip, as it is not installed). The registry's
    only torch builds at the floor are CUDA builds (about 3 GB with their libraries: a few minutes
    to download, which is why CI does not run this); set METHODS_TORCH_FLOOR_SPEC to another wheel
    or spec to test a different one.
    """
    import tomllib

    project = tomllib.loads(Path("pyproject.toml").read_text(encoding="utf-8"))["project"]
    runtime = floors([*project["dependencies"], *project["optional-dependencies"]["torch"]])
    tools = [p for p in floors(project["optional-dependencies"]["dev"]) if p.split("==")[0] in TEST_TOOLS]
    torch_floor = os.environ.get("METHODS_TORCH_FLOOR_SPEC") or next(p for p in runtime if p.startswith("torch=="))
    others = [p for p in runtime if not p.startswith("torch==")]
    session.install(torch_floor, *others, *tools)
    session.install("--no-deps", "-e", ".")
    session.run(
        "python",
        "-c",
        "import importlib.metadata as m; print('testing with', ', '.join("
        "f'{n} {m.version(n)}' for n in ('torch', 'jsonschema', 'jinja2', 'pytest', 'hypothesis', 'numpy')))",
    )
    # and the two-process parity tests: FSDP's sharded step is what sets the torch floor on the CPU
    session.run(
        "pytest", "-q", "-p", "no:cacheprovider", *FAST_TESTS[:-1], "tests/core/test_distributed.py", *session.posargs
    )


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """Ruff over the package, tools and tests: the formatter's check, then the linter (the version
    pyproject.toml's dev extra pins)."""
    session.install("ruff==0.17.6")
    session.run("ruff", "format", "--check", ".")
    session.run("ruff", "check", ".")


@nox.session(python=PYTHON)
def mutants(session: nox.Session) -> None:
    """Mutation testing of the training path; run by hand, not in CI (a full run makes about 8,400
    mutants and takes about two hours on 2 cores, best a few folders at a time:
    ``nox -s mutants -- 'algorithms.cutout.*' 'algorithms.colout.*'``).

    mutmut mutates what ``[tool.mutmut]`` in pyproject.toml names (the method folders, the
    Trainer's loop, engine, precision and state, the target utilities and the shared mixing code)
    and runs the fast tests against each mutant, in a fresh copy under .nox/ (the checkout stays as
    it is, and no verdict of an older run is reused: mutmut does not retest a survivor when only the
    tests changed). It then reports the mutation score, by module and overall, and each surviving
    mutant with the change it makes (tools/mutation_score.py): a figure to report, not a gate, and no
    ledger of survivors is kept. Arguments go to ``mutmut run``: ``--max-children N``, or mutant
    names to run only those.
    """
    install_project(session, "dev")
    session.install("mutmut==3.8.1", "pytest-timeout==2.4.0")
    work = Path(session.create_tmp()) / "tree"
    shutil.rmtree(work, ignore_errors=True)
    for folder in ("algorithms", "tests"):
        shutil.copytree(folder, work / folder, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2("pyproject.toml", work)
    reporter = Path("tools/mutation_score.py").resolve()
    session.chdir(work)
    # torch's OpenMP threads do not survive mutmut's fork: a forked child that computes in
    # parallel hangs and is counted as a timeout. One thread per mutmut worker.
    env = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    session.run("mutmut", "run", *session.posargs, env=env)
    session.run("python", str(reporter), env=env)
    session.log(f"the mutmut run is in {work} (`mutmut show NAME` there shows a mutant)")


# The peers of the batch-method benchmark, in an environment of their own (the project does not depend on
# them): torchvision's transforms v2 and timm beside a torch that torchvision supports, and Composer, whose
# release pins an older torch, installed without its pins together with what composer.functional imports.
PEERS_TORCH_SPEC = os.environ.get("METHODS_PEERS_TORCH_SPEC", "torch==2.14.1 torchvision==0.29.1")
COMPOSER_SPEC = os.environ.get("METHODS_PEERS_COMPOSER_SPEC", "mosaicml==0.32.1")
COMPOSER_IMPORTS = (
    "pyyaml",
    "tqdm",
    "torchmetrics>=1.0,<1.7.5",
    "torch_optimizer",
    "requests",
    "numpy",
    "psutil",
    "coolname",
    "tabulate",
    "py-cpuinfo",
    "packaging",
    "importlib-metadata",
    "pillow",
    "mosaicml-cli>=0.5.25,<0.8",
)


@nox.session(python=PYTHON)
def bench_peers(session: nox.Session) -> None:
    """The batch methods against torchvision v2, timm and Composer (benchmarks/batch_methods.py): our
    ratio to each peer beside its target, and to each method's memory floor.

    Installs torch and torchvision from ``$METHODS_PEERS_TORCH_SPEC`` (default torch 2.14.1 with
    torchvision 0.29.1; a CUDA build, about 5.5 GB), timm, Composer (``$METHODS_PEERS_COMPOSER_SPEC``,
    without its torch pins) and the project; reruns skip pip while these are unchanged. A peer that
    does not install or import is reported by the benchmark, which goes on without it. Rewrites
    results/bench/peers/<cpu|gpu>-<hardware>.json (commit it; the measurements page's Performance table shows it too).
    Extra arguments go to benchmarks/run.py (e.g. ``--output -``).
    """
    inputs = "\n".join(
        [Path("pyproject.toml").read_text(encoding="utf-8"), PEERS_TORCH_SPEC, COMPOSER_SPEC, *COMPOSER_IMPORTS]
    )
    stamp = Path(session.virtualenv.location) / ".methods-peers-stamp"
    digest = hashlib.sha256(inputs.encode()).hexdigest()
    if stamp.exists() and stamp.read_text() == digest:
        session.log("environment up to date: skipping pip")
    else:
        session.install(*PEERS_TORCH_SPEC.split())
        session.install("-e", ".", "timm")
        # Composer's release asks for torch<2.7.1: install it without dependencies, then what its
        # functional forms import; a failure here leaves Composer out of the run, not the others.
        session.install("--no-deps", COMPOSER_SPEC, success_codes=[0, 1])
        session.install(*COMPOSER_IMPORTS, success_codes=[0, 1])
        stamp.write_text(digest)
    session.run("python", "benchmarks/run.py", "--peers", "--force", *session.posargs)


# torch and torchvision for nox -s models: a torchvision release built for this torch (PyPI's
# torchvision does not import beside the CPU build of torch 2.13.0 the other sessions use).
MODELS_TORCH_SPEC = os.environ.get("METHODS_MODELS_TORCH_SPEC", "torch==2.14.1 torchvision==0.29.1")


@nox.session(python=PYTHON)
def models(session: nox.Session) -> None:
    """The surgery methods on torchvision's and timm's models (tests/models): Stochastic Depth on their
    ResNet blocks, and BlurPool, Squeeze-Excite, Factorize, Ghost BatchNorm, Weight Standardization
    and the low-precision norms on a torchvision ResNet-50 and timm ResNets, built without weights.

    Installs torch and torchvision from ``$METHODS_MODELS_TORCH_SPEC`` (default torch 2.14.1 with
    torchvision 0.29.1; a CUDA build, about 5.5 GB), then the project with the ``dev`` and ``vision``
    extras. Arguments replace the selection (default ``tests/models``).
    """
    install_project(session, "dev", "vision", torch_spec=MODELS_TORCH_SPEC)
    session.run("pytest", "-q", *(session.posargs or ["tests/models"]))
