"""Tensor memory from torch's own accounting: the peak bytes a span of training's tensors hold,
and what the weights, the gradients, the optimizer's state and the activations hold of it.

Memory measured this way does not depend on the machine the way time does: the bytes a tensor
holds are the same on a CPU and on a GPU, and they are not blurred by the interpreter, the
allocator's caches or other processes, as a process's resident set is.

Measure a span of your own loop::

    with TensorMemory() as memory:  # before the model is built: its weights are counted
        model = build_model()
        optimizer = torch.optim.Adam(model.parameters())
        train_step(model, optimizer)  # a warm-up step: the optimizer's state exists after it
        with memory.window(model, optimizer):  # the steps the figures are taken over
            train_step(model, optimizer)
    memory.figures()  # {"peak_bytes": ..., "weights_bytes": ..., ..., "how": "cpu_profiler"}

What it counts, and how:

- **The peak** (``peak_bytes``): the most bytes that tensors allocated since :class:`TensorMemory`
  was entered held at one time during the window. On CUDA it comes from the caching allocator's
  statistics (``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``, less what was
  allocated on entry); on the CPU, where torch keeps no allocator statistics, from the profiler's
  memory events (``torch.profiler.profile(profile_memory=True)``): the running sum of every
  allocation on the device less its free. Tensors made before entry (a data set in memory, another
  model) are not counted. Enter it before the run's first tensor is made, and free nothing made
  before it inside: on CUDA such a free would lower the figure (the CPU's count leaves it out).
- **Weights** (``weights_bytes``): the model's parameters and buffers at the window's end;
  **gradients**: their ``.grad``, at their most during the window (read each time a gradient is
  accumulated; ``None`` when none was, as where a parallel mode keeps gradients in buffers of its
  own); **optimizer state**: every tensor in ``optimizer.state`` at the window's end, wherever it
  lies (Adam's two moments and its step counters, SGD's momentum; none for plain SGD). Each is the
  bytes of storage the tensors reach, each byte once however many views reach it: a slice of a
  larger buffer (a gradient in DeepSpeed's bucket) counts its slice, and the rest of the buffer
  shows in the peak; a sharded tensor (FSDP's) counts this process's shard.
- **Activations** (``activations_bytes``): the tensors autograd saves for the backward pass, as
  ``torch.autograd.graph.saved_tensors_hooks`` sees them, at their most: a storage counts whole (a
  saved view keeps all of it alive), once, while a saved tensor of it is alive; the model's
  parameters and buffers are left out, and the input batch a first layer saves counts. A region
  under ``torch.utils.checkpoint`` keeps its inputs through hooks of its own, which these do not
  see: its saving shows in the peak.

The peak is at least what is held at once at any moment (at the optimizer's step: weights,
gradients, state and the batch) and at most all four parts together plus the temporaries the steps
make (an activation's gradient, the optimizer's intermediate results). The split is exact
accounting from the tensors themselves, not the categories torch's own memory profiler
(``torch.profiler._memory_profiler``) infers by heuristics.

Its cost is real: on the CPU the profiler records every operator and allocation from entry to
exit, which slows what runs under it (most for a model of many small operators). Measure a few
steps, and time training elsewhere, never under it.
"""

from __future__ import annotations

import contextlib
import gc
import weakref
from collections.abc import Iterable, Iterator
from typing import Any

import torch

__all__ = [
    "SavedTensors",
    "TensorMemory",
    "gradients_bytes",
    "optimizer_state_bytes",
    "tensor_bytes",
    "weights_bytes",
]

#: The name of the profiler's marker around the window (CPU): its start and end bound the peak.
WINDOW_MARK = "algorithms.core.tensor_memory.window"


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """This process's part of a sharded tensor (a DTensor's local shard), else the tensor."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def _storage(tensor: torch.Tensor) -> tuple[tuple[Any, ...], int]:
    """``(key, bytes)`` of the storage behind ``tensor``: views of one storage share the key."""
    local = _local(tensor)
    try:
        storage = local.untyped_storage()
    except (RuntimeError, NotImplementedError):  # sparse and other layouts without one storage
        return ("tensor", id(local)), local.numel() * local.element_size()
    return (storage.device, storage.data_ptr()), storage.nbytes()


def _extent(tensor: torch.Tensor) -> tuple[tuple[Any, ...], int, int]:
    """``(storage key, first byte, end byte)`` of what ``tensor`` reaches of its storage."""
    local = _local(tensor)
    key, nbytes = _storage(local)
    if key[0] == "tensor":
        return key, 0, nbytes
    size = local.element_size()
    if local.numel() == 0:
        return key, 0, 0
    start = local.storage_offset() * size
    last = sum((n - 1) * abs(step) for n, step in zip(local.shape, local.stride(), strict=True))
    return key, start, start + (last + 1) * size


def tensor_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """The bytes of storage ``tensors`` reach, each byte once: a view of a tensor already counted
    adds nothing, a tensor that is a slice of a larger buffer (a gradient in DeepSpeed's bucket, a
    parameter in a flat one) counts its slice, and a sharded tensor this process's shard."""
    spans: dict[tuple[Any, ...], list[tuple[int, int]]] = {}
    for tensor in tensors:
        key, start, end = _extent(tensor)
        spans.setdefault(key, []).append((start, end))
    total = 0
    for ranges in spans.values():
        reached = 0  # the end of what is counted so far, the ranges sorted by start
        for start, end in sorted(ranges):
            total += max(0, end - max(start, reached))
            reached = max(reached, end)
    return total


