"""Stochastic Depth's own semantics, checked against its definition (Huang et al., 2016).

Block ``l`` of ``L`` drops its residual branch with probability ``drop_rate * l / L`` (linear)
or ``drop_rate`` (uniform). In training a dropped block returns its shortcut only (the input
itself, or ReLU of the projection where the block has one); in evaluation every branch runs,
scaled by ``1 - drop rate``. ``"sample"`` drops the branch per example. Composer's tests of the
same form are re-expressed here: every target block is replaced; a block with drop rate 1 returns
its input object, one with rate 0 does not; a sample block with rate 1 returns its (ReLU'd) input;
the warm-up scales every block's rate by the elapsed fraction; bad arguments are refused.
"""

from __future__ import annotations

import math
import re
import warnings

import pytest
import torch
from torch import nn

import algorithms.functional as cf
from algorithms import StochasticDepth
from algorithms.core import Algorithm, Event, Trainer
from algorithms.models import resnet20, resnet56
from algorithms.models.resnet import BasicBlock, Bottleneck, ResNet
from algorithms.stochastic_depth import registry
from algorithms.stochastic_depth.stochastic_depth import (
    StochasticBasicBlock,
    StochasticBottleneck,
    block_drop_rates,
)
from algorithms.surgery import NoModulesReplacedWarning, count_module_instances


def _expected_rates(num_blocks, drop_rate, distribution):
    """The paper's rule, written out: block l = 1 .. L drops with drop_rate * l / L."""
    if distribution == "uniform":
        return [drop_rate] * num_blocks
    return [drop_rate * depth / num_blocks for depth in range(1, num_blocks + 1)]


def _blocks(model):
    return [m for m in model.modules() if isinstance(m, (StochasticBasicBlock, StochasticBottleneck))]


def _five_sigma(frequency, p, n):
    """A binomial frequency within 5 standard deviations of p: a false alarm below 6e-7 per
    check, and the seeds are fixed, so the test cannot flake."""
    return abs(frequency - p) <= 5 * math.sqrt(p * (1 - p) / n) + 1e-12


@pytest.mark.parametrize("distribution", ["linear", "uniform"])
@pytest.mark.parametrize(("builder", "count"), [(resnet20, 9), (resnet56, 27)])
def test_every_basic_block_is_replaced_with_its_rate(builder, count, distribution):
    model = builder()
    assert count_module_instances(model, BasicBlock) == count
    out = cf.apply_stochastic_depth(model, "BasicBlock", drop_rate=0.3, drop_distribution=distribution)
    assert out is model
    blocks = _blocks(model)
    assert len(blocks) == count and all(type(b) is StochasticBasicBlock for b in blocks)
    assert count_module_instances(model, BasicBlock) == count  # a stochastic block is still a BasicBlock
    assert [b.drop_rate for b in blocks] == pytest.approx(_expected_rates(count, 0.3, distribution))
    assert block_drop_rates(count, 0.3, distribution) == pytest.approx(_expected_rates(count, 0.3, distribution))


def test_bottlenecks_by_either_name():
    for name in ("Bottleneck", "ResNetBottleneck"):
        model = ResNet(Bottleneck, [2, 1], [4, 8], num_classes=3, stem="cifar")
        cf.apply_stochastic_depth(model, name, drop_rate=0.5)
        assert [type(b) for b in _blocks(model)] == [StochasticBottleneck] * 3
        assert [b.drop_rate for b in _blocks(model)] == pytest.approx([0.5 / 3, 1 / 3, 0.5])


def test_blocks_made_stochastic_before_are_left_and_not_counted():
    """Applied again to a model some of whose blocks are stochastic already, the rule counts
    only the new blocks: here 2, so they drop with 0.3 * 1/2 and 0.3 * 2/2."""
    model = nn.Sequential(nn.Sequential(BasicBlock(4, 4)), BasicBlock(4, 4), BasicBlock(4, 4))
    cf.apply_stochastic_depth(model[0], "BasicBlock", drop_rate=0.9)
    cf.apply_stochastic_depth(model, "BasicBlock", drop_rate=0.3)
    assert [b.drop_rate for b in _blocks(model)] == pytest.approx([0.9, 0.15, 0.3])


