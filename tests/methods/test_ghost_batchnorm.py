"""Ghost BatchNorm's own semantics, checked against its definition (Hoffer et al., 2017).

In training a ghost batch norm splits the batch into the fewest chunks of at most
``ghost_batch_size`` examples (sizes as equal as possible) and normalizes each chunk with its own
statistics, which is ``F.batch_norm`` of each chunk; its running averages take one step per batch
with the chunks' mean statistics; in eval it is the original batch norm. Composer's own tests
(each ghost batch of a batch of 12 has mean 0 and variance 1 for 1-, 2- and 3-d
batch norms and ghost batch sizes 1, 2, 3 and 5; one module replaced per batch norm; it trains)
are re-expressed below.
"""

from __future__ import annotations

import copy
import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from trainer_support import Observed

import algorithms.functional as cf
from algorithms import GhostBatchNorm
from algorithms.core import Event, State, Trainer
from algorithms.core.time import Duration
from algorithms.ghost_batchnorm.ghost_batchnorm import (
    GhostBatchNorm1d,
    GhostBatchNorm2d,
    GhostBatchNorm3d,
)
from algorithms.models import resnet20
from algorithms.surgery import NoModulesReplacedWarning

BATCH_NORMS = {1: nn.BatchNorm1d, 2: nn.BatchNorm2d, 3: nn.BatchNorm3d}
GHOSTS = {1: GhostBatchNorm1d, 2: GhostBatchNorm2d, 3: GhostBatchNorm3d}


