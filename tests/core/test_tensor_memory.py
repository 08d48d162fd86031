"""algorithms.core.tensor_memory: its figures equal what the tensors' sizes predict, for a model whose
sizes are computed here by hand.

The model: Linear(256, 512), ReLU, Linear(512, 10), float32, cross entropy on a batch of 64.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from algorithms.core.tensor_memory import SavedTensors, TensorMemory, optimizer_state_bytes, tensor_bytes, weights_bytes

F32, I64 = 4, 8  # bytes of a float32 and of an int64
IN, HIDDEN, OUT = 256, 512, 10
PARAMETER_TENSORS = 4  # two weights, two biases

# Parameters: 256·512 + 512 + 512·10 + 10 = 136,714 floats.
WEIGHTS = (IN * HIDDEN + HIDDEN + HIDDEN * OUT + OUT) * F32  # 546,856 bytes
LARGEST_PARAMETER = IN * HIDDEN * F32  # the first weight, 524,288 bytes


def saved_for_backward(batch: int) -> int:
    """What autograd saves in one forward and loss, each storage once, the weights left out:

    - the first Linear saves its input, the batch: 256 floats an example (not its weight: the
      input needs no gradient, so the weight is not needed to make one);
    - ReLU saves its output, 512 floats an example; the second Linear saves that same tensor as its
      input (one storage, counted once) and its weight (a parameter: weights, not activations);
    - cross entropy is log_softmax, which saves its output (10 floats an example), then nll_loss,
      which saves the targets (one int64 an example) and its total weight (one float a batch).
    """
    return batch * (IN * F32 + HIDDEN * F32 + OUT * F32 + I64) + F32  # 3,120 bytes an example, + 4


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(IN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, OUT))


def measure(make_optimizer, batch: int = 64, steps: int = 1) -> dict:
    """One warm-up step, then ``steps`` steps in the window; the model and the data are made inside
    the measurement, as a run's are."""
    torch.manual_seed(0)
    with TensorMemory("cpu") as memory:
        model = mlp()
        optimizer = make_optimizer(model.parameters())
        x, y = torch.randn(batch, IN), torch.randint(0, OUT, (batch,))

        def step() -> None:
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        step()
        with memory.window(model, optimizer):
            for _ in range(steps):
                step()
    return memory.figures()


# foreach=False: torch's single-tensor update, one parameter at a time (the CPU's default too),
# whose temporaries the band below counts.
def adam(params):
    return torch.optim.Adam(params, lr=1e-3, foreach=False)


def plain_sgd(params):
    return torch.optim.SGD(params, lr=0.1, foreach=False)


def momentum_sgd(params):
    return torch.optim.SGD(params, lr=0.1, momentum=0.9, foreach=False)


@pytest.fixture(scope="module")
def measured() -> dict:
    """Each measurement once (the profiler is not free): by optimizer and batch. On one thread: the
    model is tiny, and one thread is many times faster than two on a shared machine (the bytes do
    not depend on it)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return {
            (make.__name__, batch): measure(make, batch)
            for make, batch in ((adam, 64), (plain_sgd, 64), (plain_sgd, 128), (momentum_sgd, 64))
        }
    finally:
        torch.set_num_threads(threads)


def test_adam_figures_equal_the_tensors_sizes(measured):
    figures = measured["adam", 64]
    assert figures["how"] == "cpu_profiler"
    assert figures["weights_bytes"] == WEIGHTS
    assert figures["gradients_bytes"] == WEIGHTS  # one gradient per parameter, its size
    # Adam keeps two moments per parameter, each its size, and a step counter per parameter
    # tensor: a 0-d float32.
    assert figures["optimizer_bytes"] == 2 * WEIGHTS + PARAMETER_TENSORS * F32
    assert figures["activations_bytes"] == saved_for_backward(64) == 199_684


def test_the_peak_lies_in_the_band_the_sizes_allow(measured):
    """The band, for Adam and for SGD: at the optimizer's step the weights, the gradients, the
    optimizer's state and the batch (held by the loop) are alive at once, so the peak is at least
    their sum. It is at most everything at once, weights + gradients + state + what backward
    needs, plus the temporaries: the single-tensor Adam makes two of a parameter's size while it
    updates it (``exp_avg_sq.sqrt()``, then that over its bias correction, before ``add_(eps)``),
    and backward an activation's gradient, here no larger than the largest parameter."""
    batch = 64
    inputs = batch * IN * F32 + batch * I64
    for name in ("adam", "plain_sgd"):
        f = measured[name, batch]
        resident = f["weights_bytes"] + f["gradients_bytes"] + f["optimizer_bytes"]
        low = resident + inputs
        high = resident + f["activations_bytes"] + 2 * LARGEST_PARAMETER
        assert low <= f["peak_bytes"] <= high, (name, f)


