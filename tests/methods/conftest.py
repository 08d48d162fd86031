from __future__ import annotations

from collections.abc import Iterator

import pytest

import algorithms._kernels as kernels_module
from algorithms._kernels import cpu_kernels, kernel_status


@pytest.fixture(scope="module", params=["kernels", "torch ops"])
def kernels_or_torch_ops(request: pytest.FixtureRequest) -> Iterator[str]:
    """Every test of a module that uses it runs twice: with the CPU kernels of CutMix, MixUp and
    label smoothing, and with torch's own ops alone (as with ``METHODS_CPU_KERNELS=0``), which must
    give the same values."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(kernels_module, "ENABLED", request.param == "kernels")
        if request.param == "kernels":
            if cpu_kernels() is None:
                pytest.skip(f"the CPU kernels did not build here: {kernel_status()}")
        yield request.param