def test_the_stochastic_block_leaves_the_original_block_as_it_was():
    """The replacement holds the block's submodules, but changing which submodules it holds
    leaves the original block's registry alone."""
    block = BasicBlock(4, 4)
    conv1 = block.conv1
    stochastic = cf.apply_stochastic_depth(nn.Sequential(block), "BasicBlock", drop_rate=0.5)[0]
    assert stochastic.conv1 is conv1
    stochastic.conv1 = nn.Identity()
    stochastic.register_buffer("extra", torch.zeros(1))
    assert block.conv1 is conv1 and "extra" not in dict(block.named_buffers())


def test_the_blocks_keep_their_parameters_names_and_outputs_at_rate_zero():
    """The replacement shares the block's tensors (an optimizer built before still trains them)
    and its state dict keys; with drop rate 0 the model computes what it did, in both modes."""
    torch.manual_seed(0)
    model = resnet20()
    reference = resnet20()
    reference.load_state_dict(model.state_dict())
    params = {name: p for name, p in model.named_parameters()}
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    cf.apply_stochastic_depth(model, "BasicBlock", drop_rate=0.0)
    assert {name: p for name, p in model.named_parameters()} == params
    assert model.state_dict().keys() == reference.state_dict().keys()
    x = torch.randn(4, 3, 16, 16)
    for mode in (True, False):
        model.train(mode), reference.train(mode)
        torch.testing.assert_close(model(x), reference(x), rtol=0, atol=0)
    model.train()
    before = model.layer2[0].conv1.weight.detach().clone()
    model(x).sum().backward()
    optimizer.step()
    assert not torch.equal(model.layer2[0].conv1.weight, before)
    assert all(any(p is q for g in optimizer.param_groups for q in g["params"]) for p in model.parameters())


def test_a_float64_model_stays_float64():
    model = resnet20().double()
    cf.apply_stochastic_depth(model, "BasicBlock", drop_rate=0.5, stochastic_method="sample")
    assert all(p.dtype == torch.float64 for p in model.parameters())
    assert model(torch.randn(2, 3, 8, 8, dtype=torch.float64)).dtype == torch.float64


def test_drop_rate_one_returns_the_input_and_zero_never_does():
    """Composer's test_stochastic_bottleneck_drop / _keep, for both block classes."""
    x = torch.relu(torch.randn(4, 8, 6, 6))
    for block in (BasicBlock(8, 8), Bottleneck(8, 2)):
        dropping = cf.apply_stochastic_depth(
            nn.Sequential(block), type(block).__name__, drop_rate=1.0, drop_distribution="uniform"
        )[0]
        assert dropping(x) is x
        dropping.drop_rate = 0.0
        assert dropping(x) is not x


def test_a_dropped_block_with_a_projection_returns_the_projected_shortcut():
    block = BasicBlock(4, 8, stride=2)
    model = cf.apply_stochastic_depth(nn.Sequential(block), "BasicBlock", drop_rate=1.0)
    x = torch.randn(2, 4, 8, 8)
    torch.testing.assert_close(model(x), torch.relu(block.downsample(x)))


@pytest.mark.slow
def test_empirical_drop_frequency_matches_each_blocks_rate():
    """400 training passes through ResNet-20 (drop_rate 0.5, linear) with torch's global generator
    seeded: each block's share of passes in which it returned its input lies within 5 binomial
    standard deviations of drop_rate * l / L."""
    torch.manual_seed(0)
    model = cf.apply_stochastic_depth(resnet20(), "BasicBlock", drop_rate=0.5).train()
    blocks = _blocks(model)
    dropped = [0] * len(blocks)

    def recorder(i, block):
        def hook(module, inputs, output):
            if block.downsample is None:
                dropped[i] += output is inputs[0]
            else:  # a dropped projection block returns ReLU of the projection
                dropped[i] += torch.equal(output, torch.relu(block.downsample(inputs[0])))

        return hook

    for i, block in enumerate(blocks):
        block.register_forward_hook(recorder(i, block))
    n = 400
    torch.manual_seed(1)
    with torch.no_grad():
        for _ in range(n):
            model(torch.randn(1, 3, 8, 8))
    for frequency, p in zip([d / n for d in dropped], _expected_rates(9, 0.5, "linear"), strict=True):
        assert _five_sigma(frequency, p, n), (frequency, p)


