"""The CPU kernels of CutMix, MixUp, CutOut and label smoothing (algorithms/_kernels.cpp): the same values
as torch's ops, nothing written where they decline, autograd told of what they write, and a build
that fails falls back with one warning.

The methods' own tests (test_cutmix.py, test_mixup.py, test_cutout.py, test_label_smoothing.py and
test_targets.py) run every test with the kernels and with torch's ops alone, against the
definitions; these check what lies between the two.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import warnings

import pytest
import torch
from trainer_support import line_that_called_into

import algorithms._kernels as kernels_module
import algorithms.functional as cf
import algorithms.mixup.mixup as mixup_module
from algorithms._kernels import DISABLE, cpu_kernels, kernel_status


@pytest.fixture
def ops():
    built = cpu_kernels()
    if built is None:
        pytest.skip(f"the CPU kernels did not build here: {kernel_status()}")
    return built


def both_ways(monkeypatch, call):
    """``call()`` with the kernels, then with torch's ops alone."""
    monkeypatch.setattr(kernels_module, "ENABLED", True)
    with_kernels = call()
    monkeypatch.setattr(kernels_module, "ENABLED", False)
    with_torch = call()
    monkeypatch.setattr(kernels_module, "ENABLED", True)
    return with_kernels, with_torch


LAYOUTS = [((7, 3, 9, 11), False), ((7, 3, 9, 11), True), ((5, 2, 40, 33), True), ((4, 3, 130, 97), False)]


@pytest.mark.parametrize("shape, channels_last", LAYOUTS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.uint8, torch.bfloat16, torch.bool])
@pytest.mark.parametrize("inplace", [False, True])
def test_cutmix_writes_what_torchs_ops_write(ops, monkeypatch, shape, channels_last, dtype, inplace):
    g = torch.Generator().manual_seed(0)
    x = (torch.rand(*shape, generator=g) * 200).to(dtype)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    y = torch.arange(shape[0])
    for seed in range(6):

        def call(seed=seed):
            work = x.clone()
            return cf.cutmix_batch(work, y, alpha=1.0, generator=torch.Generator().manual_seed(seed), inplace=inplace)

        (a, ya, area_a, box_a), (b, yb, area_b, box_b) = both_ways(monkeypatch, call)
        assert torch.equal(a, b) and torch.equal(ya, yb) and (area_a, box_a) == (area_b, box_b)
        assert a.stride() == b.stride() == x.stride()


@pytest.mark.parametrize("shape, channels_last", LAYOUTS)
@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float64, torch.uint8, torch.bfloat16, torch.bool, torch.complex128]
)
@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize(("num_holes", "length", "uniform_sampling"), [(1, 0.5, False), (3, 0.3, True), (2, 1.0, True)])
def test_cutout_writes_what_torchs_ops_write(
    ops, monkeypatch, shape, channels_last, dtype, inplace, num_holes, length, uniform_sampling
):
    """Holes cut at the border included (uniform sampling, and holes as large as the image), and
    non-finite pixels: zero in the holes either way, bit for bit."""
    g = torch.Generator().manual_seed(0)
    x = (torch.rand(*shape, generator=g) * 200).to(dtype)
    if dtype == torch.float32:
        x.view(-1)[::7] = float("nan")
        x.view(-1)[3::11] = float("-inf")
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    for seed in range(4):

        def call(seed=seed):
            work = x.clone()
            out = cf.cutout_batch(
                work,
                num_holes,
                length,
                uniform_sampling,
                generator=torch.Generator().manual_seed(seed),
                inplace=inplace,
            )
            assert (out is work) == inplace
            return out

        a, b = both_ways(monkeypatch, call)
        assert a.stride() == b.stride() == x.stride() and a.dtype == b.dtype == dtype
        assert torch.equal(_bytes(a), _bytes(b))


def _bytes(t):
    return (torch.view_as_real(t) if t.is_complex() else t).contiguous().view(torch.uint8)


