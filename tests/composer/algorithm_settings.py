"""Composer's ``tests/algorithms/algorithm_settings.py`` for this library: the model, the batches
and the arguments each algorithm is trained with by the tests that run every algorithm
(``test_composer_algorithms_train.py``, ``test_composer_algorithm_resumption.py``, ...).

The settings are Composer's. Its loaders are lists of batches here (``RandomImageDataset`` in
batches of 4: 25 batches of 3 x 32 x 32 images, 2 classes). Composer trains ALiBi, Gated Linear
Units, Low Precision LayerNorm and Sequence Length Warmup on a tiny Hugging Face BERT, which needs
``transformers`` (Composer skips them without it); their policies here match this library's
reference transformer (their cards say so), so they train ``transformer_tiny`` on batches of the
same shape (Composer's ``dummy_bert_lm_dataloader(size=8)``: 8 sequences of 4 tokens in batches of 2).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from composer_support import SimpleConvModel, SimpleModelWithDropout

import algorithms
from algorithms.core import Algorithm
from algorithms.models import lm_loss, resnet50, transformer_tiny

VOCAB = 50


def random_image_batches(
    shape: tuple[int, ...] = (3, 32, 32), size: int = 100, num_classes: int = 2, batch_size: int = 4
):
    """Composer's ``RandomImageDataset`` in a loader of ``batch_size``; like Composer's, drawn the
    same at every call (Composer draws it after the Trainer seeds torch)."""
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(size, *shape, generator=g), torch.randint(0, num_classes, (size,), generator=g)
    return [(x[i : i + batch_size], y[i : i + batch_size]) for i in range(0, size, batch_size)]


def lm_batches(size: int = 8, sequence_length: int = 4, batch_size: int = 2):
    """Composer's ``dummy_*_lm_dataloader``: ``size`` random sequences in batches of 2, the labels
    the collator's copy of the ids."""
    ids = torch.randint(0, VOCAB, (size, sequence_length), generator=torch.Generator().manual_seed(0))
    return [
        {"input_ids": ids[i : i + batch_size], "labels": ids[i : i + batch_size].clone()}
        for i in range(0, size, batch_size)
    ]


def simple_dataset_batches(size: int = 256, batch_size: int = 2, feature_size: int = 64, num_classes: int = 10):
    """Composer's ``SimpleDataset``, whose every item is already a batch of ``batch_size``."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(size * batch_size, feature_size, generator=g)
    y = torch.randint(0, num_classes, (size * batch_size,), generator=g)
    return [(x[i : i + batch_size], y[i : i + batch_size]) for i in range(0, size * batch_size, batch_size)]


_LM = {"loss_fn": lm_loss, "input_key": "input_ids", "target_key": "labels"}


def _lm(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {"model": lambda: transformer_tiny(VOCAB), "dataloader": lm_batches, "kwargs": kwargs, "trainer": _LM}


def _vision(kwargs: dict[str, Any] | None = None, model: Callable[[], torch.nn.Module] = SimpleConvModel):
    return {"model": model, "dataloader": random_image_batches, "kwargs": kwargs or {}, "trainer": {}}


_SETTINGS: dict[str, dict[str, Any] | None] = {
    "GradientClipping": _vision({"clipping_type": "norm", "clipping_threshold": 0.1}),
    "Alibi": _lm({"max_sequence_length": 256}),
    "AugMix": _vision(),
    "BlurPool": _vision({"min_channels": 0}),
    "ChannelsLast": _vision(),
    "ColOut": _vision(),
    "CutMix": _vision(),
    "CutOut": _vision(),
    "EMA": _vision({"half_life": "1ba"}),
    "Factorize": _vision({"min_channels": 4, "min_features": 4, "latent_features": 2}),
    "GatedLinearUnits": _lm({}),
    "GhostBatchNorm": _vision({"ghost_batch_size": 2}, model=lambda: SimpleConvModel(norm="group")),
    "LabelSmoothing": _vision(),
    "LayerFreezing": _vision(),
    "LowPrecisionLayerNorm": _lm({}),
    "LowPrecisionGroupNorm": _vision(model=lambda: SimpleConvModel(norm="group")),
    "MixUp": _vision(),
    "ProgressiveResizing": _vision(),
    "RandAugment": _vision(),
    "SAM": _vision(),
    "SelectiveBackprop": _vision(),
    "SeqLengthWarmup": _lm({"duration": 0.5, "min_seq_length": 8, "max_seq_length": 16}),
    "SqueezeExcite": _vision({"min_channels": 4}),
    "StochasticDepth": {
        "model": lambda: resnet50(num_classes=2),
        "dataloader": lambda: random_image_batches(shape=(3, 224, 224)),
        "kwargs": {
            "stochastic_method": "block",
            "target_layer_name": "ResNetBottleneck",
            "drop_rate": 0.2,
            "drop_distribution": "linear",
            "drop_warmup": "0.0dur",
        },
        "trainer": {},
    },
    "SWA": _vision({"swa_start": "0.2dur", "swa_end": "0.97dur", "update_interval": "1ep", "schedule_swa_lr": True}),
    "WeightStandardization": _vision(),
    "GyroDropout": {
        "model": SimpleModelWithDropout,
        "dataloader": simple_dataset_batches,
        "kwargs": {"p": 0.5, "sigma": 2, "tau": 1},
        "trainer": {},
    },
}


def _settings(alg_cls: type[Algorithm]) -> dict[str, Any]:
    settings = _SETTINGS.get(alg_cls.__name__)
    if settings is None:
        raise ValueError(f"Algorithm {alg_cls.__name__} not in the settings dictionary.")
    return settings


def get_alg_kwargs(alg_cls: type[Algorithm]) -> dict[str, Any]:
    return _settings(alg_cls)["kwargs"]


def get_alg_model(alg_cls: type[Algorithm]) -> torch.nn.Module:
    return _settings(alg_cls)["model"]()


def get_alg_dataloader(alg_cls: type[Algorithm]) -> list[Any]:
    return _settings(alg_cls)["dataloader"]()


def get_trainer_kwargs(alg_cls: type[Algorithm]) -> dict[str, Any]:
    """What this Trainer needs besides the model and the batches: the loss and the batch keys of
    the language-model settings (a Composer model carries its own loss)."""
    return dict(_settings(alg_cls)["trainer"])


def algorithm_classes() -> list[type[Algorithm]]:
    """Every algorithm class the package exports (Composer: every subclass in ``composer.algorithms``)."""
    classes = (getattr(algorithms, name) for name in algorithms.__all__)
    return [c for c in classes if isinstance(c, type) and issubclass(c, Algorithm)]


def get_algs_with_marks(xfail: dict[str, str] | None = None) -> list[Any]:
    """Each algorithm class as a ``pytest.param`` with its id, an algorithm without settings marked
    xfail as in Composer; ``xfail`` adds non-strict xfail marks (Composer's own known failures,
    so that a case that passes here shows as XPASS)."""
    params = []
    for alg_cls in algorithm_classes():
        marks = []
        if _SETTINGS.get(alg_cls.__name__) is None:
            marks.append(pytest.mark.xfail(reason=f"Algorithm {alg_cls.__name__} is missing settings."))
        if xfail and alg_cls.__name__ in xfail:
            marks.append(pytest.mark.xfail(reason=xfail[alg_cls.__name__], strict=False))
        params.append(pytest.param(alg_cls, marks=marks, id=alg_cls.__name__))
    return params