def test_a_blocks_own_generator_repeats_its_draws():
    def draws(seed):
        block = cf.apply_stochastic_depth(nn.Sequential(BasicBlock(4, 4)), "BasicBlock", drop_rate=0.5)[0]
        block.generator = torch.Generator().manual_seed(seed)
        x = torch.relu(torch.randn(1, 4, 4, 4))
        return [block(x) is x for _ in range(64)]

    assert draws(3) == draws(3) and draws(3) != draws(4)
    assert _five_sigma(sum(draws(3)) / 64, 0.5, 64)


@pytest.mark.parametrize("stochastic_method", ["block", "sample"])
def test_evaluation_scales_the_branch_by_its_survival_probability(stochastic_method):
    """eval: relu((1 - p) * branch(x) + shortcut(x)), the branch written out from the block, on
    every call (nothing is drawn in evaluation)."""
    torch.manual_seed(0)
    block = BasicBlock(4, 8, stride=2)
    model = nn.Sequential(block)
    model(torch.randn(8, 4, 8, 8))  # non-trivial running statistics
    block.eval()
    x = torch.randn(3, 4, 8, 8)
    with torch.no_grad():
        branch = block.bn2(block.conv2(torch.relu(block.bn1(block.conv1(x)))))
        expected = torch.relu((1 - 0.3) * branch + block.downsample(x))
        cf.apply_stochastic_depth(model, "BasicBlock", stochastic_method, drop_rate=0.3)
        model.eval()
        for _ in range(32):
            torch.testing.assert_close(model(x), expected)


def test_sample_mode_drops_the_branch_per_example():
    """Each example of a training batch is either the block's full output or its shortcut alone,
    both occur in one batch, and the share dropped is binomial around the rate."""
    torch.manual_seed(0)
    block = BasicBlock(4, 4)
    model = cf.apply_stochastic_depth(
        nn.Sequential(block), "BasicBlock", "sample", drop_rate=0.5, drop_distribution="uniform"
    )
    x = torch.relu(torch.randn(2000, 4, 5, 5))
    with torch.no_grad():
        full = torch.relu(block.bn2(block.conv2(torch.relu(block.bn1(block.conv1(x))))) + x)
        torch.manual_seed(1)
        out = model(x)
    kept = (out == full).flatten(1).all(dim=1)
    dropped = (out == x).flatten(1).all(dim=1)
    assert bool((kept ^ dropped).all())
    assert _five_sigma(dropped.double().mean().item(), 0.5, len(x))
    # Composer's test_sample_stochastic_bottleneck_drop_all: rate 1 returns the ReLU'd input.
    model[0].drop_rate = 1.0
    assert torch.equal(model(x), x)


def test_sample_mode_draws_from_the_blocks_own_generator():
    """With a generator of its own a sample-mode block repeats its per-example draws for the same
    seed, whatever torch's global generator holds, and leaves the global generator alone."""
    block = BasicBlock(4, 4)
    model = cf.apply_stochastic_depth(
        nn.Sequential(block), "BasicBlock", "sample", drop_rate=0.5, drop_distribution="uniform"
    )
    x = torch.relu(torch.randn(64, 4, 3, 3, generator=torch.Generator().manual_seed(0)))

    def dropped(seed, global_seed):
        model[0].generator = torch.Generator().manual_seed(seed)
        torch.manual_seed(global_seed)
        with torch.no_grad():
            out = model(x)
        untouched = torch.equal(torch.get_rng_state(), torch.manual_seed(global_seed).get_state())
        return (out == x).flatten(1).all(dim=1).tolist(), untouched

    first, untouched = dropped(3, 0)
    assert untouched and dropped(3, 1) == (first, True)
    assert dropped(4, 0)[0] != first and 0 < sum(first) < 64
    expected = (torch.rand(64, generator=torch.Generator().manual_seed(3)) < 0.5).tolist()
    assert first == expected


