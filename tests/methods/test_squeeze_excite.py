"""Squeeze-and-Excitation's own semantics, checked against its definition (Hu et al., 2018).

A block maps ``x`` to ``x * sigmoid(W2 relu(W1 mean(x)))`` per example and channel, the mean
over the spatial positions; a convolution gets one after it when it has at least ``min_channels``
input and output channels, and ``latent_channels`` below 1 is a fraction of its output channels.
Composer's own tests (with ``min_channels=3`` every convolution of a small conv model gets a
block, the output keeps its shape, it trains) are re-expressed below.
"""

from __future__ import annotations

import copy
import re
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from trainer_support import Observed

import algorithms.functional as cf
from algorithms import SqueezeExcite
from algorithms.core import Algorithm, Event, Trainer
from algorithms.models import resnet20
from algorithms.squeeze_excite.squeeze_excite import SqueezeExcite2d, SqueezeExciteConv2d
from algorithms.surgery import NoModulesReplacedWarning


def _definition(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    squeezed = x.mean(dim=(2, 3))  # (N, C)
    gates = torch.sigmoid(torch.relu(squeezed @ w1.T) @ w2.T)
    return x * gates[:, :, None, None]


def _simple_conv_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2)
    )


def test_the_block_is_the_definition():
    torch.manual_seed(0)
    block = SqueezeExcite2d(6, latent_channels=3)
    x = torch.randn(4, 6, 5, 7)
    torch.testing.assert_close(block(x), _definition(x, block.fc1.weight, block.fc2.weight))
    assert block.fc1.weight.shape == (3, 6) and block.fc2.weight.shape == (6, 3)
    assert block.fc1.bias is None and block.fc2.bias is None


def test_a_replaced_convolution_is_the_convolution_then_the_block():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(8, 16, 3, bias=True))
    conv = model[0]
    assert cf.apply_squeeze_excite(model, latent_channels=4, min_channels=8) == 1
    wrapped = model[0]
    assert isinstance(wrapped, SqueezeExciteConv2d) and wrapped.conv is conv
    x = torch.randn(2, 8, 9, 9)
    expected = _definition(F.conv2d(x, conv.weight, conv.bias), wrapped.se.fc1.weight, wrapped.se.fc2.weight)
    torch.testing.assert_close(model(x), expected)


@pytest.mark.parametrize(("min_channels", "expected"), [(0, 21), (16, 20), (32, 12), (64, 5)])
def test_on_resnet20_the_convolutions_wide_enough_on_both_sides_get_a_block(min_channels, expected):
    torch.manual_seed(0)
    model = resnet20(10)
    wide = [
        name
        for name, m in model.named_modules()
        if isinstance(m, nn.Conv2d) and min(m.in_channels, m.out_channels) >= min_channels
    ]
    assert len(wide) == expected
    assert cf.apply_squeeze_excite(model, latent_channels=0.25, min_channels=min_channels) == expected
    modules = dict(model.named_modules())
    assert [name for name, m in modules.items() if isinstance(m, SqueezeExciteConv2d)] == wide
    for name in wide:
        channels = modules[name].conv.out_channels
        assert modules[name].se.latent_channels == int(0.25 * channels)
    out = model(torch.randn(4, 3, 16, 16))
    assert out.shape == (4, 10)


def test_the_default_min_channels_matches_nothing_in_resnet20_and_warns():
    model = resnet20(10)
    message = "SqueezeExcite: no module of the model matched (Conv2d); the model is unchanged"
    with pytest.warns(NoModulesReplacedWarning, match=f"^{re.escape(message)}$"):
        assert cf.apply_squeeze_excite(model) == 0
    assert not any(isinstance(m, SqueezeExciteConv2d) for m in model.modules())


def test_by_default_128_channels_get_a_block_of_64():
    """Composer's defaults, min_channels=128 and latent_channels=64, in the functional form and
    the class alike; 127 channels on either side are too few."""
    for apply in (cf.apply_squeeze_excite, lambda model: SqueezeExcite().apply(Event.INIT, _state(model))):
        model = nn.Sequential(nn.Conv2d(128, 128, 1), nn.Conv2d(128, 127, 1), nn.Conv2d(127, 128, 1))
        apply(model)
        assert [type(m) for m in model] == [SqueezeExciteConv2d, nn.Conv2d, nn.Conv2d]
        assert model[0].se.latent_channels == 64


