"""Composer's ``tests/algorithms/test_torch_export.py``: the models of the surgery methods'
settings (:mod:`algorithm_settings`), changed by the functional forms, exported with TorchScript,
``torch.fx`` and ONNX, compute what the model computes. Composer's input is the
``(input, target)`` batch its models take; this library's models take the input. Composer's
``pytest.xfail`` cases (unsupported exports) are non-strict xfails here, so a pass shows as XPASS.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.fx
from algorithm_settings import get_alg_kwargs, get_alg_model, get_algs_with_marks

from algorithms import BlurPool, ChannelsLast, Factorize, GhostBatchNorm, SqueezeExcite, StochasticDepth
from algorithms.core import Algorithm
from algorithms.functional import (
    apply_blurpool,
    apply_channels_last,
    apply_factorization,
    apply_ghost_batchnorm,
    apply_squeeze_excite,
    apply_stochastic_depth,
)

algo_kwargs = {
    apply_stochastic_depth: {"stochastic_method": "block", "target_layer_name": "ResNetBottleneck"},
    apply_ghost_batchnorm: {"ghost_batch_size": 2},
}

EXPORTED = (BlurPool, Factorize, GhostBatchNorm, SqueezeExcite, StochasticDepth, ChannelsLast)


@pytest.fixture
def input():
    # Composer's input batch is an (input, target) tuple; the models here take the input
    return torch.rand(4, 3, 112, 112)


def _algs(unsupported_in_composer: dict[type[Algorithm], str]) -> list[Any]:
    xfail = {cls.__name__: reason for cls, reason in unsupported_in_composer.items()}
    return [p for p in get_algs_with_marks(xfail) if p.values[0] in EXPORTED]


def get_surgery_method(alg_cls: type[Algorithm]) -> Callable:
    methods = {
        BlurPool: apply_blurpool,
        Factorize: apply_factorization,
        GhostBatchNorm: apply_ghost_batchnorm,
        SqueezeExcite: apply_squeeze_excite,
        StochasticDepth: apply_stochastic_depth,
        ChannelsLast: apply_channels_last,
    }
    if alg_cls not in methods:
        raise ValueError(f"Unknown algorithm class {alg_cls}")
    return methods[alg_cls]


def _changed_model(alg_cls: type[Algorithm]) -> torch.nn.Module:
    surgery_method = get_surgery_method(alg_cls)
    model = get_alg_model(alg_cls)
    surgery_method(model, **algo_kwargs.get(surgery_method, get_alg_kwargs(alg_cls)))
    return model


# <--- torchscript export --->

UNSUPPORTED = "Composer: Unsupported"


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize(
    "alg_cls", _algs({Factorize: UNSUPPORTED, GhostBatchNorm: UNSUPPORTED, StochasticDepth: UNSUPPORTED})
)
def test_surgery_torchscript_train(input: Any, alg_cls: type[Algorithm]):
    """Tests torchscript model in train mode."""
    model = _changed_model(alg_cls)
    scripted_func = torch.jit.script(model)
    scripted_func.train()
    model.train()
    torch.testing.assert_close(scripted_func(input), model(input))


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("alg_cls", _algs({Factorize: UNSUPPORTED}))
def test_surgery_torchscript_eval(input: Any, alg_cls: type[Algorithm]):
    """Tests torchscript model in eval mode."""
    model = _changed_model(alg_cls)
    scripted_func = torch.jit.script(model)
    scripted_func.eval()
    model.eval()
    torch.testing.assert_close(scripted_func(input), model(input))


# <--- torch.fx export --->


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize(
    "alg_cls", _algs({BlurPool: "Composer: Control flow", GhostBatchNorm: "Composer: Control flow"})
)
def test_surgery_torchfx_eval(input: Any, alg_cls: type[Algorithm]):
    """Tests torch.fx model in eval mode."""
    model = _changed_model(alg_cls)
    model.eval()
    traced_func = torch.fx.symbolic_trace(model)
    torch.testing.assert_close(traced_func(input), model(input))


# <--- onnx export --->


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("alg_cls", _algs({}))
def test_surgery_onnx(input: Any, alg_cls: type[Algorithm], tmp_path: Path):
    """Tests onnx export and runtime."""
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")

    model = _changed_model(alg_cls)
    model.eval()
    onnx_path = tmp_path / "model.onnx"
    torch.onnx.export(model, (input,), str(onnx_path), input_names=["input"], output_names=["output"])

    onnx.checker.check_model(onnx.load(str(onnx_path)))
    ort_session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    outputs = ort_session.run(None, {"input": input.numpy()})
    torch.testing.assert_close(
        outputs[0],
        model(input).detach().numpy(),
        rtol=1e-4,  # lower tolerance for ONNX
        atol=1e-3,  # lower tolerance for ONNX
    )
