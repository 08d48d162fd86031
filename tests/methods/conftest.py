from __future__ import annotations

from collections.abc import Iterator

import pytest

import algorithms._kernels as kernels_module
from algorithms._kernels import cpu_kernels, kernel_status


@pytest.fixture(scope="module", params=["kernels", "torch ops"])
def kernels_or_torch_ops(request: pytest.FixtureRequest) -> Iterator[str]:
    """Every test of a module that uses it runs twice: with the CPU kernels of CutMix, MixUp,
    CutOut and label smoothing, and with torch's own ops alone (as with ``METHODS_CPU_KERNELS=0``),
    which must give the same values."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(kernels_module, "ENABLED", request.param == "kernels")
        if request.param == "kernels":
            if cpu_kernels() is None:
                pytest.skip(f"the CPU kernels did not build here: {kernel_status()}")
        yield request.param


@pytest.fixture(autouse=True)
def _cuda_tests_once(request: pytest.FixtureRequest) -> None:
    """A CUDA test of a module that runs twice runs once: the CPU kernels are never used on CUDA, so
    its run with them would repeat its run with torch's ops."""
    callspec = getattr(request.node, "callspec", None)
    if (
        request.node.get_closest_marker("cuda")
        and callspec is not None
        and callspec.params.get("kernels_or_torch_ops") == "kernels"
    ):
        pytest.skip("the CPU kernels are not used on CUDA: this test runs once, with torch's ops")
