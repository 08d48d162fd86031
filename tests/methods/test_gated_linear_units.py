"""Gated Linear Units, checked against their definition (Shazeer, 2020): each feed-forward block
``down(act(up(x)))`` becomes ``down(act(gate(x)) * up(x))``, at the hidden width that keeps the
block's parameter count (the paper's 3072 -> 2048 for T5's bias-free layers).

Composer's tests of ``apply_gated_linear_units`` assert that the gated block computes
``wo(act(x Wg) * (x Wn))`` from its own weights (ReLU and GELU) and that after surgery no original
block is left and gated ones are; both are re-expressed here on ``transformer_tiny``.
"""

from __future__ import annotations

import functools
import re

import pytest
import torch
import torch.nn.functional as F
from trainer_support import Observed

import algorithms.functional as cf
from algorithms import GatedLinearUnits
from algorithms.core import Trainer
from algorithms.gated_linear_units import GLUFeedForward, glu_hidden_width
from algorithms.models import lm_loss, transformer_small, transformer_tiny
from algorithms.models.transformer import FeedForward
from algorithms.surgery import NoModulesReplacedWarning

VOCAB = 50


def _model(seed=0, builder=transformer_tiny):
    torch.manual_seed(seed)
    return builder(VOCAB)


def _params(module):
    return sum(p.numel() for p in module.parameters())


