"""Factorize's own semantics, checked against its definition and Composer's tests.

A convolution W (d x c x k x k) becomes a k x k convolution to r channels and a 1 x 1 convolution
to d, a linear layer W (m x n) two linear layers through r features; the product of the pair is
the rank-r truncated SVD of W (as a d x ckk matrix for a convolution), the best rank-r
approximation (Eckart–Young), and the bias moves to the second module. A module is replaced
only if it is wide enough and r (F + d) < F d (F the fan-in). The tests every method passes
(it trains in the Trainer, its functional and class defaults agree) already run from the
metadata registry.
"""

from __future__ import annotations

import copy
import itertools
import math
import re

import pytest
import torch
import torch.nn.functional as F
from trainer_support import Observed

import algorithms.functional as cf
from algorithms import Factorize
from algorithms.core import Event, State, Trainer
from algorithms.core.time import Duration
from algorithms.factorize.factorize import (
    FactorizedConv2d,
    FactorizedLinear,
    factorizing_could_speedup,
    latent_size,
    low_rank_factors,
)
from algorithms.models import resnet20
from algorithms.surgery import NoModulesReplacedWarning


def _product(module):
    """The weight the factorized pair computes, as the original's matrix."""
    if isinstance(module, FactorizedLinear):
        return module.module1.weight @ module.module0.weight
    a = module.module0.weight.reshape(module.latent_channels, -1)
    return module.module1.weight.reshape(module.out_channels, -1) @ a


def _saves_work(fan_in, out, rank):
    return rank * (fan_in + out) < fan_in * out


def _expected_convs(model, min_channels, latent):
    return [
        n
        for n, m in model.named_modules()
        if isinstance(m, torch.nn.Conv2d)
        and m.groups == 1
        and min(m.in_channels, m.out_channels) >= min_channels
        and _saves_work(
            m.in_channels * math.prod(m.kernel_size), m.out_channels, latent_size(latent, m.in_channels, m.out_channels)
        )
    ]


# -- the factorization --------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "m", "bias"), [(12, 7, True), (7, 12, True), (9, 9, True), (9, 6, False)])
def test_a_full_rank_linear_factorization_computes_what_the_original_does(n, m, bias):
    torch.manual_seed(0)
    linear = torch.nn.Linear(n, m, bias=bias).double()
    full = FactorizedLinear.from_linear(linear, latent_features=min(n, m))
    x = torch.randn(5, n, dtype=torch.float64)
    torch.testing.assert_close(full(x), linear(x), rtol=0, atol=1e-12)
    assert full.module0.bias is None
    assert torch.equal(full.module1.bias, linear.bias) if bias else full.module1.bias is None


@pytest.mark.parametrize(
    ("c", "d", "k", "stride", "padding", "dilation", "bias", "padding_mode"),
    [
        (8, 6, 3, 1, 1, 1, False, "zeros"),
        (3, 16, 3, 2, 1, 1, True, "zeros"),
        (5, 5, (1, 3), 1, (0, 1), 1, True, "zeros"),
        (4, 7, 3, 2, 2, 2, True, "zeros"),
        (6, 6, 1, 2, 0, 1, False, "zeros"),
        (4, 6, 3, 1, 1, 1, True, "circular"),
        (4, 6, 3, 2, 2, 1, False, "reflect"),
    ],
)
def test_a_full_rank_convolution_factorization_computes_what_the_original_does(
    c, d, k, stride, padding, dilation, bias, padding_mode
):
    """At full rank, min(d, c k k) latent channels, the pair is the original convolution
    exactly (within float64 rounding), whatever its stride, padding (and padding mode) or dilation."""
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(
        c, d, k, stride=stride, padding=padding, dilation=dilation, bias=bias, padding_mode=padding_mode
    ).double()
    full_rank = min(d, c * math.prod(conv.kernel_size))
    factorized = FactorizedConv2d.from_conv2d(conv, latent_channels=full_rank)
    x = torch.randn(2, c, 9, 10, dtype=torch.float64)
    torch.testing.assert_close(factorized(x), conv(x), rtol=0, atol=1e-12)
    assert factorized.module1.kernel_size == (1, 1) and factorized.module0.stride == conv.stride
    with pytest.raises(ValueError, match="latent_channels="):
        FactorizedConv2d.from_conv2d(conv, latent_channels=full_rank + 1)