class _Rates(Algorithm):
    def __init__(self):
        self.rates = []

    def match(self, event, state):
        return event is Event.BEFORE_FORWARD

    def apply(self, event, state, logger=None):
        self.rates.append([b.drop_rate for b in _blocks(state.model)])


@pytest.mark.parametrize(
    ("drop_warmup", "factors"),
    [
        (0.5, [0, 0.5, 1, 1]),
        ("2ba", [0, 0.5, 1, 1]),
        (1.0, [0, 0.25, 0.5, 0.75]),
        (1, [0, 0.25, 0.5, 0.75]),
        ("2ep", [0, 0.125, 0.25, 0.375]),
        (0.0, [1, 1, 1, 1]),
        (None, [1, 1, 1, 1]),
    ],
)
def test_in_the_trainer_the_drop_rates_warm_up(drop_warmup, factors):
    """Four batches, one epoch: at each BATCH_START every block's rate is its full rate times
    min(elapsed / drop_warmup, 1), Composer's test_drop_rate_warmup (in epochs, the batches of
    the epoch done count as a fraction of it); by default (None here) there is no warm-up."""
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(4, 3, 8, 8, generator=g), torch.randint(0, 10, (4,), generator=g)) for _ in range(4)]
    rates = _Rates()
    warmup = {} if drop_warmup is None else {"drop_warmup": drop_warmup}
    trainer = Trainer(
        resnet20(),
        batches,
        "4ba",
        seed=0,
        device="cpu",
        algorithms=[StochasticDepth("BasicBlock", drop_rate=0.4, **warmup), rates],
    )
    trainer.fit()
    full = _expected_rates(9, 0.4, "linear")
    assert len(rates.rates) == 4
    for seen, factor in zip(rates.rates, factors, strict=True):
        assert seen == pytest.approx([factor * r for r in full])
    assert len(_blocks(trainer.state.model)) == 9
    # Set at BATCH_START only: after training the blocks keep the last batch's rates.
    assert [b.drop_rate for b in _blocks(trainer.state.model)] == pytest.approx([factors[-1] * r for r in full])


@pytest.mark.parametrize(
    ("drop_warmup", "events"),
    [(0.0, [Event.INIT]), ("2ba", [Event.INIT, Event.BATCH_START]), (0.5, [Event.INIT, Event.BATCH_START])],
)
def test_it_matches_init_and_with_a_warmup_each_batch_start(drop_warmup, events):
    algo = StochasticDepth("BasicBlock", drop_warmup=drop_warmup)
    assert [e for e in Event if algo.match(e, None)] == events


@pytest.mark.parametrize(
    ("kwargs", "rates"),
    [
        ({}, [0.4 / 3, 0.8 / 3, 0.4]),
        ({"drop_distribution": "uniform"}, [0.4] * 3),
    ],
)
def test_at_init_the_class_gives_the_rates_its_arguments_say(kwargs, rates):
    from algorithms.core import State
    from algorithms.core.time import Duration

    model = nn.Sequential(BasicBlock(4, 4), BasicBlock(4, 4), BasicBlock(4, 4))
    algo = StochasticDepth("BasicBlock", stochastic_method="sample", drop_rate=0.4, **kwargs)
    algo.apply(Event.INIT, State(model=model, max_duration=Duration.parse("1ep")))
    assert [b.drop_rate for b in _blocks(model)] == pytest.approx(rates)
    assert all(b.stochastic_method == "sample" for b in _blocks(model))


def test_in_the_trainer_runs_repeat_with_the_seed_and_differ_from_the_plain_model():
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(8, 3, 16, 16, generator=g), torch.randint(0, 10, (8,), generator=g)) for _ in range(3)]

    def losses(algorithms):
        torch.manual_seed(0)
        model = resnet20()
        seen = []

        class Loss(Algorithm):
            def match(self, event, state):
                return event is Event.BEFORE_BACKWARD

            def apply(self, event, state, logger=None):
                seen.append(state.loss.item())

        Trainer(model, batches, "3ba", seed=0, device="cpu", algorithms=[*algorithms, Loss()]).fit()
        return seen

    with_sd = losses([StochasticDepth("BasicBlock", drop_rate=0.5)])
    assert with_sd == losses([StochasticDepth("BasicBlock", drop_rate=0.5)])
    assert all(math.isfinite(v) for v in with_sd)
    assert with_sd != losses([])