@pytest.mark.parametrize("shape, channels_last", LAYOUTS + [((6, 5), False), ((3, 1), False)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("mixing", [0.0, 0.1, 0.37, 0.5, 0.9, 1.0])
@pytest.mark.parametrize("inplace", [False, True])
def test_mixup_rounds_as_torch_lerp_does(ops, monkeypatch, shape, channels_last, dtype, mixing, inplace):
    """``mixed == torch.lerp(x, x[indices], m)`` exactly, both weights' branches, with either op set."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(*shape, generator=g, dtype=dtype) * 30
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    idx = torch.randperm(shape[0], generator=g)
    y = torch.arange(shape[0])
    expected = torch.lerp(x, x[idx], mixing)

    def call():
        return cf.mixup_batch(x.clone(), y, mixing=mixing, indices=idx, inplace=inplace)[0]

    with_kernels, with_torch = both_ways(monkeypatch, call)
    assert torch.equal(with_kernels, expected) and torch.equal(with_torch, expected)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_the_result_does_not_depend_on_the_number_of_threads(ops, threads):
    """The kernels split the batch (out of place) or the permutation's cycles (in place) over threads."""
    g = torch.Generator().manual_seed(2)
    x, y = torch.randn(40, 3, 8, 8, generator=g), torch.arange(40)
    idx = torch.randperm(40, generator=g)
    centres = torch.randint(0, 8, (2, 40, 1, 1), generator=g, dtype=torch.float32)  # holes of 4x4 pixels
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        cut = cf.cutmix_batch(x, y, bbox=(1, 2, 6, 7), indices=idx)[0]
        cut_in_place = cf.cutmix_batch(x.clone(), y, bbox=(1, 2, 6, 7), indices=idx, inplace=True)[0]
        mixed = cf.mixup_batch(x, y, mixing=0.3, indices=idx)[0]
        mixed_in_place = cf.mixup_batch(x.clone(), y, mixing=0.3, indices=idx, inplace=True)[0]
        holes = ops.cutout_into(cut_out := torch.empty_like(x), x, centres, 4)
        holes_in_place = ops.cutout_inplace(x_in_place := x.clone(), centres, 4)
    finally:
        torch.set_num_threads(before)
    boxed = x.clone()
    boxed[:, :, 1:6, 2:7] = x[idx, :, 1:6, 2:7]
    assert torch.equal(cut, boxed) and torch.equal(cut_in_place, boxed)
    assert torch.equal(mixed, torch.lerp(x, x[idx], 0.3)) and torch.equal(mixed_in_place, mixed)
    holed = x.clone()
    rows, cols = centres[0, :, 0, 0].long().tolist(), centres[1, :, 0, 0].long().tolist()
    for i, (row, col) in enumerate(zip(rows, cols, strict=True)):
        holed[i, :, max(row - 2, 0) : row + 2, max(col - 2, 0) : col + 2] = 0
    assert holes and holes_in_place and torch.equal(cut_out, holed) and torch.equal(x_in_place, holed)


@pytest.mark.parametrize("form", ["cutmix", "mixup", "cutout"])
def test_mixing_in_place_is_seen_by_autograd(form, monkeypatch):
    """A batch saved for a backward pass and then mixed in place makes that backward pass fail,
    as any in-place write does, with the kernels as with torch's ops."""
    for disabled in (False, True):
        monkeypatch.setattr(kernels_module, "ENABLED", not disabled)
        x, w = torch.randn(4, 2, 6, 6), torch.ones(1, requires_grad=True)
        loss = (w * x).sum()  # saves x for the gradient of w
        version = x._version
        if form == "cutmix":
            cf.cutmix_batch(x, torch.arange(4), bbox=(1, 1, 4, 4), indices=torch.tensor([1, 2, 3, 0]), inplace=True)
        elif form == "cutout":
            cf.cutout_batch(x, generator=torch.Generator().manual_seed(0), inplace=True)
        else:
            cf.mixup_batch(x, torch.arange(4), mixing=0.3, indices=torch.tensor([1, 2, 3, 0]), inplace=True)
        assert x._version > version
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            loss.backward()


@pytest.mark.parametrize("form", ["cutmix", "mixup", "cutout"])
def test_an_inference_tensor_outside_inference_mode_is_refused_in_place_as_torch_refuses_it(form, monkeypatch):
    with torch.inference_mode():
        x = torch.randn(4, 2, 6, 6)
    idx = torch.tensor([1, 2, 3, 0])
    for enabled in (True, False):  # the kernels decline it; torch's ops raise (after writing, as torch does)
        monkeypatch.setattr(kernels_module, "ENABLED", enabled)
        with pytest.raises(RuntimeError, match="Inplace update to inference tensor outside InferenceMode"):
            if form == "cutmix":
                cf.cutmix_batch(x, torch.arange(4), bbox=(1, 1, 4, 4), indices=idx, inplace=True)
            elif form == "cutout":
                cf.cutout_batch(x, generator=torch.Generator().manual_seed(0), inplace=True)
            else:
                cf.mixup_batch(x, torch.arange(4), mixing=0.3, indices=idx, inplace=True)


def _images(dtype=torch.float32):
    return torch.randn(4, 2, 5, 6).to(dtype)


def _centres(holes=2):
    """Hole centres for the 4 images of ``_images``: float32 (2, 4, holes, 1), inside the images."""
    return torch.randint(0, 5, (2, 4, holes, 1), generator=torch.Generator().manual_seed(0), dtype=torch.float32)


_one = torch.tensor([1])


# (what, the call with `x` and a fresh output `out`): each op declines these and writes nothing
DECLINED = [
    ("index out of range", lambda ops, x, out: ops.cutmix_into(out, x, torch.tensor([0, 1, 2, 4]), 1, 1, 3, 3)),
    ("negative index", lambda ops, x, out: ops.mixup_into(out, x, torch.tensor([0, -1, 2, 3]), 0.3)),
    ("int32 indices", lambda ops, x, out: ops.mixup_into(out, x, torch.tensor([1, 0, 3, 2], dtype=torch.int32), 0.3)),
    ("too few indices", lambda ops, x, out: ops.cutmix_into(out, x, torch.tensor([1, 0, 3]), 1, 1, 3, 3)),
    ("repeats, in place", lambda ops, x, out: ops.cutmix_inplace(x, torch.tensor([0, 0, 1, 2]), 1, 1, 3, 3)),
    ("repeats, mixup in place", lambda ops, x, out: ops.mixup_inplace(x, torch.tensor([1, 1, 2, 3]), 0.3)),
    ("box past the border", lambda ops, x, out: ops.cutmix_inplace(x, torch.tensor([1, 0, 3, 2]), 1, 1, 6, 3)),
    ("box upside down", lambda ops, x, out: ops.cutmix_into(out, x, torch.tensor([1, 0, 3, 2]), 3, 1, 1, 3)),
    ("strided input", lambda ops, x, out: ops.cutmix_inplace(x[:, :, :, ::2], torch.tensor([1, 0, 3, 2]), 0, 0, 2, 2)),
    (
        "output of another layout",
        lambda ops, x, out: ops.cutmix_into(
            out.contiguous(memory_format=torch.channels_last), x, torch.tensor([1, 0, 3, 2]), 1, 1, 3, 3
        ),
    ),
    ("output is the input", lambda ops, x, out: ops.mixup_into(x, x, torch.tensor([1, 0, 3, 2]), 0.3)),
    ("float16, mixup", lambda ops, x, out: ops.mixup_inplace(x.half(), torch.tensor([1, 0, 3, 2]), 0.3)),
    ("not an image batch", lambda ops, x, out: ops.cutmix_inplace(x[0], torch.tensor([1, 0]), 0, 0, 1, 1)),
    (
        "cutout: a NaN centre",
        lambda ops, x, out: ops.cutout_into(out, x, _centres().index_fill_(1, _one, float("nan")), 2),
    ),
    (
        "cutout in place: an inf centre",
        lambda ops, x, out: ops.cutout_inplace(x, _centres().index_fill_(2, _one, float("inf")), 2),
    ),
    ("cutout: float64 centres", lambda ops, x, out: ops.cutout_into(out, x, _centres().double(), 2)),
    ("cutout: centres for 3 images", lambda ops, x, out: ops.cutout_inplace(x, _centres()[:, :3], 2)),
    ("cutout: centres of 3 dimensions", lambda ops, x, out: ops.cutout_into(out, x, _centres()[..., 0], 2)),
    ("cutout: strided centres", lambda ops, x, out: ops.cutout_inplace(x, _centres(4)[:, :, ::2], 2)),
    ("cutout: a negative side", lambda ops, x, out: ops.cutout_inplace(x, _centres(), -1)),
    ("cutout: output is the input", lambda ops, x, out: ops.cutout_into(x, x, _centres(), 2)),
    (
        "cutout: output of another layout",
        lambda ops, x, out: ops.cutout_into(out.contiguous(memory_format=torch.channels_last), x, _centres(), 2),
    ),
    ("cutout: output of another dtype", lambda ops, x, out: ops.cutout_into(out.double(), x, _centres(), 2)),
    ("cutout: strided input", lambda ops, x, out: ops.cutout_inplace(x[:, :, :, ::2], _centres(), 2)),
    ("cutout: not an image batch", lambda ops, x, out: ops.cutout_inplace(x[0], _centres()[:, :2], 2)),
]
# (what, the call with a table of rows `rows`): rows_at declines these, as index_select raises for the first ones
ROWS_DECLINED = [
    ("index past the table", lambda ops, rows: ops.rows_at(rows, torch.tensor([0, 3]))),
    ("negative (ignored) index", lambda ops, rows: ops.rows_at(rows, torch.tensor([0, -100]))),
    ("int16 indices", lambda ops, rows: ops.rows_at(rows, torch.tensor([0, 1], dtype=torch.int16))),
    ("indices of two dimensions", lambda ops, rows: ops.rows_at(rows, torch.tensor([[0, 1]]))),
    ("a table of one dimension", lambda ops, rows: ops.rows_at(rows[0], torch.tensor([0, 1]))),
    ("a strided table", lambda ops, rows: ops.rows_at(rows.t(), torch.tensor([0, 1]))),
    ("strided indices", lambda ops, rows: ops.rows_at(rows, torch.tensor([0, 9, 1])[::2])),
]


@pytest.mark.parametrize("what, call", DECLINED, ids=[what for what, _ in DECLINED])
def test_an_op_that_does_not_apply_returns_false_and_writes_nothing(ops, what, call):
    x, out = _images(), torch.zeros(4, 2, 5, 6)
    x_before = x.clone()
    assert call(ops, x, out) is False
    assert torch.equal(x, x_before) and torch.equal(out, torch.zeros(4, 2, 5, 6))


@pytest.mark.parametrize("what, call", ROWS_DECLINED, ids=[what for what, _ in ROWS_DECLINED])
def test_the_row_lookup_returns_none_where_it_does_not_apply(ops, what, call):
    assert call(ops, torch.arange(9.0).reshape(3, 3)) is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64])
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
def test_the_row_lookup_is_index_select(ops, dtype, index_dtype):
    rows = torch.arange(35).reshape(7, 5).to(dtype)
    index = torch.tensor([6, 0, 3, 3, 1], dtype=index_dtype)
    assert torch.equal(ops.rows_at(rows, index), rows.index_select(0, index))
    assert ops.rows_at(rows, index[:0]).shape == (0, 5)


