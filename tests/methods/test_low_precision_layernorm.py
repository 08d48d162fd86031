"""Low Precision LayerNorm, checked against its definition (Composer's LPLayerNorm): under autocast
the layer norm runs in the autocast dtype (input, weight and bias cast to it), outside autocast
it is ``nn.LayerNorm``; it is applied only for the autocast precisions.

Composer's tests apply it under amp_fp16, functionally and through the class, and assert that no
plain ``nn.LayerNorm`` is left and that ``LPLayerNorm`` is there; both are re-expressed here on
``transformer_tiny``, under both autocast precisions.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

import pytest
import torch
from torch import nn
from trainer_support import Observed, assert_warns_at_the_calling_line, line_that_called_into

import algorithms.functional as cf
from algorithms import LowPrecisionLayerNorm
from algorithms.core import Trainer
from algorithms.core import trainer as trainer_module
from algorithms.low_precision_layernorm import LPLayerNorm
from algorithms.low_precision_layernorm import low_precision_layernorm as lp_module
from algorithms.models import lm_loss, transformer_small, transformer_tiny
from algorithms.surgery import NoModulesReplacedWarning

VOCAB = 50
#: Unit roundoff (half the distance from 1 to the next number): bfloat16 keeps 8 significant bits,
#: float16 11.
UNIT_ROUNDOFF = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}


def _model(seed=0, builder=transformer_tiny):
    torch.manual_seed(seed)
    return builder(VOCAB)


def _lm_batches(n=2, bs=4, length=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        ids = torch.randint(0, VOCAB, (bs, length + 1), generator=g)
        out.append({"input_ids": ids[:, :-1], "labels": ids[:, 1:]})
    return out


def _pair(width=64, seed=0, eps=1e-5):
    g = torch.Generator().manual_seed(seed)
    reference = nn.LayerNorm(width, eps=eps)
    with torch.no_grad():
        reference.weight.copy_(1 + 0.3 * torch.randn(width, generator=g))
        reference.bias.copy_(0.3 * torch.randn(width, generator=g))
    low = cf.apply_low_precision_layernorm(nn.Sequential(reference), precision="amp_bf16")[0]
    return reference, low


def test_every_layer_norm_is_replaced_and_its_weights_copied():
    model = _model()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.normal_()
                m.bias.normal_()
    old = {
        n: (m.weight.detach().clone(), m.bias.detach().clone(), m.eps, m.normalized_shape)
        for n, m in model.named_modules()
        if isinstance(m, nn.LayerNorm)
    }
    assert cf.apply_low_precision_layernorm(model, precision="amp_fp16") is model
    new = {n: m for n, m in model.named_modules() if isinstance(m, nn.LayerNorm)}
    assert sorted(new) == sorted(old) == ["blocks.0.ln1", "blocks.0.ln2", "blocks.1.ln1", "blocks.1.ln2", "ln_f"]
    for name, module in new.items():
        assert type(module) is LPLayerNorm
        weight, bias, eps, shape = old[name]
        assert torch.equal(module.weight, weight) and torch.equal(module.bias, bias)
        assert module.eps == eps and module.normalized_shape == shape
    model = _model(builder=transformer_small)
    cf.apply_low_precision_layernorm(model, precision="amp_bf16")
    assert sum(type(m) is LPLayerNorm for m in model.modules()) == 9  # 2 per block of 4, and ln_f


def test_without_autocast_it_is_exactly_nn_layernorm():
    reference, low = _pair()
    x = torch.randn(8, 5, 64, generator=torch.Generator().manual_seed(1)) * 3 + 2
    assert torch.equal(low(x), reference(x))
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=False):
        assert torch.equal(low(x), reference(x))


@pytest.mark.parametrize("eps", [1e-5, 0.5])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("offset", [0.0, 1.0, 8.0, 64.0])
def test_under_autocast_it_is_within_the_roundoff_of_its_dtype(dtype, offset, eps):
    """Four roundings of relative size u (the unit roundoff: 2^-8 for bfloat16, 2^-11 for float16)
    separate it from float32: the input, the weight, the bias and the output. With
    y = (x - mean) / std and s = max |x| / std over the row (rounding x moves the mean and the
    spread by at most u s std), each element differs by at most
    u * (|w| s (2 + |y|) + |w y| + |b| + |out|); the largest ratio seen is about 0.5 of that.
    The layer's own eps is used (0.5, far from the default, shows it)."""
    reference, low = _pair(eps=eps)
    assert low.eps == eps
    g = torch.Generator().manual_seed(2)
    x = torch.randn(512, 64, generator=g) * (0.1 + 3 * torch.rand(512, 1, generator=g)) + offset
    with torch.no_grad():
        out = reference(x)
        with torch.autocast("cpu", dtype=dtype):
            lp = low(x)
    assert lp.dtype == dtype
    mean, std = x.mean(-1, keepdim=True), (x.var(-1, unbiased=False, keepdim=True) + reference.eps).sqrt()
    y, s = (x - mean) / std, x.abs().amax(-1, keepdim=True) / std
    w, b = reference.weight.detach(), reference.bias.detach()
    bound = UNIT_ROUNDOFF[dtype] * (w.abs() * s * (2 + y.abs()) + (w * y).abs() + b.abs() + out.abs())
    ratio = ((lp.float() - out).abs() / bound).max()
    assert ratio <= 1
    assert ratio > 0.05  # the bound is not vacuous: the dtype's rounding is really there
    assert not torch.equal(lp.float(), out)