def test_the_modules_default_to_an_eighth_of_the_channels():
    assert SqueezeExcite2d(16).latent_channels == 2
    assert SqueezeExciteConv2d(nn.Conv2d(8, 32, 3)).se.latent_channels == 4


@pytest.mark.parametrize(
    ("latent_channels", "channels", "expected"),
    [(64, 32, 64), (8, 32, 8), (0.25, 32, 8), (0.25, 64, 16), (0.125, 6, 1), (0.01, 16, 1), (1, 16, 1), (3.0, 16, 3)],
)
def test_latent_channels_are_a_count_or_a_fraction_of_at_least_one(latent_channels, channels, expected):
    assert SqueezeExcite2d(channels, latent_channels).latent_channels == expected


def test_composers_small_model_gets_a_block_after_every_convolution_and_keeps_its_output_shape():
    model = _simple_conv_model()
    x = torch.randn(2, 3, 10, 10)
    shape = model(x).shape
    convs = sum(isinstance(m, nn.Conv2d) for m in model.modules())
    SqueezeExcite(latent_channels=64, min_channels=3).apply(Event.INIT, _state(model))
    assert sum(isinstance(m, SqueezeExciteConv2d) for m in model.modules()) == convs == 2
    assert model(x).shape == shape


def _state(model):
    from algorithms.core import State
    from algorithms.core.time import Duration

    return State(model=model, max_duration=Duration.parse("1ep"))


def test_gradients_flow_to_the_blocks_and_the_convolutions():
    model = _simple_conv_model()
    cf.apply_squeeze_excite(model, latent_channels=2, min_channels=3)
    F.cross_entropy(model(torch.randn(4, 3, 10, 10)), torch.tensor([0, 1, 0, 1])).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name


def test_an_optimizer_built_before_surgery_holds_and_trains_the_blocks():
    model = _simple_conv_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    cf.apply_squeeze_excite(model, latent_channels=2, min_channels=3, optimizers=optimizer)
    held = [p for g in optimizer.param_groups for p in g["params"]]
    assert len(held) == len({id(p) for p in held})
    assert {id(p) for p in held} == {id(p) for p in model.parameters()}
    se_weight = model[0].se.fc1.weight
    before = se_weight.detach().clone()
    F.cross_entropy(model(torch.randn(4, 3, 10, 10)), torch.tensor([0, 1, 0, 1])).backward()
    optimizer.step()
    assert not torch.equal(se_weight, before)


def test_it_changes_the_models_outputs():
    model = _simple_conv_model()
    x = torch.randn(2, 3, 10, 10)
    before = model(x)
    cf.apply_squeeze_excite(model, min_channels=3)
    assert not torch.allclose(model(x), before)


def test_the_blocks_take_the_models_float64_and_keep_channels_last():
    model = nn.Sequential(nn.Conv2d(4, 4, 3)).double()
    cf.apply_squeeze_excite(model, latent_channels=2, min_channels=4)
    assert all(p.dtype == torch.float64 for p in model.parameters())
    x = torch.randn(2, 4, 6, 6, dtype=torch.float64).contiguous(memory_format=torch.channels_last)
    model = model.to(memory_format=torch.channels_last)
    out = model(x)
    assert out.dtype == torch.float64 and out.is_contiguous(memory_format=torch.channels_last)


def test_applying_it_twice_adds_nothing_the_second_time():
    model = _simple_conv_model()
    cf.apply_squeeze_excite(model, min_channels=3)
    with pytest.warns(NoModulesReplacedWarning, match="SqueezeExcite"):
        assert cf.apply_squeeze_excite(model, min_channels=3) == 0
    assert isinstance(model[0].conv, nn.Conv2d) and type(model[0].conv) is nn.Conv2d
    assert isinstance(copy.deepcopy(model)[0].conv, nn.Conv2d)
    with pytest.warns(NoModulesReplacedWarning):
        assert cf.apply_squeeze_excite(copy.deepcopy(model), min_channels=3) == 0


