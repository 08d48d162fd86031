"""Every method states its effect at scale: the figure from the paper or Composer's method card,
beside the project's own small-scale CPU measurements (``at_scale`` in its metadata)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from algorithms.metadata import PACKAGE_ROOT, MetadataError, load_all_metadata, load_metadata

FIELDS = ("figure", "setting", "source", "hardware", "url")
NO_FIGURE = "no figure at scale is quoted"


def _methods():
    return {key: record for key, record in load_all_metadata().items() if record.kind == "method"}


def test_every_method_has_a_figure_at_scale_with_every_field():
    methods = _methods()
    assert len(methods) == len(list(PACKAGE_ROOT.glob("*/metadata.json")))
    missing = sorted(key for key, record in methods.items() if record.at_scale is None)
    assert not missing, f"methods without at_scale: {missing}"
    for key, record in methods.items():
        at_scale = record.at_scale
        assert tuple(at_scale) == FIELDS, key  # all five, in the documented order
        for name in FIELDS:
            value = at_scale[name]
            assert isinstance(value, str) and value.strip(), f"{key}: at_scale.{name} is empty"
        assert at_scale["url"].startswith("https://"), key
        assert record.raw["at_scale"] == at_scale  # the record carries the file's entry


def test_best_practices_with_a_figure_at_scale_fill_every_field():
    for key, record in load_all_metadata().items():
        if record.kind == "best_practice" and record.at_scale is not None:
            assert all(record.at_scale[name].strip() for name in FIELDS), key


def test_no_figure_claims_no_hardware_and_says_what_the_source_says():
    for key, record in load_all_metadata().items():
        if record.at_scale is None:
            continue
        figure, hardware = record.at_scale["figure"], record.at_scale["hardware"]
        if figure == NO_FIGURE:
            assert hardware.startswith("not applicable"), key
            assert len(record.at_scale["setting"]) > 40, f"{key}: say what the source does say"
        else:
            assert not hardware.startswith("not applicable"), key


@pytest.fixture
def cutmix_copy(tmp_path: Path) -> Path:
    (tmp_path / "cutmix").mkdir()
    path = tmp_path / "cutmix" / "metadata.json"
    shutil.copy(PACKAGE_ROOT / "cutmix" / "metadata.json", path)
    return path


def _edit(path: Path, change) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    change(data["cutmix"]["at_scale"], data["cutmix"])
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")


def test_at_scale_is_optional_in_the_schema(cutmix_copy: Path):
    _edit(cutmix_copy, lambda at_scale, entry: entry.pop("at_scale"))
    assert load_metadata(cutmix_copy).at_scale is None


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda a, e: a.pop("hardware"), "missing required field 'hardware'"),
        (lambda a, e: a.update(figure=""), "must not be empty"),
        (lambda a, e: a.update(setting="   "), "must not be empty"),
        (lambda a, e: a.update(url="http://arxiv.org/abs/1905.04899"), "does not match"),
        (lambda a, e: a.update(year=2019), "unknown field(s) 'year'"),
    ],
)
def test_schema_refuses_an_incomplete_at_scale(cutmix_copy: Path, change, words):
    _edit(cutmix_copy, change)
    with pytest.raises(MetadataError) as info:
        load_metadata(cutmix_copy)
    assert "/cutmix/at_scale" in str(info.value)
    assert words in str(info.value)
