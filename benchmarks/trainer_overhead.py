"""The Trainer's own cost per batch, against a plain PyTorch loop doing the same work.

Both loops take the same forward, cross-entropy loss, backward, SGD step and ``zero_grad`` on the
same batches (a list, so the data loader costs nothing in either); the Trainer adds its events, its
engine, precision and scaler bookkeeping, timestamps and batch handling. Three variants run side
by side, interleaved round by round, each on its own copy of the model with the same weights:

- ``plain``: the hand-written loop;
- ``trainer``: ``Trainer(model, batches, ...)`` with no algorithms;
- ``trainer + 28 idle algorithms``: the same with 28 registered algorithms whose ``match`` is
  always false (the engine asks each of them at every event).

A round times each variant over the same number of batches; a round's overhead is the variant's
time over the plain loop's, minus one, and the report gives the median over the rounds (and their
range). On ResNet-20 a step takes a large fraction of a second on the CPU, so the rounds' noise
is far larger than the overhead itself; the same loops on a one-layer model, where the overhead is
nearly all there is, give it in microseconds per batch (``details``), measured the same way.

    python benchmarks/trainer_overhead.py --rounds 7 --batches 4
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from methods_tools.files import write_atomic

from algorithms.core import Algorithm, Event, State, Trainer
from algorithms.core.time import Duration
from algorithms.models import get_model

IDLE_ALGORITHMS = 28
TARGETS = {"trainer": 0.02, f"trainer + {IDLE_ALGORITHMS} idle algorithms": 0.03}  # overhead over the plain loop


class Idle(Algorithm):
    """An algorithm that never runs: its ``match`` is false at every event."""

    def match(self, event: Event, state: State) -> bool:
        return False

    def apply(self, event: Event, state: State, logger=None) -> None:  # pragma: no cover - never matched
        raise AssertionError("an idle algorithm ran")


def _sgd(model: torch.nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def _plain(model: torch.nn.Module, batches: list) -> Callable[[], None]:
    optimizer = _sgd(model)

    def loop() -> None:
        model.train()
        for x, y in batches:
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    return loop


def _trainer(model: torch.nn.Module, batches: list, algorithms: int) -> Callable[[], None]:
    """A Trainer kept across rounds; each call trains ``len(batches)`` more batches (one epoch)."""
    trainer = Trainer(
        model, batches, "1ep", optimizer=_sgd(model), device="cpu", algorithms=[Idle() for _ in range(algorithms)]
    )

    def loop() -> None:
        trainer.state.max_duration = Duration.parse(f"{trainer.state.timestamp.epoch + 1}ep")
        trainer.fit()

    return loop


def measure(model: torch.nn.Module, batches: list, rounds: int) -> dict[str, list[float]]:
    """Seconds per batch of each variant, per round (variants interleaved, order alternating)."""
    variants = {
        "plain": _plain(copy.deepcopy(model), batches),
        "trainer": _trainer(copy.deepcopy(model), batches, 0),
        f"trainer + {IDLE_ALGORITHMS} idle algorithms": _trainer(copy.deepcopy(model), batches, IDLE_ALGORITHMS),
    }
    for loop in variants.values():  # warm-up: first-call allocations, optimizer state
        loop()
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    for r in range(rounds):
        for name in list(variants) if r % 2 == 0 else list(reversed(variants)):
            start = time.perf_counter()
            variants[name]()
            seconds[name].append((time.perf_counter() - start) / len(batches))
    return seconds


def _batches(shape: tuple[int, ...], classes: int, count: int) -> list:
    g = torch.Generator().manual_seed(0)
    return [
        (torch.randn(shape, generator=g), torch.randint(0, classes, (shape[0],), generator=g)) for _ in range(count)
    ]


def run(quick: bool = False, rounds: int = 9, batches: int = 4, tiny_batches: int = 200) -> dict:
    """The overhead rows (ResNet-20, batch 128, 32x32, one thread) and the per-batch microseconds."""
    if quick:
        rounds, batches, tiny_batches = 2, 1, 10
    torch.set_num_threads(1)
    torch.manual_seed(0)
    batch_size = 8 if quick else 128
    resnet = measure(get_model("resnet20", num_classes=10), _batches((batch_size, 3, 32, 32), 10, batches), rounds)
    tiny = measure(torch.nn.Linear(8, 2), _batches((4, 8), 2, tiny_batches), rounds)
    plain_step = statistics.median(resnet["plain"])
    rows, details = (
        [],
        {
            "threads": 1,
            "rounds": rounds,
            "batches_per_round": batches,
            "model": f"resnet20, batch {batch_size}, 3x32x32, SGD with momentum, fp32",
            "plain_step_ms": 1e3 * plain_step,
            "overhead_us_per_batch": {},
            "tiny_model": "Linear(8, 2), batch 4",
            "tiny_batches_per_round": tiny_batches,
        },
    )
    for name, target in TARGETS.items():
        ratios = [t / p - 1 for t, p in zip(resnet[name], resnet["plain"], strict=True)]
        value = statistics.median(ratios)
        rows.append(
            {
                "what": f"{name} over the plain loop, ResNet-20 step at batch {batch_size}",
                "value": 100 * value,
                "unit": "%",
                "spread": [100 * min(ratios), 100 * max(ratios)],
                "target": 100 * target,
                "compare": "<",
                "met": value < target,
            }
        )
        extra = [t - p for t, p in zip(tiny[name], tiny["plain"], strict=True)]
        us = 1e6 * statistics.median(extra)
        details["overhead_us_per_batch"][name] = {
            "median": us,
            "range": [1e6 * min(extra), 1e6 * max(extra)],
            "percent_of_plain_resnet_step": 100 * us / 1e6 / plain_step,
        }
    details["seconds_per_batch"] = {"resnet20": resnet, "tiny": tiny}
    return {"title": "The training loop's own cost", "rows": rows, "details": details}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--batches", type=int, default=4, help="ResNet-20 batches per variant per round")
    parser.add_argument("--quick", action="store_true", help="a smoke run: tiny sizes, numbers mean nothing")
    parser.add_argument("--output", type=Path, help="write the section as JSON here")
    parser.add_argument("--force", action="store_true", help="overwrite --output if it exists")
    args = parser.parse_args(argv)
    if args.output and args.output.exists() and not args.force:
        parser.error(f"{args.output}: exists; pass --force to overwrite it")
    section = run(quick=args.quick, rounds=args.rounds, batches=args.batches)
    for row in section["rows"]:
        print(
            f"{row['what']}: {row['value']:.2f} % [{row['spread'][0]:.2f}, {row['spread'][1]:.2f}] "
            f"(target < {row['target']:.0f} %: {'met' if row['met'] else 'MISSED'})"
        )
    for name, over in section["details"]["overhead_us_per_batch"].items():
        print(
            f"{name}: {over['median']:.1f} us per batch on a one-layer model "
            f"({over['percent_of_plain_resnet_step']:.3f} % of a plain ResNet-20 step)"
        )
    if args.output:
        write_atomic(args.output, json.dumps(section, indent=1) + "\n", force=args.force)
    return 0


if __name__ == "__main__":
    sys.exit(main())