def weights_bytes(model: torch.nn.Module) -> int:
    """The bytes of ``model``'s parameters and buffers: what this process holds of them (an FSDP
    shard; a DeepSpeed ZeRO-3 parameter's partition, ``ds_tensor``, and what it keeps whole)."""
    params = list(model.parameters())
    partitions = [p.ds_tensor for p in params if getattr(p, "ds_tensor", None) is not None]
    return tensor_bytes([*params, *partitions, *model.buffers()])


def gradients_bytes(model: torch.nn.Module) -> int | None:
    """The bytes of the ``.grad`` of ``model``'s parameters now; None when none has one."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    return tensor_bytes(grads) if grads else None


def _tensors_in(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors_in(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors_in(item)


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """The bytes of every tensor in ``optimizer.state`` (0 for an optimizer that keeps none)."""
    return tensor_bytes(_tensors_in(list(optimizer.state.values())))


class SavedTensors:
    """The most bytes that tensors autograd saves for backward held at one time while it was
    entered (``peak_bytes``), each storage counted once while a saved tensor of it is alive.

    Storages of the tensors in ``exclude`` (a model's parameters and buffers) and any
    ``nn.Parameter`` are left out: weights a layer saves are weights, not activations. Hooks on the
    current thread only: autograd's forward runs there."""

    def __init__(self, exclude: Iterable[torch.Tensor] = ()):
        self._excluded = {_storage(t)[0] for t in exclude}
        self._live: dict[tuple[Any, ...], list[int]] = {}  # storage key -> [bytes, saved tensors alive]
        self.current_bytes = 0
        self.peak_bytes = 0
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, _unpack)

    def _release(self, key: tuple[Any, ...]) -> None:
        entry = self._live[key]
        entry[1] -= 1
        if entry[1] == 0:
            self.current_bytes -= entry[0]
            del self._live[key]

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        key, nbytes = _storage(tensor)
        if isinstance(tensor, torch.nn.Parameter) or key in self._excluded:
            return tensor
        entry = self._live.get(key)
        if entry is None:
            entry = self._live[key] = [nbytes, 0]
            self.current_bytes += nbytes
            self.peak_bytes = max(self.peak_bytes, self.current_bytes)
        entry[1] += 1
        weakref.finalize(tensor, self._release, key)  # when autograd (and everyone else) lets it go
        return tensor

    def __enter__(self) -> SavedTensors:
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._hooks.__exit__(*exc)


def _unpack(tensor: torch.Tensor) -> torch.Tensor:
    return tensor


class _GradientPeak:
    """The most bytes the model's gradients held at once, read after each one is accumulated."""

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.peak_bytes: int | None = None
        params = [p for p in model.parameters() if p.requires_grad]
        self._handles = [p.register_post_accumulate_grad_hook(self._note) for p in params]

    def _note(self, _param: torch.Tensor) -> None:
        now = gradients_bytes(self.model)
        if now is not None:
            self.peak_bytes = max(self.peak_bytes or 0, now)

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()


