"""The bad-input corpus: every malformed input gives exit status 1, one readable line per problem
naming the file (and line or JSON pointer), no traceback, and changes no file.

Each case edits a scratch copy of the repository (every metadata file, the templates and the
repository's own cards), then runs one tool's command line on it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
from methods_tools import checks
from methods_tools.commands import (
    check_cards_main,
    check_functional_main,
    new_card_main,
    validate_metadata_main,
)
from methods_tools.scaffold import card_path

import algorithms
import algorithms.functional
import algorithms.metadata
from algorithms.metadata import load_all_metadata

# ---------------------------------------------------------------------------------------------
# edits


def _json(rel: str, change: Callable[[dict], None]) -> Callable[[Path, Path], Path]:
    """Edit the entry of one metadata file (``rel`` under the package root)."""

    def edit(repo: Path, package: Path) -> Path:
        path = package / rel
        data = json.loads(path.read_text())
        key = next(k for k in data if k != "$schema")
        change(data[key])
        path.write_text(json.dumps(data, indent=2) + "\n")
        return path

    return edit


def _text(rel: str, text: str) -> Callable[[Path, Path], Path]:
    def edit(repo: Path, package: Path) -> Path:
        path = package / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
        return path

    return edit


def _card(key: str, old: str, new: str) -> Callable[[Path, Path], Path]:
    """Replace ``old`` (which must be there) by ``new`` in a method card."""

    def edit(repo: Path, package: Path) -> Path:
        path = card_path("method", key, repo)
        text = path.read_text()
        assert old in text, old
        path.write_text(text.replace(old, new, 1))
        return path

    return edit


def _regex_card(key: str, pattern: str, replacement: str) -> Callable[[Path, Path], Path]:
    """Substitute ``pattern`` (which must match) in a method card."""

    def edit(repo: Path, package: Path) -> Path:
        path = card_path("method", key, repo)
        text, count = re.subn(pattern, replacement, path.read_text(), count=1, flags=re.S)
        assert count == 1, pattern
        path.write_text(text)
        return path

    return edit


def _rename_folder(old: str, new: str) -> Callable[[Path, Path], Path]:
    def edit(repo: Path, package: Path) -> Path:
        (package / old).rename(package / new)
        return package / new / "metadata.json"

    return edit


def _copy_method(src: str, dst: str) -> Callable[[Path, Path], Path]:
    def edit(repo: Path, package: Path) -> Path:
        data = json.loads((package / src / "metadata.json").read_text())
        (package / dst).mkdir()
        path = package / dst / "metadata.json"
        path.write_text(json.dumps({dst: data[src]}, indent=2))
        return path

    return edit


def _delete_card(kind: str, key: str) -> Callable[[Path, Path], Path]:
    def edit(repo: Path, package: Path) -> Path:
        path = card_path(kind, key, repo)
        path.unlink()
        return path

    return edit


# ---------------------------------------------------------------------------------------------
# tools, each run on the scratch roots


def _validate(repo: Path, package: Path, path: Path) -> int:
    return validate_metadata_main([str(path)] if path.exists() else [], package_root=package)


def _validate_all(repo: Path, package: Path, path: Path) -> int:
    return validate_metadata_main([], package_root=package)


def _cards(repo: Path, package: Path, path: Path) -> int:
    return check_cards_main([], repo_root=repo, package_root=package)


def _functional(repo: Path, package: Path, path: Path) -> int:
    return check_functional_main([], package_root=package)


class NotAnAlgorithm:
    def __init__(self, alpha: float = 1.0):
        self.alpha = alpha


def _functional_with_fake_exports(repo: Path, package: Path, path: Path) -> int:
    """check_functional against an ``algorithms`` whose ``CutMix`` is not an Algorithm."""
    classes = SimpleNamespace(
        __all__=list(algorithms.__all__), **{n: getattr(algorithms, n) for n in algorithms.__all__}
    )
    classes.CutMix = NotAnAlgorithm
    problems = checks.check_functional(load_all_metadata(package), classes=classes, functional=algorithms.functional)
    for problem in problems:
        print(problem, file=__import__("sys").stderr)
    return 1 if problems else 0


def _new_card(repo: Path, package: Path, path: Path) -> int:
    return new_card_main(["cutmix", "--force"], repo_root=repo, package_root=package)


def _update(key: str) -> Callable[[Path, Path, Path], int]:
    return lambda repo, package, path: new_card_main([key, "--update"], repo_root=repo, package_root=package)


def _functional_with_a_changed_default(repo: Path, package: Path, path: Path) -> int:
    """check_functional against an ``algorithms.functional`` whose ``cutmix_batch`` defaults to alpha=0.5."""

    def cutmix_batch(input, target, length=None, alpha=0.5, bbox=None, indices=None, uniform_sampling=False):
        raise AssertionError("never called")

    functional = SimpleNamespace(
        __all__=list(algorithms.functional.__all__),
        **{n: getattr(algorithms.functional, n) for n in algorithms.functional.__all__},
    )
    functional.cutmix_batch = cutmix_batch
    problems = checks.check_functional(load_all_metadata(package), functional=functional)
    for problem in problems:
        print(problem, file=__import__("sys").stderr)
    return 1 if problems else 0


CASES = [
    # (id, edit, tool, words expected in some line)
    (
        "invalid-json",
        _text("cutmix/metadata.json", '{\n  "cutmix": {\n    "name": "CutMix",,\n'),
        _validate,
        "invalid JSON at line 3",
    ),
    ("empty-file", _text("mixup/metadata.json", ""), _validate, "invalid JSON"),
    ("not-utf8", _text("mixup/metadata.json", b'{"mixup": "\xff\xfe"}'), _validate, "not UTF-8"),
    (
        "missing-field",
        _json("cutmix/metadata.json", lambda d: d.pop("summary")),
        _validate,
        "missing required field 'summary'",
    ),
    (
        "mistyped-field",
        _json("cutmix/metadata.json", lambda d: d.update(tags="augmentation")),
        _validate,
        "expected array",
    ),
    (
        "unknown-domain",
        _json("mixup/metadata.json", lambda d: d.update(domains=["vision", "chemistry"])),
        _validate,
        "/mixup/domains/1",
    ),
    ("unknown-tag", _json("mixup/metadata.json", lambda d: d.update(tags=["magic"])), _validate, "/mixup/tags/0"),
    ("unknown-field", _json("mixup/metadata.json", lambda d: d.update(colour="red")), _validate, "unknown field"),
    (
        "range-in-metadata",  # the code declares it, beside the signature
        _json("cutmix/metadata.json", lambda d: d["hyperparameters"]["alpha"].update(range=[0, None])),
        _validate,
        "unknown field(s) 'range'",
    ),
    (
        "http-link",
        _json("cutmix/metadata.json", lambda d: d.update(link="http://example.org")),
        _validate,
        "/cutmix/link",
    ),
    (
        "best-practice-without-option",
        _json("mixup/metadata.json", lambda d: d.update(kind="best_practice")),
        _validate,
        "missing required field 'trainer_option'",
    ),
    ("key-not-folder", _rename_folder("mixup", "mix_up"), _validate_all, "keyed by its folder name 'mix_up'"),
    ("duplicate-name", _copy_method("mixup", "mixup_again"), _validate_all, "duplicate method name 'MixUp'"),
    (
        "markup-script",
        _json("cutmix/metadata.json", lambda d: d.update(tldr="Mixes <script>alert(1)</script>")),
        _validate,
        "looks like markup",
    ),
    (
        "markup-myst-role",
        _json("mixup/metadata.json", lambda d: d.update(summary="See {eval-rst}`x`.")),
        _validate,
        "/mixup/summary",
    ),
    (
        "markup-rst-directive",
        _json("label_smoothing/metadata.json", lambda d: d.update(use="x\n.. raw:: html")),
        _validate,
        "/label_smoothing/use",
    ),
    ("not-a-metadata-path", _text("cutmix/notes.json", "{}"), _validate, "not a metadata file"),
    (
        "dataset-missing-builder",
        _json("data/digits.metadata.json", lambda d: d.pop("builder")),
        _validate,
        "missing required field 'builder'",
    ),
    (
        "dataset-bad-shape",
        _json("data/cifar10.metadata.json", lambda d: d.update(input_shape=[3, 0, 32])),
        _validate,
        "/cifar10/input_shape/1",
    ),
    (
        "dataset-key-not-file",
        _text("data/other.metadata.json", '{"cifar": {}}'),
        _validate,
        "keyed by its file name 'other'",
    ),
    (
        "model-member-no-depth",
        _json("models/resnet.metadata.json", lambda d: d["members"][0].pop("depth")),
        _validate,
        "/resnet/members/0",
    ),
    (
        "model-unknown-block",
        _json("models/resnet.metadata.json", lambda d: d["members"][1].update(block="dense")),
        _validate,
        "/resnet/members/1/block",
    ),
    (
        "functional-missing",
        _json("cutmix/metadata.json", lambda d: d.update(functional="cutmix_images")),
        _functional,
        "'cutmix_images' is not a function exported by algorithms.functional",
    ),
    (
        "class-not-exported",
        _json("mixup/metadata.json", lambda d: d.update(class_name="Mixup")),
        _functional,
        "'Mixup' is not exported by algorithms",
    ),
    (
        "class-not-an-algorithm",
        lambda repo, package: package / "cutmix" / "metadata.json",
        _functional_with_fake_exports,
        "is not an Algorithm subclass",
    ),
    (
        "hyperparameter-not-in-code",
        _json("cutmix/metadata.json", lambda d: d["hyperparameters"].update(beta={"suggested": 1})),
        _functional,
        "'beta' is not a parameter of CutMix",
    ),
    (
        "suggestion-outside-the-declared-range",
        _json("cutmix/metadata.json", lambda d: d["hyperparameters"]["alpha"].update(suggested=-1.0)),
        _functional,
        "/cutmix/hyperparameters/alpha/suggested: alpha=-1.0: must be a number in [0, inf)",
    ),
    (
        "suggestions-breaking-a-declared-rule",
        _json(
            "progressive_resizing/metadata.json", lambda d: d["hyperparameters"]["delay_fraction"].update(suggested=0.9)
        ),
        _functional,
        "the suggested delay_fraction=0.9, finetune_fraction=0.2: together more than all of training",
    ),
    (
        "parameter-unlisted",
        _json("cutmix/metadata.json", lambda d: d["plumbing"].remove("target_key")),
        _functional,
        "'target_key' is neither in hyperparameters nor in plumbing",
    ),
    (
        "trainer-option-unknown",
        _json("core/ddp.metadata.json", lambda d: d.update(trainer_option={"precison": "bf16"})),
        _functional,
        "'precison' is not a parameter of algorithms.core.Trainer",
    ),
    (
        "best-practice-in-a-method-folder",
        _json(
            "mixup/metadata.json",
            lambda d: d.update(
                kind="best_practice",
                class_name=None,
                functional=None,
                trainer_option={"precision": "bf16"},
                hyperparameters={},
                plumbing=[],
            ),
        ),
        _validate,
        "a best_practice lives in algorithms/core/<key>.metadata.json",
    ),
    (
        "duplicate-key",
        _text("cutmix/metadata.json", '{\n  "cutmix": {\n    "name": "CutMix",\n    "name": "CutMix 2"\n  }\n}\n'),
        _validate,
        "/cutmix: duplicate key 'name'",
    ),
    (
        "dataset-builder-missing",
        _json("data/synthetic.metadata.json", lambda d: d.update(builder="synth")),
        _functional,
        "algorithms.data.synth is not a function the package exports",
    ),
    (
        "model-builder-missing",
        _json("models/resnet.metadata.json", lambda d: d["members"][2].update(builder="rn18")),
        _functional,
        "/resnet/members/2/builder",
    ),
    (
        "card-without-section",
        _card("cutmix", "## Suggested Hyperparameters", "## Hyperparameters"),
        _cards,
        "missing section '## Suggested Hyperparameters'",
    ),
    (
        "card-facts-unknown",
        _card("cutmix", "```{card-facts} tldr\n", "```{card-facts} tl-dr\n"),
        _cards,
        "card-facts 'tl-dr': this card kind has no such fact — use one of: aka, tags, tldr",
    ),
    (
        "card-facts-missing",
        _card("cutmix", "```{card-facts} hyperparameters\n```\n", ""),
        _cards,
        "no card-facts directive for 'hyperparameters'",
    ),
    (
        "card-facts-twice",
        _card("mixup", "## Considerations\n", "## Considerations\n\n```{card-facts} tldr\n```\n"),
        _cards,
        "card-facts 'tldr' a second time",
    ),
    (
        "card-generated-text",
        _card(
            "cutmix",
            "```{card-facts} tldr\n```\n",
            "<!-- generated: tldr -->\n\nPastes a box.\n\n<!-- end generated: tldr -->\n",
        ),
        _cards,
        "generated text committed in the card (1 region(s)): facts render when the site builds — run: "
        "python tools/new_card.py cutmix --update",
    ),
    (
        "card-region-never-closed",
        _card("cutmix", "## Considerations\n", "## Considerations\n\n<!-- generated: tldr -->\n"),
        _cards,
        "region 'tldr' is never closed",
    ),
    (
        "card-inline-wrong-default",
        _card("cutmix", "## Considerations\n", "## Considerations\n\nBy default `alpha=0.5`.\n"),
        _cards,
        "card says the default is alpha=0.5, the code's default is 1.0",
    ),
    (
        "card-prompt-left",
        _card("mixup", "## Side Effects\n", "## Side Effects\n\n<!-- TODO(new_card): say it -->\n"),
        _cards,
        "TODO: write this: say it",
    ),
    (
        "functional-default-drift",
        lambda repo, package: package / "cutmix" / "metadata.json",
        _functional_with_a_changed_default,
        "cutmix_batch(alpha=0.5) but CutMix(alpha=1.0)",
    ),
    (
        "update-markers-unpaired",
        _card("mixup", "## Considerations\n", "## Considerations\n\n<!-- end generated: tags -->\n"),
        _update("mixup"),
        "'end generated: tags' closes no open region",
    ),
    (
        "new-method-exists",
        lambda repo, package: package / "cutmix" / "metadata.json",
        lambda repo, package, path: new_card_main(["cutmix", "--new"], repo_root=repo, package_root=package),
        "cutmix/metadata.json: file: exists — nothing written",
    ),
    (
        "new-method-bad-key",
        lambda repo, package: package / "cutmix" / "metadata.json",
        lambda repo, package, path: new_card_main(["Cut-Out", "--new"], repo_root=repo, package_root=package),
        "a method key is lower case letters",
    ),
    (
        "card-inline-unknown",
        _card("cutmix", "## Considerations\n", "## Considerations\n\nTry `alhpa=0.5`.\n"),
        _cards,
        "`alhpa=0.5` names no parameter",
    ),
    (
        "card-inline-unknown-call",
        _card("mixup", "## Composability\n", "## Composability\n\nUse `Trainer(precison='bf16')`.\n"),
        _cards,
        "names no parameter of Trainer",
    ),
    (
        "card-missing-section",
        _card("mixup", "## Side Effects\n", "## Side effects\n"),
        _cards,
        "missing section '## Side Effects'",
    ),
    (
        "card-missing",
        _delete_card("method", "label_smoothing"),
        _cards,
        "create it with: python tools/new_card.py label_smoothing",
    ),
    (
        "dataset-card-missing",
        _delete_card("dataset", "digits"),
        _cards,
        "python tools/new_card.py digits --kind dataset",
    ),
    (
        "card-check-class-missing",
        _json("mixup/metadata.json", lambda d: d.update(class_name="Mixup")),
        _cards,
        "algorithms.Mixup cannot be imported",
    ),
    (
        "new-card-functional-missing",
        _json("cutmix/metadata.json", lambda d: d.update(functional="cut_mix")),
        _new_card,
        "algorithms.cutmix.cut_mix cannot be imported",
    ),
    (
        "new-card-dataset-builder-missing",
        _json("data/digits.metadata.json", lambda d: d.update(builder="digitz")),
        lambda repo, package, path: new_card_main(
            ["digits", "--kind", "dataset", "--force"], repo_root=repo, package_root=package
        ),
        "/digits/builder",
    ),
    (
        "new-card-invalid-metadata",
        _json("cutmix/metadata.json", lambda d: d.pop("tldr")),
        _new_card,
        "missing required field 'tldr'",
    ),
]

LINE = re.compile(r"^(?P<file>\S+\.(json|md|py))(?::(?P<line>\d+))?: (?P<where>\S[^:]*): \S")


def _snapshot(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def scaffolded(scratch):
    """The scratch copy with the repository's own cards."""
    repo, package = scratch
    source = algorithms.metadata.PACKAGE_ROOT.parent / "docs" / "source"
    for card in [
        *source.glob("method_cards/*.md"),
        *source.glob("dataset_cards/*.md"),
        *source.glob("model_cards/*.md"),
    ]:
        target = repo / "docs" / "source" / card.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(card.read_bytes())
    return repo, package


def test_corpus_is_large_enough():
    assert len(CASES) >= 25 and len({c[0] for c in CASES}) == len(CASES)


def test_the_untouched_scratch_copy_passes(scaffolded, capsys):
    repo, package = scaffolded
    for tool in (_validate_all, _cards, _functional):
        assert tool(repo, package, package) == 0, capsys.readouterr().err


@pytest.mark.parametrize(("edit", "tool", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input(scaffolded, capsys, edit, tool, words):
    repo, package = scaffolded
    path = edit(repo, package)
    capsys.readouterr()
    before = _snapshot(repo)
    assert tool(repo, package, path) == 1
    out = capsys.readouterr()
    assert _snapshot(repo) == before, "a failing tool must change nothing"
    assert "Traceback" not in out.err + out.out
    lines = out.err.splitlines()
    problems = [line for line in lines if not re.fullmatch(r"\d+ problem\(s\)", line)]
    assert problems, out.err
    for line in problems:
        match = LINE.match(line)
        assert match, f"not 'file[:line]: where: message': {line!r}"
        assert Path(match["file"]).name in {p.name for p in repo.rglob("*")} | {path.name}
    assert any(words in line for line in problems), (words, lines)