def test_the_ops_decline_tensors_that_require_grad(ops):
    x = _images().requires_grad_()
    with torch.no_grad():
        before = x.clone()
    assert ops.cutmix_into(torch.zeros(4, 2, 5, 6), x, torch.tensor([1, 0, 3, 2]), 1, 1, 3, 3) is False
    assert ops.mixup_into(torch.zeros(4, 2, 5, 6), x, torch.tensor([1, 0, 3, 2]), 0.3) is False
    assert ops.rows_at(x[0, 0], torch.tensor([1, 0])) is None
    assert ops.cutout_into(torch.zeros(4, 2, 5, 6), x, _centres(), 2) is False
    with torch.no_grad():  # a tensor that requires grad can be written in place only under no_grad
        assert ops.cutout_inplace(x, _centres(), 2) is False
    assert torch.equal(x.detach(), before)


def test_declined_calls_still_mix_by_the_definition(ops):
    """Repeated partners in place: the kernel declines, torch's ops write the definition."""
    x = torch.randn(4, 2, 5, 6)
    original, idx = x.clone(), torch.tensor([0, 0, 3, 3])
    cf.cutmix_batch(x, torch.arange(4), bbox=(1, 1, 3, 3), indices=idx, inplace=True)
    expected = original.clone()
    expected[:, :, 1:3, 1:3] = original[idx, :, 1:3, 1:3]
    assert torch.equal(x, expected)
    with pytest.raises(IndexError):  # torch's own error for an index out of range
        cf.cutmix_batch(x, torch.arange(4), bbox=(1, 1, 3, 3), indices=torch.tensor([0, 1, 2, 9]))