def _lm_batches(n=2, bs=4, length=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        ids = torch.randint(0, VOCAB, (bs, length + 1), generator=g)
        out.append({"input_ids": ids[:, :-1], "labels": ids[:, 1:]})
    return out


@pytest.mark.parametrize("act_fn", [None, F.relu, F.gelu, F.silu, torch.nn.Tanh()])
@pytest.mark.parametrize(("gated_layer_bias", "non_gated_layer_bias"), [(False, False), (True, False), (True, True)])
def test_the_block_computes_the_glu_formula_from_its_own_weights(act_fn, gated_layer_bias, non_gated_layer_bias):
    model = _model()
    cf.apply_gated_linear_units(
        model, act_fn=act_fn, gated_layer_bias=gated_layer_bias, non_gated_layer_bias=non_gated_layer_bias
    )
    block = model.blocks[0].ffn.eval()
    with torch.no_grad():  # give every bias a value, so a bias left out of the formula would show
        for p in block.parameters():
            if p.ndim == 1:
                p.normal_()
    x = torch.randn(3, 7, 64, generator=torch.Generator().manual_seed(1))
    act = F.gelu if act_fn is None else act_fn
    gate = x @ block.gate.weight.T + (block.gate.bias if gated_layer_bias else 0)
    up = x @ block.up.weight.T + (block.up.bias if non_gated_layer_bias else 0)
    expected = (act(gate) * up) @ block.down.weight.T + block.down.bias
    torch.testing.assert_close(block(x), expected)
    assert (block.gate.bias is not None) == gated_layer_bias and (block.up.bias is not None) == non_gated_layer_bias


def test_the_parameter_count_is_kept():
    model = _model()
    before, total = [_params(b.ffn) for b in model.blocks], _params(model)
    cf.apply_gated_linear_units(model)
    assert [_params(b.ffn) for b in model.blocks] == before and _params(model) == total  # exactly, at d = 64
    # d = 128, f = 512 (transformer_small): 131712 parameters; widths 342 and 343 hold 131456 and
    # 131840, the closest a whole width gets (within half of the 3 * 128 a unit costs)
    model = _model(builder=transformer_small)
    before = _params(model.blocks[0].ffn)
    cf.apply_gated_linear_units(model)
    assert model.blocks[0].ffn.up.out_features == 343 and _params(model.blocks[0].ffn) - before == 128
    # d = 64, f = 256: 2*64*256 + 256 + 64 = 33088 = 3*64*172 + 64
    assert _model().blocks[0].ffn.up.out_features == 256
    assert glu_hidden_width(_model().blocks[0].ffn) == 172


def _feed_forward(d, f, up_bias, down_bias):
    block = FeedForward(d, f)
    block.up = torch.nn.Linear(d, f, bias=up_bias)
    block.down = torch.nn.Linear(f, d, bias=down_bias)
    return block


@pytest.mark.parametrize(("up_bias", "down_bias"), [(True, True), (False, False), (True, False), (False, True)])
@pytest.mark.parametrize(("gated_layer_bias", "non_gated_layer_bias"), [(False, False), (True, False), (True, True)])
def test_the_width_gives_the_count_closest_to_the_block_s(up_bias, down_bias, gated_layer_bias, non_gated_layer_bias):
    """Every width from 1 up is tried: none gives a count closer to the block's than the one chosen.
    The GLU block holds 3 d h weights, h per biased gate or up, and d for down's bias where the
    block's down has one."""
    for d in (1, 2, 3, 5, 8):
        for f in range(1, 13):
            block = _feed_forward(d, f, up_bias, down_bias)
            target = _params(block)

            def count(h, d=d):
                return 3 * d * h + h * (gated_layer_bias + non_gated_layer_bias) + (d if down_bias else 0)

            width = glu_hidden_width(block, gated_layer_bias, non_gated_layer_bias)
            best = min(abs(count(h) - target) for h in range(1, 4 * f + 2))
            assert width >= 1 and abs(count(width) - target) == best, (d, f, width)


def test_the_paper_s_width_for_bias_free_layers():
    """Shazeer (2020) reduces T5's d_ff = 3072 to 2048 at d_model = 768: two thirds, the same count."""
    block = FeedForward(768, 3072)
    block.up = torch.nn.Linear(768, 3072, bias=False)
    block.down = torch.nn.Linear(3072, 768, bias=False)
    assert glu_hidden_width(block) == 2048
    glu = torch.nn.Sequential(block)
    cf.apply_gated_linear_units(glu)
    assert _params(glu) == 2 * 768 * 3072 == 3 * 768 * 2048 and glu[0].down.bias is None


def test_with_biases_the_count_is_the_closest_a_whole_width_allows():
    model = _model()
    original = _params(model.blocks[0].ffn)
    cf.apply_gated_linear_units(model, gated_layer_bias=True, non_gated_layer_bias=True)
    glu = model.blocks[0].ffn
    per_unit = 3 * 64 + 2
    assert abs(_params(glu) - original) <= per_unit / 2
    assert _params(glu) == 3 * 64 * glu.up.out_features + 2 * glu.up.out_features + 64


def test_the_original_weights_are_loaded_into_up_and_down():
    """Composer builds all three layers fresh; here up and down keep the original's first rows and
    columns (the model's own initialisation, GPT-2's), and gate is drawn with the original up's spread."""
    model = _model()
    with torch.no_grad():  # GPT-2's initialisation zeroes the biases: give them values to copy
        for b in model.blocks:
            b.ffn.up.bias.normal_()
            b.ffn.down.bias.normal_()
    old = [
        (
            b.ffn.up.weight.detach().clone(),
            b.ffn.up.bias.detach().clone(),
            b.ffn.down.weight.detach().clone(),
            b.ffn.down.bias.detach().clone(),
        )
        for b in model.blocks
    ]
    cf.apply_gated_linear_units(model, non_gated_layer_bias=True, gated_layer_bias=True)
    for block, (up_w, up_b, down_w, down_b) in zip(model.blocks, old, strict=True):
        glu, width = block.ffn, 170  # round((33088 - 64) / (3 * 64 + 2)): the two biases cost two units
        assert glu.up.out_features == width
        assert torch.equal(glu.up.weight, up_w[:width]) and torch.equal(glu.up.bias, up_b[:width])
        assert torch.equal(glu.down.weight, down_w[:, :width]) and torch.equal(glu.down.bias, down_b)
        assert torch.equal(glu.gate.bias, torch.zeros(width))
        assert abs(float(glu.gate.weight.detach().std()) / float(up_w.std()) - 1) < 0.05  # 11,000 draws: 1 % spread
        assert abs(float(glu.gate.weight.detach().mean())) < 0.002


def test_the_gate_is_drawn_from_torch_s_global_generator():
    def gate(seed):
        model = _model()
        torch.manual_seed(seed)
        cf.apply_gated_linear_units(model)
        return model.blocks[0].ffn.gate.weight.detach()

    assert torch.equal(gate(3), gate(3)) and not torch.equal(gate(3), gate(4))


def test_every_feed_forward_block_is_replaced_and_nothing_else():
    model = _model()
    names = [n for n, m in model.named_modules() if not isinstance(m, FeedForward) and "ffn" not in n]
    replaced = cf.apply_gated_linear_units(model)
    assert sorted(replaced) == ["blocks.0.ffn", "blocks.1.ffn"]
    assert not any(isinstance(m, FeedForward) for m in model.modules())
    assert sum(isinstance(m, GLUFeedForward) for m in model.modules()) == 2
    assert [n for n, m in model.named_modules() if "ffn" not in n] == names
    assert len(cf.apply_gated_linear_units(_model(builder=transformer_small))) == 4


def test_a_block_built_directly_has_the_documented_defaults():
    """No dropout, no bias on gate and up, a bias on down; a plain function shows in the repr."""
    torch.manual_seed(0)
    block = GLUFeedForward(8, 12, F.silu).train()
    assert block.gate.bias is None and block.up.bias is None and block.down.bias is not None
    x = torch.randn(4, 8)
    assert block.drop.p == 0.0 and torch.equal(block(x), block(x))
    assert isinstance(block.act, torch.nn.Module) and "(act): _Activation(silu)" in repr(block)
    leaky = functools.partial(F.leaky_relu, negative_slope=0.2)  # no __qualname__: its repr is shown
    assert f"(act): _Activation({leaky!r})" in repr(GLUFeedForward(8, 12, leaky))
    torch.testing.assert_close(GLUFeedForward(8, 12, leaky).act(x), F.leaky_relu(x, 0.2))


def test_an_activation_module_is_copied_into_each_block():
    """A learnable activation given as act_fn: each block learns its own copy, and the caller's
    module is not trained."""
    act = torch.nn.PReLU()
    model = _model()
    cf.apply_gated_linear_units(model, act_fn=act)
    first, second = model.blocks[0].ffn.act, model.blocks[1].ffn.act
    assert isinstance(first, torch.nn.PReLU) and first.weight is not second.weight
    assert all(p is not act.weight for p in model.parameters())
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    batch = _lm_batches(1)[0]
    lm_loss(model(batch["input_ids"]), batch["labels"]).backward()
    optimizer.step()
    assert torch.equal(act.weight, torch.full((1,), 0.25))  # PReLU's initial slope, untouched
    assert not torch.equal(first.weight, act.weight)


def test_a_block_s_own_learnable_activation_is_copied_into_its_gated_block():
    """With act_fn=None the gated block keeps its block's activation as a copy: a learnable one is
    trained in the new block, and the replaced block (which the caller may still hold) is not."""
    model = _model()
    old = model.blocks[0].ffn
    old.act = torch.nn.PReLU()
    cf.apply_gated_linear_units(model)
    new = model.blocks[0].ffn.act
    assert isinstance(new, torch.nn.PReLU) and all(p is not old.act.weight for p in model.parameters())
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    batch = _lm_batches(1)[0]
    lm_loss(model(batch["input_ids"]), batch["labels"]).backward()
    optimizer.step()
    assert torch.equal(old.act.weight, torch.full((1,), 0.25))  # PReLU's initial slope, untouched
    assert not torch.equal(new.weight, old.act.weight)


def test_an_activation_function_is_called_as_given_in_every_block():
    """act_fn that is not a module is used as it is, not copied: a callable object sees the call
    of every gated block."""

    class Counting:
        def __init__(self):
            self.calls = 0

        def __call__(self, x):
            self.calls += 1
            return F.relu(x)

    act = Counting()
    model = _model()
    cf.apply_gated_linear_units(model, act_fn=act)
    model(_lm_batches(1)[0]["input_ids"])
    assert act.calls == len(model.blocks) == 2


def test_a_biased_up_is_zero_where_the_block_had_no_bias():
    block = _feed_forward(8, 12, up_bias=False, down_bias=True)
    model = torch.nn.Sequential(block)
    cf.apply_gated_linear_units(model, non_gated_layer_bias=True)
    assert torch.equal(model[0].up.bias, torch.zeros(model[0].up.out_features))


def test_the_block_s_own_activation_and_dropout_are_kept():
    model = _model()
    model.blocks[1].ffn.act = torch.nn.ReLU()
    cf.apply_gated_linear_units(model)
    assert isinstance(model.blocks[0].ffn.act, torch.nn.GELU) and isinstance(model.blocks[1].ffn.act, torch.nn.ReLU)
    assert model.blocks[0].ffn.drop.p == 0.1
    cf.apply_gated_linear_units(model2 := _model(), act_fn=F.silu)
    x = torch.randn(2, 64)
    torch.testing.assert_close(model2.blocks[0].ffn.act(x), F.silu(x))


def test_forward_and_backward_after_surgery():
    model = _model()
    cf.apply_gated_linear_units(model)
    batch = _lm_batches(1)[0]
    loss = lm_loss(model(batch["input_ids"]), batch["labels"])
    loss.backward()
    for block in model.blocks:
        assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in block.ffn.parameters())


