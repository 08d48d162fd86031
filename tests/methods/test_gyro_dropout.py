"""Gyro Dropout's own semantics, checked against its definition (Lee et al., 2022; Composer's layer).

At the first training call a layer draws ``sigma`` masks over its input's last dimension (each
unit kept with probability ``1 - p``); every ``iter_num = max(int(iters_per_epoch * max_epoch /
sigma), 1) * tau`` training calls it selects ``tau`` distinct ones; each call multiplies run
``k`` of the batch (``N / tau`` consecutive examples) by selected mask ``k`` and by
``1 / (1 - p)``; in evaluation it is the identity. As in Composer, there is no warm-up with plain
dropout: the masks act from the first training step. Composer's tests are re-expressed here:
``y = x * mask / (1 - p)`` entry by entry, and the mask is constant over each run of examples.
"""

from __future__ import annotations

import copy
import math
import re

import pytest
import torch
from torch import nn

import algorithms.functional as cf
from algorithms import GyroDropout
from algorithms.core import Algorithm, Event, Trainer
from algorithms.gyro_dropout.gyro_dropout import GyroDropoutLayer
from algorithms.models import lm_loss, transformer_tiny
from algorithms.surgery import NoModulesReplacedWarning, count_module_instances


def _layer(p=0.5, sigma=256, tau=16, iters_per_epoch=196, max_epoch=100, seed=0):
    """Composer's test fixture: one dropout layer through the functional form."""
    model = cf.apply_gyro_dropout(
        nn.Sequential(nn.Dropout(0.5)), iters_per_epoch=iters_per_epoch, max_epoch=max_epoch, p=p, sigma=sigma, tau=tau
    )
    layer = model[0]
    layer.generator = torch.Generator().manual_seed(seed)
    return layer.train()