class TensorMemory:
    """Measure the peak tensor memory of a span of training on ``device`` (default: the current
    CUDA device when there is one, else the CPU), with its split (see the module's docstring).

    Enter it before the run's first tensor is made, and mark the steps the figures are taken over
    with :meth:`window` (once). On the CPU everything between entry and exit runs under the
    profiler, which slows it several times: keep the span to a few steps, and time nothing in it."""

    def __init__(self, device: str | torch.device | None = None):
        if device is None:
            device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        if self.device.type not in ("cpu", "cuda"):
            raise ValueError(
                f"TensorMemory(device={str(device)!r}): measures the CPU or a CUDA device; give one of those"
            )
        self.how = "cuda_allocator" if self.device.type == "cuda" else "cpu_profiler"
        self.peak_bytes: int | None = None
        self.weights_bytes: int | None = None
        self.gradients_bytes: int | None = None
        self.optimizer_bytes: int | None = None
        self.activations_bytes: int | None = None
        self._profiler: Any = None
        self._mark: Any = None
        self._entered = self._windowed = self._window_open = False
        self._base = 0  # CUDA: bytes allocated on entry, not the span's

    # -- the span ------------------------------------------------------------------------------

    def __enter__(self) -> TensorMemory:
        if self._entered:
            raise RuntimeError("TensorMemory: already entered; build one per span")
        self._entered = True
        if self.device.type == "cuda":
            gc.collect()  # earlier garbage is freed now, not in the span (the CPU's count leaves such frees out)
            torch.cuda.synchronize(self.device)
            self._base = torch.cuda.memory_allocated(self.device)
        else:
            self._profiler = torch.profiler.profile(
                activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True
            )
            self._profiler.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._window_open:  # a run that ended (or raised) inside its window
            self.end_window()
        if self._profiler is not None:
            self._profiler.__exit__(None, None, None)
            if exc[0] is None and self._windowed:
                self.peak_bytes = _profiled_peak(self._profiler, self.device)
            self._profiler = None

    @contextlib.contextmanager
    def window(self, model: torch.nn.Module | None = None, optimizer: Any = None) -> Iterator[TensorMemory]:
        """The steps the peak is taken over, with the split of ``model`` and ``optimizer`` (left
        ``None`` where not given): weights and optimizer state as they are at the window's end,
        gradients and activations at their most inside it."""
        self.begin_window(model)
        try:
            yield self
        finally:
            self.end_window(optimizer)

    def begin_window(self, model: torch.nn.Module | None = None) -> None:
        """Open the window (what :meth:`window` does on entry), for a loop whose steps are not in
        one block (a Trainer's events); close it with :meth:`end_window`."""
        if not self._entered:
            raise RuntimeError("TensorMemory.window(): enter the TensorMemory first (with TensorMemory() as memory:)")
        if self._windowed:
            raise RuntimeError("TensorMemory.window(): one window per TensorMemory")
        self._windowed = self._window_open = True
        self._model = model
        exclude = [*model.parameters(), *model.buffers()] if model is not None else []
        self._saved = SavedTensors(exclude).__enter__() if model is not None else None
        self._grads = _GradientPeak(model) if model is not None else None
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            self._mark = torch.profiler.record_function(WINDOW_MARK)
            self._mark.__enter__()

    def end_window(self, optimizer: Any = None) -> None:
        """Close the window :meth:`begin_window` opened; the split is read as in :meth:`window`."""
        if not self._window_open:
            raise RuntimeError("TensorMemory.end_window(): no window is open")
        self._window_open = False
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.peak_bytes = torch.cuda.max_memory_allocated(self.device) - self._base
        elif self._mark is not None:
            self._mark.__exit__(None, None, None)
            self._mark = None
        if self._saved is not None:
            self._saved.__exit__(None, None, None)
            self.activations_bytes = self._saved.peak_bytes
        if self._grads is not None:
            self._grads.remove()
            self.gradients_bytes = self._grads.peak_bytes
        if self._model is not None:
            self.weights_bytes = weights_bytes(self._model)
        if optimizer is not None:
            self.optimizer_bytes = optimizer_state_bytes(optimizer)

    def figures(self) -> dict[str, Any]:
        """``{"peak_bytes", "weights_bytes", "gradients_bytes", "optimizer_bytes",
        "activations_bytes", "how"}`` (``how``: ``cuda_allocator`` or ``cpu_profiler``); the peak
        is known once the TensorMemory is exited, and None without a window."""
        return {
            "peak_bytes": self.peak_bytes,
            "weights_bytes": self.weights_bytes,
            "gradients_bytes": self.gradients_bytes,
            "optimizer_bytes": self.optimizer_bytes,
            "activations_bytes": self.activations_bytes,
            "how": self.how,
        }


def _profiled_peak(profiler: Any, device: torch.device) -> int:
    """The peak, within the window's marker, of the running sum of the profiler's allocation
    events on ``device`` since profiling began: each allocation adds its size, and its free takes
    it away. The free of a block allocated before profiling began (which the profiler reports when
    an earlier profiling session saw its allocation) is left out, as its allocation is."""
    from torch._C._profiler import _EventType

    events, window = [], None
    stack = list(profiler.profiler.kineto_results.experimental_event_tree())
    while stack:
        event = stack.pop()
        if event.tag == _EventType.Allocation:
            fields = event.extra_fields
            if fields.device.type == device.type:
                events.append((event.start_time_ns, fields.alloc_size, fields.ptr))
        elif event.name == WINDOW_MARK:
            window = (event.start_time_ns, event.end_time_ns)
        stack.extend(event.children)
    if window is None:
        raise RuntimeError("TensorMemory: the profiler recorded no window; was window() used inside the span?")
    start, end = window
    live: dict[int, int] = {}  # address -> bytes of the blocks allocated since profiling began
    level, peak = 0, None
    for time_ns, size, ptr in sorted(events, key=lambda e: e[0]):
        if time_ns > end:
            break
        if time_ns >= start and peak is None:
            peak = level  # what was held when the window opened
        if size > 0:
            live[ptr] = size
            level += size
        elif ptr in live:
            level -= live.pop(ptr)
        if time_ns >= start:
            peak = max(peak, level)
    return peak if peak is not None else level
