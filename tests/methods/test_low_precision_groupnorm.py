"""Low Precision GroupNorm's own semantics, checked against its definition (Composer's LPGroupNorm).

Under autocast the replacement casts its input, weight and bias to the autocast dtype and runs
``group_norm`` there, so its output has that dtype; outside autocast it is ``nn.GroupNorm``.
It replaces only for amp_fp16 and amp_bf16 and warns otherwise. Composer's tests are re-expressed
here: after the functional form and after the class at INIT (precision amp_fp16) no plain
``nn.GroupNorm`` is left and at least one ``LPGroupNorm`` is there.

What torch 2.13 does on the CPU, which the tests check as it is: autocast does not put
``group_norm`` on its float32 list there, so ``nn.GroupNorm`` computes in its input's dtype (a
float32 input gives float32, a bfloat16 input bfloat16); on CUDA it casts to float32.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

import pytest
import torch
from torch import nn
from trainer_support import assert_warns_at_the_calling_line

import algorithms.functional as cf
from algorithms import LowPrecisionGroupNorm
from algorithms.core import Trainer
from algorithms.low_precision_groupnorm import low_precision_groupnorm as lp_module
from algorithms.low_precision_groupnorm.low_precision_groupnorm import LPGroupNorm
from algorithms.surgery import NoModulesReplacedWarning, count_module_instances

try:
    from algorithms.models import resnet20_gn
except ImportError:  # the GroupNorm ResNet-20 is not in this checkout yet
    resnet20_gn = None

#: Unit roundoff of each low precision dtype (half the distance from 1 to the next number).
UNIT_ROUNDOFF = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}


def _model():
    """A small convolutional network with two group norms (one without affine parameters, one with
    an eps other than the default)."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.GroupNorm(4, 8, eps=1e-3),
        nn.ReLU(),
        nn.Conv2d(8, 8, 3),
        nn.GroupNorm(2, 8, affine=False),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 4),
    )
    with torch.no_grad():
        model[1].weight.uniform_(0.5, 1.5)
        model[1].bias.uniform_(-0.5, 0.5)
    return model


def _plain_groupnorms(model):
    return [m for m in model.modules() if type(m) is nn.GroupNorm]


@pytest.mark.parametrize("precision", ["amp_fp16", "amp_bf16"])
def test_every_groupnorm_is_replaced_and_keeps_its_weights(precision):
    model = _model()
    before = [(m.num_groups, m.num_channels, m.eps, m.affine, m.weight, m.bias) for m in _plain_groupnorms(model)]
    out = cf.apply_low_precision_groupnorm(model, precision=precision)
    assert out is model and not _plain_groupnorms(model)
    replaced = [m for m in model.modules() if isinstance(m, LPGroupNorm)]
    assert len(replaced) == 2
    for new, (groups, channels, eps, affine, weight, bias) in zip(replaced, before, strict=True):
        assert (new.num_groups, new.num_channels, new.eps, new.affine) == (groups, channels, eps, affine)
        if affine:
            assert torch.equal(new.weight, weight) and torch.equal(new.bias, bias)
        else:
            assert new.weight is None and new.bias is None


@pytest.mark.skipif(resnet20_gn is None, reason="algorithms.models.resnet20_gn is not there yet")
def test_the_groupnorm_resnet20_has_21_groupnorms_replaced():
    model = resnet20_gn()
    assert count_module_instances(model, nn.GroupNorm) == 21  # the stem, two per block, two projections
    cf.apply_low_precision_groupnorm(model, precision="amp_bf16")
    assert count_module_instances(model, LPGroupNorm) == 21 and not _plain_groupnorms(model)


def test_outside_autocast_it_computes_exactly_what_groupnorm_does():
    model, reference = _model(), _model()
    cf.apply_low_precision_groupnorm(model, precision="amp_fp16")
    x = torch.randn(4, 3, 8, 8)
    assert torch.equal(model(x), reference(x))