def test_a_failed_build_warns_once_with_the_reason_and_mixes_with_torchs_ops(monkeypatch):
    monkeypatch.setattr(kernels_module, "ENABLED", True)
    monkeypatch.setattr(kernels_module, "_build", lambda: (None, "no C++ compiler found"))
    kernels_module._warn_once.cache_clear()
    x, idx = torch.randn(4, 3, 2, 2), torch.tensor([1, 2, 3, 0])
    try:
        expected = r"did not build \(no C\+\+ compiler found\).*METHODS_CPU_KERNELS=0"
        out = []
        with pytest.warns(RuntimeWarning, match=expected) as caught:
            caller = line_that_called_into(
                mixup_module.__file__,
                lambda: out.append(cf.mixup_batch(x, torch.arange(4), mixing=0.25, indices=idx)[0]),
            )
        assert (caught[0].filename, caught[0].lineno) == caller  # names the call, not a line of the library
        mixed = out[0]
        assert torch.equal(mixed, torch.lerp(x, x[idx], 0.25))
        with warnings.catch_warnings():  # once per process
            warnings.simplefilter("error")
            cf.cutmix_batch(x, torch.arange(4), bbox=(0, 0, 1, 1), indices=idx)
        assert kernel_status() == "no C++ compiler found"
    finally:
        kernels_module._warn_once.cache_clear()