def _chunk_sizes(n: int, ghost_batch_size: int) -> list[int]:
    """The definition: the fewest chunks of at most ghost_batch_size examples, sizes as equal as possible."""
    k = math.ceil(n / ghost_batch_size)
    return [n // k + (1 if i < n % k else 0) for i in range(k)]


def _batch(dims: int, n: int = 12, channels: int = 4, seed: int = 123) -> torch.Tensor:
    return torch.randn(n, channels, *([3] * dims), generator=torch.Generator().manual_seed(seed)) * 3 + 1


def _trained_bn(dims: int, channels: int = 4, **kwargs) -> nn.Module:
    """A batch norm with non-trivial weight, bias and running statistics."""
    bn = BATCH_NORMS[dims](channels, **kwargs)
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        if bn.affine:
            bn.weight.copy_(torch.rand(channels, generator=g) + 0.5)
            bn.bias.copy_(torch.randn(channels, generator=g))
    for seed in range(3):
        bn(_batch(dims, seed=seed))
    return bn


def _ghosted(module: nn.Module, ghost_batch_size: int) -> nn.Module:
    model = nn.Sequential(copy.deepcopy(module))
    assert cf.apply_ghost_batchnorm(model, ghost_batch_size=ghost_batch_size) == 1
    return model[0]


@pytest.mark.parametrize("dims", [1, 2, 3])
@pytest.mark.parametrize("ghost_batch_size", [1, 2, 3, 5, 7])
def test_in_training_each_chunk_is_batch_normalized_on_its_own(dims, ghost_batch_size):
    bn = _trained_bn(dims)
    ghost = _ghosted(bn, ghost_batch_size)
    assert type(ghost) is GHOSTS[dims]
    x = _batch(dims, seed=9)
    out = ghost(x)
    sizes = _chunk_sizes(12, ghost_batch_size)
    assert max(sizes) <= ghost_batch_size and max(sizes) - min(sizes) <= 1
    expected = torch.cat([F.batch_norm(c, None, None, bn.weight, bn.bias, True, 0.0, bn.eps) for c in x.split(sizes)])
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("dims", [1, 2, 3])
@pytest.mark.parametrize("ghost_batch_size", [1, 2, 3, 5])
def test_each_ghost_batch_has_mean_0_and_variance_1(dims, ghost_batch_size):
    """Composer's check: batch norms with unit weight, a batch of 12, eps=0 there; torch now
    refuses eps=0 in training, so eps=1e-10, far below the tolerance."""
    ghost = _ghosted(BATCH_NORMS[dims](4, eps=1e-10), ghost_batch_size)
    out = ghost(_batch(dims))
    reduce = (0, *range(2, out.ndim))
    for chunk in out.split(_chunk_sizes(12, ghost_batch_size)):
        variance, mean = torch.var_mean(chunk, dim=reduce, correction=0)
        torch.testing.assert_close(variance, torch.ones(4))
        torch.testing.assert_close(mean, torch.zeros(4), atol=1e-5, rtol=0)


def test_a_two_dimensional_batch_norm1d_input_is_chunked_too():
    bn = nn.BatchNorm1d(5)
    ghost = _ghosted(bn, 4)
    x = torch.randn(10, 5, generator=torch.Generator().manual_seed(0))
    expected = torch.cat(
        [F.batch_norm(c, None, None, bn.weight, bn.bias, True, 0.0, bn.eps) for c in x.split(_chunk_sizes(10, 4))]
    )
    torch.testing.assert_close(ghost(x), expected)


@pytest.mark.parametrize("dims", [1, 2, 3])
@pytest.mark.parametrize("ghost_batch_size", [1, 4, 5, 100])
def test_in_eval_it_is_the_original_batch_norm_exactly(dims, ghost_batch_size):
    bn = _trained_bn(dims).eval()
    ghost = _ghosted(bn, ghost_batch_size)
    assert not ghost.training
    x = _batch(dims, seed=4)
    assert torch.equal(ghost(x), bn(x))
    assert torch.equal(ghost.running_mean, bn.running_mean) and torch.equal(ghost.running_var, bn.running_var)


@pytest.mark.parametrize("dims", [1, 2, 3])
def test_a_batch_no_larger_than_a_ghost_batch_is_one_chunk_plain_batch_norm(dims):
    bn = _trained_bn(dims)
    ghost = _ghosted(bn, 12)
    x = _batch(dims, seed=6)
    for n in (12, 7):
        reference = copy.deepcopy(bn)
        ghost_copy = copy.deepcopy(ghost)
        assert torch.equal(ghost_copy(x[:n]), reference(x[:n]))
        for name in ("running_mean", "running_var", "num_batches_tracked"):
            assert torch.equal(getattr(ghost_copy, name), getattr(reference, name))


@pytest.mark.parametrize("dims", [1, 2, 3])
@pytest.mark.parametrize("ghost_batch_size", [2, 3, 5])
def test_the_running_statistics_take_one_step_with_the_chunks_mean_statistics(dims, ghost_batch_size):
    """running <- (1 - momentum) running + momentum * (mean over chunks of each chunk's mean, or
    unbiased variance), once per batch; Composer instead runs the batch norm on each of the k
    chunks with momentum / k, which agrees with this to first order in the momentum."""
    bn = _trained_bn(dims, momentum=0.3)
    ghost = _ghosted(bn, ghost_batch_size)
    mean0, var0, tracked0 = bn.running_mean.clone(), bn.running_var.clone(), int(bn.num_batches_tracked)
    x = _batch(dims, seed=8)
    ghost(x)
    reduce = (0, *range(2, x.ndim))
    chunks = x.split(_chunk_sizes(12, ghost_batch_size))
    means = torch.stack([c.mean(dim=reduce) for c in chunks]).mean(dim=0)
    variances = torch.stack([c.var(dim=reduce, correction=1) for c in chunks]).mean(dim=0)
    torch.testing.assert_close(ghost.running_mean, 0.7 * mean0 + 0.3 * means)
    torch.testing.assert_close(ghost.running_var, 0.7 * var0 + 0.3 * variances)
    assert int(ghost.num_batches_tracked) == tracked0 + 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_momentum_none_keeps_the_cumulative_average_of_the_batches_chunk_statistics(dtype):
    """The average's step 1/t is taken in the statistics' own dtype: float64 ones are exact to
    float64 rounding."""
    bn = nn.BatchNorm2d(3, momentum=None).to(dtype)
    ghost = _ghosted(bn, 4)
    batches = [torch.randn(8, 3, 2, 2, generator=torch.Generator().manual_seed(s), dtype=dtype) + s for s in range(3)]
    for x in batches:
        ghost(x)
    per_batch = [torch.stack([c.mean(dim=(0, 2, 3)) for c in x.split(4)]).mean(dim=0) for x in batches]
    tolerance = {} if dtype == torch.float32 else {"rtol": 1e-12, "atol": 1e-12}
    torch.testing.assert_close(ghost.running_mean, torch.stack(per_batch).mean(dim=0), **tolerance)
    assert int(ghost.num_batches_tracked) == 3


@pytest.mark.parametrize(("affine", "track_running_stats"), [(False, True), (True, False), (False, False)])
def test_without_affine_or_running_statistics_chunks_are_still_normalized(affine, track_running_stats):
    """With the batch norm's own weight, bias and eps (0.1 here, far from the default)."""
    bn = _trained_bn(2, affine=affine, track_running_stats=track_running_stats, eps=0.1)
    ghost = _ghosted(bn, 3)
    x = _batch(2)
    expected = torch.cat(
        [F.batch_norm(c, None, None, bn.weight, bn.bias, True, 0.0, bn.eps) for c in x.split(_chunk_sizes(12, 3))]
    )
    torch.testing.assert_close(ghost(x), expected)
    bn.load_state_dict(ghost.state_dict())  # the running statistics training gave the ghost
    assert torch.equal(ghost.eval()(x), bn.eval()(x))


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"affine": False},
        {"track_running_stats": False},
        {"eps": 0.1, "momentum": None},
        {"affine": False, "track_running_stats": False},
    ],
)
def test_the_replacement_has_the_settings_of_the_batch_norm(kwargs):
    """The repr of a ghost batch norm is the batch norm's (its features, eps, momentum, affine and
    running statistics) with the ghost batch size added."""
    bn = nn.BatchNorm2d(6, **kwargs)
    ghost = _ghosted(bn, 5)
    assert repr(ghost) == f"Ghost{repr(bn)[:-1]}, ghost_batch_size=5)"
    assert (ghost.affine, ghost.track_running_stats) == (bn.affine, bn.track_running_stats)


