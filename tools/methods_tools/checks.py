"""The drift checks behind ``tools/validate_metadata.py``, ``check_functional.py`` and
``check_cards.py``: each returns a list of :class:`~algorithms.metadata.Problem` (one line each,
``file:line: where: what is wrong — what to do``) and changes nothing.

:func:`validate_metadata` imports neither torch nor the method code (it runs in pre-commit);
:func:`check_functional` and :func:`check_cards` read the code with ``inspect``.
"""

from __future__ import annotations

import ast
import importlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from algorithms.metadata import (
    METHOD_KINDS,
    PACKAGE_ROOT,
    Kind,
    MethodRecord,
    Problem,
    _locate,
    _locate_text,
    _pointer,
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

from . import REPO_ROOT
from .prompts import json_prompts, prompts, read_json

__all__ = [
    "MethodTerms",
    "check_cards",
    "check_composability",
    "check_composability_matrix",
    "check_composability_prose",
    "check_interaction_keys",
    "check_mode_claims",
    "mode_claims",
    "ModeClaim",
    "check_card_sections",
    "check_builders",
    "check_card_facts",
    "check_declaration",
    "check_functional",
    "check_method_placeholders",
    "valid_records",
    "placeholder_problems",
    "validate_metadata",
]


# Text in metadata is plain text; the site escapes it, and this catches markup at commit time.
_MARKUP = re.compile(r"<\s*[A-Za-z/!?]|```|:::|\{[A-Za-z][\w:-]*\}`|(?:^|\n)\s*\.\. [\w-]+::")


# ---------------------------------------------------------------------------------------------
# validate_metadata: schema + cross-file rules + no markup; no torch


def validate_metadata(paths: Iterable[Path] | None = None, package_root: Path | None = None) -> list[Problem]:
    """Validate metadata files (default: every method, best practice, data set and model family)."""
    if paths is None:
        paths = [
            *discover_metadata_files(package_root),
            *discover_dataset_files(package_root),
            *discover_model_family_files(package_root),
        ]
    groups: dict[Kind, list[Path]] = {Kind.METHOD: [], Kind.DATASET: [], Kind.MODEL_FAMILY: []}
    problems: list[Problem] = []
    for path in map(Path, paths):
        kind = expected_kind(path)
        if kind is None:
            problems.append(
                Problem(
                    path,
                    "",
                    "not a metadata file: expected algorithms/<method>/metadata.json, "
                    "algorithms/core/<key>.metadata.json (a best practice), "
                    "algorithms/data/<key>.metadata.json or "
                    "algorithms/models/<key>.metadata.json — check the path",
                )
            )
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
    return _with_prompts(problems, [p for group in groups.values() for p in group])


def _with_prompts(problems: list[Problem], paths: list[Path]) -> list[Problem]:
    """Each ``TODO(new_card)`` prompt left in a metadata file is one problem saying what to write; a
    schema complaint about the same value (an enum that the prompt is not in) is left out."""
    prompted: list[Problem] = []
    for path in paths:
        data = read_json(path)  # None where unreadable: the schema check has said why
        text = path.read_text(encoding="utf-8") if data is not None else ""
        for where, hint in json_prompts(data):
            prompted.append(Problem(path, _pointer(where), f"write this: {hint}", _locate_text(text, list(where))))
    covered = {(p.path, p.pointer) for p in prompted}
    return [p for p in problems if (p.path, p.pointer) not in covered] + prompted


def _markup_problems(path: Path, where: list[Any], value: Any) -> list[Problem]:
    if isinstance(value, str):
        match = _MARKUP.search(value)
        if match and where[-1] not in ("link", "url"):
            return [
                Problem(
                    path,
                    "/" + "/".join(map(str, where)),
                    f"looks like markup ({match.group(0).strip()!r}): metadata text is plain text — "
                    "say it in words, or put markup in the card",
                    _locate(path, where),
                )
            ]
        return []
    if isinstance(value, Mapping):
        return [p for k, v in value.items() for p in _markup_problems(path, [*where, k], v)]
    if isinstance(value, (list, tuple)):
        return [p for i, v in enumerate(value) for p in _markup_problems(path, [*where, i], v)]
    return []


# ---------------------------------------------------------------------------------------------
# check_functional: metadata against the code


def check_functional(
    records: Mapping[str, MethodRecord] | None = None, *, classes: Any = None, functional: Any = None
) -> list[Problem]:
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
        problems.append(
            Problem(record.path, f"/{record.key}/{field}", message, _locate(record.path, [record.key, field]))
        )

    for record in records.values():
        if record.is_best_practice:
            known = trainer_parameters()
            for option in record.trainer_option or {}:
                if option not in known:
                    problem(
                        record,
                        "trainer_option",
                        f"{option!r} is not a parameter of algorithms.core.Trainer — use one of: {', '.join(known)}",
                    )
            if "optimizer" in (record.trainer_option or {}) and _option_optimizer(record) is None:
                problem(
                    record,
                    "trainer_option",
                    f"optimizer={record.trainer_option['optimizer']!r} is not a "
                    "torch.optim.Optimizer class the package exports — name it by "
                    "its dotted path, e.g. algorithms.optim.DecoupledSGDW",
                )
        if record.functional is not None:
            exported = getattr(functional, "__all__", dir(functional))
            if record.functional not in exported or not callable(getattr(functional, record.functional, None)):
                problem(
                    record,
                    "functional",
                    f"{record.functional!r} is not a function exported by "
                    f"algorithms.functional — define it in algorithms/{record.key}/ and add "
                    f'"{record.functional}": "{record.key}" to EXPORTS in algorithms/functional.py, '
                    "with its TYPE_CHECKING import, or fix the name",
                )
        if record.class_name is None:
            continue
        exported = getattr(classes, "__all__", dir(classes))
        cls = getattr(classes, record.class_name, None) if record.class_name in exported else None
        if cls is None:
            problem(
                record,
                "class_name",
                f"{record.class_name!r} is not exported by algorithms — define it "
                f'in algorithms/{record.key}/ and add "{record.class_name}": "{record.key}" to EXPORTS '
                "in algorithms/__init__.py, with its TYPE_CHECKING import, or fix the name",
            )
            continue
        if not (isinstance(cls, type) and issubclass(cls, Algorithm)):
            problem(
                record,
                "class_name",
                f"algorithms.{record.class_name} is not an Algorithm subclass — name the method's Algorithm class",
            )
            continue
        params = parameters(cls)
        for name in record.hyperparameters:
            if name not in params:
                problem(
                    record,
                    "hyperparameters",
                    f"{name!r} is not a parameter of {record.class_name} — use one of: {', '.join(params) or 'none'}",
                )
        for name in record.plumbing:
            if name not in params:
                problem(
                    record,
                    "plumbing",
                    f"{name!r} is not a parameter of {record.class_name} — remove it or fix the name",
                )
            elif name in record.hyperparameters:
                problem(record, "plumbing", f"{name!r} is both a hyperparameter and plumbing — keep one")
        for name in params:
            if name not in record.hyperparameters and name not in record.plumbing:
                problem(
                    record,
                    "hyperparameters",
                    f"{record.class_name} parameter {name!r} is neither in "
                    "hyperparameters nor in plumbing — add it to one",
                )
        problems.extend(check_declaration(record, cls, [n for n in params if n not in record.plumbing]))
        form = getattr(functional, record.functional, None) if record.functional else None
        if callable(form):
            for name, param in parameters(form).items():
                # A class default of None means "derived from the class's other arguments" (EMA's
                # smoothing from its half_life, as Composer's): the form's own default stands.
                if (
                    name in params
                    and params[name].default is not None
                    and not _same_value(param.default, params[name].default)
                ):
                    problem(
                        record,
                        "functional",
                        f"{record.functional}({name}={param.default!r}) but "
                        f"{record.class_name}({name}={params[name].default!r}): the "
                        "functional form and the class must share defaults — make "
                        "them the same",
                    )
    return problems


def check_declaration(record: MethodRecord, cls: type, hyperparameters: list[str]) -> list[Problem]:
    """The class's module declares exactly its ``hyperparameters`` (``PARAMETERS``), and each
    suggested value lies in its declared range, the suggestions together keeping its rules."""
    from .codeinfo import declaration

    declared = declaration(cls)
    module = cls.__module__

    def problem(message: str, *where: str) -> Problem:
        where = where or ("hyperparameters",)
        return Problem(record.path, _pointer([record.key, *where]), message, _locate(record.path, [record.key, *where]))

    if declared is None:
        return [
            problem(
                f"{module} declares no PARAMETERS — declare each hyperparameter of {record.class_name} "
                "beside its signature (algorithms.core.parameters), even none: PARAMETERS = Parameters()",
                "class_name",
            )
        ]
    found = [
        problem(
            f"{record.class_name} parameter {name!r} is not declared in {module}.PARAMETERS — declare its "
            "kind, range and note there (or list it under plumbing)"
        )
        for name in hyperparameters
        if name not in declared
    ]
    found += [
        problem(
            f"{module}.PARAMETERS declares {name!r}, which is not a hyperparameter of {record.class_name} — "
            "remove it or fix the name"
        )
        for name in declared
        if name not in hyperparameters
    ]
    suggested = {}
    for name, spec in record.hyperparameters.items():
        if name not in declared:
            continue
        try:
            declared[name].check(name, spec.suggested)
        except (ValueError, TypeError) as exc:
            found.append(
                problem(f"{exc} — fix the suggestion or {module}.PARAMETERS", "hyperparameters", name, "suggested")
            )
        else:
            suggested[name] = spec.suggested
    if not found:
        try:
            declared.check(**suggested)
        except (ValueError, TypeError) as exc:
            found.append(problem(f"the suggested {exc} — fix the suggestions"))
    return found


def _is_optimizer_class(obj: Any) -> bool:
    import torch

    return isinstance(obj, type) and issubclass(obj, torch.optim.Optimizer)


def _option_optimizer(record: MethodRecord) -> Any:
    """The optimizer class a best practice's ``trainer_option`` ``{"optimizer": "<dotted name>"}``
    names, or None (no such option, or no such class)."""
    from .codeinfo import resolve

    dotted = (record.trainer_option or {}).get("optimizer") if record.is_best_practice else None
    if not isinstance(dotted, str) or "." not in dotted:
        return None
    try:
        cls = resolve(dotted)
    except (ImportError, AttributeError):
        return None
    return cls if _is_optimizer_class(cls) else None


def check_method_placeholders(package_root: Path | None = None, repo_root: Path | None = None) -> list[Problem]:
    """The ``TODO(new_card)`` prompts left in each method folder's code and in its own test file
    (valid metadata or not: a new method's first prompts are there before its metadata is)."""
    package = Path(package_root) if package_root is not None else PACKAGE_ROOT
    tests = Path(repo_root or REPO_ROOT) / "tests" / "methods"
    paths = []
    for metadata in sorted(package.glob("*/metadata.json")):
        paths += sorted(metadata.parent.glob("*.py"))
        paths.append(tests / f"test_{metadata.parent.name}.py")
    return placeholder_problems(paths)


def valid_records(package_root: Path | None = None) -> tuple[dict[str, MethodRecord], list[Problem]]:
    """The method and best-practice records whose metadata is valid, and one line per file skipped
    (``validate_metadata`` says what is wrong with it)."""
    records, problems = validate_files(discover_metadata_files(package_root))
    skipped = sorted({p.path for p in problems})
    return records, [
        Problem(path, "", "skipped: its metadata is invalid — python tools/validate_metadata.py lists why")
        for path in skipped
    ]


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
            problems.append(
                Problem(
                    path,
                    "/" + "/".join(map(str, [key, *where])),
                    f"{dotted} is not a function the package exports — fix the name or add it to the module",
                    _locate(path, [key, *where]),
                )
            )

    for key, record in load_all_datasets(package_root).items():
        check(record.path, key, ["builder"], f"{record.raw['module']}.{record.raw['builder']}")
    for key, record in load_all_model_families(package_root).items():
        for index, member in enumerate(record.raw["members"]):
            check(record.path, key, ["members", index, "builder"], f"{record.raw['module']}.{member['builder']}")
    return problems


# ---------------------------------------------------------------------------------------------
# check_cards: every card against its template (sections, facts directives), and its prose


def check_cards(
    repo_root: Path | None = None, package_root: Path | None = None, results_root: Path | None = None
) -> list[Problem]:
    """Check every method, best-practice, dataset and model-family card; a record without a card is a
    problem.

    Each card has the sections of its kind's template in order and a ``card-facts`` directive for
    each of the template's facts (the build renders them, so they cannot go stale).
    Inline ``name=value`` names a real parameter (of the card's class or functional form, the
    Trainer, a best practice's optimizer, or a strategy object such as ``DeepSpeed(zero_stage=3)``
    and, bare, the practice's own strategy's), and one that says it is the default states the
    code's default. ``TODO(new_card)`` prompts are reported.
    The cards' composability statements and the committed matrix (``results_root``, default the
    checkout's ``results/``) are checked by :func:`check_composability`.
    """
    from algorithms.core.strategies import STRATEGIES

    from . import cards
    from .codeinfo import CodeLookupError, lookup, parameters, trainer_parameters
    from .scaffold import CARD_DIRS, card_path, render_card

    repo_root = Path(repo_root or REPO_ROOT)
    records, problems = valid_records(package_root)
    signatures: dict[str, dict[str, Any]] = {"Trainer": trainer_parameters()}
    # the parallel modes' strategy objects, as cards write them: DeepSpeed(zero_stage=3), FSDP(cpu_offload=True)
    signatures.update({cls.__name__: parameters(cls) for cls in STRATEGIES.values()})
    unresolved = set()
    for record in records.values():
        try:
            if record.class_name:
                signatures[record.class_name] = parameters(
                    lookup(f"algorithms.{record.class_name}", record.path, record.key, "class_name")
                )
            if record.functional:
                signatures[record.functional] = parameters(
                    lookup(f"algorithms.functional.{record.functional}", record.path, record.key, "functional")
                )
        except CodeLookupError as exc:
            problems.append(exc.problem)
            unresolved.add(record.key)
        optimizer = _option_optimizer(record)
        if optimizer is not None:  # the optimizers of its module, by class name, as the card calls them
            module = importlib.import_module(optimizer.__module__)
            for name in getattr(module, "__all__", ()):
                if _is_optimizer_class(getattr(module, name, None)):
                    signatures[name] = parameters(getattr(module, name))

    subjects: list[tuple[str, Any]] = [
        (record.kind, record) for record in records.values() if record.key not in unresolved
    ]
    subjects += [(Kind.DATASET, s) for s in load_all_datasets(package_root).values()]
    subjects += [(Kind.MODEL_FAMILY, s) for s in load_all_model_families(package_root).values()]
    terms, prose = MethodTerms(records), {}  # the Composability prose of each card, checked with the card
    for kind, record in subjects:
        path = card_path(kind, record.key, repo_root)
        if not path.exists():
            flag = "" if kind in METHOD_KINDS else f" --kind {kind}"
            problems.append(
                Problem(
                    path,
                    "card",
                    f"missing: {display_path(record.path)} has no card — "
                    f"create it with: python tools/new_card.py {record.key}{flag}",
                )
            )
            continue
        text = path.read_text(encoding="utf-8")
        inline: list[Problem] = []
        if kind in METHOD_KINDS:  # first: it parses the card in full, and the checks below reuse that parse
            optimizer = _option_optimizer(record) if record.is_best_practice else None
            mode = STRATEGIES.get((record.trainer_option or {}).get("parallel"))
            own = (
                {
                    **trainer_parameters(),
                    **(parameters(optimizer) if optimizer else {}),
                    **(parameters(mode) if mode else {}),
                }
                if record.is_best_practice
                else {**signatures[record.class_name], **signatures[record.functional]}
            )
            inline = _check_inline(path, text, own, signatures)
        fresh = render_card(kind, record.key, repo_root=repo_root, package_root=package_root, record=record)
        problems += check_card_sections(path, text, cards.sections(fresh)[1:])
        problems += check_card_facts(path, text, fresh, record.key, kind)
        problems += inline
        if record.kind == "method":
            prose[record.key] = check_composability_prose(path, text, record, records, terms)
    card_files = sorted({card_path(kind, "x", repo_root).parent for kind in CARD_DIRS}, key=str)
    problems += placeholder_problems([p for folder in card_files for p in sorted(folder.glob("*.md"))])
    problems += check_composability(records, repo_root, results_root, prose=prose)
    return problems


# ---------------------------------------------------------------------------------------------
# check_composability: what the cards say of combinations is the matrix's, and the matrix is current

COMPOSABILITY_SECTION = "Composability"
COMPOSABILITY_REGION = "composability"


def check_composability(
    records: Mapping[str, MethodRecord],
    repo_root: Path | None = None,
    results_root: Path | None = None,
    *,
    prose: Mapping[str, list[Problem]] | None = None,
) -> list[Problem]:
    """The four composability rules: method cards name no other method in their Composability
    prose (:func:`check_composability_prose`), every ``interactions`` key names something the
    matrix runs (:func:`check_interaction_keys`), a claim that a method works in a precision or
    parallel mode has a passing cell of the matrix behind it (:func:`check_mode_claims`), and the
    committed matrix covers the registry without a failing cell (:func:`check_composability_matrix`).
    ``prose``: the first rule's problems by method key, for the cards the caller has checked
    already."""
    from .composability_pages import composability_files
    from .results import ResultsError
    from .scaffold import card_path

    problems: list[Problem] = []
    terms = None
    for record in records.values():
        path = card_path(record.kind, record.key, repo_root)
        if prose is not None and record.key in prose:
            problems += prose[record.key]
        elif record.kind == "method" and path.exists():
            terms = terms or MethodTerms(records)  # once for all cards: linear in the number of methods
            problems += check_composability_prose(path, path.read_text(encoding="utf-8"), record, records, terms)
    problems += check_interaction_keys(records)
    try:  # read once for the last two rules; where unreadable, the last says why
        files = composability_files(Path(results_root) / "composability" if results_root is not None else None)
    except ResultsError:
        files = None
    if files is not None:
        problems += check_mode_claims(records, repo_root, files=files)
    return problems + check_composability_matrix(records, results_root, files=files)


def _method_terms(record: MethodRecord) -> list[str]:
    """What names a method in prose: display name, class name, AKA and key."""
    return [t for t in (record.name, record.class_name, *record.aka, record.key) if t]


@cache
def _term_pattern(term: str) -> re.Pattern[str]:
    """``term`` as whole words, any case, its spaces matching any run of whitespace (a line break too)."""
    words = r"\s+".join(re.escape(word) for word in term.split())
    return re.compile(rf"(?<![\w]){words}(?![\w])", re.IGNORECASE)


_WORD = re.compile(r"\w+")


class MethodTerms:
    """The terms that name each ``kind: method`` record (:func:`_method_terms`), indexed by their
    first word: prose can name a term only where that word stands as a whole word, so a card's
    prose is searched for the few terms whose words it has, not for every method's."""

    def __init__(self, records: Mapping[str, MethodRecord]):
        self.by_word: dict[str, list[tuple[MethodRecord, str, frozenset[str]]]] = {}
        self.wordless: list[tuple[MethodRecord, str, frozenset[str]]] = []  # no word to index by
        for record in sorted(records.values(), key=lambda r: r.key):
            if record.kind != "method":
                continue
            for term in _method_terms(record):
                words = [w.casefold() for w in _WORD.findall(term)]
                entry = (record, term, frozenset(words))
                if words:
                    self.by_word.setdefault(words[0], []).append(entry)
                else:
                    self.wordless.append(entry)

    def candidates(self, text: str) -> list[tuple[MethodRecord, str]]:
        """``(record, term)`` for every term whose words all stand in ``text`` (the others cannot match)."""
        present = {w.casefold() for w in _WORD.findall(text)}
        found = [entry for word in present for entry in self.by_word.get(word, ())] + self.wordless
        return [
            (record, term) for record, term, words in sorted(found, key=lambda e: (e[0].key, e[1])) if words <= present
        ]


def check_composability_prose(
    path: Path, text: str, record: MethodRecord, records: Mapping[str, MethodRecord], terms: MethodTerms | None = None
) -> list[Problem]:
    """In the card's Composability section, its prose (not its HTML comments) names no other
    ``kind: method`` of the registry: a statement about a combination belongs in the metadata's
    ``interactions``, which the card's composability facts show beside the matrix's outcome.
    ``terms``: :class:`MethodTerms` of ``records``, when the caller checks many cards."""
    from . import cards

    found = cards.sections(text)
    starts = [i for i, s in enumerate(found) if s.title == COMPOSABILITY_SECTION and s.level == 2]
    if not starts:
        return []  # check_card_sections reports the missing section
    start = found[starts[0]]
    end = next((s.line for s in found[starts[0] + 1 :] if s.level <= start.level), None)
    lines = text.splitlines()
    first, last = start.line, (end - 1 if end else len(lines))  # the lines after the heading, 1-based
    # (its facts directive names only a fact, never a method: nothing to leave out)
    shown = "\n".join(lines[first:last])
    shown = re.sub(r"<!--.*?-->", lambda m: "\n" * m.group().count("\n"), shown, flags=re.DOTALL)
    own = {t.casefold() for t in _method_terms(record)}
    problems, reported = [], set()
    for other, term in (terms or MethodTerms(records)).candidates(shown):
        if other.key == record.key or term.casefold() in own:
            continue
        for match in _term_pattern(term).finditer(shown):
            line = first + 1 + shown.count("\n", 0, match.start())
            if (line, other.key) in reported:
                continue
            reported.add((line, other.key))
            problems.append(
                Problem(
                    path,
                    COMPOSABILITY_SECTION,
                    f"names {other.name} in the card's prose "
                    f"— move the statement into "
                    f'{display_path(record.path)} interactions["{other.key}"], shown beside '
                    "the matrix's outcome",
                    line,
                )
            )
    return sorted(problems, key=lambda p: (p.line or 0, p.message))


def check_interaction_keys(records: Mapping[str, MethodRecord]) -> list[Problem]:
    """Every ``interactions`` key is another method's key (one it shares a domain with, so the
    matrix pairs them), ``precision=<mode>`` or ``parallel=<mode>`` of the Trainer."""
    from algorithms.core.options import PARALLELS, PRECISIONS

    methods = {k: r for k, r in records.items() if r.kind == "method"}
    problems = []
    for record in records.values():
        for key in record.interactions:
            option, _, mode = key.partition("=")
            if (option == "precision" and mode in PRECISIONS) or (option == "parallel" and mode in PARALLELS):
                continue
            if key in methods and key != record.key and set(methods[key].domains) & set(record.domains):
                continue
            if key in methods and key != record.key:
                why = f"{methods[key].name} shares no domain with {record.name}, so the matrix never pairs them"
            elif key == record.key:
                why = "a note on the method with itself is never shown"
            else:
                why = (
                    f"it is not a method key, nor precision=<{'|'.join(PRECISIONS)}>, nor "
                    f"parallel=<{'|'.join(PARALLELS)}>"
                )
            problems.append(
                Problem(
                    record.path,
                    f"/{record.key}/interactions/{key}",
                    f"{key!r}: {why} — fix the key or remove the note",
                    _locate(record.path, [record.key, "interactions", key]),
                )
            )
    return problems


# ---------------------------------------------------------------------------------------------
# check_mode_claims: "works with bf16", "runs under ddp" is the matrix's to say
#
# The grammar, kept small so that it reads no more than it should:
# - A claim is a verb of working together (work, run, ran, compose, combine, compatible), then
#   optionally "it", "them", "the same", "unchanged" or "as is", then "with", "under" or "in";
#   not negated by "not", "never", "cannot" or "n't" in the three words before it.
# - Its modes are the mode names after it in the same clause, which ends at ". ; : ! ?" outside code
#   spans, or at a word that turns it round ("not", "never", "nor", "except", "but", "unless",
#   "without"). A parenthesis in the clause is read unless it holds such a word (a qualification:
#   "(`adaptive` not under `fsdp`)").
# - Mode names: the Trainer's (fp32, fp16, bf16, amp_fp16, amp_bf16; `single`, dp, ddp, fsdp,
#   deepspeed, accelerate), the classes and libraries' names (DataParallel, DistributedDataParallel,
#   FSDP, DeepSpeed, ZeRO, Accelerate), "mixed precision"/AMP, "half precision", and the collective
#   "every precision (mode)", "all precisions", "the parallel modes", "every distributed mode".
# - Each mode named is backed on its own by a cell of the committed matrix whose outcome is "runs",
#   whose ``methods`` hold the method (a best practice: whose own precision or parallel mode is the
#   practice's) and whose ``precision`` or ``parallel`` is the mode. A 16-bit format's name (fp16,
#   bf16) is backed by its pure or its autocast mode, "mixed precision" by either autocast mode,
#   "half precision" by either pure one; a collective name needs every mode it covers.

_NEGATION = r"not|never|nor|except|but|unless|without|cannot|can't|\w+n't"
_CLAIM_VERB = re.compile(
    r"\b(?:work(?:s|ed)?|runs?|ran|compos(?:e|es|ed)|combin(?:e|es|ed)|compatible)"
    r"(?:\s+(?:it|them|the\s+same|unchanged|as\s+is))?\s+(?:with|under|in)\b",
    re.IGNORECASE,
)
_NEGATED = re.compile(rf"\b(?:{_NEGATION})\b(?:\W+\w+){{0,2}}\W*$", re.IGNORECASE)
_TURN = re.compile(rf"\b(?:{_NEGATION})\b", re.IGNORECASE)
_CLAUSE_END = re.compile(r"[.;:!?](?!\w)")


def _mode_terms() -> list[tuple[str, str, tuple[tuple[tuple[str, str], ...], ...]]]:
    """``(pattern, label, groups)``: a mode name, as a claim prints it, and what backs it: every
    group needs one passing cell in one of its ``(option, mode)`` alternatives."""
    from algorithms.core.options import DISTRIBUTED, PARALLELS, PRECISIONS

    def each(option: str, modes: Iterable[str]) -> tuple[tuple[tuple[str, str], ...], ...]:
        return tuple(((option, mode),) for mode in modes)

    def any_of(option: str, *modes: str) -> tuple[tuple[tuple[str, str], ...], ...]:
        return (tuple((option, mode) for mode in modes),)

    def every(noun: str) -> str:  # "every precision (mode)", "each of the Trainer's precisions", "the precision modes"
        trainers = r"(?:`?Trainer`?'s\s+)?"
        return (
            rf"(?:every|each|any)\s+{trainers}{noun}(?:\s+mode)?"
            rf"|(?:(?:every|each|any|all)(?:\s+of)?\s+)?(?:the\s+)?{trainers}{noun}(?:s|\s+modes)"
        )

    return [  # longest first: "distributed data parallel" is ddp, not dp
        (every("precision"), "every precision", each("precision", PRECISIONS)),
        (every("parallel"), "every parallel mode", each("parallel", PARALLELS)),
        (every("distributed"), "every distributed mode", each("parallel", DISTRIBUTED)),
        (r"(?:automatic\s+)?mixed[\s-]precision|amp", "mixed precision", any_of("precision", "amp_fp16", "amp_bf16")),
        (r"half[\s-]precision", "half precision", any_of("precision", "fp16", "bf16")),
        (r"amp_fp16", "amp_fp16", any_of("precision", "amp_fp16")),
        (r"amp_bf16", "amp_bf16", any_of("precision", "amp_bf16")),
        (r"fp32", "fp32", any_of("precision", "fp32")),
        (r"fp16", "fp16", any_of("precision", "fp16", "amp_fp16")),
        (r"bf16", "bf16", any_of("precision", "bf16", "amp_bf16")),
        (r"[`\"']single[`\"']", "single", any_of("parallel", "single")),
        (r"ddp|DistributedDataParallel|distributed\s+data\s+parallel", "ddp", any_of("parallel", "ddp")),
        (
            r"fsdp2?|FullyShardedDataParallel|fully_shard|fully\s+sharded\s+data\s+parallel",
            "fsdp",
            any_of("parallel", "fsdp"),
        ),
        (r"dp|DataParallel", "dp", any_of("parallel", "dp")),
        (r"deepspeed(?:\s+(?-i:ZeRO))?|(?-i:ZeRO)(?:-?[123])?", "deepspeed", any_of("parallel", "deepspeed")),
        (r"(?-i:Accelerate)|`accelerate`", "accelerate", any_of("parallel", "accelerate")),
    ]


@cache
def _mode_pattern() -> tuple[re.Pattern[str], tuple[tuple[str, tuple[tuple[tuple[str, str], ...], ...]], ...]]:
    terms = _mode_terms()
    pattern = "|".join(f"(?P<t{i}>{p})" for i, (p, _, _) in enumerate(terms))
    return re.compile(rf"(?<![\w-])(?:{pattern})(?![\w-])", re.IGNORECASE), tuple((t[1], t[2]) for t in terms)


@dataclass(frozen=True)
class ModeClaim:
    """A sentence's claim that its subject works in some modes: where it stands (``offset`` in the
    text given), its words, and each mode it names with what backs that mode."""

    offset: int
    text: str
    modes: tuple[tuple[str, tuple[tuple[tuple[str, str], ...], ...]], ...]


def mode_claims(text: str) -> list[ModeClaim]:
    """The claims of working in a precision or parallel mode that ``text`` (prose, with Markdown code
    spans) makes, by the grammar above; a claim that names no mode is none."""
    # Code spans are read as words: their punctuation ends no clause and opens no parenthesis.
    flat = re.sub(r"`[^`]*`", lambda m: re.sub(r"[().;:!?,]", " ", m.group()), text)
    pattern, terms = _mode_pattern()
    found, read_to = [], 0
    for verb in _CLAIM_VERB.finditer(flat):
        if verb.start() < read_to:
            continue  # within the last claim's clause ("works with fp32 and combines with ddp"): read with it
        start = max(flat.rfind(c, 0, verb.start()) for c in ".;:!?")
        if _NEGATED.search(flat[start + 1 : verb.start()]):
            continue
        end = _CLAUSE_END.search(flat, verb.end())
        clause = flat[verb.end() : end.start() if end else len(flat)]
        read_to = verb.end() + len(clause)
        clause = re.sub(r"\([^()]*\)", lambda m: " " * len(m.group()) if _TURN.search(m.group()) else m.group(), clause)
        turn = _TURN.search(clause)
        clause = clause[: turn.start()] if turn else clause
        modes, last = [], 0
        for match in pattern.finditer(clause):
            label, groups = terms[int(match.lastgroup[1:])]
            last = match.end()
            if all(label != m[0] for m in modes):
                modes.append((label, groups))
        if modes:  # the claim's words: from its verb to its last mode, and the end of that mode's code span
            end = verb.end() + last
            if text.count("`", verb.start(), end) % 2:
                end = text.find("`", end) + 1 or len(text)
            words = " ".join(text[verb.start() : end].split())
            found.append(ModeClaim(verb.start(), words, tuple(modes)))
    return found


def _runs(cell: Mapping[str, Any], subject: MethodRecord) -> bool:
    """Whether ``cell`` shows ``subject`` running. A best practice runs in a cell of its own mode:
    its Trainer option's, or one its ``aka`` names (Mixed Precision's amp_fp16 beside its
    amp_bf16); an optimizer or a model is in no cell."""
    if cell["outcome"] != "runs":
        return False
    if subject.kind == "method":
        return subject.key in cell["methods"]
    for option, value in (subject.trainer_option or {}).items():
        if option in ("precision", "parallel"):
            return cell[option] == value or cell[option] in subject.aka
    return False


def check_mode_claims(
    records: Mapping[str, MethodRecord],
    repo_root: Path | None = None,
    results_root: Path | None = None,
    *,
    files: list[tuple[Path, Mapping[str, Any]]] | None = None,
) -> list[Problem]:
    """A card's prose (outside code and comments) and its metadata's text (but the quoted source's:
    ``at_scale``, ``paper``) claim that the method works in a precision or parallel mode only where
    the committed matrix has a passing cell of it in that mode (:func:`mode_claims` reads them).
    Without a readable committed matrix nothing is checked: :func:`check_composability_matrix` says
    why. ``files``: the committed matrix files, where the caller has read them."""
    from . import cards
    from .composability_pages import composability_files
    from .results import ResultsError
    from .scaffold import card_path

    if files is None:
        try:
            files = composability_files(Path(results_root) / "composability" if results_root is not None else None)
        except ResultsError:
            return []
    cells = [cell for _, document in files for cell in document["cells"]]
    if not cells:
        return []
    problems = []

    ran: dict[str, set[tuple[str, str]]] = {}  # by record: the (option, mode) of its passing cells

    def check(path: Path, line: int | None, claim: ModeClaim, record: MethodRecord) -> None:
        if record.key not in ran:
            ran[record.key] = {
                (option, cell[option]) for cell in cells for option in ("precision", "parallel") if _runs(cell, record)
            }
        for label, groups in claim.modes:
            missing = [g for g in groups if not set(g) & ran[record.key]]
            if not missing:
                continue
            names = ["/".join(mode for _, mode in group) for group in missing]
            what = ", ".join(names) + ("" if names == [label] else f" (of {label})")
            modes = {mode for group in missing for _, mode in group}
            if record.kind != "method":
                own = "/".join(f"{o}={m}" for o, m in (record.trainer_option or {}).items())
                how, fix = f"the matrix has no passing cell under {own} ({record.name}) and {what}", "remove the claim"
            elif not modes & _matrix_modes():
                how = f"the matrix has no passing cell of {record.name} under {what}"
                fix = f"remove the claim: the matrix does not run {' or '.join(sorted(modes))}"
            else:
                how = f"the matrix has no passing cell of {record.name} under {what}"
                fix = f"remove the claim, or run python tools/composability_matrix.py --only {record.key} --merge"
            problems.append(Problem(path, f'"{claim.text}"', f"{how} — {fix}", line))

    for record in records.values():
        path = card_path(record.kind, record.key, repo_root)
        text = path.read_text(encoding="utf-8") if path.exists() else ""
        if mode_claims(text):  # the card's prose, where its source has a claim at all (parsing costs)
            for first, source in cards.prose(text):
                for claim in mode_claims(source):
                    check(path, first + source.count("\n", 0, claim.offset), claim, record)
        for where, value in _texts(record.raw, [record.key]):
            for claim in mode_claims(value):
                check(record.path, _locate(record.path, where), claim, record)
    return problems


def _matrix_modes() -> set[str]:
    from algorithms.core.options import MATRIX_PARALLELS, PRECISIONS

    return {*PRECISIONS, "single", *MATRIX_PARALLELS}


def _texts(value: Any, where: list[Any]) -> Iterable[tuple[list[Any], str]]:
    """``(pointer parts, text)`` of every string in a metadata entry but its quotations' (what a
    source says of its own runs is the source's)."""
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            if key not in ("at_scale", "paper", "link", "url"):
                yield from _texts(item, [*where, key])
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from _texts(item, [*where, index])


def check_composability_matrix(
    records: Mapping[str, MethodRecord],
    results_root: Path | None = None,
    *,
    files: list[tuple[Path, Mapping[str, Any]]] | None = None,
) -> list[Problem]:
    """The committed matrix (``results/composability/*.json``) is valid, every CPU file has every
    cell of today's methods (:func:`~methods_tools.composability_pages.expected_cells`), and no
    file has a ``fails`` cell. A GPU file is not held to the registry (it needs a GPU to rerun);
    its cells of newer methods show as not run. ``files``: the valid files, where the caller has
    read them."""
    from .composability_pages import (
        COMPOSABILITY_DIR,
        MATRIX_COMMAND,
        cell_key,
        cell_label,
        composability_files,
        expected_cells,
    )
    from .results import ResultsError

    root = Path(results_root) / "composability" if results_root is not None else COMPOSABILITY_DIR
    rerun = f"run {MATRIX_COMMAND} and commit the file it writes"
    if files is None:
        try:
            files = composability_files(root)
        except ResultsError as exc:
            return [_results_line(line) for line in str(exc).splitlines()]
    if not files:
        return [Problem(root, "matrix", f"no composability matrix is committed — {rerun}")]
    names = {k: r.name for k, r in records.items()}
    problems = []
    if not any(document["environment"]["device_type"] == "cpu" for _, document in files):
        problems.append(Problem(root, "matrix", f"no CPU composability matrix is committed — {rerun}"))
    for path, document in files:
        present = {cell_key(c) for c in document["cells"]}
        missing = [k for k in expected_cells(records.values(), document) if k not in present]
        if missing and document["environment"]["device_type"] == "cpu":
            shown = "; ".join(cell_label(k, names) for k in missing[:4]) + ("; …" if len(missing) > 4 else "")
            # a method without its solo cell is new to the file: its own cells are all it needs
            new = sorted({k[1][0] for k in missing if k[0] == "solo"})
            how = (
                f"run python tools/composability_matrix.py --only {','.join(new)} --merge (or {MATRIX_COMMAND}) "
                "and commit the file it writes"
                if new
                else rerun
            )
            problems.append(
                Problem(path, "/cells", f"lacks {len(missing)} cell(s) of today's methods ({shown}) — {how}")
            )
        for index, cell in enumerate(document["cells"]):
            if cell["outcome"] != "fails":
                continue
            why = cell["detail"] or f"not seen: {', '.join(cell['missing'])}"
            first = cell["methods"][0]
            where = (
                f'algorithms/{first}/metadata.json interactions["{cell["methods"][1]}"]'
                if cell["kind"] == "pair"
                else f'algorithms/{first}/metadata.json interactions["{cell["kind"]}={cell[cell["kind"]]}"]'
                if cell["kind"] in ("precision", "parallel")
                else f"the code of algorithms/{first}/"
            )
            problems.append(
                Problem(
                    path,
                    f"/cells/{index}",
                    f"fails: {cell_label(cell_key(cell), names)}: {why} — fix "
                    f"the bug, or explain the interaction in {where}; then {rerun}",
                )
            )
    return problems


def _results_line(line: str) -> Problem:
    """A :class:`~methods_tools.results.ResultsError` line (``file: /pointer: message``) as a Problem."""
    where, _, rest = line.partition(": ")
    pointer, _, message = rest.partition(": ")
    return Problem(Path(where), pointer, message) if message else Problem(Path(where), "", rest)


def check_card_sections(path: Path, text: str, expected: list[Any]) -> list[Problem]:
    """The card has a ``#`` title and every section of its template (``expected``: the
    :class:`~methods_tools.cards.Section` list of a fresh render), at the template's level, in the
    template's order (extra sections are allowed)."""
    from . import cards

    found = cards.sections(text)
    problems = []
    if not found or found[0].level != 1:
        problems.append(Problem(path, "title", "the card must open with one '# Title' heading — add it", 1))
    position, last_line = 0, 1
    for section in expected:
        matches = [i for i, s in enumerate(found) if s.title == section.title and s.level == section.level]
        if not matches:
            problems.append(
                Problem(
                    path,
                    section.title,
                    f"missing section '{'#' * section.level} "
                    f"{section.title}' — add it after line {last_line}, as in the template",
                    last_line,
                )
            )
            continue
        later = [i for i in matches if i >= position]
        if not later:
            problems.append(
                Problem(
                    path,
                    section.title,
                    "section out of order — move it to where the template has it",
                    found[matches[0]].line,
                )
            )
            continue
        position, last_line = later[0], found[later[0]].line
    return problems


def check_card_facts(path: Path, text: str, fresh: str, key: str, kind: str) -> list[Problem]:
    """The card holds a ``card-facts`` directive for each region of ``fresh`` (its template
    rendered), once, and none its kind does not have; a card still written with generated regions
    is told how to convert it."""
    from . import cards
    from .facts import DIRECTIVE, directive_fence, directives

    update = f"python tools/new_card.py {key}{'' if kind in METHOD_KINDS else f' --kind {kind}'} --update"
    try:
        old = cards.regions(text)
    except cards.RegionError as exc:
        return [Problem(path, "regions", f"{exc}", exc.line)]
    if old:
        first = min(old.values(), key=lambda r: r.line)
        return [
            Problem(
                path,
                first.name,
                f"generated text committed in the card ({len(old)} region(s)): "
                f"facts render when the site builds — run: {update}",
                first.line,
            )
        ]
    want = list(cards.regions(fresh))
    have = directives(text)
    problems = []
    seen: dict[str, int] = {}
    for line, name in have:
        if name not in want:
            problems.append(
                Problem(
                    path,
                    name,
                    f"{DIRECTIVE} {name!r}: this card kind has no such fact — use one of: {', '.join(want)}",
                    line,
                )
            )
        elif name in seen:
            problems.append(
                Problem(
                    path,
                    name,
                    f"{DIRECTIVE} {name!r} a second time (the first is at line {seen[name]}) — keep one",
                    line,
                )
            )
        seen.setdefault(name, line)
    for name in want:
        if name not in seen:
            problems.append(
                Problem(
                    path,
                    name,
                    f"no {DIRECTIVE} directive for {name!r} — add "
                    f"{directive_fence(name)!r} where the template has it (python "
                    f"tools/new_card.py {key} --dry-run shows where)",
                )
            )
    return problems


def placeholder_problems(paths: Iterable[Path]) -> list[Problem]:
    """One problem per ``TODO(new_card)`` prompt left in ``paths`` (those that exist)."""
    return [
        Problem(path, "TODO", f"write this: {hint}", line)
        for path in paths
        if Path(path).exists()
        for line, hint in prompts(path)
    ]


def _check_inline(
    path: Path, text: str, own: Mapping[str, Any], signatures: Mapping[str, Mapping[str, Any]]
) -> list[Problem]:
    """``name=value`` in inline code names a parameter; where the sentence says it is the default,
    the value is the code's default."""
    from algorithms.core.strategies import STRATEGIES

    from . import cards
    from .codeinfo import REQUIRED

    strategy_names = {cls.__name__ for cls in STRATEGIES.values()}  # torch has a DataParallel too
    problems = []
    for item in cards.inline_assignments(text):
        if item.callee is None:
            known, owner = own, "this card's class, functional form, Trainer option or its strategy"
        elif item.callee in strategy_names and (item.qualifier or "").split(".")[0] in ("torch", "nn"):
            continue  # torch.nn.DataParallel, not the strategy of that name
        elif item.callee in signatures:
            known, owner = signatures[item.callee], item.callee
        else:
            continue  # another library's function: not ours to check
        if item.name not in known:
            problems.append(
                Problem(
                    path,
                    item.name,
                    f"`{item.text}` names no parameter of {owner} — "
                    + (f"use one of: {', '.join(known)}" if known else f"{owner} takes none"),
                    item.line,
                )
            )
            continue
        default = known[item.name].default
        if item.value is None or default is REQUIRED or not _claims_default(item):
            continue
        try:
            value = ast.literal_eval(item.value)
        except (ValueError, SyntaxError):
            continue
        if not _same_value(value, default):
            problems.append(
                Problem(
                    path,
                    item.name,
                    f"card says the default is {item.name}={item.value}, the code's "
                    f"default is {default!r} — fix the card or the code",
                    item.line,
                )
            )
    return problems


def _claims_default(item: Any) -> bool:
    """Whether the words around ``name=value`` call it the default ("default `alpha=1.0`",
    "`alpha=1.0` (the default)")."""
    at = item.context.find(item.text)
    around = item.context[max(0, at - 25) : at + len(item.text) + 25] if at >= 0 else item.context
    return re.search(r"\bdefaults?\b", around, re.IGNORECASE) is not None


def _same_value(a: Any, b: Any) -> bool:
    """Equality of literals as values: ``1 == 1.0`` and lists equal tuples, but ``True != 1``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same_value(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)