def test_an_optimizer_built_before_surgery_trains_the_new_blocks():
    model = _model()
    old = [p for b in model.blocks for p in b.ffn.parameters()]  # kept alive, so their ids stay theirs
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    cf.apply_gated_linear_units(model, optimizer)
    held = {id(p) for g in optimizer.param_groups for p in g["params"]}
    assert held == {id(p) for p in model.parameters()} and not held & {id(p) for p in old}
    gate = model.blocks[0].ffn.gate.weight.detach().clone()
    batch = _lm_batches(1)[0]
    lm_loss(model(batch["input_ids"]), batch["labels"]).backward()
    optimizer.step()
    assert not torch.equal(model.blocks[0].ffn.gate.weight, gate)


def test_the_model_s_dtype_is_kept():
    model = _model().double()
    cf.apply_gated_linear_units(model)
    assert all(p.dtype == torch.float64 for p in model.parameters())
    assert model(torch.randint(0, VOCAB, (2, 5))).dtype == torch.float64


def test_in_the_trainer_the_model_trained_has_gated_blocks():
    seen = Observed(input_key="input_ids", target_key="labels")
    trainer = Trainer(
        _model(),
        _lm_batches(2),
        "2ba",
        loss_fn=lm_loss,
        input_key="input_ids",
        target_key="labels",
        algorithms=[GatedLinearUnits(), seen],
        seed=0,
        device="cpu",
    )
    model = trainer.state.model
    assert sum(isinstance(m, GLUFeedForward) for m in model.modules()) == 2
    assert all(b.ffn.gate.bias is None and b.ffn.up.bias is None for b in model.blocks)  # the defaults: no biases
    held = {id(p) for p in trainer.state.optimizers[0].param_groups[0]["params"]}
    assert held == {id(p) for p in model.parameters()}
    before = model.blocks[0].ffn.gate.weight.detach().clone()
    trainer.fit()
    assert len(seen.losses) == 2 and all(torch.isfinite(loss) for loss in seen.losses)
    assert not torch.equal(model.blocks[0].ffn.gate.weight, before)
    for out, batch, loss in zip(seen.outputs, _lm_batches(2), seen.losses, strict=True):
        torch.testing.assert_close(loss, lm_loss(out, batch["labels"]))