_LATENT = "must be a fraction in (0, 1) of the convolution's output channels or a whole count >= 1"
_MIN = "must be an integer in [0, inf)"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"latent_channels": 0}, f"latent_channels=0: {_LATENT}"),
        ({"latent_channels": -0.5}, f"latent_channels=-0.5: {_LATENT}"),
        ({"latent_channels": 1.5}, f"latent_channels=1.5: {_LATENT}"),
        ({"latent_channels": True}, f"latent_channels=True: {_LATENT}"),
        ({"latent_channels": float("nan")}, f"latent_channels=nan: {_LATENT}"),
        ({"latent_channels": "8"}, f"latent_channels='8': {_LATENT}"),
        ({"min_channels": -1}, f"min_channels=-1: {_MIN}"),
        ({"min_channels": 2.0}, f"min_channels=2.0: {_MIN}"),
        ({"min_channels": None}, f"min_channels=None: {_MIN}"),
    ],
)
def test_bad_hyperparameters_are_refused_naming_them(kwargs, message):
    match = f"^{re.escape(message)}$"
    with pytest.raises(ValueError, match=match):
        SqueezeExcite(**kwargs)
    model = _simple_conv_model()
    with pytest.raises(ValueError, match=match):
        cf.apply_squeeze_excite(model, **kwargs)
    assert not any(isinstance(m, SqueezeExciteConv2d) for m in model.modules())


def test_a_model_without_conv2d_warns_and_is_unchanged():
    model = nn.Sequential(nn.Conv1d(3, 4, 3), nn.Linear(4, 2))
    with pytest.warns(NoModulesReplacedWarning, match="SqueezeExcite"):
        assert cf.apply_squeeze_excite(model, min_channels=0) == 0
    assert [type(m) for m in model] == [nn.Conv1d, nn.Linear]


class _SnapshotAtInit(Algorithm):
    """Put after SqueezeExcite: keeps the blocks' weights as the surgery made them."""

    def __init__(self):
        self.weights = None

    def match(self, event, state):
        return event is Event.INIT

    def apply(self, event, state, logger=None):
        self.weights = {k: v.detach().clone() for k, v in state.model.state_dict().items() if ".se." in k}


@pytest.mark.parametrize("built_before", [True, False])
def test_in_the_trainer_the_blocks_are_added_at_init_and_trained(built_before):
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(4, 3, 10, 10, generator=g), torch.randint(0, 2, (4,), generator=g)) for _ in range(3)]
    model = _simple_conv_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5) if built_before else None
    snapshot, seen = _SnapshotAtInit(), Observed()
    trainer = Trainer(
        model,
        batches,
        "3ba",
        optimizer=optimizer,
        algorithms=[SqueezeExcite(latent_channels=0.5, min_channels=3), snapshot, seen],
        seed=0,
        device="cpu",
    )
    trainer.fit()
    trained = trainer.state.model
    assert isinstance(trained[0], SqueezeExciteConv2d) and isinstance(trained[2], SqueezeExciteConv2d)
    assert trained[0].se.latent_channels == 4 and trained[2].se.latent_channels == 2
    assert len(snapshot.weights) == 4
    held = {id(p) for g in trainer.state.optimizers[0].param_groups for p in g["params"]}
    assert held == {id(p) for p in trained.parameters()}
    after = trained.state_dict()
    assert not torch.equal(after["0.se.fc1.weight"], snapshot.weights["0.se.fc1.weight"])
    assert all(torch.isfinite(loss) for loss in seen.losses)


@pytest.mark.cuda
def test_on_cuda_the_block_makes_no_host_sync():
    from trainer_support import no_host_sync

    model = _simple_conv_model().cuda()
    cf.apply_squeeze_excite(model, latent_channels=2, min_channels=3)
    assert model[0].se.fc1.weight.device.type == "cuda"
    x = torch.randn(2, 3, 10, 10, device="cuda")
    with no_host_sync():
        out = model(x)
    assert out.device == x.device


def test_no_warning_when_something_was_replaced():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cf.apply_squeeze_excite(nn.Sequential(nn.Conv2d(4, 4, 1)), min_channels=4)
