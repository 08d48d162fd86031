"""Composer's ``tests/algorithms/test_algorithms_train.py``: every algorithm trains two batches
with its settings (:mod:`algorithm_settings`), then one more. Composer runs it on a GPU
(``pytest.mark.gpu``); it runs here on whatever device the Trainer picks. Composer's second
``fit(duration='1ba')`` is the same Trainer's ``fit()`` with ``max_duration`` one batch longer.
Composer expects the second fit to fail for Layer Freezing and Gyro Dropout (``pytest.xfail``
after the first); those are non-strict xfails here, so a pass shows as XPASS."""

from __future__ import annotations

import pytest
from algorithm_settings import (
    get_alg_dataloader,
    get_alg_kwargs,
    get_alg_model,
    get_algs_with_marks,
    get_trainer_kwargs,
)

from algorithms.core import Algorithm, Trainer
from algorithms.core.time import Duration

SECOND_FIT_FAILS_IN_COMPOSER = {
    "LayerFreezing": "Composer: layer freezing is incompatible with a second call to .fit(), all layers frozen",
    "GyroDropout": "Composer: GyroDropout applies at FIT_START, so it is not compatible with multiple calls to fit",
}


@pytest.mark.parametrize("alg_cls", get_algs_with_marks(SECOND_FIT_FAILS_IN_COMPOSER))
def test_algorithm_trains(alg_cls: type[Algorithm]):
    trainer = Trainer(
        model=get_alg_model(alg_cls),
        train_dataloader=get_alg_dataloader(alg_cls),
        max_duration="2ba",
        algorithms=[alg_cls(**get_alg_kwargs(alg_cls))],
        seed=0,
        **get_trainer_kwargs(alg_cls),
    )
    trainer.fit()
    # fit again for another batch
    trainer.state.max_duration = Duration.parse("3ba")
    trainer.fit()
    assert trainer.state.timestamp.batch == 3  # the stand-in for fit(duration='1ba') trained one more batch