def test_the_kernels_build_where_a_compiler_and_ninja_are_found():
    from torch.utils.cpp_extension import is_ninja_available

    compiler = os.environ.get("CXX", "c++")
    if shutil.which(compiler) is None or not is_ninja_available():
        pytest.skip(f"no C++ compiler ({compiler}) or no ninja on PATH: the methods use torch's ops")
    assert kernel_status() == "built"
    ops = cpu_kernels()
    assert {name for name in vars(ops)} == set(kernels_module.OPS)


def test_each_torch_version_has_a_build_of_its_own(monkeypatch):
    """torch's check of a cached build compares sources and flags, not the torch it was built
    against: a second torch in another environment must not load this one's build."""
    names = set()
    for version in ("2.13.0+cpu", "2.13.0", "2.14.1+cu128", "2.14.1"):
        monkeypatch.setattr(torch, "__version__", version)
        name = kernels_module.build_name()
        assert name.isidentifier() and name.startswith("methods_library_kernels")
        names.add(name)
    assert len(names) == 4


@pytest.mark.parametrize("form", ["cutmix", "mixup"])
def test_in_place_under_inference_mode(ops, form):
    """Inference tensors have no version counter to bump; the batch is still mixed in place."""
    with torch.inference_mode():
        x = torch.randn(4, 2, 6, 6)
        original, idx = x.clone(), torch.tensor([1, 2, 3, 0])
        if form == "cutmix":
            cf.cutmix_batch(x, torch.arange(4), bbox=(1, 1, 4, 4), indices=idx, inplace=True)
            expected = original.clone()
            expected[:, :, 1:4, 1:4] = original[idx, :, 1:4, 1:4]
        else:
            cf.mixup_batch(x, torch.arange(4), mixing=0.3, indices=idx, inplace=True)
            expected = torch.lerp(original, original[idx], 0.3)
    assert torch.equal(x, expected)


