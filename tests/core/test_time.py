from __future__ import annotations

import pytest

from algorithms.core import Duration, TimeUnit


@pytest.mark.parametrize(
    ("text", "value", "unit"),
    [
        ("2ep", 2, TimeUnit.EPOCH),
        ("100ba", 100, TimeUnit.BATCH),
        ("512sp", 512, TimeUnit.SAMPLE),
        ("0.7dur", 0.7, TimeUnit.DURATION),
        (" 3 ep ", 3, TimeUnit.EPOCH),
    ],
)
def test_parse(text, value, unit):
    d = Duration.parse(text)
    assert (d.value, d.unit) == (value, unit)


@pytest.mark.parametrize("text", ["2", "ep", "1.5ep", "-1ba", "2epochs", "1.2dur"])
def test_parse_rejects(text):
    with pytest.raises(ValueError, match="duration"):
        Duration.parse(text)
