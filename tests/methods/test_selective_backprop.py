"""Selective Backprop's own semantics, checked against its definition (Jiang et al., 2019, with
Composer's selection rule).

Each example is scored by its loss under no_grad, with the model in eval mode (at reduced size
when ``scale_factor < 1``, by ``F.interpolate``); the examples are ranked from the lowest loss
(rank 0) to the highest, rank ``i`` gets the weight ``((i + 0.5) / N) ** (1 / keep - 1)``, and
``round(keep * N)`` ranks (at least one) are drawn without replacement, i.e. one after another,
each with probability proportional to its weight among those not drawn yet. The draws are
replayed here from the same seeded generator. Composer's own tests of ``select_using_loss`` and
``should_selective_backprop`` are repeated below with our names. The tests every method passes
run from the metadata registry.
"""

from __future__ import annotations

import copy
import itertools
import math
import re

import pytest
import torch
import torch.nn.functional as F
from trainer_support import Observed, no_host_sync, replayed_generator

import algorithms.functional as cf
from algorithms import MixUp, SelectiveBackprop
from algorithms.core import Algorithm, Event, State, Trainer
from algorithms.core.time import Duration
from algorithms.selective_backprop import should_selective_backprop
from algorithms.selective_backprop.selective_backprop import selection_probabilities


@pytest.fixture(autouse=True)
def _one_thread():
    """The models here are tiny: one thread is many times faster than two on a shared machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _weights(n: int, keep: float) -> list[float]:
    """The paper's selection weight of each loss rank (rank 0 the lowest loss), as Composer sets
    its exponent: the percentile (i + 0.5) / n raised to 1 / keep - 1."""
    return [((i + 0.5) / n) ** (1 / keep - 1) for i in range(n)]


def _count(n: int, keep: float) -> int:
    return min(n, max(1, round(keep * n)))


def _eval_losses(model, x, target, loss_fun=F.cross_entropy):
    model = copy.deepcopy(model).eval()
    with torch.no_grad():
        return loss_fun(model(x), target, reduction="none")


def _definition(x, target, losses, keep, generator):
    """The rows kept: ranks drawn without replacement by the weights, replayed from ``generator``."""
    n = x.shape[0]
    by_loss = sorted(range(n), key=lambda i: (float(losses[i]), i))  # ties: the earlier row first
    ranks = torch.multinomial(
        torch.tensor(_weights(n, keep), dtype=torch.float64), _count(n, keep), replacement=False, generator=generator
    ).tolist()
    rows = [by_loss[r] for r in ranks]
    return x[rows], target[rows]


def _classifier(seed=0, in_features=6, classes=3, bn=False):
    torch.manual_seed(seed)
    layers = [torch.nn.Linear(in_features, 8)]
    if bn:
        layers += [torch.nn.BatchNorm1d(8), torch.nn.Dropout(0.5)]
    return torch.nn.Sequential(*layers, torch.nn.ReLU(), torch.nn.Linear(8, classes))


def _batch(n, seed=0, features=6, classes=3):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, features, generator=g), torch.randint(0, classes, (n,), generator=g)


def exactly(message: str) -> str:
    """A ``match`` pattern for the whole of ``message``."""
    return f"^{re.escape(message)}$"


# -- the functional form against its definition --------------------------------------------------


@pytest.mark.parametrize("keep", [0.25, 0.3, 0.5, 0.75])
@pytest.mark.parametrize("n", [8, 10, 13])
def test_select_using_loss_matches_its_definition(n, keep):
    """A model with batch norm and dropout, in train mode: the ranking is by its eval-mode losses."""
    x, y = _batch(n, seed=n)
    model = _classifier(bn=True).train()
    kept_x, kept_y = cf.select_using_loss(
        x, y, model, F.cross_entropy, keep=keep, generator=torch.Generator().manual_seed(3)
    )
    want_x, want_y = _definition(x, y, _eval_losses(model, x, y), keep, torch.Generator().manual_seed(3))
    assert torch.equal(kept_x, want_x) and torch.equal(kept_y, want_y)


@pytest.mark.parametrize(
    ("n", "keep"), [(16, 0.5), (16, 0.75), (10, 0.25), (5, 0.5), (7, 0.5), (9, 0.3), (4, 0.1), (1, 0.5), (3, 0.9)]
)
def test_round_keep_n_rows_are_kept_each_a_row_of_the_batch_once_with_its_target(n, keep):
    """round(keep * n), Python's rounding (2.5 -> 2, 3.5 -> 4), and at least one row."""
    x = torch.randn(n, 3, generator=torch.Generator().manual_seed(0))
    x[:, 0] = torch.arange(n)  # each row carries its index
    ids = torch.arange(n)
    for seed in range(5):
        kept_x, kept_ids = cf.select_using_loss(
            x, ids, lambda v: v[:, 1:], _loss_of_first_output, keep=keep, generator=torch.Generator().manual_seed(seed)
        )
        expected = {(5, 0.5): 2, (7, 0.5): 4, (4, 0.1): 1, (1, 0.5): 1, (3, 0.9): 3}.get((n, keep), round(keep * n))
        assert kept_x.shape == (expected, 3) and kept_ids.shape == (expected,)
        assert len(set(kept_ids.tolist())) == expected  # no duplicates
        assert torch.equal(kept_x, x[kept_ids])  # each kept input is the batch's row of its kept target


def _loss_of_first_output(outputs, target, reduction="mean"):
    return outputs[:, 0] if reduction == "none" else outputs[:, 0].mean()


def test_tied_losses_rank_the_earlier_row_first():
    """40 examples with three distinct losses: among equal losses the earlier row has the lower
    rank, so the same batch keeps the same rows on every device (an unstable sort would not)."""
    n = 40
    x = torch.stack([torch.arange(n, dtype=torch.float32), torch.arange(n).remainder(3).float()], dim=1)
    ids = torch.arange(n)
    for seed in range(3):
        kept_x, kept_ids = cf.select_using_loss(
            x, ids, lambda v: v[:, 1:], _loss_of_first_output, keep=0.5, generator=torch.Generator().manual_seed(seed)
        )
        want_x, want_ids = _definition(x, ids, x[:, 1], 0.5, torch.Generator().manual_seed(seed))
        assert torch.equal(kept_ids, want_ids) and torch.equal(kept_x, want_x)


