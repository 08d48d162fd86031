"""CPU kernels for CutMix, MixUp, CutOut and label smoothing (``_kernels.cpp``), built on first use with
``torch.utils.cpp_extension`` and cached by torch (``$TORCH_EXTENSIONS_DIR``, by default
``~/.cache/torch_extensions``), one build per torch version.

Torch's own ops cannot write each output byte once for these methods: an out-of-place CutMix is
a copy of the batch and then a second write of the box, and an in-place CutMix or MixUp gathers
every partner before writing any. The kernels do one pass, along each cycle of the permutation
in place, so they run at about the speed of one copy of the batch. CutOut's kernel copies each
plane and zeroes its holes while the plane is in cache (in place, it writes the holes alone),
where torch's ops build a full-size mask and then apply it.

Label smoothing of class indices is a lookup of each class's smoothed row; the kernel's lookup
costs less than ``index_select``'s call, which is most of the time at a few hundred labels.

They are an optimisation only: where they do not build (no C++ compiler or ninja), or are
turned off (``METHODS_CPU_KERNELS=0`` in the environment when ``algorithms`` is imported), or do
not apply to a call (another device, layout or dtype, or indices that are not a permutation in
place), the methods use torch's ops and give the same values. A failed build warns once, with
the reason.

Private: the methods call :func:`cpu_kernels`; nothing else is public.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import types
from pathlib import Path
from typing import Any

import torch

from .core.algorithm import warn_from_callers_line

__all__ = ["DISABLE", "ENABLED", "cpu_kernels", "kernel_status"]

# Set to "0" to use torch's ops alone; read once, here (the tests switch ENABLED to run both ways).
DISABLE = "METHODS_CPU_KERNELS"
ENABLED = os.environ.get(DISABLE) != "0"
SOURCE = Path(__file__).with_name("_kernels.cpp")
OPS = ("cutmix_into", "cutmix_inplace", "cutout_into", "cutout_inplace", "mixup_into", "mixup_inplace", "rows_at")

_log = logging.getLogger(__name__)


@functools.cache
def _build() -> tuple[Any | None, str]:
    """``(the ops, "built")``, or ``(None, why)`` where the build failed. The ops are their default
    overloads (``torch.ops.methods_library.<op>.default``), which cost less to call than the packets."""
    try:
        from torch.utils import cpp_extension

        _log.info(
            "building the CPU kernels of CutMix, MixUp, CutOut and label smoothing from %s (once; a few seconds)",
            SOURCE,
        )
        cpp_extension.load(
            name=build_name(), sources=[str(SOURCE)], extra_cflags=["-O3"], is_python_module=False, verbose=False
        )
    except Exception as exc:  # no compiler, no ninja, no headers: torch's ops do the work
        return None, build_failure(exc)
    library = torch.ops.methods_library
    # MixUp's lerp rounds as torch.lerp does: fused multiply-adds where torch's CPU kernels use them
    library.use_fused_multiply_add(torch.backends.cpu.get_cpu_capability() != "DEFAULT")
    return types.SimpleNamespace(**{name: getattr(library, name).default for name in OPS}), "built"


def build_failure(exc: BaseException) -> str:
    """One line, at most 300 characters, for a failed build: torch's first line (``Error building
    extension '...'``) and the first line that reports an error, not the command lines ninja echoes."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    head = lines[0].split(": [")[0]  # torch puts ninja's first command line after the extension's name
    reasons = [
        line
        for line in lines[1:]
        if "-DTORCH_EXTENSION_NAME" not in line and ("error" in line.lower() or "not found" in line.lower())
    ]
    return (f"{head}: {reasons[0]}" if reasons else head)[:300]


def build_name() -> str:
    """The build's name, and its folder's: one per torch version, as torch's own check of a cached
    build compares the sources and flags but not the torch they were built against."""
    return "methods_library_kernels_torch_" + re.sub(r"\W", "_", torch.__version__)


def kernel_status() -> str:
    """``"built"``, ``"off (METHODS_CPU_KERNELS=0)"``, or why the build failed."""
    if not ENABLED:
        return f"off ({DISABLE}=0)"
    return _build()[1]


def cpu_kernels() -> Any | None:
    """The kernels' op namespace, or ``None`` (turned off, or the build failed: warns once)."""
    if not ENABLED:
        return None
    ops, why = _build()
    if ops is None:
        _warn_once(why)
    return ops


@functools.cache
def _warn_once(why: str) -> None:
    warn_from_callers_line(
        f"the CPU kernels for CutMix, MixUp, CutOut and label smoothing did not build ({why}); the "
        f"methods use torch's ops instead, with the same values, more slowly. Set {DISABLE}=0 "
        "to skip the build.",
        RuntimeWarning,
    )
