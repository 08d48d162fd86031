"""Each algorithm's generator: seeded from the Trainer's seed, the rank, the class name and which
instance of its class it is in the Trainer's list, so two instances of one class draw
independently, the first draws what a lone instance draws, and other methods change nothing; or,
given a seed (``manual_seed``), from that seed and the rank alone."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from algorithms import CutOut, MixUp
from algorithms.core import Trainer


def _trainer(algorithms, seed=0, duration="1ep", load_path=None):
    torch.manual_seed(0)  # the model's initial weights
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 10))
    data = [(torch.rand(4, 3, 8, 8, generator=torch.Generator().manual_seed(i)), torch.arange(4)) for i in range(2)]
    return Trainer(model, data, duration, algorithms=algorithms, seed=seed, load_path=load_path)


def _draws(algorithm, trainer, n=5):
    return torch.rand(n, generator=algorithm.generator(trainer.state))


def test_two_instances_of_one_class_draw_independently():
    first, second = CutOut(), CutOut()
    trainer = _trainer([first, second])
    assert not torch.equal(_draws(first, trainer), _draws(second, trainer))


def test_the_first_instance_draws_what_a_lone_instance_draws_and_other_methods_change_nothing():
    lone = CutOut()
    alone = _draws(lone, _trainer([lone]))
    first, second, other = CutOut(), CutOut(), MixUp()
    assert torch.equal(_draws(first, _trainer([other, first, second])), alone)
    again = CutOut()
    assert torch.equal(_draws(again, _trainer([again], seed=1)), _draws(CutOut(), _trainer([CutOut()], seed=1)))
    assert not torch.equal(_draws(again, _trainer([again], seed=1)), alone)  # another seed, another stream


def test_two_instances_train_differently_and_repeat_under_the_same_seed():
    def run():
        a, b = CutOut(length=0.5), CutOut(length=0.5)
        trainer = _trainer([a, b])
        trainer.fit()
        return (
            [p.detach().clone() for p in trainer.state.model.parameters()],
            a.generator(trainer.state).get_state(),
            b.generator(trainer.state).get_state(),
        )

    params1, a1, b1 = run()
    params2, a2, b2 = run()
    assert all(torch.equal(x, y) for x, y in zip(params1, params2, strict=True))  # the run repeats
    assert torch.equal(a1, a2) and torch.equal(b1, b2) and not torch.equal(a1, b1)


# A seed given to one algorithm (Algorithm.manual_seed): its draws depend on that seed and the rank
# alone.


def test_instances_given_different_seeds_draw_differently_and_one_seed_draws_alike():
    a, b, c = CutOut().manual_seed(1), CutOut().manual_seed(2), CutOut().manual_seed(1)
    trainer = _trainer([a, b, c])
    first = _draws(a, trainer)
    assert not torch.equal(first, _draws(b, trainer))
    assert torch.equal(first, _draws(c, trainer))  # as two torch generators given one seed


def test_a_given_seed_draws_the_same_whatever_the_trainer_seed_and_position():
    def given():
        return CutOut(length=0.5).manual_seed(7)

    lone = given()
    expected = _draws(lone, _trainer([lone], seed=0))
    assert torch.equal(expected, torch.rand(5, generator=torch.Generator().manual_seed(7)))  # rank 0: the seed itself
    for seed in (0, 1, 12345, None):  # the Trainer's seed, or none at all
        third = given()
        assert torch.equal(_draws(third, _trainer([MixUp(), CutOut(), third], seed=seed)), expected), seed
    # and without a given seed the same instance would draw something else
    unseeded = CutOut(length=0.5)
    assert not torch.equal(_draws(unseeded, _trainer([unseeded], seed=0)), expected)


def test_a_given_seed_still_draws_differently_on_each_rank():
    draws = [
        torch.rand(5, generator=CutOut().manual_seed(7).generator(SimpleNamespace(seed=0, rank=rank)))
        for rank in range(4)
    ]
    assert all(not torch.equal(draws[i], draws[j]) for i in range(4) for j in range(i))
    again = torch.rand(5, generator=CutOut().manual_seed(7).generator(SimpleNamespace(seed=99, rank=2)))
    assert torch.equal(again, draws[2])  # on one rank, the seed alone decides


def test_seeding_again_starts_the_stream_anew():
    cutout = CutOut().manual_seed(3)
    trainer = _trainer([cutout])
    first = _draws(cutout, trainer)
    assert not torch.equal(_draws(cutout, trainer), first)  # the stream goes on
    assert cutout.manual_seed(3) is cutout
    assert torch.equal(_draws(cutout, trainer), first)


def test_the_given_seed_is_logged_and_shown():
    cutout = CutOut(length=0.5).manual_seed(7)
    assert cutout.hyperparameters()["seed"] == 7
    assert repr(cutout) == repr(CutOut(length=0.5)) + ".manual_seed(7)"
    assert "seed" not in CutOut(length=0.5).hyperparameters()
    trainer = _trainer([cutout])
    trainer.fit()
    assert trainer.method_log.records["CutOut"]["hyperparameters"]["seed"] == 7  # the run's log says it


def _fit(duration, cutout, load_path=None):
    trainer = _trainer([MixUp(alpha=0.4), cutout], duration=duration, load_path=load_path)
    trainer.fit()
    return trainer


def test_a_run_with_a_given_seed_resumed_from_a_checkpoint_ends_bit_identical(tmp_path):
    uninterrupted = _fit("5ba", CutOut(length=0.5).manual_seed(11))

    interrupted = _fit("3ba", CutOut(length=0.5).manual_seed(11))
    path = interrupted.save_checkpoint(tmp_path / "run.ckpt")
    torch.rand(1000)  # the global generator moves on; the checkpoint's state must replace it
    resumed_cutout = CutOut(length=0.5).manual_seed(11)  # a fresh stream, until the checkpoint's state replaces it
    resumed = _fit("5ba", resumed_cutout, load_path=path)

    assert resumed.state.timestamp == uninterrupted.state.timestamp
    for p, q in zip(resumed.state.model.parameters(), uninterrupted.state.model.parameters(), strict=True):
        assert torch.equal(p, q)
    ends = [t.engine.algorithms[1].generator(t.state).get_state() for t in (resumed, uninterrupted)]
    assert torch.equal(*ends)
    # and the interruption mattered: the generator restarted from the seed would not be where it ended
    assert not torch.equal(ends[0], CutOut().manual_seed(11).generator(resumed.state).get_state())
    assert not all(
        torch.equal(p, q)
        for p, q in zip(interrupted.state.model.parameters(), uninterrupted.state.model.parameters(), strict=True)
    )


@pytest.mark.parametrize(
    ("seed", "error"),
    [(True, TypeError), (7.0, TypeError), ("7", TypeError), (None, TypeError), (-1, ValueError), (2**64, ValueError)],
    ids=["bool", "float", "str", "None", "negative", "too-large"],
)
def test_a_bad_seed_is_refused_with_a_clear_error_and_changes_nothing(seed, error):
    cutout = CutOut().manual_seed(5)
    with pytest.raises(error, match=r"CutOut\.manual_seed: seed must be an int from 0 to 2\*\*64 - 1, got"):
        cutout.manual_seed(seed)
    assert cutout.hyperparameters()["seed"] == 5


def test_any_integer_type_is_a_seed():
    assert CutOut().manual_seed(np.int64(7)).hyperparameters()["seed"] == 7
    assert type(CutOut().manual_seed(np.int64(7)).hyperparameters()["seed"]) is int  # jsonable in the log
    assert CutOut().manual_seed(2**64 - 1).hyperparameters()["seed"] == 2**64 - 1
