"""Composer's tests of Stochastic Depth (``tests/algorithms/test_stochastic_depth.py``),
re-expressed with this library's imports. Composer's ``composer_resnet('resnet50')`` is this
library's ResNet-50 (:func:`algorithms.models.resnet50`), torchvision's ``Bottleneck`` its
``Bottleneck``, Composer's ``_STOCHASTIC_LAYER_MAPPING`` its ``TARGET_LAYERS``, and
``make_resnet_bottleneck_stochastic`` is ``StochasticBottleneck.from_block`` with the block's rate
from ``block_drop_rates``; ``minimal_state`` is the stand-in of :mod:`composer_support`. Composer's
``drop_warmup`` attribute is its ``Time``; here the attribute is the string given, and its value is
read with this library's ``Duration``."""

from __future__ import annotations

from unittest.mock import Mock

import pytest
import torch
import torch.nn.functional as F
from composer_support import minimal_state

import algorithms.functional as cf
from algorithms import StochasticDepth
from algorithms.core import Event, TimeUnit
from algorithms.core.time import Duration
from algorithms.models import resnet50
from algorithms.models.resnet import Bottleneck
from algorithms.stochastic_depth.stochastic_depth import TARGET_LAYERS, StochasticBottleneck, block_drop_rates
from algorithms.surgery import count_module_instances


@pytest.fixture()
def state():
    """stochastic depth tests require ResNet model."""
    return minimal_state(resnet50(num_classes=100))


@pytest.fixture()
def target_layer_name() -> str:
    return "ResNetBottleneck"


@pytest.fixture()
def stochastic_method():
    return "block"


def count_sd_forward(module: torch.nn.Module, target_block: type[torch.nn.Module], count: int = 0):
    if len(list(module.children())) == 0 and len(list(module.parameters())) > 0:
        return count
    for child in module.children():
        if isinstance(child, target_block) and hasattr(child, "drop_rate"):
            count += 1
        count = count_sd_forward(child, target_block, count)
    return count


def make_resnet_bottleneck_stochastic(
    module, module_index, module_count, drop_rate, drop_distribution, stochastic_method
):
    """Composer's ``make_resnet_bottleneck_stochastic``: block ``module_index`` of ``module_count``."""
    rate = block_drop_rates(module_count, drop_rate, drop_distribution)[module_index]
    return StochasticBottleneck.from_block(module, rate, stochastic_method)


@pytest.mark.parametrize("stochastic_method", ["block", "sample"])
@pytest.mark.parametrize("target_layer_name", ["ResNetBottleneck"])
def test_sd_algorithm(state, stochastic_method: str, target_layer_name: str):
    """Composer's ``test_sd_algorithm``: every bottleneck gets a drop rate."""
    target_layer = TARGET_LAYERS[target_layer_name]
    target_block_count = count_module_instances(state.model, target_layer)
    sd = StochasticDepth(
        stochastic_method=stochastic_method,
        target_layer_name=target_layer_name,
        drop_rate=0.5,
        drop_distribution="linear",
        drop_warmup=0.0,
    )
    sd.apply(Event.INIT, state, logger=Mock())
    assert target_block_count == count_sd_forward(state.model, target_layer)


@pytest.mark.parametrize("stochastic_method", ["block", "sample"])
@pytest.mark.parametrize("target_layer_name", ["ResNetBottleneck"])
def test_sd_functional(state, stochastic_method: str, target_layer_name: str):
    """Composer's ``test_sd_functional``: the same through the functional form."""
    target_layer = TARGET_LAYERS[target_layer_name]
    target_block_count = count_module_instances(state.model, target_layer)
    cf.apply_stochastic_depth(
        model=state.model,
        stochastic_method=stochastic_method,
        target_layer_name=target_layer_name,
        drop_rate=0.5,
        drop_distribution="linear",
    )
    assert target_block_count == count_sd_forward(state.model, target_layer)


