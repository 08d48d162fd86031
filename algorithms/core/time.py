"""Durations (``"2ep"``, ``"100ba"``, ``"512sp"``, ``"65536tok"``, ``"0.7dur"``) and the training timestamp."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

__all__ = ["Duration", "TimeUnit", "Timestamp"]


class TimeUnit(str, Enum):
    EPOCH = "ep"
    BATCH = "ba"
    SAMPLE = "sp"
    TOKEN = "tok"
    DURATION = "dur"


_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ep|ba|sp|tok|dur)\s*$")


@dataclass(frozen=True)
class Duration:
    """An amount of training time: whole epochs, batches, samples or tokens, or a fraction of the run."""

    value: float
    unit: TimeUnit

    @classmethod
    def parse(cls, text: str | Duration) -> Duration:
        if isinstance(text, Duration):
            return text
        match = _DURATION_RE.match(str(text))
        if not match:
            raise ValueError(
                f"duration {text!r} is not understood — write e.g. '2ep', '100ba', '512sp', '65536tok' or '0.5dur'"
            )
        value, unit = float(match.group(1)), TimeUnit(match.group(2))
        if unit is TimeUnit.DURATION:
            if not 0 <= value <= 1:
                raise ValueError(f"duration {text!r}: a fraction of the run must be in [0, 1]")
        elif value != int(value) or value < 0:
            raise ValueError(f"duration {text!r}: epochs, batches, samples and tokens are whole numbers >= 0")
        return cls(value, unit)

    def __str__(self) -> str:
        value = self.value if self.unit is TimeUnit.DURATION else int(self.value)
        return f"{value}{self.unit.value}"


@dataclass
class Timestamp:
    """Where training is: completed epochs, batches, samples and tokens, and batches in this epoch.
    Samples and tokens are the loader's, before any method changes the batch, over every rank."""

    epoch: int = 0
    batch: int = 0
    sample: int = 0
    batch_in_epoch: int = 0
    token: int = 0

    def get(self, unit: TimeUnit) -> int:
        counts = {TimeUnit.EPOCH: self.epoch, TimeUnit.BATCH: self.batch, TimeUnit.SAMPLE: self.sample}
        return {**counts, TimeUnit.TOKEN: self.token}[unit]
