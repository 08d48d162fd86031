"""The composability check of check_cards: each of its three rules caught on a scratch copy, and
silent on the repository."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from methods_tools import checks
from methods_tools.composability_pages import COMPOSABILITY_DIR, composability_files

from algorithms.metadata import PACKAGE_ROOT, load_all_metadata

REPO_ROOT = PACKAGE_ROOT.parent
sys.path.insert(0, str(REPO_ROOT / "tests" / "docs"))
from composability_support import matrix_document  # noqa: E402


@pytest.fixture
def carded(scratch):
    """The scratch copy with the repository's method cards, and a complete matrix without a failing cell."""
    repo, package = scratch
    cards = repo / "docs" / "source" / "method_cards"
    shutil.copytree(REPO_ROOT / "docs" / "source" / "method_cards", cards)
    results = repo / "results"
    (results / "composability").mkdir(parents=True)
    write_matrix(results, matrix_document(load_all_metadata(package)))
    return repo, package, results


def write_matrix(results: Path, document: dict, name: str = "cpu-test.json") -> Path:
    path = results / "composability" / name
    path.write_text(json.dumps(document, indent=1), encoding="utf-8")
    return path


def problems(repo: Path, package: Path, results: Path) -> list[str]:
    return [str(p) for p in checks.check_composability(load_all_metadata(package), repo, results)]


def edit_json(path: Path, change) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    (entry,) = data.values() if "$schema" not in data else [v for k, v in data.items() if k != "$schema"]
    change(entry)
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")


def test_the_scratch_copy_passes(carded):
    assert problems(*carded) == []


def test_a_card_naming_another_method_in_its_prose_is_one_line_per_mention(carded):
    repo, package, results = carded
    card = repo / "docs" / "source" / "method_cards" / "cutout.md"
    text = card.read_text(encoding="utf-8")
    prose = (
        "- Works well with CutMix, and with `LabelSmoothing()` or label\n  smoothing too; cutmix again.\n"
        "<!-- an HTML comment may name MixUp -->\n"
    )
    directive = "```{card-facts} composability\n```\n"
    assert directive in text
    text = text.replace(directive, directive + prose)
    card.write_text(text, encoding="utf-8")
    line = text.splitlines().index("- Works well with CutMix, and with `LabelSmoothing()` or label") + 1
    found = problems(repo, package, results)
    card_path = str(card.relative_to(Path.cwd())) if card.is_relative_to(Path.cwd()) else str(card)
    metadata = package / "cutout" / "metadata.json"
    where = str(metadata.relative_to(Path.cwd())) if metadata.is_relative_to(Path.cwd()) else str(metadata)
    assert found == [
        f"{card_path}:{line}: Composability: names CutMix in the card's prose — move the "
        f'statement into {where} interactions["cutmix"], shown beside the matrix\'s outcome',
        f"{card_path}:{line}: Composability: names Label Smoothing in the card's prose — "
        f'move the statement into {where} interactions["label_smoothing"], shown beside the matrix\'s outcome',
        f"{card_path}:{line + 1}: Composability: names CutMix in the card's prose — move "
        f'the statement into {where} interactions["cutmix"], shown beside the matrix\'s outcome',
    ]