class TestStochasticBottleneckForward:
    @pytest.mark.parametrize("drop_rate", [1.0])
    def test_block_stochastic_bottleneck_drop(self, drop_rate: float):
        X = torch.randn(4, 4, 16, 16)
        stochastic_block = make_resnet_bottleneck_stochastic(Bottleneck(4, 1), 0, 1, drop_rate, "linear", "block")
        assert stochastic_block(X) is X

    @pytest.mark.parametrize("drop_rate", [0.0])
    def test_block_stochastic_bottleneck_keep(self, drop_rate: float):
        X = torch.randn(4, 4, 16, 16)
        stochastic_block = make_resnet_bottleneck_stochastic(Bottleneck(4, 1), 0, 1, drop_rate, "linear", "block")
        assert stochastic_block(X) is not X

    @pytest.mark.parametrize("drop_rate", [1.0])
    def test_sample_stochastic_bottleneck_drop_all(self, drop_rate: float):
        X = F.relu(torch.randn(4, 4, 16, 16))  # inputs and outputs will match if the input has been ReLUed
        stochastic_block = make_resnet_bottleneck_stochastic(Bottleneck(4, 1), 0, 1, drop_rate, "linear", "sample")
        assert torch.all(X == stochastic_block(X))


class TestStochasticDepthDropRate:
    @pytest.fixture
    def algorithm(self, target_layer_name, stochastic_method, drop_rate, drop_distribution, drop_warmup):
        return StochasticDepth(target_layer_name, stochastic_method, drop_rate, drop_distribution, drop_warmup)

    def get_drop_rate_list(self, module: torch.nn.Module, drop_rates: list | None = None):
        if drop_rates is None:
            drop_rates = []
        if len(list(module.children())) == 0 and len(list(module.parameters())) > 0:
            return
        for _, child in module.named_children():
            if hasattr(child, "drop_rate"):
                drop_rates.append(child.drop_rate)
            self.get_drop_rate_list(child, drop_rates)

    @pytest.mark.parametrize("step", [50, 100, 1000])
    @pytest.mark.parametrize("drop_rate", [0.0, 0.5, 1.0])
    @pytest.mark.parametrize("drop_distribution", ["uniform", "linear"])
    @pytest.mark.parametrize("drop_warmup", ["0.1dur"])
    def test_drop_rate_warmup(self, algorithm, step: int, state):
        """Composer's ``test_drop_rate_warmup``. As in Composer, the algorithm is not applied at
        ``Event.INIT`` first, so the model holds no stochastic block and both lists are empty."""
        old_drop_rates = []
        self.get_drop_rate_list(state.model, drop_rates=old_drop_rates)
        state.timestamp.batch = step
        algorithm.apply(Event.BATCH_START, state, logger=Mock())
        new_drop_rates = []
        self.get_drop_rate_list(state.model, drop_rates=new_drop_rates)

        assert state.max_duration is not None
        assert state.max_duration.unit == TimeUnit.EPOCH
        assert state.dataloader_len is not None
        drop_warmup = Duration.parse(algorithm.drop_warmup).value
        drop_warmup_iters = int(int(state.dataloader_len) * int(state.max_duration.value) * drop_warmup)
        assert torch.all(torch.tensor(new_drop_rates) == ((step / drop_warmup_iters) * torch.tensor(old_drop_rates)))


class TestStochasticDepthInputValidation:
    @pytest.mark.parametrize("stochastic_method", ["nonsense"])
    def test_invalid_method_name(self, stochastic_method: str, target_layer_name: str):
        with pytest.raises(ValueError):
            StochasticDepth(stochastic_method=stochastic_method, target_layer_name=target_layer_name)

    @pytest.mark.parametrize("target_layer_name", ["nonsense_pt2"])
    def test_invalid_layer_name(self, stochastic_method: str, target_layer_name: str):
        with pytest.raises(ValueError):
            StochasticDepth(stochastic_method=stochastic_method, target_layer_name=target_layer_name)

    @pytest.mark.parametrize("drop_rate", [-0.5, 1.7])
    def test_invalid_drop_rate(self, stochastic_method: str, target_layer_name: str, drop_rate: float):
        with pytest.raises(ValueError):
            StochasticDepth(
                stochastic_method=stochastic_method, target_layer_name=target_layer_name, drop_rate=drop_rate
            )

    @pytest.mark.parametrize("drop_distribution", ["nonsense_pt3"])
    def test_invalid_drop_distribution(self, stochastic_method: str, target_layer_name: str, drop_distribution: str):
        with pytest.raises(ValueError):
            StochasticDepth(
                stochastic_method=stochastic_method,
                target_layer_name=target_layer_name,
                drop_distribution=drop_distribution,
            )