def test_by_default_a_ghost_batch_holds_32_examples():
    """Composer's default, in the functional form and the class alike: a batch of 32 is one
    chunk, a batch of 33 two (17 and 16)."""
    x = _batch(2, n=33)
    for apply in (
        cf.apply_ghost_batchnorm,
        lambda model: GhostBatchNorm().apply(Event.INIT, State(model, Duration.parse("1ep"))),
    ):
        model = nn.Sequential(nn.BatchNorm2d(4))
        apply(model)
        assert model[0].ghost_batch_size == 32
        expected = torch.cat([F.batch_norm(c, None, None, None, None, True, 0.0, 1e-5) for c in x.split([17, 16])])
        torch.testing.assert_close(model(x), expected)
        torch.testing.assert_close(model(x[:32]), F.batch_norm(x[:32], None, None, None, None, True, 0.0, 1e-5))


def test_on_resnet20_every_batch_norm_is_replaced_keeping_its_tensors():
    torch.manual_seed(0)
    model = resnet20(10)
    batch_norms = {name: m for name, m in model.named_modules() if isinstance(m, nn.BatchNorm2d)}
    tensors = {
        name: {k: id(t) for k, t in [*m.named_parameters(), *m.named_buffers()]} for name, m in batch_norms.items()
    }
    assert cf.apply_ghost_batchnorm(model, ghost_batch_size=16) == len(batch_norms) == 21
    modules = dict(model.named_modules())
    for name in batch_norms:
        assert type(modules[name]) is GhostBatchNorm2d and modules[name].ghost_batch_size == 16
        assert {k: id(t) for k, t in [*modules[name].named_parameters(), *modules[name].named_buffers()]} == tensors[
            name
        ]
    assert not any(type(m) is nn.BatchNorm2d for m in model.modules())
    out = model(torch.randn(64, 3, 16, 16))
    out.sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


def test_an_optimizer_built_before_surgery_holds_the_same_parameters_and_trains_them():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.Linear(4 * 6 * 6, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    cf.apply_ghost_batchnorm(model, ghost_batch_size=4, optimizers=optimizer)
    held = [p for group in optimizer.param_groups for p in group["params"]]
    assert {id(p) for p in held} == {id(p) for p in model.parameters()} and len(held) == 6
    weight = model[1].weight.detach().clone()
    F.cross_entropy(model(torch.randn(8, 3, 8, 8)), torch.zeros(8, dtype=torch.long)).backward()
    optimizer.step()
    assert not torch.equal(model[1].weight, weight)


def test_it_keeps_float64_and_channels_last():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)).double()
    cf.apply_ghost_batchnorm(model, ghost_batch_size=2)
    assert all(p.dtype == torch.float64 for p in model.parameters())
    x = torch.randn(6, 3, 5, 5, dtype=torch.float64).contiguous(memory_format=torch.channels_last)
    out = model(x)
    assert out.dtype == torch.float64 and out.is_contiguous(memory_format=torch.channels_last)