def test_a_conv_with_fewer_outputs_than_inputs_is_exact_at_latent_min_in_out():
    """latent = min(in, out) is full rank when out <= in (the matrix has out rows)."""
    conv = torch.nn.Conv2d(8, 4, 3, padding=1).double()
    factorized = FactorizedConv2d.from_conv2d(conv, latent_channels=4)
    x = torch.randn(2, 8, 6, 6, dtype=torch.float64)
    torch.testing.assert_close(factorized(x), conv(x), rtol=0, atol=1e-12)


@pytest.mark.parametrize("rank", [1, 3, 6])
def test_at_lower_rank_the_linear_weight_is_the_best_rank_r_approximation(rank):
    """Eckart–Young: the truncated SVD is the closest rank-r matrix; its Frobenius error is the
    norm of the discarded singular values, its spectral error the first discarded one, and any
    other rank-r matrix (here random ones and a perturbed optimum) is farther."""
    torch.manual_seed(1)
    linear = torch.nn.Linear(10, 8).double()
    factorized = FactorizedLinear.from_linear(linear, latent_features=rank)
    approx = _product(factorized).detach()
    s = torch.linalg.svdvals(linear.weight.detach())
    assert torch.linalg.matrix_rank(approx) == rank
    torch.testing.assert_close(torch.linalg.norm(linear.weight - approx), s[rank:].norm(), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(torch.linalg.matrix_norm(linear.weight - approx, ord=2), s[rank], rtol=1e-10, atol=1e-12)
    g = torch.Generator().manual_seed(2)
    best = torch.linalg.norm(linear.weight - approx)
    for _ in range(20):
        other = torch.randn(8, rank, generator=g, dtype=torch.float64) @ torch.randn(
            rank, 10, generator=g, dtype=torch.float64
        )
        assert torch.linalg.norm(linear.weight - other) > best
        nudged = (
            factorized.module1.weight + 1e-3 * torch.randn(8, rank, generator=g, dtype=torch.float64)
        ) @ factorized.module0.weight
        assert torch.linalg.norm(linear.weight - nudged) > best


def test_the_conv_factorization_is_the_truncated_svd_of_the_reshaped_weight():
    torch.manual_seed(3)
    conv = torch.nn.Conv2d(6, 10, 3).double()
    matrix = conv.weight.detach().reshape(10, -1)
    u, s, vh = torch.linalg.svd(matrix, full_matrices=False)
    factorized = FactorizedConv2d.from_conv2d(conv, latent_channels=4)
    torch.testing.assert_close(
        _product(factorized).detach(), u[:, :4] @ torch.diag(s[:4]) @ vh[:4], rtol=1e-10, atol=1e-12
    )
    # The two factors share the singular values' square roots (the same scale).
    torch.testing.assert_close(
        factorized.module0.weight.reshape(4, -1).norm(dim=1), s[:4].sqrt(), rtol=1e-10, atol=1e-12
    )


def test_more_latent_dimensions_never_increase_the_error():
    """Composer's factorize_core test, for the SVD: the error falls as the rank grows."""
    torch.manual_seed(4)
    conv = torch.nn.Conv2d(8, 12, 3).double()
    errors = [
        torch.linalg.norm(conv.weight.reshape(12, -1) - _product(FactorizedConv2d.from_conv2d(conv, r))).item()
        for r in (1, 2, 4, 8, 12)
    ]
    assert all(b <= a for a, b in itertools.pairwise(errors)) and errors[-1] < 1e-12


def test_low_rank_factors_keep_the_dtype():
    first, second = low_rank_factors(torch.randn(6, 5), 2)
    assert first.shape == (2, 5) and second.shape == (6, 2) and first.dtype == second.dtype == torch.float32


@pytest.mark.parametrize(("latent", "size"), [(0.25, 4), (0.01, 1), (0.5, 8), (3, 3), (3.0, 3)])
def test_latent_size_is_a_fraction_of_the_smaller_width_or_a_count(latent, size):
    assert latent_size(latent, 16, 32) == size


def test_the_multiply_add_rule():
    """r (F + O) < F O: a 1 x 1 (or linear) 64 -> 64 saves work below r = 32, a 3 x 3 one below
    r = 576 * 64 / 640 = 57.6; a grouped convolution never."""
    assert factorizing_could_speedup(torch.nn.Linear(64, 64), 31) and not factorizing_could_speedup(
        torch.nn.Linear(64, 64), 32
    )
    # A fraction is of the smaller width: 0.25 of 64 is 16 latent features, 0.5 is 32.
    assert factorizing_could_speedup(torch.nn.Linear(64, 96), 0.25)
    assert not factorizing_could_speedup(torch.nn.Linear(64, 64), 0.5)
    assert factorizing_could_speedup(torch.nn.Conv2d(64, 64, 1), 31)
    assert not factorizing_could_speedup(torch.nn.Conv2d(64, 64, 1), 0.5)
    assert factorizing_could_speedup(torch.nn.Conv2d(64, 64, 3), 57)
    assert not factorizing_could_speedup(torch.nn.Conv2d(64, 64, 3), 58)
    assert not factorizing_could_speedup(torch.nn.Conv2d(64, 64, 3, groups=2), 2)
    assert not factorizing_could_speedup(torch.nn.ReLU(), 2)


@pytest.mark.parametrize(
    ("batch_size", "in_channels", "out_channels", "kernel_size"),
    list(itertools.product([1, 2], [4, 8], [4, 8], [(1, 1), (2, 2), (3, 3), (1, 3), (5, 5)])),
)
def test_factorized_conv_shapes(batch_size, in_channels, out_channels, kernel_size):
    """Composer's shape test: the output has the batch and the output channels."""
    conv = FactorizedConv2d(in_channels, out_channels, kernel_size, latent_channels=2)
    y = conv(torch.randn(batch_size, in_channels, 5, 6))
    assert y.ndim == 4 and y.shape[:2] == (batch_size, out_channels)
    assert (conv.in_channels, conv.out_channels, conv.latent_channels) == (in_channels, out_channels, 2)


def test_the_module_defaults_are_a_quarter_of_the_smaller_width_and_torchs_layers():
    """Without a latent size, a quarter of the smaller width; the first module has no bias, the
    second a bias unless told otherwise; a convolution's other defaults are torch.nn.Conv2d's."""
    conv = FactorizedConv2d(8, 12, 3)
    assert repr(conv.module0) == repr(torch.nn.Conv2d(8, 2, 3, bias=False))
    assert repr(conv.module1) == repr(torch.nn.Conv2d(2, 12, 1))
    assert conv.module0.padding_mode == "zeros"
    assert FactorizedConv2d(8, 12, 3, bias=False).module1.bias is None
    linear = FactorizedLinear(8, 12)
    assert repr(linear.module0) == repr(torch.nn.Linear(8, 2, bias=False))
    assert repr(linear.module1) == repr(torch.nn.Linear(2, 12))
    assert FactorizedLinear(8, 12, bias=False).module1.bias is None
    assert FactorizedConv2d.from_conv2d(torch.nn.Conv2d(8, 12, 3)).latent_channels == 2
    assert FactorizedLinear.from_linear(torch.nn.Linear(12, 8)).latent_features == 2


@pytest.mark.parametrize(
    ("batch_size", "in_features", "out_features"), list(itertools.product([1, 2], [7, 8, 11], [4, 6, 8]))
)
def test_factorized_linear_shapes(batch_size, in_features, out_features):
    module = FactorizedLinear(in_features, out_features)
    assert module(torch.randn(batch_size, in_features)).shape == (batch_size, out_features)
    assert module.latent_features == max(1, int(0.25 * min(in_features, out_features)))


# -- apply_factorization ------------------------------------------------------------------------


@pytest.mark.parametrize(("min_channels", "latent"), [(32, 0.25), (64, 0.25), (16, 0.25), (32, 8), (0, 0.4)])
@pytest.mark.slow
def test_on_resnet20_it_replaces_the_wide_convolutions_that_save_work(min_channels, latent):
    model = resnet20()
    expected = _expected_convs(model, min_channels, latent)
    params = sum(p.numel() for p in model.parameters())
    cf.apply_factorization(model, min_channels=min_channels, latent_channels=latent)
    replaced = [n for n, m in model.named_modules() if isinstance(m, FactorizedConv2d)]
    assert replaced == expected and replaced
    for name in replaced:
        module = model.get_submodule(name)
        smaller = min(module.in_channels, module.out_channels)
        assert module.latent_channels == (max(1, int(latent * smaller)) if latent < 1 else latent), name
    assert sum(p.numel() for p in model.parameters()) < params
    assert type(model.fc) is torch.nn.Linear  # 64 -> 10 is narrower than min_features=512
    if (min_channels, latent) == (32, 0.25):  # the suggested values: stages 2 and 3 bar their first inputs
        assert len(replaced) == 12 and "layer2.0.conv1" not in replaced and "layer3.0.downsample.0" in replaced
        assert model.layer3[1].conv1.latent_channels == 16 and model.layer2[1].conv1.latent_channels == 8


def test_linear_layers_are_replaced_by_the_same_rule():
    """64 -> 48 and 48 -> 16 through 5 save work and are wide enough; 64 -> 8 is narrower than
    min_features; 10 -> 10 through 5 costs 5 * 20 = 100 multiply-adds, no fewer than 100."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 48),
        torch.nn.ReLU(),
        torch.nn.Linear(48, 16),
        torch.nn.Linear(16, 10),
        torch.nn.Linear(10, 10),
        torch.nn.Linear(10, 8),
    )
    cf.apply_factorization(model, min_features=10, latent_features=5)
    assert [type(m).__name__ for m in model] == [
        "FactorizedLinear",
        "ReLU",
        "FactorizedLinear",
        "FactorizedLinear",
        "Linear",
        "Linear",
    ]
    assert [m.latent_features for m in model if isinstance(m, FactorizedLinear)] == [5, 5, 5]


def test_composers_counts_on_a_small_conv_model():
    """Composer's layer-replacement test: with min_channels=3, latent_channels=2, min_features=8
    and latent_features=4, every conv and linear layer of a small model is replaced, by flag."""
    for convs, linears in itertools.product((False, True), repeat=2):
        if not (convs or linears):
            continue
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Conv2d(32, 8, 3),
            torch.nn.Conv2d(8, 32, 3),
            torch.nn.AdaptiveAvgPool2d(1),
            torch.nn.Flatten(),
            torch.nn.Linear(32, 48),
            torch.nn.Linear(48, 10),
        )
        x = torch.randn(2, 32, 9, 9)
        shape = model(x).shape
        cf.apply_factorization(
            model,
            factorize_convs=convs,
            factorize_linears=linears,
            min_channels=3,
            latent_channels=2,
            min_features=8,
            latent_features=4,
        )
        classes = [type(m) for m in model.modules()]
        assert classes.count(FactorizedConv2d) == (2 if convs else 0)
        assert classes.count(FactorizedLinear) == (2 if linears else 0)
        assert model(x).shape == shape


def test_at_full_rank_through_the_functional_form_nothing_is_replaced_and_it_warns():
    """Full rank never saves multiply-adds, so the rule leaves every module alone. The warning
    names the method and what it looked for."""
    model = torch.nn.Sequential(torch.nn.Linear(16, 16))
    message = f"^{re.escape('Factorize: no module of the model matched (Conv2d, Linear); the model is unchanged')}$"
    with pytest.warns(NoModulesReplacedWarning, match=message):
        cf.apply_factorization(model, min_features=1, latent_features=16)
    with pytest.warns(NoModulesReplacedWarning, match=message):
        cf.apply_factorization(resnet20())  # Composer's min_channels=512 is wider than resnet20


def _wide_model():
    return torch.nn.Sequential(torch.nn.Conv2d(512, 512, 1), torch.nn.Flatten(), torch.nn.Linear(512, 512))


def test_by_default_512_channels_and_features_are_wide_enough():
    """Composer's defaults: min_channels=512 and min_features=512, a quarter of the width latent;
    the functional form and the class at Event.INIT alike."""
    for apply in (
        cf.apply_factorization,
        lambda model: Factorize().apply(Event.INIT, State(model, Duration.parse("1ep")), None),
    ):
        model = _wide_model()
        apply(model)
        assert [type(m) for m in model] == [FactorizedConv2d, torch.nn.Flatten, FactorizedLinear]
        assert (model[0].latent_channels, model[2].latent_features) == (128, 128)


def test_an_optimizer_built_before_holds_the_new_parameters_and_none_of_the_old():
    model = resnet20()
    old = list(model.layer3[1].conv1.parameters())  # kept alive, so their ids are not reused
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    cf.apply_factorization(model, min_channels=32, optimizers=optimizer)
    held = [p for group in optimizer.param_groups for p in group["params"]]
    assert {id(p) for p in held} == {id(p) for p in model.parameters()}
    assert all(p is not q for p in held for q in old)
    before = model.layer3[1].conv1.module0.weight.detach().clone()
    F.cross_entropy(model(torch.randn(2, 3, 16, 16)), torch.tensor([0, 1])).backward()
    optimizer.step()
    assert not torch.equal(model.layer3[1].conv1.module0.weight, before)


def test_a_float64_model_keeps_its_dtype_and_at_full_rank_its_outputs():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(4, 6, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(6 * 5 * 5, 7)
    ).double()
    reference = copy.deepcopy(model)
    model[0] = FactorizedConv2d.from_conv2d(model[0], latent_channels=6)
    model[3] = FactorizedLinear.from_linear(model[3], latent_features=7)
    assert all(p.dtype == torch.float64 for p in model.parameters())
    x = torch.randn(3, 4, 5, 5, dtype=torch.float64)
    torch.testing.assert_close(model(x), reference(x), rtol=0, atol=1e-12)
    wide = resnet20().double()
    cf.apply_factorization(wide, min_channels=32)
    assert all(p.dtype == torch.float64 for p in wide.parameters())
    out = wide(torch.randn(2, 3, 16, 16, dtype=torch.float64))
    out.sum().backward()
    assert out.dtype == torch.float64 and wide.layer3[0].conv1.module0.weight.grad is not None


_LATENT = "must be a fraction in (0, 1) of the smaller width or a whole count >= 1"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"min_channels": -1}, "min_channels=-1: must be an integer in [0, inf)"),
        ({"min_features": 2.5}, "min_features=2.5: must be an integer in [0, inf)"),
        ({"latent_channels": 0}, f"latent_channels=0: {_LATENT}"),
        ({"latent_channels": -0.5}, f"latent_channels=-0.5: {_LATENT}"),
        ({"latent_channels": 1.5}, f"latent_channels=1.5: {_LATENT}"),
        ({"latent_features": float("nan")}, f"latent_features=nan: {_LATENT}"),
        ({"latent_features": True}, f"latent_features=True: {_LATENT}"),
        ({"factorize_convs": 1}, "factorize_convs=1: must be True or False"),
        ({"factorize_linears": "no"}, "factorize_linears='no': must be True or False"),
        (
            {"factorize_convs": False, "factorize_linears": False},
            "factorize_convs=False, factorize_linears=False: Factorize would replace nothing; set one of them",
        ),
    ],
)
def test_bad_hyperparameters_fail_with_a_clear_error(kwargs, message):
    match = f"^{re.escape(message)}$"
    with pytest.raises(ValueError, match=match):
        Factorize(**kwargs)
    model = resnet20()
    before = repr(model)
    with pytest.raises(ValueError, match=match):
        cf.apply_factorization(model, **kwargs)
    assert repr(model) == before


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda: FactorizedLinear(8, 10, latent_features=9),
            "latent_features=9: at most min(in_features, out_features) = 8",
        ),
        (lambda: FactorizedLinear(8, 10, latent_features=1.5), f"latent_features=1.5: {_LATENT}"),
        # a 12 x 9 matrix has rank at most 9
        (
            lambda: FactorizedConv2d(1, 12, 3, latent_channels=10),
            "latent_channels=10: at most min(out_channels, in_channels * kH * kW) = 9",
        ),
        (lambda: FactorizedConv2d(1, 12, 3, latent_channels=2.5), f"latent_channels=2.5: {_LATENT}"),
        (
            lambda: FactorizedConv2d.from_conv2d(torch.nn.Conv2d(4, 4, 3, groups=2), 2),
            "conv: groups=2; only convolutions with groups=1 are factorized",
        ),
    ],
)
def test_module_constructors_refuse_a_bad_latent_size(build, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        build()


# -- the class in the Trainer --------------------------------------------------------------------


def test_it_matches_only_init():
    algo = Factorize()
    assert [e for e in Event if algo.match(e, None)] == [Event.INIT]


_SMALL = dict(min_channels=3, latent_channels=2, min_features=8, latent_features=4)


@pytest.mark.parametrize(
    ("kwargs", "latents"),
    [
        (_SMALL, [2, 2, 4, 4]),
        ({**_SMALL, "factorize_convs": False}, [None, None, 4, 4]),
        ({**_SMALL, "factorize_linears": False}, [2, 2, None, None]),
        ({**_SMALL, "latent_channels": 3}, [3, 3, 4, 4]),
        ({**_SMALL, "latent_features": 0.5}, [2, 2, 16, 5]),
        ({**_SMALL, "min_channels": 9}, [None, None, 4, 4]),
        ({**_SMALL, "min_features": 11}, [2, 2, 4, None]),
    ],
)
def test_at_init_it_factorizes_what_its_arguments_say(kwargs, latents):
    """Composer's small model: convolutions 32 -> 8 and 8 -> 32 (3 x 3), linear layers 32 -> 48
    and 48 -> 10; each latent size (None: not replaced) follows from the arguments, every
    replacement saving multiply-adds here (2 (288 + 8) < 288 * 8, 16 (32 + 48) < 32 * 48, ...)."""
    model = torch.nn.Sequential(
        torch.nn.Conv2d(32, 8, 3),
        torch.nn.Conv2d(8, 32, 3),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(32, 48),
        torch.nn.Linear(48, 10),
    )
    Factorize(**kwargs).apply(Event.INIT, State(model=model, max_duration=Duration.parse("1ep")), None)
    found = [
        getattr(m, "latent_channels", None) or getattr(m, "latent_features", None)
        for m in (model[0], model[1], model[4], model[5])
    ]
    assert found == latents


def test_in_the_trainer_the_factorized_model_trains_with_the_optimizer_given():
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(4, 3, 16, 16, generator=g), torch.randint(0, 10, (4,), generator=g)) for _ in range(3)]
    model = resnet20()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    seen = Observed()
    trainer = Trainer(
        model, batches, "3ba", optimizer=optimizer, algorithms=[Factorize(min_channels=32), seen], seed=0, device="cpu"
    )
    start = trainer.state.model.layer3[1].conv1.module1.weight.detach().clone()
    trainer.fit()
    trained = trainer.state.model
    assert sum(isinstance(m, FactorizedConv2d) for m in trained.modules()) == 12
    assert {id(p) for g in optimizer.param_groups for p in g["params"]} == {id(p) for p in trained.parameters()}
    assert not torch.equal(trained.layer3[1].conv1.module1.weight, start)
    assert len(seen.losses) == 3 and all(torch.isfinite(loss) for loss in seen.losses)


@pytest.mark.cuda
def test_on_cuda_the_factors_are_computed_and_kept_on_the_device():
    model = resnet20().cuda()
    cf.apply_factorization(model, min_channels=32)
    assert all(p.is_cuda for p in model.parameters())
    assert model(torch.randn(2, 3, 16, 16, device="cuda")).is_cuda


def test_the_figure_arguments_factorize_the_block_it_shows():
    import json
    from pathlib import Path

    import algorithms.factorize

    spec = json.loads((Path(algorithms.factorize.__file__).parent / "metadata.json").read_text())["factorize"]["figure"]
    model = resnet20()
    cf.apply_factorization(model, **spec["arguments"])
    block = model.get_submodule(spec["module"])
    assert [type(m) for m in (block.conv1, block.conv2, block.downsample[0])] == [FactorizedConv2d] * 3
