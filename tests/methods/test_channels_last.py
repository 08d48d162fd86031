"""Channels Last's own semantics, checked against its definition and Composer's tests.

``apply_channels_last(model)`` is ``model.to(memory_format=torch.channels_last)``: every 4-D
parameter and buffer keeps its shape and values and gets the strides of an NHWC tensor, the
channels innermost; nothing else about the model changes, so its outputs are the same. The
tests every method passes (it trains in the Trainer, its functional and class defaults agree)
already run from the metadata registry.
"""

from __future__ import annotations

import copy
import re

import numpy as np
import pytest
import torch
from trainer_support import Observed

import algorithms.functional as cf
from algorithms import ChannelsLast
from algorithms.core import Event, Trainer
from algorithms.models import resnet20


def _infer_memory_format(tensor: torch.Tensor) -> str:
    """Composer's test helper: the dimensions ordered from the largest stride to the smallest."""
    if any(s == 1 for s in tensor.shape):
        raise ValueError(f"shape {tuple(tensor.shape)} has singleton dimensions: the format is ambiguous")
    if tensor.dim() != 4:
        raise ValueError(f"needs a 4-D tensor, got shape {tuple(tensor.shape)}")
    order = np.argsort(tensor.stride())
    return "".join("nchw"[o] for o in reversed(order))


def _four_d(model):
    return [(n, t) for n, t in [*model.named_parameters(), *model.named_buffers()] if t.dim() == 4]


def test_every_4d_parameter_becomes_channels_last_contiguous_with_its_values():
    model = resnet20()
    before = copy.deepcopy(model)
    assert cf.apply_channels_last(model) is model
    four_d = _four_d(model)
    assert len(four_d) == 21  # the stem, 18 block convolutions and 2 shortcuts
    for name, t in four_d:
        assert t.is_contiguous(memory_format=torch.channels_last), name
        assert torch.equal(t, before.get_parameter(name))
    assert _infer_memory_format(model.layer1[0].conv1.weight) == "nhwc"
    assert _infer_memory_format(before.layer1[0].conv1.weight) == "nchw"
    # The rest is untouched: names, shapes, dtypes, values, module classes.
    assert [(n, p.shape, p.dtype) for n, p in model.named_parameters()] == [
        (n, p.shape, p.dtype) for n, p in before.named_parameters()
    ]
    assert all(
        torch.equal(a, b) for a, b in zip(model.state_dict().values(), before.state_dict().values(), strict=True)
    )
    assert [type(m) for m in model.modules()] == [type(m) for m in before.modules()]


def test_the_strides_are_those_of_nhwc():
    """A (O, I, kH, kW) weight in channels-last order has strides (I*kH*kW, 1, kW*I, I)."""
    model = cf.apply_channels_last(resnet20())
    o, i, kh, kw = model.layer2[0].conv1.weight.shape
    assert model.layer2[0].conv1.weight.stride() == (i * kh * kw, 1, kw * i, i)


@pytest.mark.parametrize(("dtype", "tolerance"), [(torch.float32, 1e-5), (torch.float64, 1e-12)])
def test_outputs_are_unchanged_on_resnet20(dtype, tolerance):
    torch.manual_seed(0)
    model = resnet20().to(dtype).eval()
    reference = copy.deepcopy(model)
    cf.apply_channels_last(model)
    x = torch.randn(4, 3, 16, 16, dtype=dtype)
    torch.testing.assert_close(model(x), reference(x), rtol=tolerance, atol=tolerance)
    torch.testing.assert_close(
        model(x.contiguous(memory_format=torch.channels_last)), reference(x), rtol=tolerance, atol=tolerance
    )


def test_gradients_are_unchanged_and_keep_the_parameters_layout():
    torch.manual_seed(0)
    model = resnet20().double()
    reference = copy.deepcopy(model)
    cf.apply_channels_last(model)
    x = torch.randn(4, 3, 16, 16, dtype=torch.float64)
    y = torch.randint(0, 10, (4,))
    for m in (model, reference):
        torch.nn.functional.cross_entropy(m(x), y).backward()
    for (name, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-10, atol=1e-12)
        if p.dim() == 4:
            assert p.grad.is_contiguous(memory_format=torch.channels_last), name