def test_a_batch_of_scalars_is_selected_like_any_other():
    """Input (N,): one number per example (here the example's loss itself)."""
    x, ids = torch.tensor([0.3, 2.0, 0.1, 1.2, 0.7, 3.5, 0.5, 1.6]), torch.arange(8)
    kept_x, kept_ids = cf.select_using_loss(
        x, ids, lambda v: v[:, None], _loss_of_first_output, keep=0.5, generator=torch.Generator().manual_seed(1)
    )
    want_x, want_ids = _definition(x, ids, x, 0.5, torch.Generator().manual_seed(1))
    assert torch.equal(kept_x, want_x) and torch.equal(kept_ids, want_ids)


def test_an_empty_batch_comes_back_as_it_is_without_scoring():
    def never(v):
        raise AssertionError("the model was called on an empty batch")

    x, y = torch.zeros(0, 6), torch.zeros(0, dtype=torch.long)
    kept_x, kept_y = cf.select_using_loss(x, y, never, F.cross_entropy, keep=0.5)
    assert kept_x is x and kept_y is y


@pytest.mark.parametrize(("n", "keep"), [(1, 0.5), (8, 0.5), (10, 0.3), (7, 0.9), (5, 1.0), (100, 0.01)])
def test_selection_probabilities_are_the_normalized_weights_in_float64(n, keep):
    """Up to a small keep, whose exponent (99 for 0.01) takes the percentiles, all below 1, to
    tiny but finite weights."""
    probabilities = selection_probabilities(n, keep)
    weights = torch.tensor(_weights(n, keep), dtype=torch.float64)
    assert probabilities.dtype == torch.float64
    torch.testing.assert_close(probabilities, weights / weights.sum(), rtol=1e-14, atol=0)


def _inclusion_probabilities(weights: list[float], draws: int) -> list[float]:
    """P(rank i is among ``draws`` drawn one after another without replacement), by enumerating
    every ordered sequence of draws (small n)."""
    n = len(weights)
    inclusion = [0.0] * n
    for sequence in itertools.permutations(range(n), draws):
        p, left = 1.0, sum(weights)
        for i in sequence:
            p *= weights[i] / left
            left -= weights[i]
        for i in sequence:
            inclusion[i] += p
    return inclusion


def test_high_loss_rows_are_kept_as_often_as_the_papers_rule_says():
    """Over 4,000 seeded calls, each rank's frequency of being kept matches its probability under
    the rule, computed here by enumeration, within 5 standard deviations (a false alarm rate below
    6e-7 per rank, under 5e-6 for the 8; the seed is fixed, so the test cannot flake). The mean
    loss of the kept rows exceeds the batch mean, also within 5 standard deviations of its
    expectation."""
    n, keep, trials = 8, 0.5, 4000
    losses = torch.tensor([0.3, 2.0, 0.1, 1.2, 0.7, 3.5, 0.5, 1.6])  # row 5 has the highest loss
    x = torch.arange(n, dtype=torch.float32)[:, None]
    rows = torch.arange(n)
    model = lambda v: losses[v[:, 0].long()][:, None]  # noqa: E731 (each row's output is its loss)
    g = torch.Generator().manual_seed(0)
    kept = torch.zeros(n)
    kept_means = []
    for _ in range(trials):
        _, kept_rows = cf.select_using_loss(x, rows, model, _loss_of_first_output, keep=keep, generator=g)
        kept[kept_rows] += 1
        kept_means.append(float(losses[kept_rows].mean()))
    by_loss = sorted(range(n), key=lambda i: float(losses[i]))
    inclusion = _inclusion_probabilities(_weights(n, keep), _count(n, keep))
    for rank, row in enumerate(by_loss):
        p, frequency = inclusion[rank], float(kept[row]) / trials
        assert abs(frequency - p) < 5 * math.sqrt(p * (1 - p) / trials), (rank, row, frequency, p)
    assert all(a < b for a, b in zip(inclusion, inclusion[1:], strict=False))  # a higher loss, kept more often
    assert int(kept.argmax()) == 5  # the biggest loser, most often
    expected_mean = sum(p * float(losses[row]) for p, row in zip(inclusion, by_loss, strict=True)) / _count(n, keep)
    spread = torch.tensor(kept_means).std().item()
    mean = sum(kept_means) / trials
    assert abs(mean - expected_mean) < 5 * spread / math.sqrt(trials)
    assert mean > float(losses.mean()) + 5 * spread / math.sqrt(trials)


def test_keep_1_keeps_every_row_in_order_without_scoring():
    x, y = _batch(6)

    def never(v):
        raise AssertionError("the model was called with nothing to select")

    for keep, n in ((1, 6), (0.95, 6)):  # round(0.95 * 6) = 6
        kept_x, kept_y = cf.select_using_loss(x[:n], y[:n], never, F.cross_entropy, keep=keep)
        assert torch.equal(kept_x, x[:n]) and torch.equal(kept_y, y[:n])


class _SizeRecorder(torch.nn.Module):
    """Records the input it is called on; its output is a fixed per-pixel score averaged."""

    def __init__(self, classes=3, channels=3):
        super().__init__()
        self.seen = []
        self.weight = torch.nn.Parameter(torch.randn(classes, channels, generator=torch.Generator().manual_seed(1)))

    def forward(self, v):
        self.seen.append(v.clone())
        pooled = v.flatten(2).mean(dim=2) if v.ndim > 2 else v
        return pooled @ self.weight.t()