@pytest.mark.parametrize(
    "message, line",
    [
        (
            "Ninja is required to load C++ extensions (pip install ninja to get it)",
            "Ninja is required to load C++ extensions (pip install ninja to get it)",
        ),
        (
            "Error building extension 'k': [1/2] c++ -DTORCH_EXTENSION_NAME=k -c a.cpp -o a.o\nFAILED: a.o\n"
            "c++ -DTORCH_EXTENSION_NAME=k -c a.cpp -o a.o\nIn file included from a.cpp:1:\n"
            "a.cpp:3:1: error: 'foo' does not name a type\nninja: build stopped: subcommand failed.\n",
            "Error building extension 'k': a.cpp:3:1: error: 'foo' does not name a type",
        ),
        (
            "Error building extension 'k': [1/2] /no/c++ -DTORCH_EXTENSION_NAME=k -c a.cpp\nFAILED: a.o\n"
            "/no/c++ -DTORCH_EXTENSION_NAME=k -c a.cpp\n/bin/sh: 1: /no/c++: not found\n"
            "ninja: build stopped: subcommand failed.\n",
            "Error building extension 'k': /bin/sh: 1: /no/c++: not found",
        ),
        (
            "Error building extension 'k': [1/2] c++ -DTORCH_EXTENSION_NAME=k -Werror -c a.cpp\n"
            "c++ -DTORCH_EXTENSION_NAME=k -Werror -c a.cpp\nIn file included from a.cpp:1:\n"
            "warning, treated as an ERROR\n",
            "Error building extension 'k': warning, treated as an ERROR",
        ),
        (
            "Error building extension 'k'\n/bin/sh: 1: ninja: NOT FOUND",
            "Error building extension 'k': /bin/sh: 1: ninja: NOT FOUND",
        ),
        ("Error building extension 'k'\nninja: build stopped: subcommand failed.", "Error building extension 'k'"),
        ("x" * 400, "x" * 300),
        ("", "RuntimeError"),
    ],
)
def test_a_failed_build_is_summed_up_in_one_line_without_ninjas_command_lines(message, line):
    assert kernels_module.build_failure(RuntimeError(message)) == line


def test_without_a_compiler_the_methods_warn_once_and_mix_with_torchs_ops(tmp_path):
    """A real build, in a fresh cache, with a compiler that does not exist (a subprocess: a process
    loads its build once)."""
    code = (
        "import warnings, torch\n"
        "import algorithms.functional as cf\n"
        "from algorithms._kernels import kernel_status\n"
        "x, idx = torch.randn(4, 3, 8, 8), torch.tensor([1, 2, 3, 0])\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    mixed = cf.cutmix_batch(x, torch.arange(4), bbox=(1, 1, 4, 4), indices=idx)[0]\n"
        "    cf.mixup_batch(x, torch.arange(4), mixing=0.5, indices=idx)\n"
        "expected = x.clone()\n"
        "expected[:, :, 1:4, 1:4] = x[idx, :, 1:4, 1:4]\n"
        "assert torch.equal(mixed, expected)\n"
        "import algorithms, pathlib\n"
        "inside = pathlib.Path(caught[0].filename).resolve().is_relative_to(pathlib.Path(algorithms.__file__).parent)\n"
        "print(len(caught), caught[0].category.__name__, 'inside' if inside else 'outside')\n"
        "print(kernel_status())\n"
    )
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path), "CXX": str(tmp_path / "no-such-c++")}
    env.pop(DISABLE, None)
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    warned, status = result.stdout.strip().splitlines()[-2:]
    # once, naming a line outside the library (the in-process test above checks it is the caller's)
    assert warned == "1 RuntimeWarning outside"
    assert status.startswith("Error building extension") and "no-such-c++" in status


def test_turned_off_the_kernels_are_not_built(monkeypatch):
    monkeypatch.setattr(kernels_module, "ENABLED", False)

    def must_not_build():
        raise AssertionError("built although turned off")

    monkeypatch.setattr(kernels_module, "_build", must_not_build)
    assert cpu_kernels() is None and kernel_status() == "off (METHODS_CPU_KERNELS=0)"
    x = torch.randn(2, 1, 2, 2)
    assert torch.equal(
        cf.mixup_batch(x, torch.arange(2), mixing=0.5, indices=torch.tensor([1, 0]))[0], torch.lerp(x, x[[1, 0]], 0.5)
    )


@pytest.mark.parametrize("value, enabled", [("0", False), ("1", True), ("", True)])
def test_the_environment_variable_is_read_when_the_package_is_imported(value, enabled):
    code = "import algorithms._kernels as k; print(k.ENABLED)"
    env = {**os.environ, DISABLE: value}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == str(enabled)
