"""The hook this repository offers others (``.pre-commit-hooks.yaml``: ``methods-validate-metadata``).

pre-commit installs the hook's repository with ``pip install .`` into the hook's environment, so
the project's hard dependencies are what every user of the hook downloads: jsonschema, never
torch (an extra). The validator reads the schemas shipped in the installed package and checks
metadata files wherever the other repository keeps them. Without torch, a name that needs it is
one ImportError that says how to install it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from algorithms.metadata import PACKAGE_ROOT

REPO_ROOT = PACKAGE_ROOT.parent
HOOK_ID = "methods-validate-metadata"
# what the hook's environment may install: the validator's needs, nothing heavy
LIGHT = {"jsonschema", "jinja2"}
INSTALL_HINT = "pip install 'methods-library[torch]'"


def _name(requirement: str) -> str:
    return re.match(r"[A-Za-z0-9_.\-]+", requirement)[0].lower()


def _block_torch(code: str) -> str:
    """``code`` run as if torch were not installed (``import torch`` raises ModuleNotFoundError)."""
    return f"import sys\nsys.modules['torch'] = None\n{code}"


def _python(code: str, cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "tools")])}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, env=env, timeout=120)


def test_the_hard_dependencies_are_what_the_validator_needs_and_torch_is_an_extra():
    tomllib = pytest.importorskip("tomllib", reason="reads pyproject.toml with tomllib, Python 3.11 and later")
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    hard = {_name(r) for r in project["dependencies"]}
    assert "jsonschema" in hard
    assert hard <= LIGHT, f"pre-commit would install {sorted(hard - LIGHT)} into every user's hook environment"
    extras = project["optional-dependencies"]
    assert [_name(r) for r in extras["torch"]] == ["torch"]
    # the extras that run the methods bring torch with them
    for extra in ("docs", "dev", "deepspeed"):
        pulled = {r.replace(" ", "") for r in extras[extra]}
        assert pulled & {"methods-library[torch]", "methods-library[docs]"}, extra


def test_without_torch_a_name_that_needs_it_is_one_import_error_saying_how_to_install_it():
    out = _python(_block_torch("from algorithms import CutMix"))
    assert out.returncode == 1
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("ModuleNotFoundError: algorithms.CutMix needs torch, which is not installed: "), last
    assert INSTALL_HINT in last
    code = _block_torch(
        "import algorithms, algorithms.core, algorithms.functional as cf\n"
        "for get in (lambda: cf.cutmix_batch, lambda: algorithms.core.Trainer, lambda: algorithms.MixUp):\n"
        "    try:\n        get()\n    except ModuleNotFoundError as exc:\n"
        "        print(exc.name, exc)\n"
        "from algorithms.core import PRECISIONS\n"  # the torch-free names still work
        "from algorithms.metadata import load_all_metadata\n"
        "print(len(load_all_metadata()) > 0, 'fp32' in PRECISIONS)"
    )
    out = _python(code)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert [line.split(" ", 2)[:2] for line in lines[:3]] == [
        ["torch", "algorithms.functional.cutmix_batch"],
        ["torch", "algorithms.core.Trainer"],
        ["torch", "algorithms.MixUp"],
    ]
    assert all(INSTALL_HINT in line for line in lines[:3])
    assert lines[3] == "True True"


def _user_repository(root: Path) -> tuple[Path, Path, str]:
    """Another repository's metadata, in its own layout: a valid file, a broken one, and the line
    the validator must print for the broken one."""
    valid = root / "mylib" / "cutmix" / "metadata.json"
    valid.parent.mkdir(parents=True)
    shutil.copy(PACKAGE_ROOT / "cutmix" / "metadata.json", valid)
    data = json.loads(valid.read_text(encoding="utf-8"))
    record = {**data["cutmix"], "kind": "trick"}
    broken = root / "mylib" / "broken" / "metadata.json"
    broken.parent.mkdir(parents=True)
    text = json.dumps({"broken": record}, indent=2, ensure_ascii=False) + "\n"
    broken.write_text(text, encoding="utf-8")
    line = next(i for i, t in enumerate(text.splitlines(), 1) if t.strip() == '"kind": "trick",')
    return valid, broken, f'mylib/broken/metadata.json:{line}: /broken/kind: "trick" is not allowed'


def test_the_validator_checks_another_repositorys_files_with_the_packaged_schema_without_torch(tmp_path):
    valid, broken, expected = _user_repository(tmp_path)
    run = "from methods_tools.commands import validate_metadata_main as main\nsys.exit(main(sys.argv[1:]))"
    script = tmp_path / "hook.py"
    script.write_text(_block_torch(run), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "tools")])}

    def hook(*files: Path) -> subprocess.CompletedProcess:
        args = [sys.executable, str(script), *(str(f.relative_to(tmp_path)) for f in files)]
        return subprocess.run(args, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)

    ok = hook(valid)
    assert (ok.returncode, ok.stdout.strip(), ok.stderr) == (0, "ok: 1 metadata file(s) valid", "")
    bad = hook(valid, broken)
    assert bad.returncode == 1
    problems = [line for line in bad.stderr.splitlines() if line.startswith("mylib/")]
    assert len(problems) == 1 and problems[0].startswith(expected), bad.stderr  # the broken file's, alone


# -- end to end, as a user of the hook runs it -----------------------------------------------------


def _git(*args: str, cwd: Path, env: dict[str, str]) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True).stdout


def _hook_repository(target: Path, env: dict[str, str]) -> str:
    """A repository holding what a commit of this checkout would hold (its tracked files as they
    are now, and the new files git does not ignore), committed: what a user's pre-commit clones.
    Returns the commit."""
    listed = _git("ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=REPO_ROOT, env=env)
    for name in filter(None, listed.split("\0")):
        source = REPO_ROOT / name
        if source.is_file():  # a tracked file deleted in the checkout is not in the commit
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    _git("init", "-q", cwd=target, env=env)
    _git("add", "-A", cwd=target, env=env)
    _git("-c", "user.name=test", "-c", "user.email=test@example.com", "commit", "-qm", "hook", cwd=target, env=env)
    return _git("rev-parse", "HEAD", cwd=target, env=env).strip()


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("pre_commit") is None, reason="needs pre-commit (the dev extra has it)")
@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
@pytest.mark.skipif(not (REPO_ROOT / ".git").exists(), reason="needs a git checkout of the hook's repository")
def test_pre_commit_runs_the_hook_from_another_repository_without_installing_torch(tmp_path):
    """``pre-commit try-repo`` from a scratch repository: one valid file passes, one invalid file
    fails with its line and exit status 1; and the environment pre-commit builds for the hook holds
    no torch. pre-commit creates a virtual environment and pip-installs the hook's repository and
    its dependencies, from the package index pip is configured with (about 15 s a run here)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "PRE_COMMIT"))}
    env["PRE_COMMIT_HOME"] = str(tmp_path / "cache")
    hook_repo, user = tmp_path / "hook-repository", tmp_path / "user-repository"
    hook_repo.mkdir()
    user.mkdir()
    rev = _hook_repository(hook_repo, env)
    valid, broken, expected = _user_repository(user)
    _git("init", "-q", cwd=user, env=env)
    _git("add", "-A", cwd=user, env=env)

    def pre_commit(*args: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "pre_commit", *args]
        return subprocess.run(command, cwd=user, env=env, capture_output=True, text=True, timeout=600)

    passed = pre_commit("try-repo", str(hook_repo), HOOK_ID, "--files", str(valid.relative_to(user)))
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert re.search(r"validate Methods Library metadata\.+Passed", passed.stdout), passed.stdout

    failed = pre_commit("try-repo", str(hook_repo), HOOK_ID, "--files", str(broken.relative_to(user)))
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert re.search(r"validate Methods Library metadata\.+Failed", failed.stdout), failed.stdout
    assert any(line.startswith(expected) for line in failed.stdout.splitlines()), failed.stdout

    # try-repo's environment goes with its temporary store: install the hook as a user's
    # .pre-commit-config.yaml names it, into PRE_COMMIT_HOME, and look inside the environment
    config = f"repos:\n  - repo: {hook_repo.as_posix()}\n    rev: {rev}\n    hooks:\n      - id: {HOOK_ID}\n"
    (user / ".pre-commit-config.yaml").write_text(config, encoding="utf-8")
    _git("add", "-A", cwd=user, env=env)
    installed = pre_commit("run", "--all-files")
    assert installed.returncode == 1, installed.stdout + installed.stderr  # the broken file is in the repository
    assert any(line.startswith(expected) for line in installed.stdout.splitlines()), installed.stdout
    (python,) = Path(env["PRE_COMMIT_HOME"]).glob("repo*/py_env-*/bin/python")
    names = "import importlib.metadata as m, json; print(json.dumps([d.metadata['Name'] for d in m.distributions()]))"
    listing = subprocess.run([str(python), "-c", names], capture_output=True, text=True, check=True, timeout=60)
    packages = {name.lower() for name in json.loads(listing.stdout)}
    assert {"methods-library", "jsonschema"} <= packages
    assert not packages & {"torch", "triton", "numpy"}, sorted(packages)
    assert not any(p.startswith("nvidia-") for p in packages), sorted(packages)