def test_interaction_keys_name_a_paired_method_a_precision_or_a_parallel_mode(carded):
    repo, package, results = carded
    edit_json(
        package / "cutmix" / "metadata.json",
        lambda e: e["interactions"].update(
            {
                "cutmixx": "A typo.",
                "precision=fp8": "No such mode.",
                "parallel=ddp": "Fine.",
                "precision=amp_bf16": "Fine.",
                "cutmix": "Itself.",
            }
        ),
    )
    edit_json(package / "mixup" / "metadata.json", lambda e: e.update(domains=["nlp"]))
    write_matrix(results, matrix_document(load_all_metadata(package)))
    found = problems(repo, package, results)
    assert sorted(p.split(": ", 2)[1] for p in found) == sorted(
        [
            "/cutmix/interactions/mixup",
            "/cutmix/interactions/cutmixx",
            "/cutmix/interactions/precision=fp8",
            "/cutmix/interactions/cutmix",
            "/cutout/interactions/mixup",
            "/randaugment/interactions/mixup",
            "/augmix/interactions/mixup",
            "/selective_backprop/interactions/mixup",
        ]
    )
    by_key = {p.split(": ", 2)[1]: p for p in found}
    assert by_key["/cutmix/interactions/cutmixx"].endswith(
        "'cutmixx': it is not a method key, nor precision=<fp32|fp16|bf16|amp_fp16|amp_bf16>, nor "
        "parallel=<single|dp|ddp|fsdp|deepspeed|accelerate> — fix the key or remove the note"
    )
    assert "MixUp shares no domain with CutMix, so the matrix never pairs them" in by_key["/cutmix/interactions/mixup"]
    assert "a note on the method with itself is never shown" in by_key["/cutmix/interactions/cutmix"]
    assert all(p.split(": ")[0].rsplit(":", 1)[-1].isdigit() for p in found)  # each at its line


def test_the_committed_matrix_covers_the_registry_and_has_no_failing_cell(carded):
    repo, package, results = carded
    records = load_all_metadata(package)
    (results / "composability" / "cpu-test.json").unlink()
    assert problems(repo, package, results) == [
        f"{results / 'composability'}: matrix: no composability matrix is committed — run nox -s matrix and commit "
        "the file it writes"
    ]
    document = matrix_document(
        records,
        {("pair", ("mixup", "cutmix"), None): {"outcome": "fails", "detail": "RuntimeError: boom"}},
        drop=[("solo", ("cutmix",), None)],
    )
    path = write_matrix(results, document)
    index = next(i for i, c in enumerate(document["cells"]) if c["methods"] == ["mixup", "cutmix"])
    assert problems(repo, package, results) == [
        f"{path}: /cells: lacks 1 cell(s) of today's methods (CutMix alone) — run python "
        "tools/composability_matrix.py --only cutmix --merge (or nox -s matrix) and commit the file it writes",
        f"{path}: /cells/{index}: fails: MixUp, then CutMix: RuntimeError: boom — fix the bug, or explain the "
        'interaction in algorithms/mixup/metadata.json interactions["cutmix"]; then run nox -s matrix and commit '
        "the file it writes",
    ]
    # a GPU file is not held to today's registry (rerunning it needs a GPU), but may not fail either
    gpu = matrix_document(records, drop=[("solo", ("cutmix",), None)])
    gpu["environment"]["device_type"] = "cuda"
    write_matrix(results, matrix_document(records))
    write_matrix(results, gpu, "gpu-test.json")
    assert problems(repo, package, results) == []
    path = write_matrix(results, dict(gpu, cells=[dict(gpu["cells"][0], outcome="perhaps")]), "gpu-test.json")
    (line,) = problems(repo, package, results)
    assert line.startswith(f"{path}: /cells/0/outcome: 'perhaps' is not one of")


def test_check_cards_runs_the_composability_check(carded):
    repo, package, results = carded
    for folder in ("dataset_cards", "model_cards"):
        shutil.copytree(REPO_ROOT / "docs" / "source" / folder, repo / "docs" / "source" / folder)
    (results / "composability" / "cpu-test.json").unlink()
    found = [str(p) for p in checks.check_cards(repo, package, results)]
    assert found == [
        f"{results / 'composability'}: matrix: no composability matrix is committed — run nox -s matrix "
        "and commit the file it writes"
    ]


def test_the_repositorys_cards_and_metadata_pass():
    records = load_all_metadata()
    assert [
        str(p)
        for p in checks.check_composability(records, REPO_ROOT, Path("/nonexistent"))
        if "no composability matrix" not in str(p)
    ] == []
    if not composability_files(COMPOSABILITY_DIR):
        pytest.skip("no composability matrix is committed yet (nox -s matrix writes it): its coverage is not checked")
    assert [str(p) for p in checks.check_composability_matrix(records)] == []
