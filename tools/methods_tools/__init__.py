"""Contributor tooling: the library behind ``tools/*.py``, the docs generators and the checks.

It lives outside the runtime package ``algorithms``, which never imports it: the scaffold, the
card checks, the generators and the training comparison work on a source checkout (cards,
templates, committed results), whose root is :data:`REPO_ROOT`. It is installed with the
project only so that ``methods-validate-metadata`` works as a pre-commit console script.
Nothing here imports torch unless a function needs the method code.
"""

from pathlib import Path

__all__ = ["REPO_ROOT"]

# tools/methods_tools/__init__.py -> the checkout's root
REPO_ROOT = Path(__file__).resolve().parents[2]
