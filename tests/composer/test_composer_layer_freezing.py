"""Composer's tests of Layer Freezing (``tests/algorithms/test_layer_freezing.py``), re-expressed
with this library's imports; ``SimpleConvModel`` and ``SimpleTransformerClassifier`` are the
stand-ins of :mod:`composer_support`. Composer's third model, a tiny Hugging Face BERT, needs
``transformers`` (see ``differences.EXCLUDED``)."""

from __future__ import annotations

from copy import deepcopy

import pytest
import torch
from composer_support import SimpleConvModel, SimpleTransformerClassifier

from algorithms import LayerFreezing
from algorithms.core import Event, State, Timestamp
from algorithms.core.time import Duration


def _generate_state(model_cls, epoch: int, max_epochs: int) -> State:
    """Composer's ``_generate_state``: SGD with momentum 0.99, 100 batches an epoch, ``epoch`` of
    ``max_epochs`` epochs done."""
    model = model_cls()
    state = State(
        model=model,
        max_duration=Duration.parse(f"{max_epochs}ep"),
        optimizers=(torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.99),),
        precision="fp32",
        seed=0,
        dataloader_len=100,
    )
    state.timestamp = Timestamp(epoch=epoch)
    return state


def _assert_param_groups_equal(expected_groups, actual_groups):
    assert len(expected_groups) == len(actual_groups), "Incorrect number of param groups"
    for i, expected_group in enumerate(expected_groups):
        assert len(expected_group) == len(actual_groups[i]), f"Group {i} has the wrong number of parameters"
        for j, expected_params in enumerate(expected_group["params"]):
            assert (actual_groups[i]["params"][j] == expected_params).all()


@pytest.mark.parametrize("model_cls", [SimpleConvModel, SimpleTransformerClassifier])
def test_freeze_layers_no_freeze(model_cls):
    """Composer's ``test_freeze_layers_no_freeze``: at 10 of 100 epochs, with ``freeze_start=0.5``,
    the optimizer's groups are unchanged."""
    state = _generate_state(model_cls, epoch=10, max_epochs=100)
    first_optimizer = state.optimizers[0]
    expected_param_groups = deepcopy(first_optimizer.param_groups)
    LayerFreezing(freeze_start=0.5, freeze_level=1.0).apply(event=Event.EPOCH_END, state=state, logger=None)
    _assert_param_groups_equal(expected_param_groups, first_optimizer.param_groups)


@pytest.mark.parametrize("model_cls", [SimpleConvModel, SimpleTransformerClassifier])
def test_freeze_layers_with_freeze(model_cls):
    """Composer's ``test_freeze_layers_with_freeze``: at 80 of 100 epochs, with
    ``freeze_start=0.05``, the group keeps its keys (Composer empties the expected parameters, so
    only their count of keys is compared)."""
    state = _generate_state(model_cls, epoch=80, max_epochs=100)
    first_optimizer = state.optimizers[0]
    expected_param_groups = deepcopy(first_optimizer.param_groups)
    LayerFreezing(freeze_start=0.05, freeze_level=1.0).apply(event=Event.EPOCH_END, state=state, logger=None)
    expected_param_groups[0]["params"] = []  # the first group should be removed due to freezing
    _assert_param_groups_equal(expected_param_groups, first_optimizer.param_groups)