@pytest.mark.parametrize(("gated_layer_bias", "non_gated_layer_bias"), [(True, False), (False, True)])
def test_the_class_passes_its_hyperparameters_on(gated_layer_bias, non_gated_layer_bias):
    algo = GatedLinearUnits(act_fn=F.relu, gated_layer_bias=gated_layer_bias, non_gated_layer_bias=non_gated_layer_bias)
    trainer = Trainer(
        _model(),
        _lm_batches(1),
        "1ba",
        loss_fn=lm_loss,
        input_key="input_ids",
        target_key="labels",
        algorithms=[algo],
        seed=0,
        device="cpu",
    )
    block = trainer.state.model.blocks[0].ffn
    assert (block.gate.bias is not None) == gated_layer_bias and (block.up.bias is not None) == non_gated_layer_bias
    x = torch.randn(4, 64)
    torch.testing.assert_close(block.act(x), F.relu(x))


def test_in_the_trainer_an_optimizer_given_to_it_trains_the_gated_blocks():
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    trainer = Trainer(
        model,
        _lm_batches(1),
        "1ba",
        loss_fn=lm_loss,
        input_key="input_ids",
        target_key="labels",
        optimizer=optimizer,
        algorithms=[GatedLinearUnits()],
        seed=0,
        device="cpu",
    )
    held = {id(p) for g in optimizer.param_groups for p in g["params"]}
    assert held == {id(p) for p in trainer.state.model.parameters()}
    gate = trainer.state.model.blocks[0].ffn.gate.weight.detach().clone()
    trainer.fit()
    assert not torch.equal(trainer.state.model.blocks[0].ffn.gate.weight, gate)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"act_fn": "gelu"},
            "act_fn='gelu': must be None (keep each block's activation) or a function of a tensor, "
            "e.g. torch.nn.functional.silu",
        ),
        ({"gated_layer_bias": 1}, "gated_layer_bias=1: must be True or False"),
        ({"non_gated_layer_bias": "yes"}, "non_gated_layer_bias='yes': must be True or False"),
    ],
)
def test_bad_arguments_fail_naming_the_argument(kwargs, message):
    whole = f"^{re.escape(message)}$"
    with pytest.raises(ValueError, match=whole):
        GatedLinearUnits(**kwargs)
    model = _model()
    with pytest.raises(ValueError, match=whole):
        cf.apply_gated_linear_units(model, **kwargs)
    assert sum(isinstance(m, FeedForward) for m in model.modules()) == 2  # nothing changed


