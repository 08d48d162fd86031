"""Weight Standardization's own semantics, checked against its definition (Qiao et al., 2019).

The forward of a standardized convolution uses, per output filter ``o``,
``(W[o] - mean(W[o])) / sqrt(var(W[o]) + 1e-10)`` (biased variance, over the filter's input
channels and kernel positions) of the trained tensor ``W``; the last ``n_last_layers_ignore``
convolutions the forward calls are left alone. Composer's own tests (each filter of a two-conv
model has mean 0 and variance 1; ``max(2 - n, 0)`` convolutions parametrized for
``n_last_layers_ignore`` of 0, 1 and 3, by the functional form and by the class at INIT) are
re-expressed below.
"""

from __future__ import annotations

import copy
import re
import warnings

import pytest
import torch
import torch.nn.functional as F
import torch.nn.utils.parametrize as parametrize
from torch import nn
from trainer_support import Observed, line_that_called_into

import algorithms.functional as cf
from algorithms import WeightStandardization
from algorithms.core import Event, Trainer
from algorithms.models import resnet20
from algorithms.surgery import NoModulesReplacedWarning
from algorithms.weight_standardization import weight_standardization as ws_module

CONVS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)


def _definition(raw: torch.Tensor) -> torch.Tensor:
    dims = tuple(range(1, raw.ndim))
    mean = raw.mean(dim=dims, keepdim=True)
    var = ((raw - mean) ** 2).mean(dim=dims, keepdim=True)
    return (raw - mean) / torch.sqrt(var + 1e-10)


def _simple_conv_model() -> nn.Module:
    """Composer's SimpleConvModel: two convolutions, a pool and a linear layer."""
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2)
    )


def _standardized(model: nn.Module) -> list[str]:
    return [name for name, m in model.named_modules() if parametrize.is_parametrized(m, "weight")]


def test_every_filter_has_mean_0_and_variance_1_as_the_definition_says():
    torch.manual_seed(0)
    model = resnet20(10)
    assert cf.apply_weight_standardization(model) == 21
    for name in _standardized(model):
        conv = model.get_submodule(name)
        raw = conv.parametrizations.weight.original
        weight = conv.weight
        var, mean = torch.var_mean(weight, dim=(1, 2, 3), correction=0)
        raw_var = raw.var(dim=(1, 2, 3), correction=0)
        torch.testing.assert_close(mean, torch.zeros_like(mean), atol=1e-6, rtol=0)
        torch.testing.assert_close(var, raw_var / (raw_var + 1e-10))  # 1, but for the epsilon
        torch.testing.assert_close(weight, _definition(raw))


def test_a_float64_weight_is_standardized_in_float64():
    conv = nn.Conv2d(3, 5, 3).double()
    raw = conv.weight.detach().clone()
    model = nn.Sequential(conv)
    cf.apply_weight_standardization(model)
    assert model[0].weight.dtype == torch.float64
    torch.testing.assert_close(model[0].weight, _definition(raw), rtol=1e-12, atol=1e-12)


def test_composers_two_convolutions_are_standardized():
    model = _simple_conv_model()
    cf.apply_weight_standardization(module=model)
    for conv in (model[0], model[2]):
        var, mean = torch.var_mean(conv.weight, dim=[1, 2, 3], correction=0)
        torch.testing.assert_close(var, torch.ones_like(var))
        torch.testing.assert_close(mean, torch.zeros_like(mean))


@pytest.mark.parametrize("n_last_layers_ignore", [0, 1, 3])
@pytest.mark.parametrize("form", ["functional", "class"])
def test_composers_counts_of_standardized_convolutions(n_last_layers_ignore, form):
    model = _simple_conv_model()
    expected = max(2 - n_last_layers_ignore, 0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if form == "functional":
            assert cf.apply_weight_standardization(model, n_last_layers_ignore=n_last_layers_ignore) == expected
        else:
            WeightStandardization(n_last_layers_ignore=n_last_layers_ignore).apply(Event.INIT, _state(model))
    assert len(_standardized(model)) == expected
    assert _standardized(model) == ["0", "2"][:expected]  # the last ones are left
    assert any(issubclass(w.category, NoModulesReplacedWarning) for w in caught) == (expected == 0)


def _state(model):
    from algorithms.core import State
    from algorithms.core.time import Duration

    return State(model=model, max_duration=Duration.parse("1ep"))


def test_the_last_convolutions_are_the_last_the_forward_calls():
    """ResNet-20 defines a stage's shortcut convolution after the block's two, but calls it first."""
    torch.manual_seed(0)
    model = resnet20(10)
    called = []
    hooks = [
        m.register_forward_hook(lambda m, i, o, name=name: called.append(name))
        for name, m in model.named_modules()
        if isinstance(m, nn.Conv2d)
    ]
    model(torch.randn(2, 3, 16, 16))
    for hook in hooks:
        hook.remove()
    convs = [name for name, m in model.named_modules() if isinstance(m, nn.Conv2d)]
    assert len(called) == len(convs) == 21 and called != convs
    for n in (0, 1, 6, 7, 21):
        fresh = copy.deepcopy(model)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NoModulesReplacedWarning)
            assert cf.apply_weight_standardization(fresh, n_last_layers_ignore=n) == 21 - n
        assert set(_standardized(fresh)) == set(called[: 21 - n])


