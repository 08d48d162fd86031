"""check_cards on what cards and metadata claim of the Trainer's modes: a claim that a method works
in a precision or parallel mode needs a passing cell of the committed composability matrix, and a
strategy object's options (``DeepSpeed(zero_stage=3)``) are the constructor's, with its defaults."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from methods_tools import checks
from methods_tools.commands import check_cards_main
from methods_tools.composability_pages import COMPOSABILITY_DIR, composability_files

from algorithms.metadata import PACKAGE_ROOT, display_path, load_all_metadata

REPO_ROOT = PACKAGE_ROOT.parent
sys.path.insert(0, str(REPO_ROOT / "tests" / "docs"))
from composability_support import matrix_cell, matrix_document  # noqa: E402

DIRECTIVE = "```{card-facts} composability\n```\n"


# --------------------------------------------------------------------------------------------- grammar


@pytest.mark.parametrize(
    ("text", "claims"),
    [
        ("It works with bf16.", [("works with bf16", ["bf16"])]),
        (
            "It is compatible with FSDP and DeepSpeed ZeRO.",
            [("compatible with FSDP and DeepSpeed ZeRO", ["fsdp", "deepspeed"])],
        ),
        ("Combines with the parallel modes.", [("Combines with the parallel modes", ["every parallel mode"])]),
        (
            "The matrix ran it in each of the `Trainer`'s precisions, and under `ddp` in fp32.",
            [
                (
                    "ran it in each of the `Trainer`'s precisions, and under `ddp` in fp32",
                    ["every precision", "ddp", "fp32"],
                )
            ],
        ),
        # a code span is read as words: its parentheses and dots neither end nor qualify the clause
        (
            'It works the same with `Trainer(parallel="fsdp")`.',
            [('works the same with `Trainer(parallel="fsdp")`', ["fsdp"])],
        ),
        # "Distributed Data Parallel" is ddp, not dp; "amp_bf16" is not "bf16"
        (
            "It runs under Distributed Data Parallel and amp_bf16.",
            [("runs under Distributed Data Parallel and amp_bf16", ["ddp", "amp_bf16"])],
        ),
        (
            "Runs in mixed precision\nand under `single`.",
            [("Runs in mixed precision and under `single`", ["mixed precision", "single"])],
        ),
        # negated before the verb, or turned round inside the clause: what follows is no claim
        ("It does not work with fsdp.", []),
        ("It has never been run under deepspeed.", []),
        ("It runs under ddp but not under fsdp.", [("runs under ddp", ["ddp"])]),
        # a second verb in a claim's clause is read with it, once
        ("It works with fp32 and combines with ddp.", [("works with fp32 and combines with ddp", ["fp32", "ddp"])]),
        ("It runs under `ddp` (`adaptive` not under `fsdp`); FSDP refuses EMA.", [("runs under `ddp`", ["ddp"])]),
        (
            "It runs in fp32 (scoring uses the same autocast) and with `dp`.",
            [("runs in fp32 (scoring uses the same autocast) and with `dp`", ["fp32", "dp"])],
        ),
        # no verb of working together, or no mode after it: no claim
        ("Mixed precision and the other Trainer options are independent of it.", []),
        ("Composer divides by zero; it runs in the loader's workers.", []),
        ("It works with any optimizer, in a single process.", []),
    ],
)
def test_the_claim_grammar(text, claims):
    assert [(c.text, [label for label, _ in c.modes]) for c in checks.mode_claims(text)] == claims


def test_a_collective_name_needs_every_mode_and_a_16_bit_name_its_pure_or_autocast_mode():
    (claim,) = checks.mode_claims("It works with every precision, bf16 and the distributed modes.")
    modes = dict(claim.modes)
    assert modes["every precision"] == tuple(
        (("precision", p),) for p in ("fp32", "fp16", "bf16", "amp_fp16", "amp_bf16")
    )
    assert modes["bf16"] == ((("precision", "bf16"), ("precision", "amp_bf16")),)
    assert modes["every distributed mode"] == tuple(
        (("parallel", p),) for p in ("ddp", "fsdp", "deepspeed", "accelerate")
    )


# --------------------------------------------------------------------------------------------- against a matrix


@pytest.fixture
def carded(scratch):
    """The scratch copy with the repository's method cards, and a complete matrix of passing cells."""
    repo, package = scratch
    shutil.copytree(REPO_ROOT / "docs" / "source" / "method_cards", repo / "docs" / "source" / "method_cards")
    results = repo / "results"
    (results / "composability").mkdir(parents=True)
    write_matrix(results, matrix_document(load_all_metadata(package)))
    return repo, package, results


def write_matrix(results: Path, document: dict) -> None:
    (results / "composability" / "cpu-test.json").write_text(json.dumps(document), encoding="utf-8")


def claims(repo: Path, package: Path, results: Path) -> list[str]:
    return [str(p) for p in checks.check_mode_claims(load_all_metadata(package), repo, results)]