def test_the_parameters_stay_the_same_objects_so_an_optimizer_built_before_still_trains_them():
    model = resnet20()
    params = list(model.parameters())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    cf.apply_channels_last(model)
    assert all(p is q for p, q in zip(model.parameters(), params, strict=True))
    before = model.conv1.weight.detach().clone()
    torch.nn.functional.cross_entropy(model(torch.randn(2, 3, 16, 16)), torch.tensor([0, 1])).backward()
    optimizer.step()
    assert not torch.equal(model.conv1.weight, before)
    assert model.conv1.weight.is_contiguous(memory_format=torch.channels_last)


def test_a_model_without_4d_tensors_is_left_as_it_is_and_a_5d_one_is_refused():
    linear = torch.nn.Linear(4, 2)
    strides = [p.stride() for p in linear.parameters()]
    cf.apply_channels_last(linear)
    assert [p.stride() for p in linear.parameters()] == strides
    conv3d = torch.nn.Sequential(torch.nn.Conv2d(2, 2, 3), torch.nn.Conv3d(2, 2, 3))
    five_d = (
        "model: 1.weight is 5-D, and channels_last is a layout of 4-D tensors; convert a 3-D convolutional "
        "model with model.to(memory_format=torch.channels_last_3d)"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(five_d)}$"):
        cf.apply_channels_last(conv3d)
    assert conv3d[0].weight.is_contiguous()  # nothing changed
    with pytest.raises(ValueError, match=r"^model: must be a torch\.nn\.Module, got Tensor$"):
        cf.apply_channels_last(torch.zeros(2, 3, 4, 4))


def test_it_matches_only_init_and_has_no_hyperparameters():
    algo = ChannelsLast()
    assert [e for e in Event if algo.match(e, None)] == [Event.INIT]


def test_in_the_trainer_the_model_is_channels_last_from_the_first_step():
    """Composer's test applies it and checks conv1's inferred format goes from nchw to nhwc; here
    through the Trainer, with an optimizer built before, the outputs those of the same model
    trained without it."""
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(4, 3, 16, 16, generator=g), torch.randint(0, 10, (4,), generator=g)) for _ in range(3)]

    def train(algorithms):
        torch.manual_seed(0)
        model = resnet20()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        seen = Observed()
        trainer = Trainer(
            model, batches, "3ba", optimizer=optimizer, algorithms=[*algorithms, seen], seed=0, device="cpu"
        )
        trainer.fit()
        return trainer.state.model, seen

    model, seen = train([ChannelsLast()])
    reference, seen_reference = train([])
    assert _infer_memory_format(model.layer1[0].conv1.weight) == "nhwc"
    assert all(t.is_contiguous(memory_format=torch.channels_last) for _, t in _four_d(model))
    for a, b in zip(seen.outputs, seen_reference.outputs, strict=True):  # float32: summed in another order
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    for a, b in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert seen.inputs[0].is_contiguous()  # the batch is left as it is


@pytest.mark.cuda
def test_on_cuda_outputs_are_unchanged():
    torch.manual_seed(0)
    model = resnet20().cuda().eval()
    reference = copy.deepcopy(model)
    cf.apply_channels_last(model)
    x = torch.randn(4, 3, 16, 16, device="cuda")
    out = model(x)
    assert out.is_cuda and model.conv1.weight.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(out, reference(x), rtol=1e-3, atol=1e-4)  # cuDNN's NHWC kernels sum in another order


def test_it_reports_the_tensors_it_converted_and_none_for_a_model_without_4d_ones():
    batches = [(torch.randn(2, 3, 8, 8), torch.randint(0, 10, (2,)))]
    model = resnet20()
    to_convert = sum(not t.is_contiguous(memory_format=torch.channels_last) for _, t in _four_d(model))
    trainer = Trainer(model, batches, "1ba", algorithms=[ChannelsLast()], seed=0, device="cpu")
    assert to_convert > 0
    assert trainer.method_log.records["ChannelsLast"]["activity"] == {"tensors_converted": to_convert}
    flat = [(torch.randn(2, 5), torch.randint(0, 3, (2,)))]
    trainer = Trainer(torch.nn.Linear(5, 3), flat, "1ba", algorithms=[ChannelsLast()], seed=0, device="cpu")
    assert not trainer.method_log.acted("ChannelsLast")