def test_a_model_without_feed_forward_blocks_warns_and_is_unchanged():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.GELU(), torch.nn.Linear(4, 2))
    message = (
        "apply_gated_linear_units: Sequential holds none of the module classes it knows (FeedForward, "
        "BertIntermediate, BertOutput, RobertaIntermediate, RobertaOutput); the model is unchanged. Register "
        "your own class with algorithms.gated_linear_units.registry.register"
    )
    with pytest.warns(NoModulesReplacedWarning, match=f"^{re.escape(message)}"):
        assert cf.apply_gated_linear_units(model) == {}
    model = _model()
    cf.apply_gated_linear_units(model)
    with pytest.warns(NoModulesReplacedWarning):  # applied twice: the gated blocks are not matched
        cf.apply_gated_linear_units(model)


@pytest.mark.cuda
def test_on_cuda_the_blocks_stay_on_the_device():
    model = _model().cuda()
    cf.apply_gated_linear_units(model)
    assert all(p.is_cuda for p in model.parameters())
    with torch.autocast("cuda", dtype=torch.bfloat16):
        assert model(torch.randint(0, VOCAB, (2, 8), device="cuda")).is_cuda


def test_a_model_in_eval_mode_gets_blocks_in_eval_mode():
    model = _model().eval()
    cf.apply_gated_linear_units(model)
    assert not any(m.training for m in model.modules())
    x = torch.randint(0, VOCAB, (2, 8))
    assert torch.equal(model(x), model(x))  # no dropout