def _masks_used(layer, n):
    """Each example's mask by the definition: run k = floor(i * tau / N) takes selected mask k."""
    runs = [i * layer.tau // n for i in range(n)]
    return torch.stack([layer.preselect_masks[layer.selected[k]] for k in runs])


def test_every_dropout_of_the_transformer_is_replaced():
    model = transformer_tiny(vocab_size=50)
    assert count_module_instances(model, nn.Dropout) == 3  # after the embeddings, in each feed-forward block
    params = list(model.parameters())
    cf.apply_gyro_dropout(model, iters_per_epoch=10, max_epoch=2, p=0.1, sigma=16, tau=4)
    layers = [m for m in model.modules() if isinstance(m, GyroDropoutLayer)]
    assert len(layers) == 3 and count_module_instances(model, nn.Dropout) == 0
    assert all((m.p, m.sigma, m.tau, m.iter_num) == (0.1, 16, 4, 4) for m in layers)  # int(20 / 16) * 4
    assert list(model.parameters()) == params  # dropout has no parameters: an optimizer needs no change


def test_the_output_is_the_input_times_its_mask_scaled():
    """Composer's test_gyro_dropout_masking, with the mask taken from the layer's definition."""
    layer = _layer()
    x = torch.randn(256, 512)
    y = layer(x)
    expected = x * _masks_used(layer, 256) * (1 / (1 - 0.5))
    assert torch.equal(y, expected)


def test_each_run_of_examples_shares_one_of_tau_distinct_preselected_masks():
    """Composer's test_gyro_dropout_mask_pattern: 256 examples, tau = 16, so 16 runs of 16."""
    layer = _layer()
    x = torch.ones(256, 512)
    mask = layer(x) * (1 - 0.5)
    assert layer.preselect_masks.shape == (256, 512)
    assert layer.selected.shape == (16,) and len(set(layer.selected.tolist())) == 16
    for k in range(16):
        run = mask[16 * k : 16 * (k + 1)]
        assert torch.equal(run, run[:1].expand_as(run))
        assert torch.equal(run[0], layer.preselect_masks[layer.selected[k]])


def test_the_preselected_masks_keep_each_unit_with_probability_one_minus_p():
    """256 x 512 Bernoulli(1 - p) draws: the share kept within 5 binomial standard deviations of
    1 - p (a false alarm below 6e-7; the seed is fixed)."""
    for p in (0.1, 0.5):
        layer = _layer(p=p)
        layer(torch.ones(32, 512))
        n = layer.preselect_masks.numel()
        kept = layer.preselect_masks.mean().item()
        assert set(layer.preselect_masks.unique().tolist()) <= {0.0, 1.0}
        assert abs(kept - (1 - p)) <= 5 * math.sqrt(p * (1 - p) / n)


def test_with_p_0_every_unit_is_kept_even_where_a_draw_is_exactly_0():
    """torch.rand draws from [0, 1), 0 included; a unit is kept with probability 1 - p, so with
    p = 0 always. Seed 84 of torch's CPU generator draws exactly 0.0 for mask 23, unit 2557."""
    assert torch.rand(64, 4096, generator=torch.Generator().manual_seed(84))[23, 2557] == 0
    layer = _layer(p=0.0, sigma=64, tau=64, seed=84)
    x = torch.ones(64, 4096)
    assert torch.equal(layer(x), x) and bool(layer.preselect_masks.all())


def test_a_low_precision_input_keeps_its_dtype():
    """A bfloat16 activation (a linear layer's output under autocast) gives a bfloat16 output."""
    layer = _layer(p=0.25, sigma=8, tau=2)
    x = torch.randn(4, 6).bfloat16()
    y = layer(x)
    assert y.dtype == torch.bfloat16
    assert torch.equal(y, x * _masks_used(layer, 4).bfloat16() * (1 / (1 - 0.25)))


def test_a_selection_lasts_iter_num_steps_and_the_masks_never_change():
    layer = _layer(sigma=8, tau=2, iters_per_epoch=12, max_epoch=1)  # iter_num = int(12 / 8) * 2 = 2
    assert layer.iter_num == 2
    x = torch.randn(4, 6)
    selections, preselected = [], None
    for _ in range(12):
        y = layer(x)
        assert torch.equal(y, x * _masks_used(layer, 4) * 2)
        selections.append(tuple(layer.selected.tolist()))
        preselected = layer.preselect_masks.clone() if preselected is None else preselected
        assert torch.equal(layer.preselect_masks, preselected)
    assert all(selections[i] == selections[i + 1] for i in range(0, 12, 2))  # held for 2 steps
    assert len(set(selections)) > 1 and all(len(set(s)) == 2 for s in selections)
    assert layer.training_step == 12


def test_a_run_shorter_than_sigma_changes_the_selection_every_tau_steps():
    """Composer divides by zero here (int(iters * epochs / sigma) = 0); the floor is one."""
    layer = _layer(sigma=256, tau=16, iters_per_epoch=10, max_epoch=1)
    assert layer.iter_num == 16


def test_a_batch_that_tau_does_not_divide_is_split_into_nearly_equal_runs():
    layer = _layer(sigma=8, tau=4)
    x = torch.randn(10, 5)
    y = layer(x)
    assert [i * 4 // 10 for i in range(10)] == [0, 0, 0, 1, 1, 2, 2, 2, 3, 3]
    assert torch.equal(y, x * _masks_used(layer, 10) * 2)


def test_a_sequence_input_masks_the_last_dimension_at_every_position():
    layer = _layer(p=0.25, sigma=8, tau=2)
    x = torch.randn(4, 7, 6)
    y = layer(x)
    mask = _masks_used(layer, 4)[:, None, :]
    assert layer.preselect_masks.shape == (8, 6)
    assert torch.equal(y, x * mask * (1 / (1 - 0.25)))


def test_evaluation_is_the_identity():
    layer = _layer().eval()
    x = torch.randn(8, 16)
    assert layer(x) is x
    assert layer.preselect_masks.numel() == 0  # nothing drawn outside training


def test_the_generator_repeats_the_masks_and_torchs_global_one_is_the_default():
    a, b = _layer(seed=3), _layer(seed=3)
    x = torch.randn(32, 64)
    assert torch.equal(a(x), b(x)) and not torch.equal(_layer(seed=4)(x), a(x))
    c, d = _layer(), _layer()
    c.generator = d.generator = None
    torch.manual_seed(5)
    yc = c(x)
    torch.manual_seed(5)
    assert torch.equal(d(x), yc)


def test_a_float64_model_keeps_its_dtype_and_trains():
    model = nn.Sequential(nn.Linear(6, 8), nn.Dropout(0.5), nn.Linear(8, 2)).double()
    cf.apply_gyro_dropout(model, iters_per_epoch=4, max_epoch=1, p=0.5, sigma=4, tau=2)
    out = model(torch.randn(4, 6, dtype=torch.float64))
    assert out.dtype == torch.float64  # the mask is cast to the input dtype
    out.sum().backward()
    assert model[0].weight.grad is not None


def test_the_state_dict_carries_the_masks_selection_and_step():
    layer = _layer(sigma=8, tau=2, iters_per_epoch=12, max_epoch=1)
    x = torch.randn(4, 6)
    for _ in range(3):
        layer(x)
    fresh = _layer(sigma=8, tau=2, iters_per_epoch=12, max_epoch=1, seed=99)
    fresh.load_state_dict(layer.state_dict())
    assert fresh.training_step == 3 and torch.equal(fresh.preselect_masks, layer.preselect_masks)
    fresh.generator.set_state(layer.generator.get_state())
    for _ in range(4):
        assert torch.equal(fresh(x), layer(x))


def test_before_its_first_training_call_the_layer_holds_no_masks_and_no_selection():
    """Nothing is drawn before the first training call: the state dict holds an empty
    (sigma, units) table of masks, 0 by 0, an empty selection of mask indices and step 0."""
    state = GyroDropoutLayer(iters_per_epoch=10, max_epoch=1, p=0.5, sigma=4, tau=2).state_dict()
    assert state["preselect_masks"].shape == (0, 0) and state["selected"].shape == (0,)
    assert state["selected"].dtype == torch.long and state["_extra_state"] == {"training_step": 0}


def test_a_checkpoint_from_before_the_surgery_loads_without_strict():
    """The plain model's state dict has no masks: loaded with strict=False into the changed model,
    they are reported missing and are drawn at the first training call."""
    model = nn.Sequential(nn.Linear(4, 6), nn.Dropout(0.5))
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    cf.apply_gyro_dropout(model, iters_per_epoch=10, max_epoch=1, p=0.5, sigma=4, tau=2)
    result = model.load_state_dict(saved, strict=False)
    assert result.missing_keys == ["1.preselect_masks", "1.selected", "1._extra_state"] and not result.unexpected_keys
    assert torch.equal(model[0].weight, saved["0.weight"])
    model.train()(torch.randn(4, 4))
    assert model[1].preselect_masks.shape == (4, 6)


class _Layers(Algorithm):
    def __init__(self):
        self.layers = []

    def match(self, event, state):
        return event is Event.BEFORE_FORWARD

    def apply(self, event, state, logger=None):
        self.layers = [m for m in state.model.modules() if isinstance(m, GyroDropoutLayer)]


def test_in_the_trainer_it_replaces_the_transformers_dropout_with_the_runs_length():
    g = torch.Generator().manual_seed(0)
    batches = [
        {"input_ids": torch.randint(0, 50, (8, 16), generator=g), "labels": torch.randint(0, 50, (8, 16), generator=g)}
        for _ in range(4)
    ]
    seen = _Layers()
    trainer = Trainer(
        transformer_tiny(vocab_size=50),
        batches,
        "2ep",
        algorithms=[GyroDropout(0.1, 4, 2), seen],
        loss_fn=lm_loss,
        input_key="input_ids",
        target_key="labels",
        seed=0,
        device="cpu",
    )
    trainer.fit()
    assert len(seen.layers) == 3
    # 4 batches x 2 epochs = 8 steps: iter_num = int(8 / 4) * 2 = 4; each layer ran 8 training calls
    assert all(m.iter_num == 4 and m.training_step == 8 and m.preselect_masks.shape == (4, 64) for m in seen.layers)


def test_in_the_trainer_a_run_in_batches_counts_its_batches():
    batches = [(torch.randn(4, 6), torch.randint(0, 2, (4,))) for _ in range(3)]
    model = nn.Sequential(nn.Linear(6, 8), nn.Dropout(0.5), nn.Linear(8, 2))
    trainer = Trainer(model, batches, "6ba", algorithms=[GyroDropout(0.5, 2, 2)], seed=0, device="cpu")
    trainer.fit()
    assert trainer.state.model[1].iter_num == int(6 / 2) * 2
    assert trainer.method_log.records["GyroDropout"]["activity"] == {"modules_replaced": 1}
    assert trainer.method_log.acted("GyroDropout")


def test_with_p_zero_every_mask_keeps_every_unit_and_it_did_not_act():
    batches = [(torch.randn(4, 6), torch.randint(0, 2, (4,)))]
    model = nn.Sequential(nn.Linear(6, 8), nn.Dropout(0.5), nn.Linear(8, 2))
    trainer = Trainer(model, batches, "1ba", algorithms=[GyroDropout(0.0, 2, 2)], seed=0, device="cpu")
    trainer.fit()
    assert trainer.method_log.records["GyroDropout"]["activity"] == {"modules_replaced": 1}
    assert not trainer.method_log.acted("GyroDropout")


def test_in_the_trainer_a_run_of_one_batch_selects_every_tau_steps():
    """One step in all: iter_num = max(int(1 * 1 / sigma), 1) * tau, one selection per step at sigma = tau = 1."""
    batches = [(torch.randn(4, 6), torch.randint(0, 2, (4,)))]
    model = nn.Sequential(nn.Linear(6, 8), nn.Dropout(0.5), nn.Linear(8, 2))
    trainer = Trainer(model, batches, "1ba", algorithms=[GyroDropout(0.5, 1, 1)], seed=0, device="cpu")
    assert trainer.state.model[1].iter_num == 1


def test_the_defaults_are_composers():
    """p = 0.5, sigma = 256, tau = 16, for the functional form and the class."""
    layer = cf.apply_gyro_dropout(nn.Sequential(nn.Dropout(0.1)), iters_per_epoch=10, max_epoch=1)[0]
    assert (layer.p, layer.sigma, layer.tau) == (0.5, 256, 16)
    batches = [(torch.randn(16, 6), torch.randint(0, 2, (16,)))]
    model = nn.Sequential(nn.Linear(6, 8), nn.Dropout(0.1), nn.Linear(8, 2))
    trainer = Trainer(model, batches, "1ba", algorithms=[GyroDropout()], seed=0, device="cpu")
    layer = trainer.state.model[1]
    assert (layer.p, layer.sigma, layer.tau) == (0.5, 256, 16)


def test_a_run_in_samples_is_refused():
    batches = [(torch.randn(4, 6), torch.randint(0, 2, (4,)))]
    model = nn.Sequential(nn.Linear(6, 8), nn.Dropout(0.5), nn.Linear(8, 2))
    message = (
        "max_duration=8sp: GyroDropout needs the run's number of steps, so give it in epochs of a data loader "
        "with a length, or in batches"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        Trainer(model, batches, "8sp", algorithms=[GyroDropout(0.5, 2, 2)], seed=0, device="cpu")


def test_nothing_to_replace_warns():
    message = "GyroDropout: no module of the model matched (Dropout); the model is unchanged"
    with pytest.warns(NoModulesReplacedWarning, match=f"^{re.escape(message)}$"):
        cf.apply_gyro_dropout(nn.Sequential(nn.Linear(2, 2)), 10, 1, 0.5, 4, 2)


def test_p_0_is_allowed():
    GyroDropout(p=0, sigma=4, tau=2)
    assert cf.apply_gyro_dropout(nn.Sequential(nn.Dropout()), 10, 1, p=0.0, sigma=4, tau=2)[0].p == 0.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"p": 1.0}, "p=1.0: must be a number in [0, 1)"),
        ({"p": -0.1}, "p=-0.1: must be a number in [0, 1)"),
        ({"p": True}, "p=True: must be a number in [0, 1)"),
        ({"p": "0.5"}, "p='0.5': must be a number in [0, 1)"),
        ({"sigma": 0}, "sigma=0: must be an integer in [1, inf)"),
        ({"tau": 0}, "tau=0: must be an integer in [1, inf)"),
        ({"sigma": 2.5}, "sigma=2.5: must be an integer in [1, inf)"),
        (
            {"tau": 9, "sigma": 8},
            "tau=9, sigma=8: each batch trains tau distinct masks of the sigma pre-selected ones, so tau <= sigma",
        ),
    ],
)
def test_bad_hyperparameters_fail_with_a_clear_error(kwargs, message):
    arguments = {"p": 0.5, "sigma": 8, "tau": 2, **kwargs}
    whole = f"^{re.escape(message)}$"
    with pytest.raises(ValueError, match=whole):
        GyroDropout(**arguments)
    model = nn.Sequential(nn.Dropout())
    with pytest.raises(ValueError, match=whole):
        cf.apply_gyro_dropout(model, 10, 1, **arguments)
    assert type(model[0]) is nn.Dropout


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"iters_per_epoch": 0}, "iters_per_epoch=0: must be an integer in [1, inf)"),
        ({"max_epoch": -1}, "max_epoch=-1: must be an integer in [1, inf)"),
    ],
)
def test_bad_run_lengths_fail_with_a_clear_error(kwargs, message):
    """Refused before the model is looked at (a model without dropout too), and by the layer itself."""
    arguments = {"iters_per_epoch": 10, "max_epoch": 1, "p": 0.5, "sigma": 4, "tau": 2, **kwargs}
    whole = f"^{re.escape(message)}$"
    for model in (nn.Sequential(nn.Dropout()), nn.Sequential(nn.Linear(2, 2))):
        with pytest.raises(ValueError, match=whole):
            cf.apply_gyro_dropout(model, **arguments)
    with pytest.raises(ValueError, match=whole):
        GyroDropoutLayer(**arguments)