@pytest.mark.parametrize("eps", [1e-5, 0.5])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("groups", [1, 2, 4, 8, 16])
def test_under_autocast_the_output_has_the_autocast_dtype_and_is_close_to_float32(dtype, groups, eps):
    """The dtype: float32 in, ``dtype`` out (nn.GroupNorm gives float32). The values: with the
    unit roundoff u of ``dtype``, rounding the input, the weight, the bias and the output each
    moves an entry of y = w * (x - mean) / std + b by at most about u times |y|, |w * xhat| or
    |b|, so |low - float32| <= 4 u (|y| + |w| + |b|) bounds it with margin (the mean and the
    variance are accumulated in float32)."""
    g = torch.Generator().manual_seed(groups)
    x = 3 * torch.randn(8, 16, 6, 6, generator=g) + 1
    reference = nn.GroupNorm(groups, 16, eps=eps)
    with torch.no_grad():
        reference.weight.copy_(torch.randn(16, generator=g))
        reference.bias.copy_(torch.randn(16, generator=g))
    low = cf.apply_low_precision_groupnorm(nn.Sequential(reference), precision="amp_bf16")[0]
    with torch.no_grad():
        expected = reference(x)
        with torch.autocast("cpu", dtype=dtype):
            out = low(x)
            plain = reference(x)
    assert out.dtype == dtype and plain.dtype == torch.float32
    bound = (
        4
        * UNIT_ROUNDOFF[dtype]
        * (expected.abs() + reference.weight.abs().view(1, -1, 1, 1) + reference.bias.abs().view(1, -1, 1, 1))
    )
    assert bool(((out.float() - expected).abs() <= bound).all())


def test_a_low_precision_input_keeps_its_dtype_either_way_on_the_cpu():
    """A bfloat16 input (what a convolution gives under CPU autocast) stays bfloat16 through both."""
    reference = nn.GroupNorm(2, 8)
    low = cf.apply_low_precision_groupnorm(nn.Sequential(nn.GroupNorm(2, 8)), precision="amp_bf16")[0]
    x = torch.randn(2, 8, 4, 4).bfloat16()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert reference(x).dtype == torch.bfloat16 and low(x).dtype == torch.bfloat16


def test_backward_and_a_prior_optimizer_train_the_new_parameters():
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    old = {id(p) for m in _plain_groupnorms(model) for p in m.parameters()}
    cf.apply_low_precision_groupnorm(model, precision="amp_bf16", optimizers=optimizer)
    held = {id(p) for group in optimizer.param_groups for p in group["params"]}
    assert held == {id(p) for p in model.parameters()} and not old & held
    before = model[1].weight.detach().clone()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(torch.randn(4, 3, 8, 8)).float().sum()
    loss.backward()
    assert model[1].weight.grad is not None and model[1].weight.grad.dtype == torch.float32
    optimizer.step()
    assert not torch.equal(model[1].weight, before)


def test_a_float64_model_keeps_float64_groupnorms():
    model = _model().double()
    cf.apply_low_precision_groupnorm(model, precision="amp_fp16")
    assert all(p.dtype == torch.float64 for p in model.parameters())
    assert model(torch.randn(2, 3, 8, 8, dtype=torch.float64)).dtype == torch.float64


@pytest.mark.parametrize("precision", [None, "fp32", "fp16", "bf16"])
def test_without_autocast_it_warns_and_changes_nothing(precision):
    model = _model()
    message = (
        f"LowPrecisionGroupNorm: precision={precision!r} runs no autocast, where a low precision group norm "
        "computes what nn.GroupNorm does; it applies to amp_fp16 and amp_bf16 only, so the model is unchanged"
    )
    with pytest.warns(NoModulesReplacedWarning, match=f"^{re.escape(message)}$") as record:
        cf.apply_low_precision_groupnorm(model, precision=precision)
    assert len(_plain_groupnorms(model)) == 2
    # the warning points at the call, outside the method's module
    assert Path(record[0].filename).resolve() != Path(lp_module.__file__).resolve()


def test_the_warning_points_at_the_line_that_called_it():
    """The warning is reported at the line that called into the library, the caller's own line,
    not one frame further out."""
    model = _model()
    assert_warns_at_the_calling_line(
        lp_module.__file__, lambda: cf.apply_low_precision_groupnorm(model, "fp32"), NoModulesReplacedWarning
    )