@pytest.mark.parametrize(
    ("shape", "mode"), [((6, 3, 16), "linear"), ((6, 3, 16, 12), "bilinear"), ((6, 3, 8, 8, 8), "trilinear")]
)
@pytest.mark.parametrize("scale_factor", [0.5, 0.75, 0.3])
def test_scale_factor_below_1_scores_on_the_interpolated_input_and_keeps_full_size_rows(shape, mode, scale_factor):
    """Interpolated at the given factor, as Composer does (not at the factor of the rounded
    size: 16 * 0.3 = 4.8 gives 4 samples spaced 1 / 0.3 apart, not 16 / 4)."""
    x = torch.rand(shape, generator=torch.Generator().manual_seed(0))
    x = x * torch.linspace(0.1, 3, shape[0]).view(-1, *[1] * (len(shape) - 1))  # distinct losses
    y = torch.randint(0, 3, (shape[0],), generator=torch.Generator().manual_seed(1))
    model = _SizeRecorder()
    kept_x, kept_y = cf.select_using_loss(
        x, y, model, F.cross_entropy, keep=0.5, scale_factor=scale_factor, generator=torch.Generator().manual_seed(2)
    )
    small = F.interpolate(x, scale_factor=scale_factor, mode=mode, align_corners=False, recompute_scale_factor=False)
    (seen,) = model.seen
    assert seen.shape == (shape[0], 3, *(int(s * scale_factor) for s in shape[2:]))
    torch.testing.assert_close(seen, small)
    want_x, want_y = _definition(x, y, _eval_losses(_SizeRecorder(), small, y), 0.5, torch.Generator().manual_seed(2))
    assert torch.equal(kept_x, want_x) and torch.equal(kept_y, want_y) and kept_x.shape[1:] == x.shape[1:]


def test_dense_losses_are_averaged_per_example():
    """A loss of shape (N, L) (a token or pixel loss) ranks each example by its mean."""
    g = torch.Generator().manual_seed(0)
    logits, target = torch.randn(10, 3, 5, generator=g), torch.randint(0, 3, (10, 5), generator=g)
    kept_x, kept_y = cf.select_using_loss(
        logits, target, lambda v: v, F.cross_entropy, keep=0.4, generator=torch.Generator().manual_seed(4)
    )
    per_example = F.cross_entropy(logits, target, reduction="none").mean(dim=1)
    want_x, want_y = _definition(logits, target, per_example, 0.4, torch.Generator().manual_seed(4))
    assert torch.equal(kept_x, want_x) and torch.equal(kept_y, want_y)


def test_seeded_calls_repeat_and_the_seed_matters():
    x, y = _batch(32)
    model = _classifier()

    def call(seed):
        return cf.select_using_loss(x, y, model, F.cross_entropy, generator=torch.Generator().manual_seed(seed))[1]

    assert torch.equal(call(0), call(0)) and not torch.equal(call(0), call(1))


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_dtype_memory_format_and_the_callers_tensors_are_kept(dtype):
    x = torch.randn(6, 3, 4, 4).to(dtype).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 3, (6,))
    before_x, before_y = x.clone(), y.clone()
    model = torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(3, 3)).to(dtype)
    kept_x, kept_y = cf.select_using_loss(
        x, y, model, F.cross_entropy, keep=0.5, scale_factor=0.5, generator=torch.Generator().manual_seed(0)
    )
    assert kept_x.dtype == dtype and kept_y.dtype == torch.long
    assert kept_x.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(x, before_x) and torch.equal(y, before_y)


def test_scoring_leaves_the_models_modes_and_batch_norm_statistics_as_they_were():
    """Scored in eval mode: running statistics and the batch-norm counter unchanged, dropout off,
    and each submodule's own mode given back (here one batch norm is frozen in eval mode)."""
    model = torch.nn.Sequential(
        torch.nn.Linear(6, 8),
        torch.nn.BatchNorm1d(8),
        torch.nn.Dropout(0.5),
        torch.nn.BatchNorm1d(8),
        torch.nn.Linear(8, 3),
    ).train()
    model[3].eval()
    x, y = _batch(16)
    buffers = {k: v.clone() for k, v in model.state_dict().items()}
    modes = [m.training for m in model.modules()]
    cf.select_using_loss(x, y, model, F.cross_entropy, keep=0.5, generator=torch.Generator().manual_seed(0))
    assert [m.training for m in model.modules()] == modes == [True, True, True, True, False, True]
    assert all(torch.equal(v, buffers[k]) for k, v in model.state_dict().items())
    model.eval()
    cf.select_using_loss(x, y, model, F.cross_entropy, keep=0.5, generator=torch.Generator().manual_seed(0))
    assert not any(m.training for m in model.modules())


# -- bad input ------------------------------------------------------------------------------------


def _bad_loss(output, target):
    return 0


def test_a_loss_without_reduction_is_refused_naming_loss_fun():
    """Composer's test: a TypeError that says the loss must take `reduction`."""
    x, y = _batch(4)
    with pytest.raises(
        TypeError,
        match=exactly(
            "loss_fun=_bad_loss: the loss function must take a keyword argument `reduction`. Selective Backprop calls "
            "it as loss(outputs, target, reduction='none') for per-example losses "
            "(torch.nn.functional.cross_entropy does)"
        ),
    ):
        cf.select_using_loss(x, y, _classifier(), _bad_loss, keep=1, scale_factor=1)
    with pytest.raises(TypeError, match=r"^loss_fun=3: the loss function must be callable"):
        cf.select_using_loss(x, y, _classifier(), 3)
    with pytest.raises(TypeError, match="^loss_fun=CrossEntropyLoss: the loss function must take a keyword argument"):
        cf.select_using_loss(x, y, _classifier(), torch.nn.CrossEntropyLoss())  # a module's forward has none
    kept = cf.select_using_loss(x, y, _classifier(), lambda o, t, **kw: F.cross_entropy(o, t, **kw))
    assert kept[0].shape == (2, 6)  # a loss taking **kwargs is accepted


@pytest.mark.parametrize(
    ("loss_fun", "got"), [(lambda o, t, reduction: F.cross_entropy(o, t), "()"), (lambda o, t, reduction: 0.5, "float")]
)
def test_a_loss_that_does_not_give_one_loss_per_example_is_refused(loss_fun, got):
    x, y = _batch(4)
    with pytest.raises(
        ValueError,
        match=exactly(
            f"loss_fun: with reduction='none' it must give one loss per example, shape (4,) or (4, ...), got {got}"
        ),
    ):
        cf.select_using_loss(x, y, _classifier(), loss_fun)