def test_under_cpu_autocast_its_output_is_low_precision_where_nn_layernorm_s_is_float32():
    """torch 2.13 on the CPU: layer_norm under autocast runs in its input's dtype, so a float32
    input (the residual stream) gives float32 from nn.LayerNorm; LPLayerNorm gives the autocast
    dtype. For a bfloat16 input both give bfloat16."""
    reference, low = _pair()
    x = torch.randn(4, 64)
    for dtype in (torch.bfloat16, torch.float16):
        with torch.autocast("cpu", dtype=dtype):
            assert reference(x).dtype == torch.float32
            assert low(x).dtype == dtype
            assert reference(x.to(dtype)).dtype == dtype and low(x.to(dtype)).dtype == dtype


def test_in_the_model_under_autocast_every_layer_norm_gives_bfloat16():
    def dtypes(model):
        seen = {}
        hooks = [
            m.register_forward_hook(lambda m, i, o, n=n: seen.__setitem__(n, o.dtype))
            for n, m in model.named_modules()
            if isinstance(m, nn.LayerNorm)
        ]
        with torch.autocast("cpu", dtype=torch.bfloat16):
            model(torch.randint(0, VOCAB, (2, 8)))
        for h in hooks:
            h.remove()
        return seen

    model = _model()
    assert set(dtypes(model).values()) == {torch.float32}
    cf.apply_low_precision_layernorm(model, precision="amp_bf16")
    assert set(dtypes(model).values()) == {torch.bfloat16} and len(dtypes(model)) == 5


def test_gradients_reach_the_float32_weights():
    model = _model()
    cf.apply_low_precision_layernorm(model, precision="amp_bf16")
    batch = _lm_batches(1)[0]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = lm_loss(model(batch["input_ids"]), batch["labels"])
    loss.backward()
    for m in model.modules():
        if isinstance(m, LPLayerNorm):
            assert m.weight.dtype == torch.float32 and m.weight.grad.dtype == torch.float32
            assert m.weight.grad.abs().sum() > 0 and m.bias.grad.abs().sum() > 0


