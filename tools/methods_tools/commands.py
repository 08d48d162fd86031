"""Command lines of the card tools; ``tools/*.py`` and the console script only call these.

Each returns an exit status: 0 when all is well, 1 with one line per problem on stderr. User
mistakes never raise a traceback, and nothing is written unless the command succeeds.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from algorithms.metadata import MetadataError, Problem, display_path

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
        prog="validate_metadata", description="Validate method, dataset and model-family metadata files "
        "against their JSON schemas (default: all of them). Imports neither torch nor the method code.")
    parser.add_argument("files", nargs="*", type=Path, help="metadata files (pre-commit passes the changed ones)")
    args = parser.parse_args(argv)
    problems = validate_metadata(args.files or None, package_root)
    return _report(problems, f"ok: {len(args.files) or 'all'} metadata file(s) valid")


def check_functional_main(argv: Sequence[str] | None = None, *, package_root: Path | None = None) -> int:
    from algorithms.metadata import load_all_metadata

    from .checks import check_builders, check_functional

    argparse.ArgumentParser(
        prog="check_functional", description="Check that every metadata class_name is an Algorithm exported "
        "by algorithms, every functional a function in algorithms.functional, hyperparameters/plumbing "
        "match the constructor, and every data set and model builder exists.").parse_args(argv)
    try:
        problems = check_functional(load_all_metadata(package_root)) + check_builders(package_root)
    except MetadataError as exc:
        problems = list(exc.problems)
    return _report(problems, "ok: metadata matches the code")


def check_cards_main(argv: Sequence[str] | None = None, *, repo_root: Path | None = None,
                     package_root: Path | None = None) -> int:
    from .checks import check_cards

    argparse.ArgumentParser(
        prog="check_cards", description="Check every card against its template, the code and the metadata: "
        "sections, the Suggested Hyperparameters table, and inline name=value.").parse_args(argv)
    try:
        problems = check_cards(repo_root, package_root)
    except MetadataError as exc:
        problems = list(exc.problems)
    return _report(problems, "ok: every card agrees with the code and metadata")


def new_card_main(argv: Sequence[str] | None = None, *, repo_root: Path | None = None,
                  package_root: Path | None = None) -> int:
    """``new_card NAME [--kind K] [--force] [--dry-run]``; the roots stand in for the repository in tests."""
    from methods_tools.files import write_atomic

    from .codeinfo import CodeLookupError
    from .scaffold import KINDS, UnknownName, card_path, render_card

    parser = argparse.ArgumentParser(
        prog="new_card", description="Scaffold a card from metadata and code: "
        "docs/source/method_cards/<name>.md (or dataset_cards/, model_cards/ with --kind).")
    parser.add_argument("name", help="the method's folder name (or data set / model family key)")
    parser.add_argument("--kind", choices=KINDS, default="method", help="card kind (default: method)")
    parser.add_argument("--force", action="store_true", help="overwrite an existing card")
    parser.add_argument("--dry-run", action="store_true", help="print the card instead of writing it")
    args = parser.parse_args(argv)
    path = card_path(args.kind, args.name, repo_root)
    try:
        content = render_card(args.kind, args.name, repo_root=repo_root, package_root=package_root)
    except (UnknownName, MetadataError, CodeLookupError) as exc:
        print(exc.args[0] if isinstance(exc, UnknownName) else exc, file=sys.stderr)
        return 1
    if args.dry_run:
        sys.stdout.write(content)
        return 0
    if path.exists() and not args.force:
        print(f"{display_path(path)}: exists — left unchanged; pass --force to overwrite it "
              "(or --dry-run to print the new scaffold)", file=sys.stderr)
        return 1
    write_atomic(path, content, force=args.force)
    print(f"wrote {display_path(path)} — fill in the sections marked with <!-- comments -->, then run "
          "python tools/check_cards.py")
    return 0