@pytest.mark.parametrize(
    ("input", "target", "message"),
    [
        (torch.tensor(1.0), torch.tensor([0]), "input: a batch tensor (N, ...) is needed, got ()"),
        ([[0.5] * 6] * 4, torch.tensor([0, 1, 2, 0]), "input: a batch tensor (N, ...) is needed, got list"),
        (
            torch.zeros(4, 6),
            torch.tensor(1),
            "target: a tensor with one row per example of input (4) is needed, got ()",
        ),
        (torch.zeros(4, 6), [0, 1, 2, 0], "target: a tensor with one row per example of input (4) is needed, got list"),
    ],
)
def test_an_input_or_target_that_is_not_a_batch_is_refused(input, target, message):
    with pytest.raises(ValueError, match=exactly(message)):
        cf.select_using_loss(input, target, _classifier(), F.cross_entropy)


_KEEP = "must be a number in (0, 1]"
_SCALE = "must be a number in (0, 1]"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"keep": 0}, f"keep=0: {_KEEP}"),
        ({"keep": 1.5}, f"keep=1.5: {_KEEP}"),
        ({"keep": -0.5}, f"keep=-0.5: {_KEEP}"),
        ({"keep": float("nan")}, f"keep=nan: {_KEEP}"),
        ({"keep": "0.5"}, f"keep='0.5': {_KEEP}"),
        ({"keep": True}, f"keep=True: {_KEEP}"),
        ({"scale_factor": 0}, f"scale_factor=0: {_SCALE}"),
        ({"scale_factor": 2}, f"scale_factor=2: {_SCALE}"),
        ({"scale_factor": None}, f"scale_factor=None: {_SCALE}"),
    ],
)
def test_bad_selection_hyperparameters_fail_with_a_clear_error(kwargs, message):
    x, y = _batch(4)
    with pytest.raises(ValueError, match=exactly(message)):
        SelectiveBackprop(**kwargs)
    with pytest.raises(ValueError, match=exactly(message)):
        cf.select_using_loss(x, y, _classifier(), F.cross_entropy, **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"start": -0.1}, r"start=-0.1: must be a number in \[0, 1\)$"),
        ({"start": 1}, r"start=1: must be a number in \[0, 1\)$"),
        ({"start": 0.9}, r"start=0.9, end=0.9: the interval must end after it starts$"),
        ({"end": 1.5}, r"end=1.5: must be a number in \(0, 1\]$"),
        ({"end": 0}, r"end=0: must be a number in \(0, 1\]$"),
        ({"start": 0.95}, r"start=0.95, end=0.9: the interval must end after it starts$"),
        ({"start": "0.5"}, r"start='0.5': must be a number"),
        ({"end": None}, r"end=None: must be a number"),
        ({"interrupt": 1}, r"interrupt=1: must be 0 or an integer in \[2, inf\)$"),
        ({"interrupt": -1}, r"interrupt=-1"),
        ({"interrupt": 2.0}, r"interrupt=2.0"),
        ({"interrupt": True}, "interrupt=True"),
    ],
)
def test_bad_schedules_fail_with_a_clear_error(kwargs, words):
    with pytest.raises(ValueError, match="^" + words):
        SelectiveBackprop(**kwargs)


def test_should_selective_backprop_refuses_a_bad_interrupt_or_interval():
    with pytest.raises(ValueError, match=r"^interrupt=1: "):
        should_selective_backprop(0.6, 0, interrupt=1)
    with pytest.raises(ValueError, match=r"^start=0.9, end=0.5: the interval must not end before it starts$"):
        should_selective_backprop(0.6, 0, start=0.9, end=0.5)


def test_resizing_a_batch_that_is_not_3_to_5_d_is_refused():
    """Composer's test: scale_factor < 1 on a 2-D input is a ValueError."""
    x, y = _batch(4)
    with pytest.raises(
        ValueError,
        match=r"^scale_factor=0.5: resizing needs an input \(N, C, L\), \(N, C, H, W\) "
        r"or \(N, C, D, H, W\), got shape \(4, 6\); use scale_factor=1$",
    ):
        cf.select_using_loss(x, y, _classifier(), F.cross_entropy, 1, 0.5)


def test_a_target_of_another_batch_size_is_refused():
    x, y = _batch(4)
    with pytest.raises(
        ValueError,
        match=r"^target: a tensor with one row per example of input \(4\) is needed, "
        r"got \(3,\)$",
    ):
        cf.select_using_loss(x, y[:3], _classifier(), F.cross_entropy)


# -- Composer's tests, with our import ------------------------------------------------------------


@pytest.mark.parametrize(("epoch", "batch", "interrupt"), [(10, 0, 0), (10, 0, 2), (10, 2, 2)])
def test_composer_should_select_in_its_interval(epoch, batch, interrupt):
    assert should_selective_backprop(epoch, batch, 5, 15, interrupt)


@pytest.mark.parametrize(("epoch", "batch", "interrupt"), [(0, 0, 0), (20, 0, 0), (10, 1, 2)])
def test_composer_should_not_select_outside_it(epoch, batch, interrupt):
    assert not should_selective_backprop(epoch, batch, 5, 15, interrupt)


def _ones_loss(output, target, reduction="none"):
    return torch.ones_like(target)


@pytest.mark.parametrize("keep", [1, 0.5, 0.75])
def test_composer_output_shape(keep):
    torch.manual_seed(42)
    x, y = torch.randn(16, 8), torch.randint(2, (16,))
    kept_x, kept_y = cf.select_using_loss(x, y, torch.nn.Linear(8, 1), _ones_loss, keep, 1)
    assert kept_x.shape == (int(16 * keep), 8) and kept_y.shape == (int(16 * keep),)


@pytest.mark.parametrize("keep", [0.5, 0.75, 1])
@pytest.mark.parametrize("scale_factor", [0.5, 0.75])
def test_composer_output_shape_scaled(keep, scale_factor):
    torch.manual_seed(42)
    x, y = torch.randn(16, 3, 32, 32), torch.randint(2, (16,))
    kept_x, kept_y = cf.select_using_loss(x, y, torch.nn.Conv2d(3, 8, 3), _ones_loss, keep, scale_factor)
    assert kept_x.shape == (int(16 * keep), 3, 32, 32) and kept_y.shape == (int(16 * keep),)


# -- the schedule ---------------------------------------------------------------------------------