def test_layer_norms_without_affine_or_bias_are_replaced_too():
    model = nn.Sequential(
        nn.LayerNorm(8, elementwise_affine=False),
        nn.LayerNorm(8, bias=False),
        nn.LayerNorm([2, 4]),
        nn.LayerNorm(8, eps=0.25),
    )
    cf.apply_low_precision_layernorm(model, precision="amp_bf16")
    assert all(type(m) is LPLayerNorm for m in model)
    assert [m.eps for m in model] == [1e-5, 1e-5, 1e-5, 0.25]
    assert model[0].weight is None and model[1].bias is None and model[1].weight is not None
    assert model[2].normalized_shape == (2, 4)
    x = torch.randn(3, 2, 4).reshape(3, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert model[0](x).dtype == model[1](x).dtype == torch.bfloat16


@pytest.mark.parametrize("precision", [None, "fp32", "fp16", "bf16"])
def test_outside_autocast_precisions_it_warns_and_changes_nothing(precision):
    model = _model()
    message = (
        f"LowPrecisionLayerNorm: precision={precision!r} runs no autocast, where a low precision layer norm "
        "computes what nn.LayerNorm does; it applies to amp_fp16 and amp_bf16 only, so the model is unchanged"
    )
    with pytest.warns(NoModulesReplacedWarning, match=f"^{re.escape(message)}$") as record:
        assert cf.apply_low_precision_layernorm(model, precision=precision) is model
    assert not any(isinstance(m, LPLayerNorm) for m in model.modules())
    # the warning points at the call, outside the method's module
    assert Path(record[0].filename).resolve() != Path(lp_module.__file__).resolve()


def test_the_warning_points_at_the_line_that_called_it():
    """The warning is reported at the line that called into the library, the caller's own line,
    not one frame further out."""
    model = _model()
    assert_warns_at_the_calling_line(
        lp_module.__file__, lambda: cf.apply_low_precision_layernorm(model, "fp32"), NoModulesReplacedWarning
    )


def test_an_unknown_precision_is_refused_naming_it():
    message = "precision='amp_fp8': use one of fp32, fp16, bf16, amp_fp16, amp_bf16 (or None)"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        cf.apply_low_precision_layernorm(_model(), precision="amp_fp8")


def test_a_model_without_layer_norms_warns():
    message = "LowPrecisionLayerNorm: no module of the model matched (LayerNorm); the model is unchanged"
    with pytest.warns(NoModulesReplacedWarning, match=f"^{re.escape(message)}$"):
        cf.apply_low_precision_layernorm(nn.Sequential(nn.Linear(4, 4)), precision="amp_bf16")
    model = _model()
    cf.apply_low_precision_layernorm(model, precision="amp_bf16")
    with pytest.warns(NoModulesReplacedWarning):  # applied twice: already low precision
        cf.apply_low_precision_layernorm(model, precision="amp_bf16")


def test_an_optimizer_built_before_surgery_keeps_training_the_same_weights():
    model = _model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    batch = _lm_batches(1)[0]
    lm_loss(model(batch["input_ids"]), batch["labels"]).backward()
    optimizer.step()
    old = model.ln_f.weight
    moments = optimizer.state[old]["exp_avg"].clone()
    cf.apply_low_precision_layernorm(model, precision="amp_bf16", optimizers=optimizer)
    held = [p for g in optimizer.param_groups for p in g["params"]]
    assert {id(p) for p in held} == {id(p) for p in model.parameters()} and all(p is not old for p in held)
    assert torch.equal(optimizer.state[model.ln_f.weight]["exp_avg"], moments)  # same name and shape: kept
    optimizer.zero_grad()
    lm_loss(model(batch["input_ids"]), batch["labels"]).backward()
    before = model.ln_f.weight.detach().clone()
    optimizer.step()
    assert not torch.equal(model.ln_f.weight, before)


def test_the_model_s_dtype_and_mode_are_kept():
    model = _model().double().eval()
    cf.apply_low_precision_layernorm(model, precision="amp_bf16")
    assert model.ln_f.weight.dtype == torch.float64 and not model.ln_f.training
    assert model(torch.randint(0, VOCAB, (2, 5))).dtype == torch.float64


@pytest.mark.parametrize("precision", ["amp_bf16", "amp_fp16"])
def test_in_the_trainer_under_autocast_the_model_trains_with_low_precision_layer_norms(precision):
    seen = Observed(input_key="input_ids", target_key="labels")
    batches = _lm_batches(2)
    trainer = Trainer(
        _model(),
        batches,
        "2ba",
        loss_fn=lm_loss,
        input_key="input_ids",
        target_key="labels",
        algorithms=[LowPrecisionLayerNorm(), seen],
        precision=precision,
        seed=0,
        device="cpu",
    )
    model = trainer.state.model
    assert sum(type(m) is LPLayerNorm for m in model.modules()) == 5
    assert not any(type(m) is nn.LayerNorm for m in model.modules())
    held = {id(p) for p in trainer.state.optimizers[0].param_groups[0]["params"]}
    assert held == {id(p) for p in model.parameters()}
    before = model.ln_f.weight.detach().clone()
    trainer.fit()
    assert len(seen.losses) == 2 and all(torch.isfinite(loss) for loss in seen.losses)
    assert not torch.equal(model.ln_f.weight, before)


def test_in_the_trainer_an_optimizer_given_to_it_trains_the_new_parameters():
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    old = model.ln_f.weight
    trainer = Trainer(
        model,
        _lm_batches(1),
        "1ba",
        loss_fn=lm_loss,
        input_key="input_ids",
        target_key="labels",
        optimizer=optimizer,
        algorithms=[LowPrecisionLayerNorm()],
        precision="amp_bf16",
        seed=0,
        device="cpu",
    )
    held = [p for g in optimizer.param_groups for p in g["params"]]
    assert {id(p) for p in held} == {id(p) for p in trainer.state.model.parameters()}
    assert all(p is not old for p in held)
    before = trainer.state.model.ln_f.weight.detach().clone()
    trainer.fit()
    assert not torch.equal(trainer.state.model.ln_f.weight, before)


def test_in_the_trainer_in_fp32_it_warns_and_changes_nothing():
    made = []
    with pytest.warns(NoModulesReplacedWarning, match="precision='fp32'") as record:
        caller = line_that_called_into(
            trainer_module.__file__,
            lambda: made.append(
                Trainer(
                    _model(),
                    _lm_batches(1),
                    "1ba",
                    loss_fn=lm_loss,
                    input_key="input_ids",
                    target_key="labels",
                    algorithms=[LowPrecisionLayerNorm()],
                    seed=0,
                    device="cpu",
                )
            ),
        )
    assert (record[0].filename, record[0].lineno) == caller  # the call into the Trainer, not a line of the library
    [trainer] = made
    assert not any(isinstance(m, LPLayerNorm) for m in trainer.state.model.modules())


@pytest.mark.parametrize("precision", ["amp_bf16", "fp32"])
def test_it_reports_the_norms_it_replaced_and_the_batches_run_in_low_precision(precision):
    model = _model()
    norms = sum(isinstance(m, nn.LayerNorm) for m in model.modules())
    low = precision == "amp_bf16"
    with pytest.warns(NoModulesReplacedWarning) if not low else contextlib.nullcontext():
        trainer = Trainer(
            model,
            _lm_batches(3),
            "1ep",
            loss_fn=lm_loss,
            input_key="input_ids",
            target_key="labels",
            algorithms=[LowPrecisionLayerNorm()],
            precision=precision,
            seed=0,
            device="cpu",
        )
    trainer.fit()
    assert trainer.method_log.records["LowPrecisionLayerNorm"]["activity"] == {
        "modules_replaced": norms if low else 0,
        "batches_in_low_precision": 3 if low else 0,
    }
    assert trainer.method_log.acted("LowPrecisionLayerNorm") is low


def test_replaced_norms_without_a_low_precision_batch_did_not_act():
    algo = LowPrecisionLayerNorm()
    assert not algo.acted({"modules_replaced": 5, "batches_in_low_precision": 0})
    assert algo.acted({"modules_replaced": 5, "batches_in_low_precision": 1})


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_on_cuda_autocast_runs_it_in_low_precision_where_nn_layernorm_runs_in_float32(dtype):
    reference, low = _pair()
    reference, low = reference.cuda(), low.cuda()
    x = torch.randn(4, 64, device="cuda").to(dtype)
    with torch.autocast("cuda", dtype=dtype):
        assert reference(x).dtype == torch.float32  # layer_norm is on CUDA autocast's float32 list
        out = low(x)
    assert out.dtype == dtype and out.is_cuda
    torch.testing.assert_close(out.float(), reference(x.float()), atol=0.1, rtol=0.05)