def test_nothing_to_replace_warns_and_applying_twice_changes_nothing():
    """A model without a known block gets the registry's warning, which names the classes it knows
    and where to register one; a model whose blocks are all stochastic already gets the surgery's."""
    known = ", ".join(f"{p.split('.', 1)[0]}.{p.rsplit('.', 1)[-1]}" for p in registry.known())  # a doctest may add one
    message = (
        f"apply_stochastic_depth: Sequential holds none of the module classes it knows ({known}); the model is "
        "unchanged. Register your own class with algorithms.stochastic_depth.registry.register(YourModuleClass, "
        "policy), where policy(module, index, **options) returns the replacement (or None to keep the module)"
    )
    assert known.startswith(
        "algorithms.BasicBlock, algorithms.Bottleneck, torchvision.BasicBlock, torchvision.Bottleneck"
    )
    with pytest.warns(NoModulesReplacedWarning, match=f"^{re.escape(message)}$"):
        cf.apply_stochastic_depth(nn.Sequential(nn.Linear(2, 2)), "BasicBlock")
    model = cf.apply_stochastic_depth(resnet20(), "BasicBlock", drop_rate=0.2)
    with pytest.warns(NoModulesReplacedWarning, match="^apply_stochastic_depth: no module of the model matched"):
        cf.apply_stochastic_depth(model, "BasicBlock", drop_rate=0.9)
    assert _blocks(model)[-1].drop_rate == pytest.approx(0.2)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"target_layer_name": "nonsense_pt2"},
            "target_layer_name='nonsense_pt2': must be one of 'BasicBlock', 'Bottleneck', 'ResNetBottleneck'",
        ),
        ({"stochastic_method": "nonsense"}, "stochastic_method='nonsense': must be one of 'block', 'sample'"),
        ({"drop_rate": -0.5}, "drop_rate=-0.5: must be a number in [0, 1]"),
        ({"drop_rate": 1.7}, "drop_rate=1.7: must be a number in [0, 1]"),
        ({"drop_rate": True}, "drop_rate=True: must be a number in [0, 1]"),
        ({"drop_distribution": "nonsense_pt3"}, "drop_distribution='nonsense_pt3': must be one of 'linear', 'uniform'"),
    ],
)
def test_bad_arguments_fail_with_a_clear_error(kwargs, message):
    arguments = {"target_layer_name": "BasicBlock", **kwargs}
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        StochasticDepth(**arguments)
    model = resnet20()
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        cf.apply_stochastic_depth(model, **arguments)
    assert not _blocks(model)  # nothing changed


_WARMUP = "must be a fraction of training in [0, 1] or a duration such as '2ep'"


