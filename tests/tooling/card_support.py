"""Running a card's python blocks, shared by the card tests."""

from __future__ import annotations

import os

import pytest
from methods_tools import cards


def run_card_code(text: str, label: str) -> dict:
    """Run every python block of a card (hidden set-up included) in order, in one namespace.

    A block that needs an optional third-party package that is not installed skips the test,
    naming the package. A failing distributed example leaves no process group or environment
    behind.
    """
    import torch

    from algorithms.core.distributed import destroy_process_group

    torch.manual_seed(0)
    environ = dict(os.environ)
    namespace: dict = {"__name__": "__card__"}
    try:
        for block in cards.code_blocks(text):
            if block.language not in cards.PYTHON_LANGS:
                continue
            try:
                exec(compile(block.code, f"{label}:{block.line}", "exec"), namespace)  # noqa: S102
            except ModuleNotFoundError as exc:
                if (exc.name or "").split(".")[0] == "algorithms":
                    raise
                pytest.skip(f"{label}:{block.line} needs the package {exc.name!r}, which is not installed")
    finally:
        destroy_process_group()
        os.environ.clear()
        os.environ.update(environ)
    return namespace