def test_should_selective_backprop_matches_its_definition_on_a_grid():
    durations = [0.0, 0.1, 0.3, 0.49, 0.5, 0.51, 0.7, 0.89, 0.9, 0.95, 1.0]
    for start, end, interrupt in itertools.product([0.0, 0.3, 0.5], [0.5, 0.9, 1.0], [0, 2, 3, 5]):
        if start > end:
            continue
        for duration, batch_idx in itertools.product(durations, range(12)):
            selects = start <= duration < end and (interrupt == 0 or (batch_idx + 1) % interrupt != 0)
            assert should_selective_backprop(duration, batch_idx, start, end, interrupt) is selects


def _state_at(batch, total, batch_in_epoch, model=None, precision="fp32"):
    state = State(
        model=model if model is not None else torch.nn.Identity(),
        max_duration=Duration.parse(f"{total}ba"),
        loss_fn=F.cross_entropy,
        precision=precision,
        seed=0,
    )
    state.timestamp.batch, state.timestamp.batch_in_epoch = batch, batch_in_epoch
    return state


def test_the_defaults_select_on_every_other_batch_from_half_to_nine_tenths():
    """Composer's defaults, in the functional form and the class: start 0.5, end 0.9, interrupt 2."""
    assert [should_selective_backprop(0.5, i) for i in range(4)] == [True, False, True, False]
    assert not should_selective_backprop(0.49, 0) and not should_selective_backprop(0.9, 0)
    algo = SelectiveBackprop()
    assert [algo.match(Event.AFTER_DATALOADER, _state_at(60, 100, i)) for i in range(4)] == [True, False, True, False]
    assert not algo.match(Event.AFTER_DATALOADER, _state_at(49, 100, 0))
    assert not algo.match(Event.AFTER_DATALOADER, _state_at(90, 100, 0))


# -- in the Trainer -------------------------------------------------------------------------------


class _Snapshot(Algorithm):
    """Listed before SelectiveBackprop: the model (weights and modes) and batch it scores with."""

    def __init__(self):
        self.models, self.batches = [], []

    def match(self, event, state):
        return event is Event.AFTER_DATALOADER

    def apply(self, event, state, logger=None):
        self.models.append(copy.deepcopy(state.model))
        self.batches.append(copy.deepcopy(state.batch))


def _selecting_batches(total, per_epoch, start, end, interrupt):
    """Which batches select, by the definition: progress (batches done / total) in [start, end)
    and not an interrupting batch of its epoch."""
    return [start <= b / total < end and (interrupt == 0 or (b % per_epoch + 1) % interrupt != 0) for b in range(total)]


@pytest.mark.parametrize(("start", "end", "interrupt"), [(0.3, 0.8, 2), (0.0, 1.0, 0), (0.2, 0.7, 3)])
def test_in_the_trainer_the_batch_sizes_follow_the_schedule_and_the_rows_the_rule(start, end, interrupt):
    """Two epochs of five batches of 10; the rows the model sees are the definition's, with the
    draws replayed from the class's generator and the losses of the model as it was at that step."""
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(10, 6, generator=g), torch.randint(0, 3, (10,), generator=g)) for _ in range(5)]
    snapshot, seen = _Snapshot(), Observed()
    algo = SelectiveBackprop(start=start, end=end, keep=0.3, interrupt=interrupt)
    Trainer(_classifier(bn=True), batches, "2ep", algorithms=[snapshot, algo, seen], seed=0, device="cpu").fit()
    selects = _selecting_batches(10, 5, start, end, interrupt)
    assert [len(x) for x in seen.inputs] == [3 if s else 10 for s in selects]
    assert any(selects) and not all(selects) or (start, end, interrupt) == (0.0, 1.0, 0)
    replayed = replayed_generator(SelectiveBackprop, seed=0)
    for step, selected in enumerate(selects):
        (x, y), x_seen, y_seen = snapshot.batches[step], seen.inputs[step], seen.targets[step]
        if not selected:
            assert torch.equal(x_seen, x) and torch.equal(y_seen, y)
            continue
        want_x, want_y = _definition(x, y, _eval_losses(snapshot.models[step], x, y), 0.3, replayed)
        assert torch.equal(x_seen, want_x) and torch.equal(y_seen, want_y)
    for out, y_seen, loss in zip(seen.outputs, seen.targets, seen.losses, strict=True):
        torch.testing.assert_close(loss, F.cross_entropy(out, y_seen))  # the loss is on the kept rows


class _After(Algorithm):
    """Listed after SelectiveBackprop: the model's modes and buffers once it has scored."""

    def __init__(self):
        self.modes, self.buffers = [], []

    def match(self, event, state):
        return event is Event.AFTER_DATALOADER

    def apply(self, event, state, logger=None):
        self.modes.append([m.training for m in state.model.modules()])
        self.buffers.append({k: v.clone() for k, v in state.model.state_dict().items()})


@pytest.mark.parametrize("parallel", ["single", "dp"])
def test_in_the_trainer_scoring_leaves_train_mode_and_batch_norm_statistics_as_they_were(parallel):
    """Under parallel='dp' the Trainer's model is a DataParallel wrapper; it is unwrapped to score."""
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(8, 6, generator=g), torch.randint(0, 3, (8,), generator=g)) for _ in range(4)]
    snapshot, after, seen = _Snapshot(), _After(), Observed()
    Trainer(
        _classifier(bn=True),
        batches,
        "4ba",
        algorithms=[snapshot, SelectiveBackprop(start=0.0, interrupt=0), after, seen],
        seed=0,
        device="cpu",
        parallel=parallel,
    ).fit()
    assert [len(x) for x in seen.inputs] == [4, 4, 4, 4]
    for model, modes, buffers in zip(snapshot.models, after.modes, after.buffers, strict=True):
        assert modes == [m.training for m in model.modules()] and all(modes)
        assert all(torch.equal(v, buffers[k]) for k, v in model.state_dict().items())


def test_dict_batches_are_selected_by_key_and_their_other_items_left_alone():
    g = torch.Generator().manual_seed(0)
    batches = [
        {
            "features": torch.randn(8, 6, generator=g),
            "label": torch.randint(0, 3, (8,), generator=g),
            "note": "kept as it is",
        }
        for _ in range(2)
    ]
    snapshot, seen = _Snapshot(), Observed(input_key="features", target_key="label")
    algo = SelectiveBackprop(start=0.0, keep=0.5, interrupt=0, input_key="features", target_key="label")
    Trainer(
        _classifier(),
        batches,
        "2ba",
        algorithms=[snapshot, algo, seen],
        seed=0,
        device="cpu",
        input_key="features",
        target_key="label",
    ).fit()
    replayed = replayed_generator(SelectiveBackprop, seed=0)
    for batch, model, x_seen, y_seen in zip(snapshot.batches, snapshot.models, seen.inputs, seen.targets, strict=True):
        x, y = batch["features"], batch["label"]
        want_x, want_y = _definition(x, y, _eval_losses(model, x, y), 0.5, replayed)
        assert torch.equal(x_seen, want_x) and torch.equal(y_seen, want_y)


