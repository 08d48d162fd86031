"""The drift checks behind ``tools/validate_metadata.py``, ``check_functional.py`` and
``check_cards.py``: each returns a list of :class:`~algorithms.metadata.Problem` (one line each,
``file:line: where: what is wrong — what to do``) and changes nothing.

:func:`validate_metadata` imports neither torch nor the method code (it runs in pre-commit);
:func:`check_functional` and :func:`check_cards` read the code with ``inspect``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from algorithms.metadata import (
    METHOD_KINDS,
    Kind,
    MethodRecord,
    Problem,
    _locate,
    discover_dataset_files,
    discover_metadata_files,
    discover_model_family_files,
    display_path,
    expected_kind,
    load_all_datasets,
    load_all_metadata,
    load_all_model_families,
    validate_files,
    validate_subject_files,
)

from . import REPO_ROOT, cards

__all__ = [
    "check_cards",
    "check_card_sections",
    "check_builders",
    "check_card_table",
    "check_functional",
    "template_sections",
    "validate_metadata",
]


# Text in metadata is plain text; the site escapes it, and this catches markup at commit time.
_MARKUP = re.compile(r"<\s*[A-Za-z/!?]|```|:::|\{[A-Za-z][\w:-]*\}`|(?:^|\n)\s*\.\. [\w-]+::")


# ---------------------------------------------------------------------------------------------
# validate_metadata: schema + cross-file rules + no markup; no torch


def validate_metadata(paths: Iterable[Path] | None = None, package_root: Path | None = None) -> list[Problem]:
    """Validate metadata files (default: every method, best practice, data set and model family)."""
    if paths is None:
        paths = [*discover_metadata_files(package_root), *discover_dataset_files(package_root),
                 *discover_model_family_files(package_root)]
    groups: dict[Kind, list[Path]] = {Kind.METHOD: [], Kind.DATASET: [], Kind.MODEL_FAMILY: []}
    problems: list[Problem] = []
    for path in map(Path, paths):
        kind = expected_kind(path)
        if kind is None:
            problems.append(Problem(path, "", "not a metadata file: expected algorithms/<method>/metadata.json, "
                                              "algorithms/core/<key>.metadata.json (a best practice), "
                                              "algorithms/data/<key>.metadata.json or "
                                              "algorithms/models/<key>.metadata.json — check the path"))
        else:
            groups[Kind.METHOD if kind in METHOD_KINDS else kind].append(path)
    records, found = validate_files(groups[Kind.METHOD])
    problems += found
    everything: list[tuple[Path, str, Mapping[str, Any]]] = [(r.path, r.key, r.raw) for r in records.values()]
    for kind in (Kind.DATASET, Kind.MODEL_FAMILY):
        subjects, found = validate_subject_files(groups[kind], kind)
        problems += found
        everything += [(r.path, r.key, r.raw) for r in subjects.values()]
    for path, key, raw in everything:
        problems += _markup_problems(path, [key], raw)
    return problems


def _markup_problems(path: Path, where: list[Any], value: Any) -> list[Problem]:
    if isinstance(value, str):
        match = _MARKUP.search(value)
        if match and where[-1] not in ("link", "url"):
            return [Problem(path, "/" + "/".join(map(str, where)),
                            f"looks like markup ({match.group(0).strip()!r}): metadata text is plain text — "
                            "say it in words, or put markup in the card", _locate(path, where))]
        return []
    if isinstance(value, Mapping):
        return [p for k, v in value.items() for p in _markup_problems(path, [*where, k], v)]
    if isinstance(value, (list, tuple)):
        return [p for i, v in enumerate(value) for p in _markup_problems(path, [*where, i], v)]
    return []


# ---------------------------------------------------------------------------------------------
# check_functional: metadata against the code


def check_functional(records: Mapping[str, MethodRecord] | None = None, *, classes: Any = None,
                     functional: Any = None) -> list[Problem]:
    """Every ``functional`` is a callable in ``algorithms.functional``, every ``class_name`` an
    ``Algorithm`` subclass exported by ``algorithms``, every constructor parameter is either a
    hyperparameter or plumbing (and nothing else is), and every best practice's
    ``trainer_option`` names a ``Trainer`` parameter. ``classes``/``functional`` stand in for the
    two modules in tests."""
    import algorithms
    import algorithms.functional as functional_module
    from algorithms.core import Algorithm

    from .codeinfo import parameters, trainer_parameters

    records = load_all_metadata() if records is None else records
    classes = algorithms if classes is None else classes
    functional = functional_module if functional is None else functional
    problems: list[Problem] = []

    def problem(record: MethodRecord, field: str, message: str) -> None:
        problems.append(Problem(record.path, f"/{record.key}/{field}", message,
                                _locate(record.path, [record.key, field])))

    for record in records.values():
        if record.is_best_practice:
            known = trainer_parameters()
            for option in record.trainer_option or {}:
                if option not in known:
                    problem(record, "trainer_option", f"{option!r} is not a parameter of algorithms.core.Trainer "
                                                      f"— use one of: {', '.join(known)}")
        if record.functional is not None:
            exported = getattr(functional, "__all__", dir(functional))
            if record.functional not in exported or not callable(getattr(functional, record.functional, None)):
                problem(record, "functional", f"{record.functional!r} is not a function exported by "
                                              "algorithms.functional — add it there or fix the name")
        if record.class_name is None:
            continue
        exported = getattr(classes, "__all__", dir(classes))
        cls = getattr(classes, record.class_name, None) if record.class_name in exported else None
        if cls is None:
            problem(record, "class_name", f"{record.class_name!r} is not exported by algorithms — "
                                          "add it to algorithms/__init__.py or fix the name")
            continue
        if not (isinstance(cls, type) and issubclass(cls, Algorithm)):
            problem(record, "class_name", f"algorithms.{record.class_name} is not an Algorithm subclass — "
                                          "name the method's Algorithm class")
            continue
        params = parameters(cls)
        for name in record.hyperparameters:
            if name not in params:
                problem(record, "hyperparameters", f"{name!r} is not a parameter of {record.class_name} — "
                                                   f"use one of: {', '.join(params) or 'none'}")
        for name in record.plumbing:
            if name not in params:
                problem(record, "plumbing", f"{name!r} is not a parameter of {record.class_name} — "
                                            "remove it or fix the name")
            elif name in record.hyperparameters:
                problem(record, "plumbing", f"{name!r} is both a hyperparameter and plumbing — keep one")
        for name in params:
            if name not in record.hyperparameters and name not in record.plumbing:
                problem(record, "hyperparameters", f"{record.class_name} parameter {name!r} is neither in "
                                                   "hyperparameters nor in plumbing — add it to one")
    return problems


def check_builders(package_root: Path | None = None) -> list[Problem]:
    """Every data set's ``module.builder`` and every model-family member's builder is a
    function the package exports."""
    from .codeinfo import resolve

    problems: list[Problem] = []

    def check(path: Path, key: str, where: list[Any], dotted: str) -> None:
        try:
            ok = callable(resolve(dotted))
        except (ImportError, AttributeError):
            ok = False
        if not ok:
            problems.append(Problem(path, "/" + "/".join(map(str, [key, *where])),
                                    f"{dotted} is not a function the package exports — fix the name or "
                                    "add it to the module", _locate(path, [key, *where])))

    for key, record in load_all_datasets(package_root).items():
        check(record.path, key, ["builder"], f"{record.raw['module']}.{record.raw['builder']}")
    for key, record in load_all_model_families(package_root).items():
        for index, member in enumerate(record.raw["members"]):
            check(record.path, key, ["members", index, "builder"], f"{record.raw['module']}.{member['builder']}")
    return problems


# ---------------------------------------------------------------------------------------------
# check_cards: every card against its template, the code and the metadata


def template_sections(kind: str, repo_root: Path | None = None) -> list[cards.Section]:
    """The sections below the title of a card kind, from its RST template (the one list)."""
    from .scaffold import TEMPLATES

    root = Path(repo_root or REPO_ROOT)
    text = (root / "docs" / "source" / "templates" / TEMPLATES[kind][1]).read_text(encoding="utf-8")
    return [s for s in cards.rst_sections(text) if s.level > 1]


def check_cards(repo_root: Path | None = None, package_root: Path | None = None) -> list[Problem]:
    """Check every method, dataset and model-family card; a record without a card is a problem."""
    from .codeinfo import CodeLookupError, lookup, parameters, trainer_parameters
    from .scaffold import card_path

    repo_root = Path(repo_root or REPO_ROOT)
    records = load_all_metadata(package_root)
    signatures: dict[str, dict[str, Any]] = {"Trainer": trainer_parameters()}
    problems: list[Problem] = []
    unresolved = set()
    for record in records.values():
        try:
            if record.class_name:
                signatures[record.class_name] = parameters(
                    lookup(f"algorithms.{record.class_name}", record.path, record.key, "class_name"))
            if record.functional:
                signatures[record.functional] = parameters(
                    lookup(f"algorithms.functional.{record.functional}", record.path, record.key, "functional"))
        except CodeLookupError as exc:
            problems.append(exc.problem)
            unresolved.add(record.key)

    for record in records.values():
        if record.key in unresolved:
            continue
        path = card_path("method", record.key, repo_root)
        if not path.exists():
            problems.append(_missing_card(path, record.key, "", record.path))
            continue
        text = path.read_text(encoding="utf-8")
        problems += check_card_sections(path, text, template_sections("method", repo_root),
                                        skip=(cards.HYPERPARAMETER_SECTION,) if record.is_best_practice else ())
        if not record.is_best_practice:
            problems += check_card_table(path, text, record, signatures[record.class_name])
        own = trainer_parameters() if record.is_best_practice else {
            **signatures[record.class_name], **signatures[record.functional]}
        problems += _check_inline(path, text, own, signatures)
    for kind, loader in (("dataset", load_all_datasets), ("model", load_all_model_families)):
        for key, subject in loader(package_root).items():
            path = card_path(kind, key, repo_root)
            if not path.exists():
                problems.append(_missing_card(path, key, f" --kind {kind}", subject.path))
                continue
            problems += check_card_sections(path, path.read_text(encoding="utf-8"),
                                            template_sections(kind, repo_root))
    return problems


def _missing_card(path: Path, key: str, flag: str, metadata: Path) -> Problem:
    return Problem(path, "card", f"missing: {display_path(metadata)} has no card — "
                             f"create it with: python tools/new_card.py {key}{flag}")


def check_card_sections(path: Path, text: str, expected: list[cards.Section],
                        skip: tuple[str, ...] = ()) -> list[Problem]:
    """The card has a ``#`` title and every section of its template, at the template's level,
    in the template's order (extra sections are allowed)."""
    found = cards.sections(text)
    problems = []
    if not found or found[0].level != 1:
        problems.append(Problem(path, "title", "the card must open with one '# Title' heading — add it", 1))
    position, last_line = 0, 1
    for section in expected:
        if section.title in skip:
            continue
        matches = [i for i, s in enumerate(found) if s.title == section.title and s.level == section.level]
        if not matches:
            problems.append(Problem(path, section.title, f"missing section '{'#' * section.level} "
                                    f"{section.title}' — add it after line {last_line}, as in the template",
                                    last_line))
            continue
        later = [i for i in matches if i >= position]
        if not later:
            problems.append(Problem(path, section.title, "section out of order — move it to where the "
                                    "template has it", found[matches[0]].line))
            continue
        position, last_line = later[0], found[later[0]].line
    return problems


