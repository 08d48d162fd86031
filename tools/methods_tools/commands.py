"""Command lines of the card tools; ``tools/*.py`` and the console script only call these.

Each returns an exit status: 0 when all is well, 1 with one line per problem on stderr. User
mistakes never raise a traceback, and nothing is written unless the command succeeds.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from algorithms.metadata import MetadataError, Problem, display_path

from . import REPO_ROOT
from .files import write_atomic, write_if_changed

__all__ = ["check_cards_main", "check_functional_main", "new_card_main", "validate_metadata_main"]


def _report(problems: Sequence[Problem | str], ok: str) -> int:
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print(f"{len(problems)} problem(s)", file=sys.stderr)
        return 1
    print(ok)
    return 0


def validate_metadata_main(argv: Sequence[str] | None = None, *, package_root: Path | None = None) -> int:
    """``methods-validate-metadata [FILES]``: schema-validate metadata files; no torch."""
    from .checks import validate_metadata

    parser = argparse.ArgumentParser(
        prog="validate_metadata",
        description="Validate method, dataset and model-family metadata files "
        "against their JSON schemas (default: all of them). Imports neither torch nor the method code.",
    )
    parser.add_argument("files", nargs="*", type=Path, help="metadata files (pre-commit passes the changed ones)")
    args = parser.parse_args(argv)
    problems = validate_metadata(args.files or None, package_root)
    return _report(problems, f"ok: {len(args.files) or 'all'} metadata file(s) valid")


def check_functional_main(argv: Sequence[str] | None = None, *, package_root: Path | None = None) -> int:
    from .checks import check_builders, check_functional, check_method_placeholders, valid_records

    argparse.ArgumentParser(
        prog="check_functional",
        description="Check that every metadata class_name is an Algorithm exported "
        "by algorithms, every functional a function in algorithms.functional with the class's defaults, "
        "hyperparameters/plumbing match the constructor, every data set and model builder exists, and no "
        "TODO(new_card) prompt is left in a method's code or test file.",
    ).parse_args(argv)
    try:
        records, skipped = valid_records(package_root)
        problems = (
            skipped + check_functional(records) + check_builders(package_root) + check_method_placeholders(package_root)
        )
    except MetadataError as exc:
        problems = list(exc.problems)
    return _report(problems, "ok: metadata matches the code")


def check_cards_main(
    argv: Sequence[str] | None = None, *, repo_root: Path | None = None, package_root: Path | None = None
) -> int:
    from .checks import check_cards

    argparse.ArgumentParser(
        prog="check_cards",
        description="Check every card against its template and the code: its sections "
        "in order, a card-facts directive for each fact (the docs build renders them), inline name=value naming "
        "real parameters and the code's defaults (strategy options such as DeepSpeed(zero_stage=3) too), method "
        "names in Composability prose, claims that a method works in a precision or parallel mode that the "
        "committed composability matrix does not back, and TODO(new_card) prompts left.",
    ).parse_args(argv)
    try:
        problems = check_cards(repo_root, package_root)
    except MetadataError as exc:
        problems = list(exc.problems)
    return _report(problems, "ok: every card agrees with the code and metadata")


def new_card_main(
    argv: Sequence[str] | None = None, *, repo_root: Path | None = None, package_root: Path | None = None
) -> int:
    """``new_card NAME [--kind K] [--new | --update] [--force] [--dry-run]``; the roots stand in for the
    repository in tests."""
    from algorithms.metadata import Kind

    from .cards import RegionError
    from .codeinfo import CodeLookupError
    from .scaffold import KINDS, UnknownName, card_path, card_source, update_card

    parser = argparse.ArgumentParser(
        prog="new_card",
        description="Write a card for a method (docs/source/method_cards/<name>.md, or "
        "dataset_cards/, model_cards/ with --kind): its sections with prompts for the prose and a card-facts "
        "directive for each fact, which the docs build renders from metadata and code; turn an old card's "
        "generated regions into directives (--update); or scaffold a whole new method (--new).",
    )
    parser.add_argument("name", help="the method's folder name (or data set / model family key)")
    parser.add_argument(
        "--kind",
        choices=KINDS,
        default="method",
        help="what NAME is (default: method; best practices are found as methods too)",
    )
    action = parser.add_mutually_exclusive_group()
    action.add_argument(
        "--new",
        action="store_true",
        help="scaffold a new method: algorithms/NAME/ (code and "
        "metadata.json), tests/methods/test_NAME.py and its card",
    )
    action.add_argument(
        "--update",
        action="store_true",
        help="turn the card's generated regions (text "
        "between <!-- generated --> markers) into card-facts directives, keeping the prose",
    )
    parser.add_argument("--class-name", help="with --new: the Algorithm class (default: NAME in CamelCase)")
    parser.add_argument("--functional", help="with --new: the functional form (default: NAME_batch)")
    parser.add_argument("--force", action="store_true", help="overwrite existing files")
    parser.add_argument("--dry-run", action="store_true", help="print what would be written instead of writing it")
    args = parser.parse_args(argv)
    if (args.class_name or args.functional) and not args.new:
        parser.error("--class-name and --functional go with --new")
    path = card_path(args.kind, args.name, repo_root)
    if args.new:
        if args.kind != Kind.METHOD.value:
            parser.error("--new scaffolds methods only")
        return _new_method(args, repo_root)
    try:
        content = card_source(args.kind, args.name, repo_root=repo_root, package_root=package_root)
        if args.update:
            if not path.exists():
                print(
                    f"{display_path(path)}: no card to update — write it with: python tools/new_card.py "
                    f"{args.name}{_kind_flag(args.kind)}",
                    file=sys.stderr,
                )
                return 1
            content, converted = update_card(path.read_text(encoding="utf-8"))
    except (UnknownName, MetadataError, CodeLookupError) as exc:
        print(exc.args[0] if isinstance(exc, UnknownName) else exc, file=sys.stderr)
        return 1
    except RegionError as exc:
        print(f"{display_path(path)}:{exc.line}: regions: {exc}", file=sys.stderr)
        return 1
    if args.dry_run:
        sys.stdout.write(content)
        return 0
    if args.update:
        changed = write_if_changed(path, content)
        print(
            f"updated: {display_path(path)} ({len(converted)} generated region(s) now card-facts directives)"
            if changed
            else f"up to date: {display_path(path)} (its facts render when the site builds)"
        )
        return 0
    if path.exists() and not args.force:
        print(
            f"{display_path(path)}: exists — left unchanged; its facts render when the site builds, so it "
            "needs no update; pass --force to overwrite it, or --dry-run to print a fresh one",
            file=sys.stderr,
        )
        return 1
    write_atomic(path, content, force=args.force)
    print(f"wrote {display_path(path)} — replace each TODO(new_card) prompt, then run nox -s check")
    return 0


def _kind_flag(kind: str) -> str:
    return "" if kind == "method" else f" --kind {kind}"


def _new_method(args: argparse.Namespace, repo_root: Path | None) -> int:
    """Scaffold the folder, metadata, test and card of a new method, and add its export lines;
    nothing is written (and nothing changed) on error."""
    import importlib

    import algorithms
    import algorithms.functional

    from .codeinfo import CodeLookupError
    from .scaffold import card_path, card_source, draft_record, export_edits, scaffold_method

    root = Path(repo_root or REPO_ROOT)
    try:
        files = scaffold_method(args.name, class_name=args.class_name, functional=args.functional, repo_root=repo_root)
    except ValueError as exc:
        print(f"{display_path(root / 'algorithms' / args.name / 'metadata.json')}: key: {exc}", file=sys.stderr)
        return 1
    card = card_path("method", args.name, repo_root)
    existing = [p for p in [*files, card] if p.exists()]
    if existing and not args.force:
        for p in existing:
            print(f"{display_path(p)}: file: exists — nothing written; pass --force to overwrite", file=sys.stderr)
        return 1
    try:
        names = _scaffolded_names(files[next(p for p in files if p.name == "metadata.json")], args.name)
        exports = export_edits(args.name, **names, repo_root=repo_root)
    except ValueError as exc:  # the message names the file (and line) of the export table
        print(f"{exc} — nothing written", file=sys.stderr)
        return 1
    if args.dry_run:
        for p, content in files.items():
            sys.stdout.write(f"==> {display_path(p)} <==\n{content}\n")
        for p, content in exports.items():
            added = sorted(set(content.splitlines()) - set(p.read_text(encoding="utf-8").splitlines()))
            sys.stdout.write(f"==> {display_path(p)} (lines added) <==\n" + "\n".join(added) + "\n")
        return 0
    written: list[Path] = []
    originals = {p: p.read_text(encoding="utf-8") for p in exports}
    try:
        for p, content in files.items():
            write_atomic(p, content, force=args.force)
            written.append(p)
        for p, content in exports.items():
            write_atomic(p, content, force=True)
        # The card is rendered from the code just written (its facts render at every docs build).
        importlib.invalidate_caches()
        for package in (algorithms, algorithms.functional):
            if Path(package.__file__).resolve() in {p.resolve() for p in exports}:
                importlib.reload(package)
        metadata = next(p for p in files if p.name == "metadata.json")
        record = draft_record(args.name, files[metadata], metadata)
        write_atomic(card, card_source("method", args.name, repo_root=repo_root, record=record), force=args.force)
        written.append(card)
    except (OSError, CodeLookupError, ImportError, ValueError) as exc:
        for p in written:
            p.unlink(missing_ok=True)
        for p, text in originals.items():
            write_atomic(p, text, force=True)
        print(f"new_card: {exc} — nothing written", file=sys.stderr)
        return 1
    for p in written:
        print(f"wrote {display_path(p)}")
    for p in exports:
        print(f"added {args.name}'s export lines to {display_path(p)}")
    print(
        "next: replace each TODO(new_card) prompt; `nox -s check` lists the ones left, one line each; the "
        "card's facts (TL;DR, hyperparameters, API) render from metadata.json and the code at every docs build"
    )
    return 0


def _scaffolded_names(metadata_text: str, key: str) -> dict[str, str]:
    """The class and functional names the scaffold's ``metadata.json`` gives the new method."""
    entry = json.loads(metadata_text)[key]
    return {"class_name": entry["class_name"], "functional": entry["functional"]}
