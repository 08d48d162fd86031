"""Each algorithm's generator: seeded from the Trainer's seed, the rank, the class name and which
instance of its class it is in the Trainer's list, so two instances of one class draw
independently, the first draws what a lone instance draws, and other methods change nothing."""

from __future__ import annotations

import torch

from algorithms import CutOut, MixUp
from algorithms.core import Trainer


def _trainer(algorithms, seed=0):
    torch.manual_seed(0)  # the model's initial weights
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 10))
    data = [(torch.rand(4, 3, 8, 8, generator=torch.Generator().manual_seed(i)), torch.arange(4)) for i in range(2)]
    return Trainer(model, data, "1ep", algorithms=algorithms, seed=seed)


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