def check_card_table(path: Path, text: str, record: MethodRecord, params: Mapping[str, Any]) -> list[Problem]:
    """The ``## Suggested Hyperparameters`` table against the code and the metadata (DESIGN.md)."""
    from .codeinfo import REQUIRED

    heading = cards.HYPERPARAMETER_SECTION
    span = cards.section_span(text, heading)
    if span is None:
        return [Problem(path, heading, f"no '## {heading}' section — add it with the table; "
                        f"python tools/new_card.py {record.key} --dry-run prints one", 1)]
    table = cards.find_table(text)
    if table is None:
        return [Problem(path, heading, "no pipe table in the section — add "
                        "'| Hyperparameter | Default | Suggested | Range |' and one row per parameter",
                        span[0] - 1)]
    problems: list[Problem] = []
    want = ("Hyperparameter", "Default", "Suggested", "Range")
    if table.header[:4] != want:
        return [Problem(path, heading, f"the header must start with {' | '.join(want)}, "
                                       f"found {' | '.join(table.header)} — fix the header", table.line)]
    seen: set[str] = set()
    for line, cells in table.rows:
        cells = cells + ("",) * (4 - len(cells))
        name = cards.unquote_code(cells[0])
        if name is None or not name.isidentifier():
            problems.append(Problem(path, cells[0] or "table", "the first cell must be a parameter name in "
                                    "backticks, e.g. `alpha`", line))
            continue
        if name in seen:
            problems.append(Problem(path, name, "a second row for this parameter — keep one", line))
            continue
        seen.add(name)
        if name not in params:
            problems.append(Problem(path, name, f"{record.class_name} has no parameter {name!r} — fix the "
                                    f"name or remove the row (parameters: {', '.join(params)})", line))
            continue
        if name in record.plumbing:
            problems.append(Problem(path, name, "listed as plumbing in metadata.json, not a hyperparameter "
                                    "— remove the row", line))
            continue
        default = params[name].default
        if default is REQUIRED:
            if cells[1].strip() != "required":
                problems.append(Problem(path, name, f"card says default {cells[1]}, code says it is required "
                                        "— write: required", line))
        else:
            card_value = _cell_value(path, name, "Default", cells[1], line, problems)
            if card_value is not _BAD and not cards.same_value(card_value, default):
                problems.append(Problem(path, name, f"card says default {card_value!r}, code says {default!r}",
                                        line))
        spec = record.hyperparameters.get(name)
        if spec is None:
            problems.append(Problem(path, name, f"metadata.json has no hyperparameters entry for {name!r} — "
                                    "add one with its suggested value", line))
            continue
        card_value = _cell_value(path, name, "Suggested", cells[2], line, problems)
        if card_value is not _BAD and not cards.same_value(card_value, spec.suggested):
            problems.append(Problem(path, name, f"card says suggested {card_value!r}, metadata says "
                                    f"{_plain(spec.suggested)!r}", line))
        problems += _check_range(path, name, cells[3], spec, line)
    for name in params:
        if name not in seen and name not in record.plumbing:
            problems.append(Problem(path, name, "no row for this constructor parameter — add one (every "
                                    "parameter that is not plumbing needs a row)", table.line))
    return problems


