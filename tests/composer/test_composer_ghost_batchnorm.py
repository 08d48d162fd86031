"""Composer's tests of Ghost Batch Normalization (``tests/algorithms/test_ghost_batchnorm.py``),
re-expressed with this library's imports. Composer's ``_GhostBatchNorm`` wrapper is the mixin
that ``GhostBatchNorm1d/2d/3d`` share here; its ``MagicMock`` state is :func:`minimal_state`
holding the model, and the count it logs is the class's ``modules_replaced`` counter."""

from __future__ import annotations

import contextlib
import math
from unittest.mock import Mock

import pytest
import torch
from composer_support import counted, minimal_state

import algorithms.functional as cf
from algorithms import GhostBatchNorm
from algorithms.core import Event
from algorithms.ghost_batchnorm.ghost_batchnorm import _GhostBatchNormMixin
from algorithms.surgery import count_module_instances

_GHOSTBN_MODULE_CLASS = _GhostBatchNormMixin
_GHOSTBN_CORRECT_EVENT = Event.INIT

_TEST_NUM_DIMS = [1, 2, 3]
_TEST_GHOST_BATCH_SIZES = [1, 2, 3, 5]
_TEST_BATCH_SIZES = [12]  # multiple of some, but not all, ghost batch sizes


class ModuleWithBatchnorm(torch.nn.Module):
    """Composer's test model: one batch norm of ``num_dims`` spatial dimensions, and a convolution
    the forward does not use. Composer's eps is 0, which torch (2.13 here) now refuses in training
    (``ValueError: batch_norm eps must be positive``); 1e-10 is as good for the checks, far below
    their tolerance."""

    def __init__(self, num_dims, num_features=4):
        super().__init__()
        eps = 1e-10  # makes it easier to check normalization correctness (Composer's 0: see above)
        factory_func = {1: torch.nn.BatchNorm1d, 2: torch.nn.BatchNorm2d, 3: torch.nn.BatchNorm3d}
        self.bn = factory_func[num_dims](num_features, eps=eps)
        self.num_dims = num_dims
        self.num_features = num_features
        self.non_batchnorm_module = torch.nn.Conv2d(4, 5, (1, 1))

    def forward(self, input: torch.Tensor):
        return self.bn(input)


@pytest.fixture
def state(num_dims: int):
    return minimal_state(ModuleWithBatchnorm(num_dims=num_dims))


@pytest.fixture
def algo_instance(ghost_batch_size: int):
    return GhostBatchNorm(ghost_batch_size=ghost_batch_size)


@pytest.mark.parametrize("num_dims", [1, 2, 3, 4, -1])
def test_batchnorm_gets_replaced_functional(num_dims: int):
    """GhostBatchNorm{1,2,3}d should work, but other ints should throw."""
    ctx = pytest.raises(KeyError) if num_dims < 1 or num_dims > 3 else contextlib.nullcontext()
    with ctx:
        module = ModuleWithBatchnorm(num_dims)
        assert count_module_instances(module, _GHOSTBN_MODULE_CLASS) == 0
        cf.apply_ghost_batchnorm(module, ghost_batch_size=1)
        assert count_module_instances(module, _GHOSTBN_MODULE_CLASS) == 1


@pytest.mark.parametrize("num_dims", _TEST_NUM_DIMS)
@pytest.mark.parametrize("ghost_batch_size", _TEST_GHOST_BATCH_SIZES)
@pytest.mark.parametrize("batch_size", _TEST_BATCH_SIZES)
class TestGhostBatchesNormalized:
    def _assert_ghost_batches_normalized(self, module, ghost_batch_size: int, batch_size: int) -> None:
        torch.manual_seed(123)
        size = [batch_size, module.num_features] + ([3] * module.num_dims)
        X = torch.randn(size=size)
        module.train()
        out = module(X)
        n_channels = out.shape[1]
        reduce_dims = (0,) + tuple(range(2, out.ndim))  # everything but the channels
        nchunks = int(math.ceil(batch_size / ghost_batch_size))
        for ghost_batch in out.chunk(nchunks):
            channel_variances, channel_means = torch.var_mean(ghost_batch, dim=reduce_dims, unbiased=False)
            torch.testing.assert_close(channel_variances, torch.ones(n_channels))
            torch.testing.assert_close(channel_means, torch.zeros(n_channels))

    def test_normalization_correct_functional(self, num_dims: int, ghost_batch_size: int, batch_size: int) -> None:
        module = ModuleWithBatchnorm(num_dims=num_dims)
        cf.apply_ghost_batchnorm(module, ghost_batch_size=ghost_batch_size)
        self._assert_ghost_batches_normalized(module, ghost_batch_size, batch_size)

    def test_normalization_correct_algorithm(self, state, algo_instance, num_dims, ghost_batch_size, batch_size):
        algo_instance.apply(_GHOSTBN_CORRECT_EVENT, state, logger=None)
        self._assert_ghost_batches_normalized(state.model, ghost_batch_size, batch_size)


@pytest.mark.parametrize("ghost_batch_size", [4])
def test_correct_event_matches(algo_instance):
    assert algo_instance.match(_GHOSTBN_CORRECT_EVENT, Mock(side_effect=ValueError))


@pytest.mark.parametrize("ghost_batch_size", [4])
@pytest.mark.parametrize("event", Event)  # enum iteration
def test_incorrect_event_does_not_match(event: Event, algo_instance):
    if event == _GHOSTBN_CORRECT_EVENT:
        return
    assert not algo_instance.match(event, Mock(side_effect=ValueError))


@pytest.mark.parametrize("ghost_batch_size", [4])
@pytest.mark.parametrize("num_dims", [2])
def test_algorithm_logging(state, algo_instance):
    """Composer's ``test_algorithm_logging``: one new module counted."""
    assert counted(algo_instance, state) == {"modules_replaced": 1}