def add_prose(card: Path, prose: str) -> int:
    """``prose`` after the card's composability facts; the line it starts on."""
    text = card.read_text(encoding="utf-8")
    assert DIRECTIVE in text
    card.write_text(text.replace(DIRECTIVE, DIRECTIVE + "\n" + prose + "\n", 1), encoding="utf-8")
    return card.read_text(encoding="utf-8").splitlines().index(prose.splitlines()[0]) + 1


def test_the_scratch_copys_claims_are_backed(carded):
    assert claims(*carded) == []


def test_a_method_claim_is_backed_by_a_passing_cell_of_it_in_that_mode(carded):
    repo, package, results = carded
    records = load_all_metadata(package)
    card = repo / "docs" / "source" / "method_cards" / "cutout.md"
    line = add_prose(card, "It works with `bf16` and under\nDeepSpeed ZeRO; FSDP is not tested.")

    def claims(*roots: Path) -> list[str]:  # the card's other claims (every precision) aside
        return [p for p in globals()["claims"](*roots) if f":{line}:" in p]

    assert claims(repo, package, results) == []
    # bf16 is backed by amp_bf16 alone
    bf16 = {"outcome": "interaction", "note": "x"}
    write_matrix(results, matrix_document(records, {("precision", ("cutout",), "bf16"): bf16}))
    assert claims(repo, package, results) == []
    write_matrix(
        results,
        matrix_document(
            records,
            {
                ("precision", ("cutout",), "bf16"): bf16,
                ("precision", ("cutout",), "amp_bf16"): {"outcome": "refused", "detail": "ValueError: no"},
                ("parallel", ("cutout",), "deepspeed"): {"outcome": "fails", "detail": "RuntimeError: boom"},
                # the parallel cells in amp_bf16 back bf16 (and deepspeed's, deepspeed) too
                **{
                    ("parallel", ("cutout",), f"{mode}+amp_bf16"): {"outcome": "refused", "detail": "ValueError: no"}
                    for mode in ("ddp", "fsdp", "deepspeed")
                },
            },
        ),
    )
    shown = display_path(card)
    assert claims(repo, package, results) == [
        f'{shown}:{line}: "works with `bf16` and under DeepSpeed ZeRO": the matrix has no passing cell of CutOut '
        "under bf16/amp_bf16 (of bf16) — remove the claim, or run python tools/composability_matrix.py --only "
        "cutout --merge",
        f'{shown}:{line}: "works with `bf16` and under DeepSpeed ZeRO": the matrix has no passing cell of CutOut '
        "under deepspeed — remove the claim, or run python tools/composability_matrix.py --only cutout --merge",
    ]


def test_a_mode_the_matrix_does_not_run_is_never_backed(carded):
    repo, package, results = carded
    card = repo / "docs" / "source" / "method_cards" / "cutout.md"
    line = add_prose(card, "It also runs under the parallel modes.")
    found = claims(repo, package, results)
    assert found == [
        f'{display_path(card)}:{line}: "runs under the parallel modes": the matrix has no passing cell of CutOut '
        "under dp, accelerate (of every parallel mode) — remove the claim: the matrix does not run accelerate or dp"
    ]


def test_a_best_practice_is_backed_by_a_passing_cell_in_its_own_mode(carded):
    repo, package, results = carded
    records = load_all_metadata(package)
    document = matrix_document(records)
    # whatever the matrix runs today, ddp here runs fp32 and amp_bf16 only, and fsdp fp32 only
    document["cells"] = [
        c
        for c in document["cells"]
        if c["parallel"] != "ddp" and not (c["parallel"] == "fsdp" and c["precision"] == "amp_bf16")
    ] + [
        matrix_cell("parallel", ["cutout"], "ddp"),
        dict(matrix_cell("parallel", ["cutmix"], "ddp"), precision="amp_bf16"),
    ]
    write_matrix(results, document)

    def claims_of(card: Path) -> list[str]:  # the method cards' claims of ddp aside
        return [p for p in claims(repo, package, results) if p.startswith(f"{display_path(card)}:")]

    card = repo / "docs" / "source" / "method_cards" / "ddp.md"
    line = add_prose(card, "It works with `amp_bf16` and fp32, and combines with every precision mode.")
    assert claims_of(card) == [
        f'{display_path(card)}:{line}: "works with `amp_bf16` and fp32, and combines with every precision mode": '
        "the matrix has no passing cell under parallel=ddp (Distributed Data Parallel) and fp16, bf16, amp_fp16 "
        "(of every precision) — remove the claim"
    ]
    # Mixed Precision's own mode is amp_bf16 or, by its aka, amp_fp16
    card = repo / "docs" / "source" / "method_cards" / "mixed_precision.md"
    line = add_prose(card, "It works with DDP; it is compatible with FSDP.")
    assert claims_of(card) == [
        f'{display_path(card)}:{line}: "compatible with FSDP": the matrix has no passing cell under '
        "precision=amp_bf16 (Mixed Precision) and fsdp — remove the claim"
    ]