_BAD = object()


def _cell_value(path: Path, name: str, column: str, cell: str, line: int, problems: list[Problem]) -> Any:
    source = cards.unquote_code(cell)
    if source is None:
        problems.append(Problem(path, name, f"{column} cell {cell!r} must be a Python literal in backticks, "
                                "e.g. `1.0`", line))
        return _BAD
    try:
        return cards.parse_literal(source)
    except ValueError:
        problems.append(Problem(path, name, f"{column} `{source}` is not a Python literal — write the value "
                                "itself (a number, string, True/False/None, list or tuple)", line))
        return _BAD


def _check_range(path: Path, name: str, cell: str, spec: Any, line: int) -> list[Problem]:
    source = cards.unquote_code(cell)
    if spec.range is None and spec.choices is None:
        return []
    if source is None:
        return [Problem(path, name, f"Range cell {cell!r} must be `(low, high)` or a list of choices in "
                        "backticks", line)]
    try:
        form, value = cards.parse_range(source)
    except ValueError as exc:
        return [Problem(path, name, f"Range: {exc} — write `(low, high)` (inf for no bound) or `[choices]`",
                        line)]
    if spec.range is not None:
        low, high = spec.range
        want = (float("-inf") if low is None else low, float("inf") if high is None else high)
        if form != "range" or not cards.same_value(list(value), list(want)):
            return [Problem(path, name, f"card says range {source}, metadata says "
                            f"({'-inf' if low is None else low}, {'inf' if high is None else high})", line)]
    elif form != "choices" or not cards.same_value(sorted(map(repr, value)), sorted(map(repr, spec.choices))):
        return [Problem(path, name, f"card says choices {source}, metadata says {_plain(spec.choices)!r}", line)]
    return []


def _check_inline(path: Path, text: str, own: Mapping[str, Any], signatures: Mapping[str, Mapping[str, Any]]
                  ) -> list[Problem]:
    problems = []
    for item in cards.inline_assignments(text):
        if item.callee is None:
            known, owner = own, "this card's class, functional form or Trainer option"
        elif item.callee in signatures:
            known, owner = signatures[item.callee], item.callee
        else:
            continue  # another library's function: not ours to check
        if item.name not in known:
            problems.append(Problem(path, item.name, f"`{item.text}` names no parameter of {owner} — "
                                    f"use one of: {', '.join(known)}", item.line))
    return problems


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value