class _Untraceable(nn.Module):
    def __init__(self):
        super().__init__()
        self.late = nn.Conv2d(4, 4, 1)  # defined first, called last
        self.early = nn.Conv2d(3, 4, 1)

    def forward(self, x):
        x = self.early(x)
        if x.sum() > 0:  # data-dependent: torch.fx cannot trace it
            x = x * 2
        return self.late(x)


def test_an_untraceable_model_falls_back_to_the_definition_order_with_a_warning():
    model = _Untraceable()
    message = (
        "WeightStandardization: the model could not be traced with torch.fx, so n_last_layers_ignore=1 leaves "
        "the last 1 convolutions in the order the model defines them, which may not be the order its forward "
        "calls them"
    )
    counts = []
    with pytest.warns(UserWarning, match=f"^{re.escape(message)}$") as record:
        caller = line_that_called_into(
            ws_module.__file__, lambda: counts.append(cf.apply_weight_standardization(model, n_last_layers_ignore=1))
        )
    assert counts == [1]
    # The warning names the line that called into the library, however deep the helper that warns
    assert (record[0].filename, record[0].lineno) == caller
    assert _standardized(model) == ["late"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # n_last_layers_ignore=0 needs no order, so no trace and no warning
        assert cf.apply_weight_standardization(_Untraceable()) == 2


@pytest.mark.parametrize("cls", CONVS)
def test_conv1d_2d_and_3d_compute_with_the_standardized_weight(cls):
    dims = CONVS.index(cls) + 1
    torch.manual_seed(0)
    conv = cls(3, 5, 3, bias=True)
    raw, bias = conv.weight.detach().clone(), conv.bias.detach().clone()
    model = nn.Sequential(conv)
    assert cf.apply_weight_standardization(model) == 1
    x = torch.randn(2, 3, *([6] * dims))
    conv_fn = (F.conv1d, F.conv2d, F.conv3d)[dims - 1]
    torch.testing.assert_close(model(x), conv_fn(x, _definition(raw), bias))
    assert type(model[0]).__name__ == f"Parametrized{cls.__name__}"


def test_the_trained_tensor_is_the_original_parameter_and_gets_the_gradient():
    model = _simple_conv_model()
    weight, bias = model[0].weight, model[0].bias
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    cf.apply_weight_standardization(model)
    assert model[0].parametrizations.weight.original is weight and model[0].bias is bias
    assert {id(p) for g in optimizer.param_groups for p in g["params"]} == {id(p) for p in model.parameters()}
    before = weight.detach().clone()
    F.cross_entropy(model(torch.randn(4, 3, 8, 8)), torch.tensor([0, 1, 0, 1])).backward()
    assert weight.grad is not None and torch.isfinite(weight.grad).all() and weight.grad.abs().sum() > 0
    optimizer.step()
    assert not torch.equal(weight, before)
    torch.testing.assert_close(model[0].weight, _definition(weight.detach()))


def test_a_convolution_with_another_parametrization_or_a_buffer_is_standardized_keeping_them():
    """A parametrization of the bias is not one of the weight; a buffer someone registered on a
    convolution stays the same tensor, as its parameters do."""

    class Doubled(nn.Module):
        def forward(self, bias):
            return bias * 2

    conv = nn.Conv2d(3, 4, 3)
    parametrize.register_parametrization(conv, "bias", Doubled())
    masked = nn.Conv2d(4, 4, 1)
    masked.register_buffer("mask", torch.ones(4))
    model = nn.Sequential(conv, masked)
    mask = masked.mask
    assert cf.apply_weight_standardization(model) == 2
    assert _standardized(model) == ["0", "1"] and model[1].mask is mask
    torch.testing.assert_close(model[0].weight, _definition(model[0].parametrizations.weight.original))
    torch.testing.assert_close(model[0].bias, model[0].parametrizations.bias.original * 2)


def test_it_changes_the_models_outputs():
    model = _simple_conv_model()
    x = torch.randn(2, 3, 8, 8)
    before = model(x)
    cf.apply_weight_standardization(model)
    assert not torch.allclose(model(x), before)


def test_it_keeps_float64_and_standardizes_half_weights_in_float32():
    model = nn.Sequential(nn.Conv2d(3, 4, 3)).double()
    cf.apply_weight_standardization(model)
    assert (
        model[0].weight.dtype == torch.float64
        and model(torch.randn(1, 3, 5, 5, dtype=torch.float64)).dtype == torch.float64
    )
    half = nn.Sequential(nn.Conv2d(3, 4, 3)).half()
    with torch.no_grad():
        half[0].weight[0].zero_()  # a dead filter: 1e-10 underflows in float16, not in float32
    cf.apply_weight_standardization(half)
    weight = half[0].weight
    assert (
        weight.dtype == torch.float16
        and torch.isfinite(weight).all()
        and torch.equal(weight[0], torch.zeros_like(weight[0]))
    )
    torch.testing.assert_close(
        weight[1:].float(), _definition(half[0].parametrizations.weight.original.float())[1:], atol=2e-3, rtol=2e-3
    )


def test_applying_it_twice_changes_nothing_the_second_time():
    model = _simple_conv_model()
    cf.apply_weight_standardization(model)
    with pytest.warns(NoModulesReplacedWarning, match="WeightStandardization"):
        assert cf.apply_weight_standardization(model) == 0
    assert len(model[0].parametrizations.weight) == 1


def test_the_state_dict_keeps_the_trained_tensor_and_a_copy_computes_the_same():
    model = _simple_conv_model()
    cf.apply_weight_standardization(model)
    assert "0.parametrizations.weight.original" in model.state_dict() and "0.weight" not in model.state_dict()
    other = _simple_conv_model()
    cf.apply_weight_standardization(other)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(1)
    other.load_state_dict(model.state_dict())
    x = torch.randn(2, 3, 8, 8)
    assert torch.equal(other(x), model(x)) and torch.equal(copy.deepcopy(model)(x), model(x))


def test_a_model_without_convolutions_warns_and_is_unchanged():
    model = nn.Sequential(nn.Linear(3, 4))
    with pytest.warns(NoModulesReplacedWarning, match="WeightStandardization"):
        assert cf.apply_weight_standardization(model) == 0
    assert type(model[0]) is nn.Linear


@pytest.mark.parametrize("bad", [-1, 1.0, True, "1", None])
def test_a_bad_n_last_layers_ignore_is_refused_naming_it(bad):
    message = f"n_last_layers_ignore={bad!r}: must be an integer in [0, inf)"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        WeightStandardization(n_last_layers_ignore=bad)
    model = _simple_conv_model()
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        cf.apply_weight_standardization(model, n_last_layers_ignore=bad)
    assert not _standardized(model)


def test_it_matches_only_init():
    algo = WeightStandardization()
    assert [e for e in Event if algo.match(e, None)] == [Event.INIT]


@pytest.mark.parametrize("built_before", [True, False])
def test_in_the_trainer_the_model_computes_with_standardized_weights(built_before):
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(4, 3, 8, 8, generator=g), torch.randint(0, 2, (4,), generator=g)) for _ in range(3)]
    model = _simple_conv_model()
    reference = copy.deepcopy(model)
    cf.apply_weight_standardization(reference)
    raw = model[0].weight.detach().clone()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1) if built_before else None
    seen = Observed()
    trainer = Trainer(
        model, batches, "3ba", optimizer=optimizer, algorithms=[WeightStandardization(), seen], seed=0, device="cpu"
    )
    trainer.fit()
    assert _standardized(trainer.state.model) == ["0", "2"]
    torch.testing.assert_close(seen.outputs[0], reference(batches[0][0]))
    assert not torch.equal(trainer.state.model[0].parametrizations.weight.original, raw)
    assert all(torch.isfinite(loss) for loss in seen.losses)


@pytest.mark.cuda
def test_on_cuda_the_forward_makes_no_host_sync():
    from trainer_support import no_host_sync

    model = _simple_conv_model().cuda()
    cf.apply_weight_standardization(model)
    x = torch.randn(2, 3, 8, 8, device="cuda")
    with no_host_sync():
        out = model(x)
    assert out.device == x.device
    torch.testing.assert_close(model[0].weight, _definition(model[0].parametrizations.weight.original))