def test_keep_1_in_the_trainer_never_scores():
    """Nothing to select: the algorithm runs once, at INIT, to check the loss, and never after."""
    calls = []
    model = _classifier()
    model.register_forward_hook(lambda m, i, o: calls.append(len(i[0])))
    trainer = Trainer(
        model,
        [_batch(6)] * 3,
        "3ba",
        algorithms=[SelectiveBackprop(start=0.0, keep=1, interrupt=0)],
        seed=0,
        device="cpu",
    )
    trainer.fit()
    assert calls == [6, 6, 6]  # the training forward passes alone
    assert [t.event for t in trainer.engine.trace if "SelectiveBackprop" in t.algorithms] == [Event.INIT]


def test_the_class_scores_on_the_input_resized_by_its_scale_factor():
    recorder = _SizeRecorder()
    state = _state_at(6, 10, 6, model=recorder)
    x = torch.rand(8, 3, 8, 6, generator=torch.Generator().manual_seed(0))
    state.batch = (x, torch.randint(0, 3, (8,), generator=torch.Generator().manual_seed(1)))
    algo = SelectiveBackprop(keep=0.5, scale_factor=0.5)
    algo.apply(Event.INIT, state)
    assert algo.match(Event.AFTER_DATALOADER, state)
    algo.apply(Event.AFTER_DATALOADER, state)
    (seen,) = recorder.seen
    torch.testing.assert_close(
        seen, F.interpolate(x, scale_factor=0.5, mode="bilinear", align_corners=False, recompute_scale_factor=False)
    )
    assert state.batch[0].shape == (4, 3, 8, 6)


def test_under_amp_bf16_the_scoring_pass_runs_in_the_trainers_autocast():
    """The card: scoring uses the Trainer's autocast, so the ranking sees the losses the step computes."""
    dtypes = []
    model = _classifier()
    model.register_forward_hook(lambda m, i, o: dtypes.append((torch.is_grad_enabled(), o.dtype)))
    Trainer(
        model,
        [_batch(8)],
        "1ba",
        algorithms=[SelectiveBackprop(start=0.0, interrupt=0)],
        seed=0,
        device="cpu",
        precision="amp_bf16",
    ).fit()
    assert dtypes == [(False, torch.bfloat16), (True, torch.bfloat16)]  # the scoring pass, then the training one


def test_a_trainer_loss_without_reduction_is_refused_before_training():
    def loss(outputs, target):
        return F.cross_entropy(outputs, target)

    with pytest.raises(
        TypeError,
        match=r"^Trainer loss_fn=loss: the loss function must take a keyword argument "
        r"`reduction`\.",
    ):
        Trainer(_classifier(), [_batch(6)], "1ba", loss_fn=loss, algorithms=[SelectiveBackprop()], device="cpu")


def test_seeded_runs_repeat_and_the_seed_matters():
    def run(seed):
        seen = Observed()
        Trainer(
            _classifier(),
            [_batch(16, seed=s) for s in range(2)],
            "2ba",
            seed=seed,
            device="cpu",
            algorithms=[SelectiveBackprop(start=0.0, interrupt=0), seen],
        ).fit()
        return seen.targets

    first = run(0)
    assert all(torch.equal(a, b) for a, b in zip(first, run(0), strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(first, run(1), strict=True))


@pytest.mark.parametrize("listed_first", ["SelectiveBackprop", "MixUp"])
def test_selective_backprop_runs_before_mixup_wherever_it_is_listed(listed_first):
    """The Engine's ordering rule: Selective Backprop selects from the loader's batch, then MixUp mixes
    the kept rows, in either listed order (listed after MixUp it used to change the batch MixUp had
    mixed, which MixUp refused)."""
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(10, 6, generator=g), torch.randint(0, 3, (10,), generator=g)) for _ in range(2)]
    seen = Observed()
    pair = [SelectiveBackprop(start=0.0, keep=0.4, interrupt=0), MixUp(alpha=1.0)]
    Trainer(
        _classifier(),
        batches,
        "2ba",
        seed=0,
        device="cpu",
        algorithms=[*(pair if listed_first == "SelectiveBackprop" else pair[::-1]), seen],
    ).fit()
    assert [len(x) for x in seen.inputs] == [4, 4] and all(t.shape == (4, 3) for t in seen.targets)
    mixup = pair[1]
    assert mixup.indices is not None and len(mixup.indices) == 4  # MixUp mixed the 4 kept rows


# -- on a GPU -------------------------------------------------------------------------------------


def _cuda_state(model, batch, precision="fp32"):
    state = State(
        model=model,
        max_duration=Duration.parse("10ba"),
        loss_fn=F.cross_entropy,
        precision=precision,
        device=torch.device("cuda"),
        seed=0,
    )
    state.timestamp.batch = state.timestamp.batch_in_epoch = 6  # progress 0.6, batch 7 of the epoch: it selects
    state.batch = batch
    return state


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_on_cuda_the_selection_stays_on_the_device_and_matches_the_cpu(dtype):
    x, y = _batch(16)
    model = _classifier(bn=True)
    kept_x, kept_y = cf.select_using_loss(
        x.cuda().to(dtype),
        y.cuda(),
        copy.deepcopy(model).cuda().to(dtype),
        F.cross_entropy,
        keep=0.5,
        generator=torch.Generator().manual_seed(0),
    )
    assert kept_x.device.type == "cuda" and kept_x.dtype == dtype and kept_y.device.type == "cuda"
    if dtype == torch.float32:  # float16 losses may tie or reorder
        want_x, want_y = _definition(x, y, _eval_losses(model, x, y), 0.5, torch.Generator().manual_seed(0))
        torch.testing.assert_close(kept_x.cpu(), want_x)
        assert torch.equal(kept_y.cpu(), want_y)