def test_metadata_text_is_read_but_a_sources_own_setting_is_not(carded):
    repo, package, results = carded
    path = package / "cutout" / "metadata.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["cutout"]["use"] += " It runs under `dp` too."
    data["cutout"]["at_scale"]["setting"] += "; the authors' runs work with DataParallel."
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if '"use"' in text)
    assert claims(repo, package, results) == [
        f'{display_path(path)}:{line}: "runs under `dp`": the matrix has no passing cell of CutOut under dp — '
        "remove the claim: the matrix does not run dp"
    ]


def test_without_a_matrix_no_claim_is_checked_and_the_matrix_check_says_why(carded):
    repo, package, results = carded
    add_prose(repo / "docs" / "source" / "method_cards" / "cutout.md", "It runs under `dp`.")
    (results / "composability" / "cpu-test.json").unlink()
    found = [str(p) for p in checks.check_composability(load_all_metadata(package), repo, results)]
    assert len(found) == 1 and "no composability matrix is committed" in found[0], found


# --------------------------------------------------------------------------------------------- one card, its CLI


def one_card(tmp_path: Path, key: str, metadata: str) -> tuple[Path, Path, Path]:
    """A repository of one method or practice: its metadata, the templates and its card."""
    repo, package = tmp_path / "repo", tmp_path / "repo" / "algorithms"
    (package / Path(metadata).parent).mkdir(parents=True)
    shutil.copy(PACKAGE_ROOT / metadata, package / metadata)
    shutil.copytree(REPO_ROOT / "docs" / "source" / "templates", repo / "docs" / "source" / "templates")
    (repo / "docs" / "source" / "method_cards").mkdir(parents=True)
    card = repo / "docs" / "source" / "method_cards" / f"{key}.md"
    shutil.copy(REPO_ROOT / "docs" / "source" / "method_cards" / f"{key}.md", card)
    return repo, package, card


def test_the_command_refuses_an_unbacked_claim_with_exit_1_and_changes_nothing(tmp_path, capsys):
    repo, package, card = one_card(tmp_path, "blurpool", "blurpool/metadata.json")
    assert check_cards_main([], repo_root=repo, package_root=package) == 0  # against the committed matrix
    line = add_prose(card, "It works under `dp`.")
    before = sorted((p, p.read_bytes()) for p in repo.rglob("*") if p.is_file())
    capsys.readouterr()
    assert check_cards_main([], repo_root=repo, package_root=package) == 1
    out = capsys.readouterr()
    assert f'{display_path(card)}:{line}: "works under `dp`": the matrix has no passing cell of BlurPool under dp' in (
        out.out + out.err
    )
    assert sorted((p, p.read_bytes()) for p in repo.rglob("*") if p.is_file()) == before


def test_strategy_options_are_the_constructors_with_its_defaults(tmp_path):
    repo, package, card = one_card(tmp_path, "deepspeed_zero", "core/deepspeed_zero.metadata.json")
    text = card.read_text(encoding="utf-8")

    def problems(extra: str) -> list[str]:
        card.write_text(text.replace("## Considerations\n", f"## Considerations\n\n{extra}\n", 1), encoding="utf-8")
        return [
            str(p)
            for p in checks.check_cards(repo, package, results_root=tmp_path / "results")
            if "deepspeed_zero.md" in str(p)
        ]

    assert problems("") == []
    assert problems("The default is `DeepSpeed(zero_stage=2)`; `FSDP(cpu_offload=True)` offloads.") == []
    # a bare option is the practice's own strategy's; torch's DataParallel is not the strategy
    assert problems("Set `zero_stage=3`, or wrap `torch.nn.DataParallel(model, device_ids=[0])`.") == []
    found = problems("Try `DeepSpeed(stage=3)`.")
    assert (
        len(found) == 1
        and "`DeepSpeed(stage=3)` names no parameter of DeepSpeed — use one of: zero_stage, "
        "offload_optimizer, offload_param"
        in found[0]
    ), found
    found = problems("The default, `DeepSpeed(zero_stage=3)`, shards the parameters.")
    assert len(found) == 1 and "card says the default is zero_stage=3, the code's default is 2" in found[0], found
    found = problems("`FSDP(cpu_offload=True, reshard=False)` and `DDP(bucket_cap_mb=25)`.")
    assert len(found) == 2, found
    assert "names no parameter of FSDP — use one of: cpu_offload" in found[0]
    assert "names no parameter of DDP — DDP takes none" in found[1]


def test_a_bare_strategy_option_is_not_a_methods(tmp_path):
    repo, package, card = one_card(tmp_path, "cutout", "cutout/metadata.json")
    add_prose(card, "Use `offload_param=True` for the rest.")
    found = [
        str(p) for p in checks.check_cards(repo, package, results_root=tmp_path / "results") if "cutout.md" in str(p)
    ]
    assert len(found) == 1 and "`offload_param=True` names no parameter of this card's class" in found[0], found


# --------------------------------------------------------------------------------------------- the catalog


def test_the_catalogs_claims_are_backed_by_the_committed_matrix():
    if not composability_files(COMPOSABILITY_DIR):
        pytest.skip("no composability matrix is committed yet (nox -s matrix writes it): no claim can be checked")
    assert [str(p) for p in checks.check_mode_claims(load_all_metadata())] == []
