"""Composer's tests of SAM (``tests/algorithms/test_sam.py``), re-expressed with this library's
imports. ``SimpleModel`` and ``random_classification_batches`` are the stand-ins of
:mod:`composer_support`; Composer's ``soft_cross_entropy`` of class indices is
``F.cross_entropy``, and its ``CosineAnnealingWithWarmupScheduler(alpha_f=0.1, t_warmup='0.01dur')``
is the same schedule as a ``LambdaLR`` over the run's batches. Composer runs the parameter-group
tests on a GPU only, on one and on two processes (FSDP); the one-process case runs here on the CPU
and on CUDA, and the two-process case is listed in ``differences.EXCLUDED``."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from composer_support import SimpleModel, random_classification_batches

from algorithms import SAM
from algorithms.core import Trainer
from algorithms.sam import SAMOptimizer


def _cosine_with_warmup(optimizer, total_batches: int, t_warmup: float = 0.01, alpha_f: float = 0.1):
    """Composer's ``CosineAnnealingWithWarmupScheduler``: linear warm-up for ``t_warmup`` of the run,
    then cosine annealing from 1 to ``alpha_f``."""
    warmup = t_warmup * total_batches

    def factor(step: int) -> float:
        if step < warmup:
            return step / warmup
        frac = (step - warmup) / max(total_batches - warmup, 1)
        return alpha_f + (1 - alpha_f) * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0)))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


class TestSAMLossDict:
    @pytest.fixture
    def config(self):
        return {
            "algorithms": [SAM()],
            "model": SimpleModel(),
            "train_dataloader": random_classification_batches(size=16, batch_size=4),
            "max_duration": "2ep",
            "precision": "fp32",
            "device": "cpu",
        }

    @pytest.mark.filterwarnings("ignore::UserWarning")
    def test_sam_dict_loss(self, config):
        """Composer's ``test_sam_dict_loss``: a loss that returns a dict of two terms trains with SAM."""

        def dict_loss(outputs, targets, *args, **kwargs):
            return {
                "cross_entropy1": 0.25 * F.cross_entropy(outputs, targets, *args, **kwargs),
                "cross_entropy2": 0.75 * F.cross_entropy(outputs, targets, *args, **kwargs),
            }

        trainer = Trainer(**config, loss_fn=dict_loss)
        trainer.fit()


@pytest.mark.parametrize("device", [pytest.param("cpu"), pytest.param("cuda", marks=pytest.mark.cuda)])
@pytest.mark.filterwarnings("ignore::UserWarning")
class TestSAMParamGroups:
    @pytest.fixture
    def config(self, device):
        model = SimpleModel()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        train_dataloader = random_classification_batches(size=16, batch_size=4)
        return {
            "algorithms": [SAM()],
            "model": model,
            "optimizer": optimizer,
            "train_dataloader": train_dataloader,
            "max_duration": "2ep",
            "schedulers": [_cosine_with_warmup(optimizer, total_batches=2 * len(train_dataloader))],
            "precision": "amp_bf16",
            "device": device,
        }

    def test_param_groups_id_matching(self, config):
        """Composer's ``test_param_groups_id_matching``: right after the Trainer is built, its
        optimizer is the SAM optimizer, which references the base optimizer's groups."""
        trainer = Trainer(**config)
        sam_optimizer: SAMOptimizer = trainer.state.optimizers[0]
        base_optimizer = sam_optimizer.base_optimizer
        # Both SAMOptimizer and base_optimizer have to reference the same param groups
        assert id(sam_optimizer.param_groups[0]) == id(base_optimizer.param_groups[0])

    def test_params_value_close_after_updating(self, config):
        """Composer's ``test_params_value_close_after_updating``: after training, the two agree on
        the scheduled learning rate."""
        trainer = Trainer(**config)
        trainer.fit()
        sam_optimizer: SAMOptimizer = trainer.state.optimizers[0]
        base_optimizer = sam_optimizer.base_optimizer
        assert math.isclose(sam_optimizer.param_groups[0]["lr"], base_optimizer.param_groups[0]["lr"])