def test_sgd_without_momentum_keeps_no_state_and_with_momentum_one_buffer_per_parameter(measured):
    assert measured["plain_sgd", 64]["optimizer_bytes"] == 0
    assert measured["momentum_sgd", 64]["optimizer_bytes"] == WEIGHTS


def test_a_bigger_batch_raises_activations_in_proportion_not_weights(measured):
    small, large = measured["plain_sgd", 64], measured["plain_sgd", 128]
    assert large["weights_bytes"] == small["weights_bytes"] == WEIGHTS
    assert large["gradients_bytes"] == small["gradients_bytes"] == WEIGHTS
    assert large["activations_bytes"] == saved_for_backward(128)
    # Twice the examples, twice the per-example bytes (the 4-byte total weight is per batch).
    assert large["activations_bytes"] - F32 == 2 * (small["activations_bytes"] - F32)
    assert large["peak_bytes"] > small["peak_bytes"]


def test_a_view_is_counted_once_and_a_slice_of_a_buffer_as_its_slice():
    base = torch.zeros(10, 10)
    assert tensor_bytes([base, base.view(100), base[2:5], base.t()]) == 100 * F32
    # Two gradients in one flat bucket (as DeepSpeed keeps them): their slices, not the bucket.
    bucket = torch.zeros(1000)
    assert tensor_bytes([bucket[0:30].view(5, 6), bucket[100:110]]) == 40 * F32
    assert tensor_bytes([bucket[0:30], bucket[20:40]]) == 40 * F32  # overlapping: each byte once
    assert tensor_bytes([torch.zeros(3).expand(4, 3)]) == 3 * F32  # a broadcast holds its row
    model = mlp()
    assert weights_bytes(model) == WEIGHTS
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    assert optimizer_state_bytes(optimizer) == 0


def test_saved_tensors_are_counted_while_alive_and_each_storage_once():
    leaf = torch.randn(1000, requires_grad=True)
    with SavedTensors() as saved:
        # mul saves both operands: two views of one storage, 4,000 bytes
        out = (leaf * leaf.view(10, 100).view(1000)).sum()
    assert saved.peak_bytes == 1000 * F32
    out.backward()
    del out
    assert saved.current_bytes == 1000 * F32  # the leaf itself is still alive
    # A parameter a layer saves is a weight, and the storages named in exclude are left out.
    weight = nn.Parameter(torch.randn(8, 8))
    hidden = torch.randn(4, 8, requires_grad=True)
    with SavedTensors(exclude=[hidden]) as saved:
        (hidden @ weight).sum().backward()
    assert saved.peak_bytes == 0


def test_the_window_is_needed_and_used_once():
    with pytest.raises(RuntimeError, match="enter the TensorMemory first"):
        TensorMemory("cpu").begin_window()
    with TensorMemory("cpu") as memory:
        with memory.window():
            torch.ones(256)
        with pytest.raises(RuntimeError, match="one window per TensorMemory"):
            memory.begin_window()
    # No model: a peak, and no split.
    assert memory.peak_bytes == 256 * F32 and memory.weights_bytes is None
    with pytest.raises(ValueError, match="measures the CPU or a CUDA device"):
        TensorMemory("meta")


@pytest.mark.cuda
def test_cuda_figures_come_from_the_allocator_and_equal_the_sizes():
    torch.manual_seed(0)
    with TensorMemory("cuda") as memory:
        model = mlp().cuda()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)
        x, y = torch.randn(64, IN, device="cuda"), torch.randint(0, OUT, (64,), device="cuda")

        def step() -> None:
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        step()
        with memory.window(model, optimizer):
            step()
    f = memory.figures()
    assert f["how"] == "cuda_allocator"
    assert f["weights_bytes"] == f["gradients_bytes"] == WEIGHTS
    assert f["activations_bytes"] == saved_for_backward(64)
    # The allocator rounds each block up to 512 bytes, so the peak is at least the sizes' sum.
    assert f["peak_bytes"] >= WEIGHTS * 2 + f["optimizer_bytes"] + 64 * IN * F32
