"""The metadata contract: schema rules, cross-file rules, and readable problems."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from algorithms.metadata import (
    PACKAGE_ROOT,
    MetadataError,
    discover_metadata_files,
    load_all_metadata,
    load_metadata,
)

METHODS = ["cutmix", "label_smoothing", "mixup"]
BEST_PRACTICES = [
    "data_parallel",
    "ddp",
    "deepspeed_zero",
    "fsdp",
    "gradient_accumulation",
    "half_precision",
    "mixed_precision",
]


def test_every_method_loads_and_is_keyed_by_its_place():
    records = load_all_metadata()
    assert set(METHODS) | set(BEST_PRACTICES) <= set(records)
    for key, record in records.items():
        assert record.key == key
        if record.kind == "method":  # one folder per method
            assert record.path == PACKAGE_ROOT / key / "metadata.json"
        else:  # beside the Trainer code it documents
            assert record.kind == "best_practice"
            assert record.path == PACKAGE_ROOT / "core" / f"{key}.metadata.json"


def test_no_folder_holds_only_metadata():
    for path in PACKAGE_ROOT.glob("*/metadata.json"):
        assert (path.parent / "__init__.py").exists() and (path.parent / f"{path.parent.name}.py").exists(), path


def test_records_are_frozen():
    record = load_all_metadata()["cutmix"]
    with pytest.raises(AttributeError):
        record.name = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        record.hyperparameters["alpha"] = None  # type: ignore[index]


def test_loader_does_not_import_torch():
    code = "import sys, algorithms.metadata as m; m.load_all_metadata(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the cutmix metadata in a scratch package tree."""
    (tmp_path / "cutmix").mkdir()
    shutil.copy(PACKAGE_ROOT / "cutmix" / "metadata.json", tmp_path / "cutmix" / "metadata.json")
    return tmp_path


def _edit(tree: Path, change) -> Path:
    path = tree / "cutmix" / "metadata.json"
    data = json.loads(path.read_text())
    change(data["cutmix"])
    path.write_text(json.dumps(data, indent=2))
    return path


def _problems(tree: Path) -> list[str]:
    with pytest.raises(MetadataError) as info:
        load_all_metadata(tree)
    lines = str(info.value).splitlines()
    assert len(lines) == len(info.value.problems)
    return lines


def test_bad_json_names_line_and_column(tree: Path):
    path = tree / "cutmix" / "metadata.json"
    path.write_text('{\n  "cutmix": {\n    "name": "CutMix",,\n  }\n}\n')
    (line,) = _problems(tree)
    assert str(path) in line or "metadata.json:3" in line
    assert "line 3 column" in line and "invalid JSON" in line


@pytest.mark.parametrize(
    ("change", "pointer", "words"),
    [
        (lambda d: d.pop("tldr"), "/cutmix", "missing required field 'tldr'"),
        (lambda d: d.update(math_equivalent="no"), "/cutmix/math_equivalent", "expected boolean"),
        (lambda d: d.update(domains=["vision", "astrology"]), "/cutmix/domains/1", "use one of"),
        (lambda d: d.update(tags=["fast"]), "/cutmix/tags/0", "use one of"),
        (lambda d: d.update(colour="red"), "/cutmix", "unknown field"),
        (lambda d: d.update(kind="trick"), "/cutmix/kind", "use one of"),
        (
            lambda d: d["hyperparameters"]["alpha"].pop("suggested"),
            "/cutmix/hyperparameters/alpha",
            "missing required field 'suggested'",
        ),
        (lambda d: d.update(tldr="   "), "/cutmix/tldr", "must not be empty"),
        (lambda d: d.update(class_name="Not A Name"), "/cutmix/class_name", ""),
    ],
)
def test_schema_problem_names_pointer(tree: Path, change, pointer: str, words: str):
    _edit(tree, change)
    lines = _problems(tree)
    assert any(f": {pointer}: " in line and words in line for line in lines), lines
    assert all("metadata.json" in line for line in lines)


def test_every_problem_is_reported_not_just_the_first(tree: Path):
    _edit(tree, lambda d: (d.pop("tldr"), d.update(domains=["x"], math_equivalent=1)))
    assert len(_problems(tree)) == 3


def test_key_must_match_folder(tree: Path):
    (tree / "cutmix").rename(tree / "cut_mix")
    (line,) = _problems(tree)
    assert "'cut_mix'" in line and "'cutmix'" in line


def test_duplicate_names_across_files(tree: Path):
    (tree / "other").mkdir()
    data = json.loads((tree / "cutmix" / "metadata.json").read_text())
    (tree / "other" / "metadata.json").write_text(json.dumps({"other": data["cutmix"]}))
    (line,) = _problems(tree)
    assert "duplicate method name 'CutMix'" in line and "/other/name" in line


def test_problem_lines_carry_a_line_number(tree: Path):
    _edit(tree, lambda d: d.update(math_equivalent="no"))
    (line,) = _problems(tree)
    path = tree / "cutmix" / "metadata.json"
    expected = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if "math_equivalent" in t)
    assert line.startswith(f"{path}:{expected}: ")


def test_best_practice_needs_trainer_option_but_not_a_class(tree: Path):
    path = _edit(tree, lambda d: d.update(kind="best_practice", class_name=None, functional=None))
    with pytest.raises(MetadataError, match="missing required field 'trainer_option'"):
        load_metadata(path)
    _edit(tree, lambda d: d.update(trainer_option={"precision": "amp_bf16"}))
    with pytest.raises(MetadataError, match="a best_practice lives in algorithms/core/<key>.metadata.json"):
        load_metadata(path)  # valid, but in a method's folder
    moved = tree / "core" / "cutmix.metadata.json"
    moved.parent.mkdir()
    path.rename(moved)
    assert load_metadata(moved).is_best_practice


def test_method_needs_a_class(tree: Path):
    _edit(tree, lambda d: d.update(class_name=None))
    assert any("/cutmix/class_name" in line for line in _problems(tree))


def test_discovery_sorted_by_key():
    names = [
        p.parent.name if p.name == "metadata.json" else p.name.removesuffix(".metadata.json")
        for p in discover_metadata_files()
    ]
    assert names == sorted(names) and "ddp" in names and "cutmix" in names


def test_missing_kind_is_one_problem_not_a_cascade(tree: Path):
    _edit(tree, lambda d: d.pop("kind"))
    (line,) = _problems(tree)
    assert "missing required field 'kind'" in line


@pytest.mark.parametrize("field", ["range", "choices", "exclusive"])
def test_a_range_in_metadata_is_refused_since_the_code_declares_it(tree: Path, field: str):
    """Ranges and choices are declared beside the signature (PARAMETERS); metadata says only the
    suggested value and why. Whether the suggestion is in range is nox -s check's (tests/tooling)."""
    _edit(tree, lambda d: d["hyperparameters"]["alpha"].update({field: [0, 1]}))
    (line,) = _problems(tree)
    assert ": /cutmix/hyperparameters/alpha: " in line and f"unknown field(s) '{field}'" in line, line


def test_a_suggestion_is_any_literal_here(tree: Path):
    _edit(tree, lambda d: d["hyperparameters"]["alpha"].update(suggested=-1.0))
    assert load_all_metadata(tree)["cutmix"].hyperparameters["alpha"].suggested == -1.0