@pytest.mark.cuda
@pytest.mark.parametrize("precision", ["fp32", "amp_bf16"])
def test_on_cuda_the_class_makes_no_host_sync(precision):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3),
        torch.nn.BatchNorm2d(8),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(8, 4),
    ).cuda()
    batch = (torch.randn(32, 3, 16, 16, device="cuda"), torch.randint(0, 4, (32,), device="cuda"))
    algo = SelectiveBackprop(keep=0.25, scale_factor=0.5)
    state = _cuda_state(model, batch, precision)
    algo.apply(Event.INIT, state)
    assert algo.match(Event.AFTER_DATALOADER, state)
    algo.apply(Event.AFTER_DATALOADER, state)  # warm up (cuDNN, the pinned-memory pool)
    state.batch = batch
    buffers = {k: v.clone() for k, v in model.state_dict().items()}
    with no_host_sync():
        algo.apply(Event.AFTER_DATALOADER, state)
    x, y = state.batch
    assert x.shape == (8, 3, 16, 16) and x.device.type == "cuda" and x.dtype == torch.float32
    assert y.shape == (8,) and y.device.type == "cuda"
    assert all(torch.equal(v, buffers[k]) for k, v in model.state_dict().items()) and model.training


def test_it_reports_the_batches_it_cut_and_the_examples_they_lost():
    batches = [_batch(8, seed=i) for i in range(4)]
    # interval [0, 1), a full batch every other batch: batches 1 and 3 are selected, keeping 4 of 8
    algo = SelectiveBackprop(start=0.0, end=1.0, keep=0.5, interrupt=2)
    trainer = Trainer(_classifier(), batches, "4ba", algorithms=[algo], seed=0, device="cpu")
    trainer.fit()
    assert trainer.method_log.records["SelectiveBackprop"]["activity"] == {"batches_selected": 2, "examples_dropped": 8}


def test_keeping_every_example_did_not_act():
    trainer = Trainer(
        _classifier(), [_batch(8)], "1ba", algorithms=[SelectiveBackprop(start=0.0, keep=1.0)], seed=0, device="cpu"
    )
    trainer.fit()
    assert not trainer.method_log.acted("SelectiveBackprop")


# -- dict batches: a tokenizer's input_ids beside their attention_mask -------------------------------


class _TextClassifier(torch.nn.Module):
    """Mean-pools the embeddings of the unmasked tokens; called as a Hugging Face model is,
    ``model(input_ids=..., attention_mask=..., token_type_ids=...)`` (other entries of the batch
    are taken and ignored), and returns a dict with ``"logits"``. It records the batch sizes of the
    tensors it uses."""

    def __init__(self, vocab=20, classes=3):
        super().__init__()
        torch.manual_seed(0)
        self.embed, self.head, self.seen = torch.nn.Embedding(vocab, 6), torch.nn.Linear(6, classes), []

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, **ignored):
        used = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
        self.seen.append({k: v.shape[0] for k, v in used.items() if v is not None})
        mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask
        hidden = self.embed(input_ids) * mask.unsqueeze(-1)
        if token_type_ids is not None:
            hidden = hidden + token_type_ids.unsqueeze(-1)
        return {"logits": self.head(hidden.sum(1) / mask.sum(1, keepdim=True))}


def _text_batch(n=10, length=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, length + 1, (n,), generator=g)
    return {
        "input_ids": torch.randint(0, 20, (n, length), generator=g),
        "attention_mask": (torch.arange(length) < lengths.unsqueeze(1)).long(),
        "token_type_ids": torch.randint(0, 2, (n, length), generator=g),
        "example": torch.arange(n),  # which example each row is
        "position_bias": torch.randn(length, length, generator=g),  # not per example: 5 rows, not 10
        "max_length": length,
        "source": "a note",
    }


_PER_EXAMPLE = ("input_ids", "attention_mask", "token_type_ids", "example")


def _masked_losses(model, batch, y):
    model = copy.deepcopy(model).eval()
    with torch.no_grad():
        return F.cross_entropy(model(**batch)["logits"], y, reduction="none")


def _assert_rows_selected_alongside(batch, kept, rows):
    """Every per-example tensor holds the original's ``rows``; every other entry is the same object."""
    assert list(kept) == list(batch)
    for key, value in batch.items():
        if key in _PER_EXAMPLE:
            assert torch.equal(kept[key], value[rows]), key
        else:
            assert kept[key] is value, key


@pytest.mark.parametrize("keep", [0.3, 0.5])
def test_a_dict_batch_is_scored_with_its_mask_and_cut_to_the_same_rows_in_every_entry(keep):
    """``model(**batch)`` scores each example with its attention mask (the definition's losses are
    the masked model's); every tensor with a row per example keeps the drawn rows, in order."""
    batch, y = _text_batch(), torch.randint(0, 3, (10,), generator=torch.Generator().manual_seed(1))
    model = _TextClassifier()
    copies = {k: v.clone() for k, v in batch.items() if isinstance(v, torch.Tensor)}
    kept, kept_y = cf.select_using_loss(
        batch, y, model, F.cross_entropy, keep=keep, generator=torch.Generator().manual_seed(2)
    )
    losses = _masked_losses(model, batch, y)
    rows, want_y = _definition(torch.arange(10), y, losses, keep, torch.Generator().manual_seed(2))
    assert torch.equal(kept_y, want_y) and len(rows) == _count(10, keep)
    _assert_rows_selected_alongside(batch, kept, rows)
    assert all(torch.equal(batch[k], v) for k, v in copies.items())  # the caller's batch is not modified
    assert model.seen[-1] == {"input_ids": 10, "attention_mask": 10, "token_type_ids": 10}


def test_a_dict_batch_with_model_input_calls_the_model_on_that_entry_and_still_cuts_every_entry():
    batch, y = _text_batch(), torch.randint(0, 3, (10,), generator=torch.Generator().manual_seed(1))
    model = _TextClassifier()
    kept, kept_y = cf.select_using_loss(
        batch,
        y,
        lambda ids: model(ids)["logits"],
        F.cross_entropy,
        keep=0.5,
        generator=torch.Generator().manual_seed(2),
        model_input="input_ids",
    )
    losses = _masked_losses(model, {"input_ids": batch["input_ids"]}, y)
    rows, want_y = _definition(torch.arange(10), y, losses, 0.5, torch.Generator().manual_seed(2))
    assert torch.equal(kept_y, want_y)
    _assert_rows_selected_alongside(batch, kept, rows)
    assert model.seen[-1] == {"input_ids": 10}