@pytest.mark.parametrize(
    ("drop_warmup", "message"),
    [
        (-0.5, f"drop_warmup=-0.5: {_WARMUP}"),
        (1.7, f"drop_warmup=1.7: {_WARMUP}"),
        (float("inf"), f"drop_warmup=inf: {_WARMUP}"),
        (True, f"drop_warmup=True: {_WARMUP}"),
        (
            "soon",
            "drop_warmup='soon': duration 'soon' is not understood — write e.g. '2ep', '100ba', '512sp', "
            "'65536tok' or '0.5dur'",
        ),
    ],
)
def test_a_bad_warmup_is_refused(drop_warmup, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        StochasticDepth("BasicBlock", drop_warmup=drop_warmup)


def test_the_repr_names_every_argument():
    algo = StochasticDepth(
        "Bottleneck", stochastic_method="sample", drop_rate=0.1, drop_distribution="uniform", drop_warmup="2ba"
    )
    assert repr(algo) == (
        "StochasticDepth(target_layer_name='Bottleneck', stochastic_method='sample', drop_rate=0.1, "
        "drop_distribution='uniform', drop_warmup='2ba')"
    )


def test_no_warning_is_raised_on_a_model_with_blocks():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cf.apply_stochastic_depth(resnet20(), "BasicBlock")


@pytest.mark.parametrize(("drop_rate", "acted"), [(0.4, True), (0.0, False)])
def test_it_reports_the_blocks_it_made_stochastic_and_acts_only_with_a_drop_rate(drop_rate, acted):
    batches = [(torch.randn(4, 3, 8, 8), torch.randint(0, 10, (4,)))]
    trainer = Trainer(
        resnet20(),
        batches,
        "1ba",
        seed=0,
        device="cpu",
        algorithms=[StochasticDepth("BasicBlock", drop_rate=drop_rate)],
    )
    trainer.fit()
    assert trainer.method_log.records["StochasticDepth"]["activity"] == {"modules_replaced": 9}
    assert trainer.method_log.acted("StochasticDepth") is acted


@pytest.mark.parametrize("seed", [0, 5])
def test_in_a_distributed_run_every_rank_drops_the_same_blocks(seed):
    """Block mode on 2 ranks: a dropped block skips its branch's collectives (FSDP's all-gathers), so
    the blocks draw from one generator seeded alike on every rank (per-rank seeds made ranks drop
    different blocks, and FSDP and DeepSpeed runs crashed)."""
    from algorithms.core import State
    from algorithms.core.time import Duration
    from algorithms.models import resnet20
    from algorithms.stochastic_depth.stochastic_depth import _StochasticResidual

    draws = []
    for rank in (0, 1):
        state = State(model=resnet20(), max_duration=Duration.parse("1ep"), seed=seed, rank=rank, world_size=2)
        algo = StochasticDepth("BasicBlock", drop_rate=0.5)
        algo.reset()
        algo.apply(Event.INIT, state)
        blocks = [m for m in state.model.modules() if isinstance(m, _StochasticResidual)]
        assert blocks and all(b.generator is blocks[0].generator is not None for b in blocks)
        draws.append(torch.rand(8, generator=blocks[0].generator))
        assert set(algo.state_dict()) == {"blocks_generator"}  # kept with the checkpoint
    assert torch.equal(*draws)


def test_a_block_class_of_ones_own_is_registered_under_a_kind():
    """A registered class is converted by the policy stochastic_policy gives, with the rates of
    the kind it is registered under, beside the project's blocks of that kind."""
    from algorithms.stochastic_depth import StochasticResidual, stochastic_policy
    from algorithms.stochastic_depth.stochastic_depth import Registry

    class Own(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.relu, self.downsample = nn.Conv2d(4, 4, 3, padding=1), nn.ReLU(), None

        def forward(self, x):
            return self.relu(self.conv(x) + x)

    class StochasticOwn(StochasticResidual, Own):
        def branch(self, x):
            return self.conv(x)

    own = Registry("apply_stochastic_depth", "algorithms.stochastic_depth.registry")
    for path in registry.known():
        own.register(path, registry.policy(path))
    own.register(Own, stochastic_policy(StochasticOwn, "BasicBlock"))
    import algorithms.stochastic_depth.stochastic_depth as module

    saved, module.registry = module.registry, own
    try:
        model = cf.apply_stochastic_depth(nn.Sequential(Own(), BasicBlock(4, 4), Own()), "BasicBlock", drop_rate=0.3)
        assert [type(b) for b in model] == [StochasticOwn, StochasticBasicBlock, StochasticOwn]
        assert [b.drop_rate for b in model] == pytest.approx([0.1, 0.2, 0.3])
        x = torch.relu(torch.randn(2, 4, 5, 5))
        model.eval()
        with torch.no_grad():
            torch.testing.assert_close(model[0](x), torch.relu(0.9 * model[0].conv(x) + x))
        with pytest.warns(NoModulesReplacedWarning):
            cf.apply_stochastic_depth(nn.Sequential(Own()), "Bottleneck")
    finally:
        module.registry = saved
    with pytest.raises(ValueError, match="must be a subclass of StochasticResidual"):
        stochastic_policy(Own, "BasicBlock")
    with pytest.raises(ValueError, match="^target_layer_name='Block': must be one of"):
        stochastic_policy(StochasticOwn, "Block")
