"""Discover, load and validate method metadata: the one loader everything uses.

``conf.py``, the table generators, the card tools, the pre-commit validator, the package's own
exports and the tests all read metadata through this module, so the rules live in one place:
the JSON Schemas beside it plus the few rules a schema cannot state (the key equals the folder
or file name, names are unique, no JSON object repeats a key).

Where each :class:`Kind` of metadata lives, beside the code it describes:

- ``method``: ``algorithms/<key>/metadata.json``, one folder per method;
- ``best_practice``: ``algorithms/core/<key>.metadata.json``, beside the Trainer option it documents;
- ``dataset``: ``algorithms/data/<key>.metadata.json``;
- ``model_family``: ``algorithms/models/<key>.metadata.json``.

This module imports neither torch nor the method code, so the pre-commit hook stays fast.

Problems are collected, not raised one at a time: :class:`MetadataError` carries every
:class:`Problem`, each rendered on one line as ``file:line: /json/pointer: message``.

Example::

    >>> from algorithms.metadata import load_all_metadata
    >>> records = load_all_metadata()
    >>> records["cutmix"].class_name
    'CutMix'
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

import jsonschema

PACKAGE_ROOT = Path(__file__).resolve().parent
SCHEMA_PATH = PACKAGE_ROOT / "metadata.schema.json"
DATASET_SCHEMA_PATH = PACKAGE_ROOT / "dataset.schema.json"
MODEL_FAMILY_SCHEMA_PATH = PACKAGE_ROOT / "model_family.schema.json"

__all__ = [
    "Kind",
    "PACKAGE_ROOT",
    "SCHEMA_PATH",
    "DATASET_SCHEMA_PATH",
    "MODEL_FAMILY_SCHEMA_PATH",
    "SUBJECT_KINDS",
    "SubjectRecord",
    "discover_dataset_files",
    "discover_model_family_files",
    "load_all_datasets",
    "load_all_model_families",
    "validate_subject_files",
    "Hyperparameter",
    "MetadataError",
    "MethodRecord",
    "Problem",
    "discover_metadata_files",
    "load_all_metadata",
    "load_metadata",
    "validate_files",
    "display_path",
    "schema_validator",
]


class Kind(str, enum.Enum):
    """What a metadata entry describes: the one list of kinds (the schemas, the scaffold and the
    checks use it; :func:`schema_validator` refuses a method schema whose ``kind`` enum differs)."""

    METHOD = "method"
    BEST_PRACTICE = "best_practice"
    DATASET = "dataset"
    MODEL_FAMILY = "model_family"

    def __str__(self) -> str:
        return self.value


# The kinds that share the method schema and MethodRecord, and the folder each lives in.
METHOD_KINDS = (Kind.METHOD, Kind.BEST_PRACTICE)
BEST_PRACTICE_FOLDER = "core"
SUFFIX = ".metadata.json"


@dataclass(frozen=True)
class Problem:
    """One thing wrong with one file."""

    path: Path
    pointer: str
    message: str
    line: int | None = None

    def __str__(self) -> str:
        where = f"{display_path(self.path)}:{self.line}" if self.line else display_path(self.path)
        return f"{where}: {self.pointer or '/'}: {self.message}"


class MetadataError(ValueError):
    """Every problem found in one or more metadata files, one per line."""

    def __init__(self, problems: Iterable[Problem]):
        self.problems: tuple[Problem, ...] = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


@dataclass(frozen=True)
class Hyperparameter:
    """What metadata says of a hyperparameter: the value to start from and why (``note``).

    Its kind, range or choices and meaning are declared in code, beside the signature
    (``PARAMETERS`` in the method's module, see :mod:`algorithms.core.parameters`); ``nox -s
    check`` holds the suggestion within that range.
    """

    suggested: Any
    note: str | None = None


@dataclass(frozen=True)
class MethodRecord:
    """A validated ``metadata.json`` entry. ``key`` is the method's folder name."""

    key: str
    path: Path
    name: str
    kind: str
    class_name: str | None
    functional: str | None
    tldr: str
    attribution: str
    link: str
    domains: tuple[str, ...]
    tags: tuple[str, ...]
    summary: str
    use: str
    math_equivalent: bool
    hyperparameters: Mapping[str, Hyperparameter]
    plumbing: tuple[str, ...]
    aka: tuple[str, ...] = ()
    paper: Mapping[str, Any] | None = None
    trainer_option: Mapping[str, Any] | None = None
    #: What the composability matrix checks to see the method act (see the schema's ``observable``).
    observable: tuple[str, ...] = ()
    #: Known interactions: another method's key, ``precision=<mode>`` or ``parallel=<mode>`` -> the note.
    interactions: Mapping[str, str] = field(default_factory=dict)
    #: The effect at scale from the paper or Composer's card (see the schema's ``at_scale``):
    #: ``figure``, ``setting``, ``source``, ``hardware`` and ``url``; None where the file has none.
    at_scale: Mapping[str, str] | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def is_best_practice(self) -> bool:
        return self.kind == "best_practice"

    def as_dict(self) -> dict[str, Any]:
        """Plain data for templates: the JSON entry plus ``key``."""
        return {"key": self.key, **_thaw(self.raw)}


def discover_metadata_files(root: Path | None = None) -> list[Path]:
    """Every method (``<root>/<folder>/metadata.json``) and best practice
    (``<root>/core/<key>.metadata.json``), sorted by key."""
    root = Path(root) if root is not None else PACKAGE_ROOT
    return sorted([*root.glob("*/metadata.json"), *(root / BEST_PRACTICE_FOLDER).glob("*" + SUFFIX)], key=metadata_key)


def metadata_key(path: Path) -> str:
    """The key a metadata file must hold: its folder's name for ``metadata.json``, else its file
    name before ``.metadata.json``."""
    path = Path(path)
    return path.parent.name if path.name == "metadata.json" else path.name.removesuffix(SUFFIX)


def expected_kind(path: Path) -> Kind | None:
    """The kind a file's place implies: ``method`` for ``<folder>/metadata.json``,
    ``best_practice`` / ``dataset`` / ``model_family`` for ``core`` / ``data`` / ``models``
    ``<key>.metadata.json``; None for any other file."""
    path = Path(path)
    if path.name == "metadata.json":
        return Kind.METHOD
    if path.name.endswith(SUFFIX):
        return {
            BEST_PRACTICE_FOLDER: Kind.BEST_PRACTICE,
            **{folder: kind for kind, (folder, _) in SUBJECT_KINDS.items()},
        }.get(path.parent.name)
    return None


def load_metadata(path: Path) -> MethodRecord:
    """Load and validate one file; raise :class:`MetadataError` listing every problem."""
    record, problems = _check_file(Path(path))
    if problems:
        raise MetadataError(problems)
    assert record is not None
    return record


def validate_files(paths: Iterable[Path]) -> tuple[dict[str, MethodRecord], list[Problem]]:
    """Validate files without raising: the records that passed, and every problem found.

    Cross-file rules (unique keys and unique display names) are checked over ``paths``.
    """
    records: dict[str, MethodRecord] = {}
    problems: list[Problem] = []
    names: dict[str, Path] = {}
    for path in paths:
        record, found = _check_file(Path(path))
        problems.extend(found)
        if record is None:
            continue
        if record.key in records:
            problems.append(
                Problem(
                    record.path,
                    f"/{record.key}",
                    f"duplicate method key, also in {display_path(records[record.key].path)} — rename one folder",
                )
            )
            continue
        folded = record.name.casefold()
        if folded in names:
            problems.append(
                Problem(
                    record.path,
                    f"/{record.key}/name",
                    f"duplicate method name {record.name!r}, also in "
                    f"{display_path(names[folded])} — give each method its own name",
                    _locate(record.path, [record.key, "name"]),
                )
            )
            continue
        names[folded] = record.path
        records[record.key] = record
    return records, problems


def load_all_metadata(root: Path | None = None) -> dict[str, MethodRecord]:
    """All methods under ``root`` (default: the installed package), keyed and sorted by key.

    Raises :class:`MetadataError` listing every problem in every file.
    """
    records, problems = validate_files(discover_metadata_files(root))
    if problems:
        raise MetadataError(problems)
    return dict(sorted(records.items()))


# ---------------------------------------------------------------------------------------------
# dataset/task and model-family metadata: ``algorithms/data/<key>.metadata.json`` and
# ``algorithms/models/<key>.metadata.json``, beside the code they describe. Same Problem
# machinery, own schema; the key is the file name before ``.metadata.json``.

SUBJECT_SUFFIX = SUFFIX
# kind -> (folder under the package root, schema)
SUBJECT_KINDS: Mapping[Kind, tuple[str, Path]] = MappingProxyType(
    {
        Kind.DATASET: ("data", DATASET_SCHEMA_PATH),
        Kind.MODEL_FAMILY: ("models", MODEL_FAMILY_SCHEMA_PATH),
    }
)


@dataclass(frozen=True)
class SubjectRecord:
    """A validated dataset/task or model-family entry. ``key`` is the file name's stem."""

    key: str
    path: Path
    kind: str
    name: str
    tldr: str
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def as_dict(self) -> dict[str, Any]:
        """Plain data for templates: the JSON entry plus ``key``."""
        return {"key": self.key, **_thaw(self.raw)}


def _discover_subjects(kind: Kind, root: Path | None) -> list[Path]:
    folder = (Path(root) if root is not None else PACKAGE_ROOT) / SUBJECT_KINDS[kind][0]
    return sorted(folder.glob("*" + SUBJECT_SUFFIX))


def discover_dataset_files(root: Path | None = None) -> list[Path]:
    """Every ``<root>/data/<key>.metadata.json``, sorted."""
    return _discover_subjects(Kind.DATASET, root)


def discover_model_family_files(root: Path | None = None) -> list[Path]:
    """Every ``<root>/models/<key>.metadata.json``, sorted."""
    return _discover_subjects(Kind.MODEL_FAMILY, root)


def validate_subject_files(paths: Iterable[Path], kind: str) -> tuple[dict[str, SubjectRecord], list[Problem]]:
    """Validate dataset (``kind="dataset"``) or model-family files without raising."""
    records: dict[str, SubjectRecord] = {}
    problems: list[Problem] = []
    names: dict[str, Path] = {}
    for path in paths:
        record, found = _check_subject_file(Path(path), kind)
        problems.extend(found)
        if record is None:
            continue
        folded = record.name.casefold()
        if folded in names:
            problems.append(
                Problem(
                    record.path,
                    f"/{record.key}/name",
                    f"duplicate name {record.name!r}, also in {display_path(names[folded])} — give each its own name",
                    _locate(record.path, [record.key, "name"]),
                )
            )
            continue
        names[folded] = record.path
        records[record.key] = record
    return records, problems


def _load_all_subjects(kind: str, root: Path | None) -> dict[str, SubjectRecord]:
    records, problems = validate_subject_files(_discover_subjects(kind, root), kind)
    if problems:
        raise MetadataError(problems)
    return dict(sorted(records.items()))


def load_all_datasets(root: Path | None = None) -> dict[str, SubjectRecord]:
    """All dataset/task records under ``root`` (default: the package), keyed and sorted by key."""
    return _load_all_subjects(Kind.DATASET, root)


def load_all_model_families(root: Path | None = None) -> dict[str, SubjectRecord]:
    """All model-family records under ``root`` (default: the package), keyed and sorted by key."""
    return _load_all_subjects(Kind.MODEL_FAMILY, root)


def _check_subject_file(path: Path, kind: str) -> tuple[SubjectRecord | None, list[Problem]]:
    kind = Kind(kind)
    if not path.name.endswith(SUBJECT_SUFFIX):
        return None, [Problem(path, "", f"the file name must end in {SUBJECT_SUFFIX!r} — rename it")]
    key = path.name[: -len(SUBJECT_SUFFIX)]
    data, problems = _check_document(path, SUBJECT_KINDS[kind][1], key, "one entry keyed by its file name")
    if data is None:
        return None, problems
    entry = data[key]
    return SubjectRecord(key=key, path=path, kind=kind, name=entry["name"], tldr=entry["tldr"], raw=_freeze(entry)), []


def _read_json(path: Path) -> tuple[Any, str, list[Problem]]:
    """``(data, text, [])`` or ``(None, "", [the one problem])``."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        return None, "", [Problem(path, "", f"cannot read file: {exc.strerror or exc} — check the path")]
    except UnicodeDecodeError as exc:
        return None, "", [Problem(path, "", f"not UTF-8 text ({exc.reason}) — save the file as UTF-8")]
    try:
        data = json.loads(text, object_pairs_hook=_KeyedObject.from_pairs)
    except json.JSONDecodeError as exc:
        return (
            None,
            "",
            [
                Problem(
                    path,
                    "",
                    f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg} — fix the syntax",
                    exc.lineno,
                )
            ],
        )
    duplicates = [
        Problem(
            path,
            _pointer(where),
            f"duplicate key {key!r}: JSON keeps only the last value — remove one of them",
            _locate_repeat(text, where, key),
        )
        for where, key in _duplicate_keys(data)
    ]
    return (None, "", duplicates) if duplicates else (_plain_json(data), text, [])


class _KeyedObject(dict):
    """A parsed JSON object that remembers the keys it held more than once."""

    duplicates: tuple[str, ...] = ()

    @classmethod
    def from_pairs(cls, pairs: list[tuple[str, Any]]) -> _KeyedObject:
        obj = cls(pairs)
        if len(obj) != len(pairs):
            seen: set[str] = set()
            obj.duplicates = tuple(k for k, _ in pairs if k in seen or seen.add(k))
        return obj


def _duplicate_keys(value: Any, where: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], str]]:
    found: list[tuple[tuple[Any, ...], str]] = []
    if isinstance(value, dict):
        found += [(where, key) for key in getattr(value, "duplicates", ())]
        for key, item in value.items():
            found += _duplicate_keys(item, (*where, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _duplicate_keys(item, (*where, index))
    return found


def _plain_json(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain_json(v) for v in value]
    return value


@cache
def schema_validator(schema_path: Path) -> jsonschema.protocols.Validator:
    """The validator of a JSON Schema file (draft from its ``$schema``), cached.

    The method schema's ``kind`` enum must be :data:`METHOD_KINDS`: :class:`Kind` is the one list.
    Each schema is checked against its metaschema by the tests, not at every load (that check
    took a fifth of the pre-commit validator's time).
    """
    schema = json.loads(schema_path.read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    if Path(schema_path).name == SCHEMA_PATH.name:
        enum_values = schema["$defs"]["method"]["properties"]["kind"]["enum"]
        if enum_values != [k.value for k in METHOD_KINDS]:
            raise RuntimeError(
                f"{schema_path}: the kind enum {enum_values} differs from algorithms.metadata.Kind "
                f"({[k.value for k in METHOD_KINDS]}) — make them the same"
            )
    return cls(schema)


# ---------------------------------------------------------------------------------------------
# internals


# Every file checked in this process, by path and content: the package's exports, the checks and
# the page generators each validate the same files, and a schema check costs far more than a read.
_CHECKED: dict[tuple[str, bytes], tuple[MethodRecord | None, tuple[Problem, ...]]] = {}


def _check_file(path: Path) -> tuple[MethodRecord | None, list[Problem]]:
    try:
        seen = (str(path), path.read_bytes())
    except OSError:
        return _check_new_file(path)  # it says why
    if seen not in _CHECKED:
        record, problems = _check_new_file(path)
        _CHECKED[seen] = (record, tuple(problems))
    record, problems = _CHECKED[seen]
    return record, list(problems)


def _check_new_file(path: Path) -> tuple[MethodRecord | None, list[Problem]]:
    key = metadata_key(path)
    place = expected_kind(path)
    holds = "one method keyed by its folder name" if place is Kind.METHOD else "one entry keyed by its file name"
    data, problems = _check_document(path, SCHEMA_PATH, key, holds)
    if data is None:
        return None, problems
    kind = data[key]["kind"]
    if place in METHOD_KINDS and kind != place.value:
        where = (
            "algorithms/<key>/metadata.json"
            if kind == Kind.METHOD
            else f"algorithms/{BEST_PRACTICE_FOLDER}/<key>{SUFFIX}, beside the Trainer option it documents"
        )
        return None, [
            Problem(
                path,
                f"/{key}/kind",
                f"a {kind} lives in {where} — move the file or fix the kind",
                _locate_text(path.read_text(encoding="utf-8"), [key, "kind"]),
            )
        ]
    return _record(key, path, data[key]), []


def _check_document(path: Path, schema_path: Path, key: str, holds: str) -> tuple[dict[str, Any] | None, list[Problem]]:
    """Read ``path``, validate it against ``schema_path`` and require the single key ``key``.

    Returns the data when it passed, else ``None`` and every problem found.
    """
    data, text, problems = _read_json(path)
    if problems:
        return None, problems
    problems = [
        Problem(path, _pointer(err.absolute_path), _explain(err), _locate_text(text, list(err.absolute_path)))
        for err in sorted(
            schema_validator(schema_path).iter_errors(data), key=lambda e: list(map(str, e.absolute_path))
        )
    ]
    if isinstance(data, dict):
        keys = [k for k in data if k != "$schema"]
        if keys != [key]:
            found = ", ".join(repr(k) for k in keys) or "none"
            problems.append(
                Problem(
                    path,
                    "",
                    f"the file must hold exactly {holds} {key!r}, found {found} — rename the key to {key!r}",
                    _locate_text(text, keys[:1]) if keys else None,
                )
            )
    return (None, problems) if problems else (data, [])


def _record(key: str, path: Path, entry: dict[str, Any]) -> MethodRecord:
    hps = {
        name: Hyperparameter(suggested=_freeze(spec["suggested"]), note=spec.get("note"))
        for name, spec in entry["hyperparameters"].items()
    }
    return MethodRecord(
        key=key,
        path=path,
        name=entry["name"],
        kind=entry["kind"],
        class_name=entry["class_name"],
        functional=entry["functional"],
        tldr=entry["tldr"],
        attribution=entry["attribution"],
        link=entry["link"],
        domains=tuple(entry["domains"]),
        tags=tuple(entry["tags"]),
        summary=entry["summary"],
        use=entry["use"],
        math_equivalent=entry["math_equivalent"],
        hyperparameters=MappingProxyType(hps),
        plumbing=tuple(entry["plumbing"]),
        aka=tuple(entry.get("aka", ())),
        paper=_freeze(entry["paper"]) if "paper" in entry else None,
        trainer_option=_freeze(entry["trainer_option"]) if "trainer_option" in entry else None,
        observable=tuple(entry.get("observable", ())),
        interactions=MappingProxyType(dict(entry.get("interactions", {}))),
        at_scale=_freeze(entry["at_scale"]) if "at_scale" in entry else None,
        raw=_freeze(entry),
    )


def _freeze(value: Any) -> Any:
    if isinstance(value, dict):
        return MappingProxyType({k: _freeze(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


def _thaw(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_thaw(v) for v in value]
    return value


def _pointer(parts: Iterable[Any]) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def _explain(err: jsonschema.ValidationError) -> str:
    """A one-line message that says what is wrong and what to do."""
    v, inst = err.validator, err.instance
    if v == "required":
        missing = re.search(r"'([^']+)' is a required property", err.message)
        return f"missing required field {missing.group(1) if missing else err.message!r} — add it"
    if v == "enum":
        allowed = ", ".join(json.dumps(x) for x in err.validator_value)
        return f"{json.dumps(inst)} is not allowed — use one of: {allowed}"
    if v == "const":
        return f"{json.dumps(inst)} must be {json.dumps(err.validator_value)}"
    if v == "type":
        want = err.validator_value
        want = " or ".join(want) if isinstance(want, list) else want
        return f"expected {want}, got {_json_type(inst)} {json.dumps(inst)[:60]} — change the value's type"
    if v == "additionalProperties":
        extra = re.findall(r"'([^']+)'", err.message)
        if err.path == [] or len(err.absolute_path) == 0:
            return (
                f"unexpected top-level key(s) {', '.join(extra)} — the file holds one method "
                "keyed by its folder name (lower case, digits, underscores)"
            )
        return f"unknown field(s) {', '.join(repr(e) for e in extra)} — remove or fix the spelling"
    if v in ("minLength", "pattern") and isinstance(inst, str):
        if v == "minLength" or err.validator_value == "\\S":
            return "must not be empty — write the text"
        return f"{inst!r} does not match the required pattern {err.validator_value!r}"
    if v in ("minItems", "maxItems", "minProperties", "maxProperties", "uniqueItems"):
        return f"{err.message} — fix the list"
    if v in ("minimum", "maximum"):
        return f"{err.message} — use a value in range"
    if v == "oneOf":
        return f"{json.dumps(inst)[:60]} is neither null nor a Python identifier — fix the value"
    return err.message


def _json_type(value: Any) -> str:
    return {
        dict: "object",
        list: "array",
        str: "string",
        bool: "boolean",
        int: "integer",
        float: "number",
        type(None): "null",
    }.get(type(value), type(value).__name__)


def _locate_repeat(text: str, where: tuple[Any, ...], key: str) -> int | None:
    """The line of the second ``"key":`` inside the object at ``where`` (best effort)."""
    first = _locate_text(text, [*where, key])
    if first is None:
        return None
    start = sum(len(line) + 1 for line in text.splitlines()[: first - 1])
    pattern = re.compile(r'"' + re.escape(key) + r'"\s*:')
    match = pattern.search(text, start)
    again = pattern.search(text, match.end()) if match else None
    return text.count("\n", 0, again.start()) + 1 if again else first


def _locate(path: Path, parts: list[Any]) -> int | None:
    try:
        return _locate_text(path.read_text(encoding="utf-8"), parts)
    except OSError:
        return None


def _locate_text(text: str, parts: list[Any]) -> int | None:
    """Best-effort line of a JSON pointer: find each object key in turn after the last one.

    Array indices are not resolved; the line of the enclosing key is close enough for a person.
    """
    pos, found = 0, False
    for part in parts:
        if isinstance(part, int):
            continue
        match = re.compile(r'"' + re.escape(str(part)) + r'"\s*:').search(text, pos)
        if not match:
            break
        pos, found = match.end(), True
    return text.count("\n", 0, pos) + 1 if found else None


def display_path(path: Path) -> str:
    """``path`` relative to the working directory where it lies below it, else as given."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)