def test_a_dict_batch_through_a_hugging_face_model():
    """A real ``transformers`` model, called ``model(**batch)``: its ``SequenceClassifierOutput``'s
    logits reach the loss, and the kept rows are the definition's in every entry."""
    transformers = pytest.importorskip("transformers", reason="transformers is not installed in the test venv")
    config = transformers.BertConfig(
        vocab_size=20, hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16, num_labels=3
    )
    torch.manual_seed(0)
    model = transformers.BertForSequenceClassification(config)
    batch, y = _text_batch(n=8), torch.randint(0, 3, (8,), generator=torch.Generator().manual_seed(1))
    scoring = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
    model.train()
    kept, kept_y = cf.select_using_loss(
        scoring, y, model, F.cross_entropy, 0.5, generator=torch.Generator().manual_seed(3)
    )
    assert model.training  # scored in eval mode (no dropout), then given its mode back
    model.eval()
    with torch.no_grad():
        output = model(**scoring)
    assert isinstance(output, transformers.modeling_outputs.SequenceClassifierOutput)
    rows, want_y = _definition(
        torch.arange(8), y, F.cross_entropy(output.logits, y, reduction="none"), 0.5, torch.Generator().manual_seed(3)
    )
    assert torch.equal(kept_y, want_y)
    for key, value in scoring.items():
        assert torch.equal(kept[key], value[rows]), key


def test_keep_1_gives_a_dict_batch_back_with_every_entry_as_it_was():
    batch, y = _text_batch(), torch.zeros(10, dtype=torch.long)
    model = _TextClassifier()
    kept, kept_y = cf.select_using_loss(batch, y, model, F.cross_entropy, keep=1.0)
    assert kept_y is y and all(kept[k] is v for k, v in batch.items()) and model.seen == []


@pytest.mark.parametrize(
    ("input", "kwargs", "error", "message"),
    [
        (
            {"input_ids": torch.zeros(4, 3, dtype=torch.long)},
            {"scale_factor": 0.5},
            ValueError,
            "scale_factor=0.5: resizing a mapping batch needs model_input, the entry to resize and call the model "
            "on; or use scale_factor=1",
        ),
        (
            {"input_ids": torch.zeros(4, 3, dtype=torch.long)},
            {"model_input": "pixel_values"},
            KeyError,
            "model_input='pixel_values': the batch has no such entry (keys ['input_ids'])",
        ),
        (
            {"x": torch.tensor(1.0)},
            {"model_input": "x"},
            ValueError,
            "input['x']: a batch tensor (N, ...) is needed, got ()",
        ),
        (
            {"x": torch.zeros(3, 6)},
            {"model_input": "x"},
            ValueError,
            "target: a tensor with one row per example of input (3) is needed, got (4,)",
        ),
        (
            torch.zeros(4, 6),
            {"model_input": "x"},
            ValueError,
            "model_input='x': only for a mapping batch; the input is a Tensor",
        ),
    ],
)
def test_a_bad_dict_batch_is_refused_with_one_line(input, kwargs, error, message):
    with pytest.raises(error) as raised:
        cf.select_using_loss(input, torch.zeros(4, dtype=torch.long), _classifier(), F.cross_entropy, **kwargs)
    assert str(raised.value).strip("\"'") == message


@pytest.mark.parametrize("input_key", [None, "input_ids"])
def test_in_the_trainer_every_entry_of_a_dict_batch_is_cut_to_the_kept_rows(input_key):
    """``Trainer(input_key=None)`` calls ``model(**batch)`` (a Hugging Face model given its mask and
    labels): the model sees every per-example entry at the kept size and the rows still belong
    together; with ``input_key="input_ids"`` the other entries are cut alike."""
    batches = [_text_batch(n=8, seed=s) | {"labels": torch.arange(8) % 3} for s in range(2)]
    kept_batches = []

    class Record(Algorithm):
        def match(self, event, state):
            return event is Event.BEFORE_FORWARD

        def apply(self, event, state, logger=None):
            kept_batches.append(dict(state.batch))

    model = _TextClassifier()
    Trainer(
        model,
        batches,
        "2ba",
        algorithms=[
            SelectiveBackprop(start=0, keep=0.5, interrupt=0, input_key=input_key, target_key="labels"),
            Record(),
        ],
        loss_fn=F.cross_entropy,
        seed=0,
        device="cpu",
        input_key=input_key,
        target_key="labels",
    ).fit()
    for original, kept in zip(batches, kept_batches, strict=True):
        rows = kept["example"]
        assert len(rows) == 4
        for key in (*_PER_EXAMPLE, "labels"):
            assert torch.equal(kept[key], original[key][rows]), key
        assert kept["position_bias"] is original["position_bias"] and kept["source"] == "a note"
    # each batch scored at full size, then trained on the kept rows, every entry the model is given alike
    assert [sorted(set(seen.values())) for seen in model.seen] == [[8], [4], [8], [4]]
    assert all(len(seen) == (1 if input_key else 3) for seen in model.seen)


@pytest.mark.cuda
def test_on_cuda_a_dict_batch_is_cut_on_the_device_with_no_host_sync():
    batch = {k: v.cuda() if isinstance(v, torch.Tensor) else v for k, v in _text_batch(n=16).items()}
    y, model = (torch.arange(16) % 3).cuda(), _TextClassifier().cuda()
    cf.select_using_loss(batch, y, model, F.cross_entropy, keep=0.25)  # warm up (the pinned-memory pool)
    generator = torch.Generator().manual_seed(0)
    with no_host_sync():
        kept, kept_y = cf.select_using_loss(batch, y, model, F.cross_entropy, keep=0.25, generator=generator)
    rows = kept["example"]
    assert rows.device.type == "cuda" and kept_y.device.type == "cuda" and len(rows) == 4
    _assert_rows_selected_alongside(batch, kept, rows)
    assert torch.equal(kept_y, y[rows])
