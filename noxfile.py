"""Sessions: ``nox -s tests``, ``nox -s docs``, ``nox -s check``, ``nox -s lint``.

Virtual environments are reused between runs (a second ``nox -s tests`` starts in seconds).
Torch is installed first, from ``$METHODS_TORCH_SPEC`` (default ``torch==2.13.0``, a CPU build),
so that resolving the project never pulls a multi-gigabyte CUDA build onto a CPU machine.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import nox

nox.options.reuse_venv = "yes"
nox.options.sessions = ["tests", "lint"]

PYTHON = os.environ.get("METHODS_PYTHON") or None  # None: the interpreter running nox
TORCH_SPEC = os.environ.get("METHODS_TORCH_SPEC", "torch==2.13.0")


def install_project(session: nox.Session, *extras: str) -> None:
    """Torch from TORCH_SPEC, then the project (editable) with ``extras``.

    A reused environment whose install inputs (pyproject.toml, TORCH_SPEC, extras) are unchanged
    skips pip altogether, so a second run starts in seconds.
    """
    spec = f".[{','.join(extras)}]" if extras else "."
    inputs = "\n".join([Path("pyproject.toml").read_text(encoding="utf-8"), TORCH_SPEC, spec])
    stamp = Path(session.virtualenv.location) / ".methods-install-stamp"
    digest = hashlib.sha256(inputs.encode()).hexdigest()
    if stamp.exists() and stamp.read_text() == digest:
        session.log("environment up to date (pyproject.toml and METHODS_TORCH_SPEC unchanged): skipping pip")
        return
    session.install(*TORCH_SPEC.split())
    session.install("-e", spec)
    stamp.write_text(digest)


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """Run the test suite (CUDA-marked tests skip without a GPU); DeepSpeed's tests run on the CPU."""
    install_project(session, "dev", "deepspeed")
    session.run("pytest", "-q", *session.posargs)


@nox.session(python=PYTHON)
def docs(session: nox.Session) -> None:
    """Build the Methods Library site into docs/build/html; any warning fails the build."""
    install_project(session, "docs")
    session.run("sphinx-build", "-W", "--keep-going", "-b", "html", "docs/source", "docs/build/html",
                *session.posargs)
    session.log(f"The site is at {Path('docs/build/html/index.html').resolve()}")


@nox.session(python=PYTHON)
def check(session: nox.Session) -> None:
    """Drift checks: metadata schemas, metadata against the code, every card against both, and
    every generated page rendering from the metadata and results (written by ``nox -s docs``)."""
    install_project(session, "docs")
    session.run("python", "tools/validate_metadata.py")
    session.run("python", "tools/check_functional.py")
    session.run("python", "tools/check_cards.py")
    session.run("python", "tools/generate_pages.py", "--check")


@nox.session(python=PYTHON)
def gpu(session: nox.Session) -> None:
    """On a CUDA machine: the CUDA-marked tests, then the training comparison at reduced scale.

    ResNet-50 on synthetic 224-pixel data, at most 200 batches of 64 per configuration, every
    precision in one process plus dp, ddp, fsdp and DeepSpeed ZeRO-2 over all visible GPUs:
    sized to finish within about five minutes on one current GPU. Writes
    results/gpu-<device>-<date>.json (commit it; the docs render it). Set METHODS_TORCH_SPEC to a
    CUDA build of torch. Extra arguments go to tools/compare_training.py (e.g. --out).
    """
    install_project(session, "dev")
    session.run("python", "-c", "import torch, sys; sys.exit(0 if torch.cuda.is_available() else "
                "'nox -s gpu needs CUDA: torch.cuda.is_available() is False (set METHODS_TORCH_SPEC "
                "to a CUDA build of torch)')")
    session.run("pytest", "-q", "-m", "cuda", "tests")
    nproc = session.run("python", "-c", "import torch; print(torch.cuda.device_count())", silent=True).strip()
    session.run("python", "tools/compare_training.py", "--model", "resnet50", "--data", "synthetic",
                "--epochs", "1", "--batch-size", "64", "--max-batches", "200", "--workers", "4",
                "--nproc", nproc, "--timeout", "300", "--force",
                "--configs", "fp32:single,fp16:single,bf16:single,amp_fp16:single,amp_bf16:single,"
                             "fp32:dp,amp_bf16:ddp,amp_bf16:fsdp,bf16:deepspeed:1,bf16:deepspeed:2",
                *session.posargs)


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """Ruff over the package, tools and tests."""
    session.install("ruff>=0.5")
    session.run("ruff", "check", ".")