def test_applying_it_twice_changes_nothing_the_second_time():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4))
    cf.apply_ghost_batchnorm(model, ghost_batch_size=2)
    with pytest.warns(NoModulesReplacedWarning, match="GhostBatchNorm"):
        assert cf.apply_ghost_batchnorm(model, ghost_batch_size=8) == 0
    assert model[1].ghost_batch_size == 2


def test_a_batch_norm_subclass_with_its_own_forward_is_left_alone():
    class Custom(nn.BatchNorm2d):
        def forward(self, input):
            return super().forward(input) * 2

    model = nn.Sequential(Custom(3), nn.BatchNorm1d(3))
    assert cf.apply_ghost_batchnorm(model) == 1
    assert type(model[0]) is Custom and type(model[1]) is GhostBatchNorm1d


def test_a_model_without_batch_norm_warns_and_is_unchanged():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.GroupNorm(2, 4))
    with pytest.warns(NoModulesReplacedWarning, match="GhostBatchNorm"):
        assert cf.apply_ghost_batchnorm(model) == 0
    assert [type(m) for m in model] == [nn.Conv2d, nn.GroupNorm]


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "4", None])
def test_a_bad_ghost_batch_size_is_refused_naming_it(bad):
    with pytest.raises(ValueError, match=rf"^ghost_batch_size={bad!r}:".replace("'", ".")):
        GhostBatchNorm(ghost_batch_size=bad)
    model = nn.Sequential(nn.BatchNorm2d(3))
    with pytest.raises(ValueError, match=r"^ghost_batch_size="):
        cf.apply_ghost_batchnorm(model, ghost_batch_size=bad)
    assert type(model[0]) is nn.BatchNorm2d


@pytest.mark.parametrize("built_before", [True, False])
def test_in_the_trainer_the_model_is_ghost_batch_normalized_from_the_first_step(built_before):
    """The class replaces the batch norms at INIT; the model's outputs in training are those of the
    functional form applied to the same initial model, and an optimizer given to the Trainer
    (built before the surgery) trains the batch norm's weight."""
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(12, 3, 8, 8, generator=g), torch.randint(0, 3, (12,), generator=g)) for _ in range(3)]
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(144, 3))
    reference = copy.deepcopy(model)
    cf.apply_ghost_batchnorm(reference, ghost_batch_size=4)
    weight = model[1].weight.detach().clone()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1) if built_before else None
    seen = Observed()
    trainer = Trainer(
        model,
        batches,
        "3ba",
        optimizer=optimizer,
        algorithms=[GhostBatchNorm(ghost_batch_size=4), seen],
        seed=0,
        device="cpu",
    )
    assert type(trainer.state.model[1]) is GhostBatchNorm2d
    trainer.fit()
    torch.testing.assert_close(seen.outputs[0], reference.train()(batches[0][0]))
    assert not torch.equal(trainer.state.model[1].weight, weight)
    assert all(torch.isfinite(loss) for loss in seen.losses)


@pytest.mark.cuda
def test_on_cuda_training_makes_no_host_sync():
    from trainer_support import no_host_sync

    bn = nn.BatchNorm2d(4).cuda()
    ghost = _ghosted(bn, 4)
    x = torch.randn(16, 4, 5, 5, device="cuda")
    with no_host_sync():
        out = ghost(x)
    expected = torch.cat([F.batch_norm(c, None, None, bn.weight, bn.bias, True, 0.0, bn.eps) for c in x.split(4)])
    torch.testing.assert_close(out, expected)
    assert out.device == x.device


def test_no_warning_when_something_was_replaced():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cf.apply_ghost_batchnorm(nn.Sequential(nn.BatchNorm2d(2)))
