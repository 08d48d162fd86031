"""Render cards and new methods from metadata and code: the logic behind ``tools/new_card.py``.

A card kind is a Jinja template plus a metadata record (as in huggingface_hub's repo cards):
method and best-practice cards come from ``algo_card.md.jinja`` and a
:class:`~algorithms.metadata.MethodRecord` plus the code read by :mod:`.codeinfo`; dataset/task
and model-family cards from their own templates and a :class:`~algorithms.metadata.SubjectRecord`.
The template is the one list of its kind's sections, in reading order, and it marks the regions
that metadata and code own (see :mod:`.cards`). A card's source holds a ``card-facts`` directive
in place of each (:func:`card_source`), which the docs build renders from the same template
(:mod:`.facts`); :func:`update_card` turns a card written with regions into one with directives.

:func:`scaffold_method` writes what ``new_card.py NAME --new`` creates: the method folder (code
whose bodies say what to write, ``metadata.json``), its test file and its card; :func:`export_edits`
adds the method's lines to the export tables of ``algorithms`` and ``algorithms.functional``. Every part left
to the author carries a ``TODO(new_card)`` prompt, and ``nox -s check`` names each one until it
is replaced (:mod:`.prompts`).

Templates render with ``StrictUndefined`` through the one docs Jinja environment
(:func:`methods_tools.docsgen.jinja_environment`), so every metadata string is escaped by the
same filters as on the generated pages.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jinja2

from algorithms.core.options import DISTRIBUTED
from algorithms.core.parameters import Other
from algorithms.metadata import (
    Kind,
    _record,
    display_path,
    load_all_datasets,
    load_all_metadata,
    load_all_model_families,
)

from . import REPO_ROOT
from .cards import HYPERPARAMETER_SECTION, regions
from .docsgen import jinja_environment, method_option
from .markup import literal, md_text
from .prompts import PLACEHOLDER

__all__ = [
    "CARD_DIRS",
    "EXPORT_TABLES",
    "KINDS",
    "LAUNCH_COMMAND",
    "TEMPLATES",
    "UnknownName",
    "card_path",
    "card_source",
    "closest_first",
    "export_edits",
    "range_literal",
    "render_card",
    "scaffold_method",
    "update_card",
]

TEMPLATE_DIR = Path("docs/source/templates")
CODE_TEMPLATES = Path(__file__).resolve().parent / "templates"
KINDS = tuple(kind.value for kind in Kind)
CARD_DIRS = {
    Kind.METHOD: "method_cards",
    Kind.BEST_PRACTICE: "method_cards",
    Kind.DATASET: "dataset_cards",
    Kind.MODEL_FAMILY: "model_cards",
}
TEMPLATES = {
    Kind.METHOD: "algo_card.md.jinja",
    Kind.BEST_PRACTICE: "algo_card.md.jinja",
    Kind.DATASET: "dataset_task_card.md.jinja",
    Kind.MODEL_FAMILY: "model_family_card.md.jinja",
}
LABELS = {
    Kind.METHOD: "method",
    Kind.BEST_PRACTICE: "method",
    Kind.DATASET: "data set",
    Kind.MODEL_FAMILY: "model family",
}
#: How a distributed card's ``train.py`` is launched; the tests launch every card that writes it.
LAUNCH_COMMAND = "python -m torch.distributed.run --standalone --nproc_per_node 2 train.py"

# Example arguments for the functional form, by parameter name (images, labels, logits).
_BATCH, _CLASSES = 8, 10
_EXAMPLE_ARGS = {
    "input": "images",
    "images": "images",
    "img": "images",
    "sample": "images",
    "x": "images",
    "target": "labels",
    "targets": "labels",
    "labels": "labels",
    "logits": "logits",
    "outputs": "logits",
    "model": "model",
    "module": "model",
    "loss_fun": "loss_fun",
    "loss_fn": "loss_fun",
    "scale_factor": "0.5",
    "batch": "batch",
    "curr_seq_len": "8",
    "grads": "grads",
    "ema_model": "averaged",
    "swa_model": "averaged",
    "num_averaged": "1",
    "optimizers": "optimizer",
    "current_duration": "0.75",
    "iters_per_epoch": "2",
    "max_epoch": "1",
}
#: The language-model examples' vocabulary (bytes) and sequence length.
_VOCAB, _SEQ = 256, 32
#: The language-model examples' text: a real sentence, read as bytes.
_TEXT = "Call me Ishmael. Some years ago, never mind how long precisely, having little or no money in my purse, "


class UnknownName(LookupError):
    """A name that is not a method (or data set, or model family); the message lists the known ones."""


@dataclass(frozen=True)
class _Row:
    """A row of a card's hyperparameter table: the name and default from the signature, the range
    and description from the declaration, the suggested value and why from the metadata."""

    name: str
    default: str
    range: str
    description: str
    suggested: str
    why: str


def card_path(kind: str, key: str, repo_root: Path | None = None) -> Path:
    return Path(repo_root or REPO_ROOT) / "docs" / "source" / CARD_DIRS[Kind(kind)] / f"{key}.md"


def closest_first(name: str, known: list[str]) -> list[str]:
    """``known`` with the closest matches to ``name`` first (difflib), then the rest sorted."""
    close = difflib.get_close_matches(name, known, n=len(known), cutoff=0.3)
    return close + sorted(k for k in known if k not in close)


def range_literal(declared: Any) -> str:
    """The Range cell of a declared hyperparameter (:mod:`algorithms.core.parameters`): an interval
    in the usual notation, ``[0, 1]`` when both ends are allowed, ``(0, 1]`` when 0 is not,
    ``[0, inf)``; the choices; or what it takes; ``None or`` first where None is allowed."""
    if declared is None:
        return "—"
    text = f"{'None or ' if declared.optional else ''}{declared.range()}"
    return md_text(text) if isinstance(declared, Other) else f"`{text}`"  # Other's range is prose


@cache
def _environment(repo_root: Path) -> jinja2.Environment:
    # One per template folder: it compiles each card template once (and recompiles one that changed).
    return jinja_environment(repo_root / TEMPLATE_DIR)


def _records(kind: Kind, package_root: Path | None) -> Mapping[str, Any]:
    if kind in (Kind.METHOD, Kind.BEST_PRACTICE):
        return load_all_metadata(package_root)
    return {Kind.DATASET: load_all_datasets, Kind.MODEL_FAMILY: load_all_model_families}[kind](package_root)


def lookup_record(kind: str, name: str, package_root: Path | None = None) -> Any:
    """The record ``name`` of ``kind``; :class:`UnknownName` lists the known ones, closest first."""
    kind = Kind(kind)
    records = _records(kind, package_root)
    if name not in records:
        known = closest_first(name, list(records))
        offer = f"; to create it: python tools/new_card.py {name} --new" if kind is Kind.METHOD else ""
        raise UnknownName(f"{name}: no {LABELS[kind]} of that name — known: {', '.join(known) or 'none'}{offer}")
    return records[name]


def render_card(
    kind: str, name: str, *, repo_root: Path | None = None, package_root: Path | None = None, record: Any = None
) -> str:
    """The card ``name`` of ``kind`` as the scaffold writes it (``record`` overrides the lookup).

    Raises :class:`UnknownName` (message lists the known names, closest first) and
    :class:`~algorithms.metadata.MetadataError` for invalid metadata.
    """
    repo_root = Path(repo_root or REPO_ROOT)
    record = record if record is not None else lookup_record(kind, name, package_root)
    kind = Kind(record.kind) if Kind(kind) in (Kind.METHOD, Kind.BEST_PRACTICE) else Kind(kind)
    template = _environment(repo_root).get_template(TEMPLATES[kind])
    if kind in (Kind.METHOD, Kind.BEST_PRACTICE):
        context = _method_context(record)
    else:
        context = {"m": record.as_dict(), "example": _builder_example(kind, record.as_dict(), record.path)}
    # Optional fields render as absent, not as an error; StrictUndefined still catches typos.
    for optional in _OPTIONAL[kind]:
        context["m"].setdefault(optional, None)
    for member in context["m"].get("members", ()):
        member.setdefault("block", None)
        member.setdefault("note", None)
    return template.render(**context)


_OPTIONAL = {
    Kind.METHOD: ("aka", "paper", "trainer_option"),
    Kind.BEST_PRACTICE: ("aka", "paper", "trainer_option"),
    Kind.DATASET: ("aka", "paper"),
    Kind.MODEL_FAMILY: ("aka", "paper", "implementation"),
}


def card_source(kind: str, name: str, **kwargs: Any) -> str:
    """The card ``name`` of ``kind`` as ``new_card.py`` writes it: the template's sections and prompts,
    with a ``card-facts`` directive for each fact (arguments as :func:`render_card`)."""
    from .facts import to_source

    return to_source(render_card(kind, name, **kwargs))


def update_card(text: str) -> tuple[str, list[str]]:
    """``(text with each generated region replaced by its card-facts directive, [the regions' names])``;
    the prose is kept byte for byte.

    Raises :class:`~methods_tools.cards.RegionError` for markers that do not pair up.
    """
    from .facts import to_source

    return to_source(text), list(regions(text))


def _method_context(record: Any) -> dict[str, Any]:
    from . import codeinfo
    from .composability_pages import practice_modes

    context: dict[str, Any] = {
        "m": record.as_dict(),
        "best_practice": record.is_best_practice,
        "option": method_option(record) if record.is_best_practice else None,
        # a best practice of a precision or parallel mode shows that mode's column of the matrix
        "matrix_mode": record.is_best_practice and practice_modes(record) is not None,
        "section": HYPERPARAMETER_SECTION,
        "rows": [],
        "functional_example": None,
        "trainer_example": None,
        "trainer_setup": None,
        "trainer_teardown": None,
        "launch": None,
        "figure": None,
        "api_classes": [],
    }
    if record.is_best_practice:
        context["trainer_example"] = _trainer_example(record, None, {})
        context["api_classes"] = _optimizer_classes(record)
        parallel = (record.trainer_option or {}).get("parallel")
        if parallel in DISTRIBUTED:
            context.update(
                launch=LAUNCH_COMMAND, trainer_setup=_one_process_world(parallel), trainer_teardown=_TEARDOWN
            )
        return context

    # From the method's own folder, so a new method's first card renders before its metadata is valid.
    cls = codeinfo.lookup(f"algorithms.{record.key}.{record.class_name}", record.path, record.key, "class_name")
    params = codeinfo.parameters(cls)
    # A new method's first card renders before its declaration is complete: what is missing shows as —.
    declared = codeinfo.declaration(cls) or {}
    suggested: dict[str, Any] = {}
    for name, param in params.items():
        if name in record.plumbing:
            continue
        spec = record.hyperparameters.get(name)
        if spec is not None:
            suggested[name] = spec.suggested
        kind = declared.get(name)
        context["rows"].append(
            _Row(
                name=name,
                default="required" if param.default is codeinfo.REQUIRED else f"`{literal(param.default)}`",
                range=range_literal(kind),
                description=md_text(kind.note) if kind is not None else "—",
                suggested=f"`{literal(spec.suggested)}`" if spec is not None else "—",
                why=md_text(spec.note) if spec is not None and spec.note else "—",
            )
        )
    functional = codeinfo.lookup(f"algorithms.{record.key}.{record.functional}", record.path, record.key, "functional")
    context["functional_example"] = _functional_example(record, functional, suggested)
    context["trainer_example"] = _trainer_example(record, record.class_name, suggested)
    if "figure" in record.raw:  # after the lookups above, which report a functional that is not there
        context["figure"] = _figure_caption(record)
    return context


def _figure_caption(record: Any) -> str:
    """The caption of a method's figure: what it shows and the exact call that made it."""
    from .figures import figure_caption

    return figure_caption(record)


# --------------------------------------------------------------------------------------------- new methods


_KEY = re.compile(r"^[a-z][a-z0-9_]*$")


def default_class_name(key: str) -> str:
    return "".join(part.capitalize() for part in key.split("_"))


def new_method_metadata(key: str, class_name: str, functional: str) -> dict[str, Any]:
    """The ``metadata.json`` of a new method: every field the author writes holds a prompt."""
    todo = PLACEHOLDER
    return {
        "$schema": "../metadata.schema.json",
        key: {
            "name": default_class_name(key) if class_name == default_class_name(key) else class_name,
            "kind": "method",
            "class_name": class_name,
            "functional": functional,
            "tldr": f"{todo}: one or two sentences on what it does and why.",
            "attribution": f"{todo}: first author et al., year.",
            "link": "https://arxiv.org/abs/0000.00000",
            "aka": [],
            "domains": [f"{todo}: one or more of {', '.join(_schema_enum('domains'))}"],
            "tags": [f"{todo}: one or more of {', '.join(_schema_enum('tags'))}"],
            "summary": f"{todo}: a paragraph on how it works.",
            "use": f"{todo}: where it applies (tasks, models, data) and where it does not.",
            "paper": {
                "title": f"{todo}: the paper's title",
                "authors": [f"{todo}: every author"],
                "venue": f"{todo}: the venue",
                "year": 2000,
                "url": "https://arxiv.org/abs/0000.00000",
            },
            "math_equivalent": False,
            "observable": [
                f"{todo}: one or more of {', '.join(_schema_enum('observable'))}: what the "
                "composability matrix checks to see the method act"
            ],
            "hyperparameters": {
                "example_hparam": {
                    "suggested": 0.5,
                    "note": f"{todo}: why this value (the paper's, Composer's, or fitted to the reference workload).",
                }
            },
            "plumbing": ["input_key"],
        },
    }


def _schema_enum(field: str) -> list[str]:
    """The values the metadata schema allows in a method's list ``field`` (one source of truth)."""
    from algorithms.metadata import SCHEMA_PATH

    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    return list(schema["$defs"]["method"]["properties"][field]["items"]["enum"])


def scaffold_method(
    key: str, *, class_name: str | None = None, functional: str | None = None, repo_root: Path | None = None
) -> dict[Path, str]:
    """Every file ``new_card.py KEY --new`` writes except the card, ``{path: content}``.

    The card is rendered from these once they exist (see ``commands.new_card_main``). Raises
    ValueError for a key, class name or function name that cannot be one.
    """
    if not _KEY.match(key):
        raise ValueError(
            f"{key!r}: a method key is lower case letters, digits and underscores, starting "
            "with a letter (it names the folder, the card and the metadata key)"
        )
    class_name = class_name or default_class_name(key)
    functional = functional or f"{key}_batch"
    for flag, value in (("--class-name", class_name), ("--functional", functional)):
        if not value.isidentifier():
            raise ValueError(f"{flag} {value!r}: not a Python identifier")
    root = Path(repo_root or REPO_ROOT)
    env = jinja_environment(CODE_TEMPLATES)
    context = {"key": key, "name": default_class_name(key), "class_name": class_name, "functional": functional}
    folder = root / "algorithms" / key
    return {
        folder / "__init__.py": env.get_template("__init__.py.jinja").render(**context),
        folder / f"{key}.py": env.get_template("method.py.jinja").render(**context),
        folder / "metadata.json": json.dumps(new_method_metadata(key, class_name, functional), indent=2) + "\n",
        root / "tests" / "methods" / f"test_{key}.py": env.get_template("test_method.py.jinja").render(**context),
    }


#: The export tables ``new_card.py NAME --new`` adds a method's lines to: the file under the
#: repository root, and what a method exports there (its class, its functional form).
EXPORT_TABLES = {"class_name": Path("algorithms") / "__init__.py", "functional": Path("algorithms") / "functional.py"}
_TABLE_ENTRY = re.compile(r'^    "(?P<name>\w+)": "(?P<module>\w+)",$')
_TYPING_IMPORT = re.compile(r"^    from \.(?P<module>\w+) import (?P<name>\w+) as (?P=name)$")


def export_edits(key: str, *, class_name: str, functional: str, repo_root: Path | None = None) -> dict[Path, str]:
    """The export tables with a new method's lines added: ``{path: new content}`` for
    ``algorithms/__init__.py`` (its class) and ``algorithms/functional.py`` (its functional form).

    Each file gets one line in its ``EXPORTS`` table and one import under ``TYPE_CHECKING``, both in
    the order of the modules (as ruff's import sorting keeps them); a file that exports the name from
    this method already is left as it is. Raises ValueError naming the file and line where a table
    exports the name from another module, or where a file has no table to add to.
    """
    root = Path(repo_root or REPO_ROOT)
    edits = {}
    for field, name in (("class_name", class_name), ("functional", functional)):
        path = root / EXPORT_TABLES[field]
        if not path.is_file():
            raise ValueError(
                f"{display_path(path)}: exports: no such file to add {name} to — run this in the repository"
            )
        edits[path] = _add_export(path, path.read_text(encoding="utf-8"), name, key)
    return edits


def _add_export(path: Path, text: str, name: str, module: str) -> str:
    lines = text.splitlines(keepends=True)
    for pattern, line, opening in (
        (_TABLE_ENTRY, f'    "{name}": "{module}",\n', "EXPORTS = {"),
        (_TYPING_IMPORT, f"    from .{module} import {name} as {name}\n", "if TYPE_CHECKING:"),
    ):
        try:
            start = next(i for i, text_line in enumerate(lines) if text_line.rstrip() == opening) + 1
        except StopIteration:
            raise ValueError(f"{display_path(path)}: exports: no line {opening!r} to add {name} under") from None
        end, present = start, False
        while end < len(lines) and (match := pattern.match(lines[end].rstrip("\n"))):
            if match["name"] == name and match["module"] != module:
                raise ValueError(
                    f"{display_path(path)}:{end + 1}: exports: {name!r} is exported already, from "
                    f"algorithms.{match['module']} — "
                    "choose another name"
                )
            present = present or match["name"] == name  # there already (a scaffold rewritten with --force)
            end += 1
        if present:
            continue
        at = next(
            (
                i
                for i in range(start, end)
                if _export_order(pattern.match(lines[i].rstrip("\n"))) > (module, name.lower())
            ),
            end,
        )
        lines.insert(at, line)
    return "".join(lines)


def _export_order(match: re.Match[str] | None) -> tuple[str, str]:
    assert match is not None
    return match["module"], match["name"].lower()


def draft_record(key: str, metadata_text: str, path: Path) -> Any:
    """A record from a new method's metadata before it is valid (its prompts are not), for its first card."""
    entry = json.loads(metadata_text)[key]
    return _record(key, path, entry)


def _nlp(record: Any) -> bool:
    return "vision" not in record.domains and "nlp" in record.domains


def _model_lines(record: Any) -> list[str]:
    """``model = ...`` for the examples: the reference model a surgery method acts on (its
    metadata's workload model, else its domain's: ``resnet20`` or ``transformer_tiny``), or a
    small classifier; for images one that takes any image size (global pooling), since some
    methods change the size."""
    workload = (record.raw.get("workload") or {}).get("model")
    surgery = "changed_model" in (record.raw.get("observable") or ())
    if workload or surgery or _nlp(record):
        name = workload or ("transformer_tiny" if _nlp(record) else "resnet20")
        size = _VOCAB if name.startswith("transformer") else _CLASSES
        return [f"from algorithms.models import {name}", "", f"model = {name}({size})"]
    if "vision" in record.domains:
        return [
            f"model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.AdaptiveAvgPool2d(1), "
            f"torch.nn.Flatten(), torch.nn.Linear(8, {_CLASSES}))"
        ]
    return [f"model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, {_CLASSES}))"]


def _call_args(positional: list[str], keywords: dict[str, Any]) -> str:
    return ", ".join(positional + [f"{k}={literal(v)}" for k, v in keywords.items()])


def _functional_example(record: Any, functional: Any, suggested: dict[str, Any]) -> str:
    """A training step that applies the functional form where a user does: to the model before the
    optimizer is built (surgery), to the batch before the forward, to the target before the loss, to
    the gradients before the step, or to an averaged copy after it; on real data (digits, or byte
    sequences for a language model), ending in a prompt for an assert of what the method did.

    A required parameter with an example argument by its name is passed positionally; one that is
    a hyperparameter gets its suggested value by keyword, as the others do."""
    import inspect

    from .codeinfo import REQUIRED, parameters

    params = parameters(functional)
    positional, needs, unknown = [], set(), []
    for name, param in params.items():
        if param.default is REQUIRED and (name in _EXAMPLE_ARGS or name not in suggested):
            arg = _EXAMPLE_ARGS.get(name, name)
            if name not in _EXAMPLE_ARGS:
                unknown.append(f"{name} = ...  # TODO: an example value for {name}")
            positional.append(arg)
            needs.add(arg)
    # A suggested None is the default that defers to other arguments: the example leaves it out.
    keywords = {k: v for k, v in suggested.items() if k in params and k not in positional and v is not None}
    needs &= {"images", "labels", "logits", "batch", "model", "grads", "averaged", "optimizer", "loss_fun"}
    call = f"cf.{record.functional}({_call_args(positional, keywords)})"
    returns = str(inspect.signature(functional).return_annotation)
    nlp = _nlp(record)

    lines = ["import torch"]
    if "averaged" in needs:
        lines.insert(0, "import copy")
    lines += [] if nlp else ["import torch.nn.functional as F"]
    lines.append("import algorithms.functional as cf")
    model = _model_lines(record)
    if not nlp and "vision" not in record.domains and not model[0].startswith("from "):
        model = [f"model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 32 * 32, {_CLASSES}))"]
    if nlp:
        lines += [f"from algorithms.models import lm_loss, {model[0].split()[-1]}"]
    else:
        lines += ["from algorithms.data import digits", *(model[:1] if model[0].startswith("from ") else [])]
    lines.append("")
    if nlp:
        lines += [
            f'text = b"{_TEXT}"',
            f"tokens = torch.tensor(list(text * 3))[: 8 * {_SEQ + 1}].view(8, {_SEQ + 1})"
            f"  # eight sequences of bytes (the vocabulary: {_VOCAB})",
            'batch = {"input_ids": tokens[:, :-1], "labels": tokens[:, 1:]}',
        ]
    else:
        lines.append(
            "images, labels = digits().train[:16]  # 16 handwritten digits, (16, 3, 32, 32), and their classes"
        )
    lines += [line for line in model if line and not line.startswith("from ")] + unknown
    if "loss_fun" in needs:
        lines.append("loss_fun = F.cross_entropy")
    surgery = "changed_model" in (record.raw.get("observable") or ()) and needs <= {"model", "optimizer"}
    if surgery and "optimizer" not in needs:
        lines.append(f"result = {call}  # before the optimizer is built")
    lines.append("optimizer = torch.optim.SGD(model.parameters(), lr=0.1)")
    if surgery and "optimizer" in needs:
        lines.append(f"result = {call}  # before the first step")
    if "averaged" in needs:
        lines.append("averaged = copy.deepcopy(model)  # the averaged weights the form updates")
    if "batch" in needs:
        lines += [f"batch = {call}  # before the forward", 'inputs, labels = batch["input_ids"], batch["labels"]']
    elif "images" in needs:
        if returns.startswith("tuple["):
            lines.append(f"images, labels = {call}  # before the forward")
        elif "Tensor" in returns.split("|")[0]:
            lines.append(f"images = {call}  # before the forward")
        else:
            lines += [
                f"result = {call}  # before the forward",
                f"# {PLACEHOLDER}: train on the batch and the targets the result holds, by their names",
                "images = result[0]",
            ]
    inputs, target = (
        ("inputs", "labels")
        if "batch" in needs
        else ('batch["input_ids"]', 'batch["labels"]')
        if nlp
        else ("images", "labels")
    )
    lines.append(f"logits = model({inputs})")
    if "logits" in needs:
        lines.append(f"targets = {call}  # before the loss")
        target = "targets"
    lines.append(f"loss = {'lm_loss' if nlp else 'F.cross_entropy'}(logits, {target})")
    lines.append("loss.backward()")
    if "grads" in needs:
        lines += ["grads = [p.grad for p in model.parameters()]", f"result = {call}  # before the step"]
    elif not (needs - {"model", "optimizer"} or surgery):
        lines.append(f"result = {call}  # before the step")
    lines.append("optimizer.step()")
    if "averaged" in needs:
        lines.append(f"result = {call}  # after the step")
    lines += ["", f"# {PLACEHOLDER}: assert what the method did (the pixels, modules or weights it changed, and how)"]
    return "\n".join(lines)


def _one_process_world(parallel: str) -> str:
    """Hidden set-up that makes this process a one-process torchrun world, so a distributed
    example runs in the test suite as written."""
    lines = [
        "# A one-process torchrun world, so the example runs in the test suite; undone below.",
        "# MASTER_PORT=0: the world's one TCPStore binds a free port itself, so no two runs collide.",
        "import os",
        "",
        "_saved_environ = dict(os.environ)",
        'os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="0", RANK="0", WORLD_SIZE="1",',
        '                  LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")',
    ]
    if parallel == "deepspeed":
        lines += ["import deepspeed  # an optional extra: without it the test skips this card, naming it"]
    return "\n".join(lines)


#: Hidden code that undoes :func:`_one_process_world` (the project's destroy_process_group also
#: drops what DeepSpeed cached from the world, so the next card's world starts clean).
_TEARDOWN = "\n".join(
    [
        "from algorithms.core.distributed import destroy_process_group",
        "",
        "destroy_process_group()",
        "os.environ.clear()",
        "os.environ.update(_saved_environ)",
    ]
)


def _optimizer_option(record: Any) -> str | None:
    """An optimizer best practice's class, dotted (``trainer_option: {"optimizer": "algorithms.optim.X"}``)."""
    value = (record.trainer_option or {}).get("optimizer")
    return value if isinstance(value, str) and "." in value else None


def _optimizer_classes(record: Any) -> list[str]:
    """What an optimizer best practice's API region documents: every class its module exports
    (``__all__``), the named one first."""
    import importlib

    dotted = _optimizer_option(record)
    if dotted is None:
        return []
    module_name, name = dotted.rsplit(".", 1)
    exported = getattr(importlib.import_module(module_name), "__all__", [name])
    return [dotted, *(f"{module_name}.{n}" for n in exported if n != name)]


def _trainer_example(record: Any, class_name: str | None, suggested: dict[str, Any]) -> str:
    vision, nlp = "vision" in record.domains, _nlp(record)
    lines = ["import torch"]
    if class_name:
        lines.append(f"from algorithms import {class_name}")
    lines += ["from algorithms.core import Trainer"]
    if nlp:
        lines += ["from algorithms.models import lm_loss"]
    lines += ["", *_model_lines(record)]
    if nlp:
        lines += [
            "train_dataloader = []",
            "for _ in range(2):",
            f"    tokens = torch.randint(0, {_VOCAB}, (8, {_SEQ + 1}))",
            '    train_dataloader.append({"input_ids": tokens[:, :-1], "labels": tokens[:, 1:]})',
        ]
    else:
        lines += [
            "train_dataloader = [",
            f"    ({'torch.rand(8, 3, 32, 32)' if vision else 'torch.randn(8, 16)'},"
            f" torch.randint(0, {_CLASSES}, (8,)))",
            "    for _ in range(2)",
            "]",
        ]
    optimizer = _optimizer_option(record)
    if optimizer:
        module_name, name = optimizer.rsplit(".", 1)
        lines.insert(lines.index("from algorithms.core import Trainer") + 1, f"from {module_name} import {name}")
    wrapped = (record.trainer_option or {}).get("model")
    if wrapped is not None:  # an expression that wraps the model, its names qualified by their packages
        packages = sorted({m for m in re.findall(r"(?<![\w.])([A-Za-z_]\w*)\.", wrapped) if m != "model"})
        lines[0:0] = [f"import {package}" for package in packages]
        lines.append(f"model = {wrapped}")
    options = "".join(
        f", {k}={name}(model.parameters(), lr=0.1)" if k == "optimizer" and optimizer else f", {k}={literal(v)}"
        for k, v in (record.trainer_option or {}).items()
        if k != "model"
    )
    if nlp:
        options += ', loss_fn=lm_loss, input_key="input_ids", target_key="labels"'
    given = {k: v for k, v in suggested.items() if v is not None}  # None defers to the other arguments
    algorithms = f", algorithms=[{class_name}({_call_args([], given)})]" if class_name else ""
    lines += [
        f'trainer = Trainer(model, train_dataloader, max_duration="1ep"{algorithms}{options})',
        "trainer.fit()",
    ]
    if (record.trainer_option or {}).get("parallel") == "deepspeed":
        lines += ["trainer.close()  # while the process group is up: DeepSpeed's engine removes its gradient hooks"]
    return "\n".join(lines)


def _builder_example(kind: str, entry: dict[str, Any], path: Path) -> str:
    """A How-to-Use example that calls the builder named in the metadata (arguments it requires
    are left as TODO for the author)."""
    from . import codeinfo

    if kind == Kind.MODEL_FAMILY:
        first = entry["members"][0]
        size = first["input_size"]
        return "\n".join(
            [
                "import torch",
                f"from {entry['module']} import {first['builder']}",
                "",
                f"model = {first['builder']}()",
                f"logits = model(torch.rand(2, 3, {size}, {size}))",
            ]
        )
    builder = codeinfo.lookup(f"{entry['module']}.{entry['builder']}", path, entry["key"], "builder")
    required = [name for name, p in codeinfo.parameters(builder).items() if p.default is codeinfo.REQUIRED]
    lines = [f"from {entry['module']} import {entry['builder']}", ""]
    if required:
        lines.append(f"# {PLACEHOLDER}: values for the required argument(s) {', '.join(required)}")
    lines.append(f"data = {entry['builder']}({', '.join(f'{name}=...' for name in required)})")
    return "\n".join(lines)