def test_a_model_without_groupnorm_warns():
    message = "LowPrecisionGroupNorm: no module of the model matched (GroupNorm); the model is unchanged"
    with pytest.warns(NoModulesReplacedWarning, match=f"^{re.escape(message)}$"):
        cf.apply_low_precision_groupnorm(nn.Sequential(nn.Linear(2, 2), nn.LayerNorm(2)), precision="amp_bf16")


def test_applied_again_it_keeps_the_low_precision_groupnorms_and_warns():
    model = _model()
    cf.apply_low_precision_groupnorm(model, precision="amp_bf16")
    norms = [m for m in model.modules() if isinstance(m, LPGroupNorm)]
    with pytest.warns(NoModulesReplacedWarning, match="no module of the model matched"):
        cf.apply_low_precision_groupnorm(model, precision="amp_fp16")
    assert [m for m in model.modules() if isinstance(m, LPGroupNorm)] == norms  # the same modules


def test_an_unknown_precision_is_refused():
    message = "precision='amp_fp8': use one of fp32, fp16, bf16, amp_fp16, amp_bf16 (or None)"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        cf.apply_low_precision_groupnorm(_model(), precision="amp_fp8")


def test_in_the_trainer_an_optimizer_given_to_it_trains_the_new_parameters():
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    old = {id(p) for m in _plain_groupnorms(model) for p in m.parameters()}
    batches = [(torch.randn(4, 3, 8, 8), torch.randint(0, 4, (4,)))]
    trainer = Trainer(
        model,
        batches,
        "1ba",
        optimizer=optimizer,
        algorithms=[LowPrecisionGroupNorm()],
        precision="amp_bf16",
        seed=0,
        device="cpu",
    )
    held = {id(p) for group in optimizer.param_groups for p in group["params"]}
    assert held == {id(p) for p in trainer.state.model.parameters()} and not old & held
    before = trainer.state.model[1].weight.detach().clone()
    trainer.fit()
    assert not torch.equal(trainer.state.model[1].weight, before)


@pytest.mark.parametrize("precision", ["amp_bf16", "fp32"])
def test_in_the_trainer_it_acts_under_autocast_only(precision):
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(4, 3, 8, 8, generator=g), torch.randint(0, 4, (4,), generator=g)) for _ in range(2)]
    expected = pytest.warns(NoModulesReplacedWarning) if precision == "fp32" else contextlib.nullcontext()
    with expected:
        trainer = Trainer(
            _model(), batches, "2ba", algorithms=[LowPrecisionGroupNorm()], precision=precision, seed=0, device="cpu"
        )
    dtypes = []
    for m in trainer.state.model.modules():
        if isinstance(m, nn.GroupNorm):
            m.register_forward_hook(lambda module, inputs, output: dtypes.append(output.dtype))
    trainer.fit()
    assert dtypes == [torch.bfloat16 if precision == "amp_bf16" else torch.float32] * 4  # 2 norms, 2 batches
    replaced = count_module_instances(trainer.state.model, LPGroupNorm)
    assert replaced == (2 if precision == "amp_bf16" else 0)
    assert all(torch.isfinite(p).all() for p in trainer.state.model.parameters())
    low = precision == "amp_bf16"
    assert trainer.method_log.records["LowPrecisionGroupNorm"]["activity"] == {
        "modules_replaced": replaced,
        "batches_in_low_precision": 2 if low else 0,
    }
    assert trainer.method_log.acted("LowPrecisionGroupNorm") is low


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_on_cuda_autocast_runs_it_in_low_precision_where_nn_groupnorm_runs_in_float32(dtype):
    """group_norm is on CUDA autocast's float32 list: nn.GroupNorm gives float32 there, LPGroupNorm
    the autocast dtype (it runs group_norm with autocast off)."""
    reference = _model()[1]
    low = cf.apply_low_precision_groupnorm(nn.Sequential(_model()[1]), precision="amp_bf16")[0]
    reference, low = reference.cuda(), low.cuda()
    x = torch.randn(4, 8, 6, 6, device="cuda").to(dtype)
    with torch.autocast("cuda", dtype=dtype):
        assert reference(x).dtype == torch.float32
        out = low(x)
    assert out.dtype == dtype and out.is_cuda
    torch.testing.assert_close(out.float(), reference(x.float()), atol=0.1, rtol=0.05)