def test_with_sam_both_passes_of_a_step_train_the_same_masks():
    """The class moves each layer's schedule once per optimizer step: SAM(rho=0), whose second pass
    runs the model again, ends where the run without SAM does (counting forward calls, the second
    pass moved the schedule and drew new selections)."""
    from algorithms import SAM

    def run(algorithms):
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Dropout(0.5), torch.nn.Linear(16, 4)
        )
        g = torch.Generator().manual_seed(1)
        batches = [(torch.randn(8, 8, generator=g), torch.randint(0, 4, (8,), generator=g)) for _ in range(6)]
        trainer = Trainer(model, batches, "1ep", algorithms=algorithms, seed=0, device="cpu")
        trainer.fit()
        layer = next(m for m in trainer.state.model.modules() if isinstance(m, GyroDropoutLayer))
        return [p.detach() for p in trainer.state.model.parameters()], layer.training_step

    plain, plain_steps = run([GyroDropout(p=0.5, sigma=4, tau=2)])
    with_sam, sam_steps = run([GyroDropout(p=0.5, sigma=4, tau=2), SAM(rho=0.0)])
    assert plain_steps == sam_steps == 6
    for a, b in zip(plain, with_sam, strict=True):
        torch.testing.assert_close(a, b)


def test_the_class_draws_from_its_own_generator_not_torchs_global_one():
    """Its masks and selections come from the algorithm's generator, so the model's other draws
    (dropout elsewhere, sampling) are what they would be without it."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Dropout(0.5), torch.nn.Linear(16, 4))
    batches = [(torch.randn(8, 8), torch.randint(0, 4, (8,))) for _ in range(3)]

    class GlobalDraw(Algorithm):
        def __init__(self):
            self.seen = []

        def match(self, event, state):
            return event is Event.AFTER_FORWARD

        def apply(self, event, state, logger=None):
            self.seen.append(torch.get_rng_state())

    def run(algorithms):
        spy = GlobalDraw()
        Trainer(copy.deepcopy(model), batches, "3ba", algorithms=[*algorithms, spy], seed=0, device="cpu").fit()
        return spy.seen

    without = run([])  # the plain Dropout draws from the global generator; gyro's layers do not
    with_gyro = run([GyroDropout(p=0.5, sigma=4, tau=2)])
    assert all(torch.equal(with_gyro[0], s) for s in with_gyro)  # nothing drew from the global generator
    assert not torch.equal(without[0], without[-1])
