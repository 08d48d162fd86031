"""Render card scaffolds from metadata and code: the logic behind ``tools/new_card.py``.

A card kind is a Jinja template plus a metadata record (as in huggingface_hub's repo cards):
method and best-practice cards come from ``algo_card.md.jinja`` and a
:class:`~algorithms.metadata.MethodRecord` plus the code read by :mod:`.codeinfo`; dataset/task
and model-family cards from their own templates and a :class:`~algorithms.metadata.SubjectRecord`.
Templates render with ``StrictUndefined``, so a typo in a template is an error, not a blank.
Every metadata string goes through :func:`md_text`, so it reads as text and never as markup.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from algorithms.metadata import (
    load_all_datasets,
    load_all_metadata,
    load_all_model_families,
)

from . import REPO_ROOT
from .cards import HYPERPARAMETER_SECTION

__all__ = [
    "CARD_DIRS",
    "KINDS",
    "REPO_ROOT",
    "TEMPLATES",
    "UnknownName",
    "card_path",
    "closest_first",
    "literal",
    "md_paragraph",
    "md_text",
    "range_literal",
    "render_card",
]

TEMPLATE_DIR = Path("docs/source/templates")
# kind -> (card folder under docs/source, Jinja template, RST template that fixes its sections)
KINDS = ("method", "dataset", "model")
CARD_DIRS = {"method": "method_cards", "dataset": "dataset_cards", "model": "model_cards"}
TEMPLATES = {
    "method": ("algo_card.md.jinja", "algo_card.rst"),
    "dataset": ("dataset_task_card.md.jinja", "dataset_task_card.rst"),
    "model": ("model_family_card.md.jinja", "model_family_card.rst"),
}

# Example arguments for the functional form, by parameter name (images, labels, logits).
_BATCH, _CLASSES = 8, 10
_EXAMPLE_ARGS = {
    "input": "images",
    "images": "images",
    "x": "images",
    "target": "labels",
    "targets": "labels",
    "labels": "labels",
    "logits": "logits",
    "outputs": "logits",
}


class UnknownName(LookupError):
    """A name that is not a method (or data set, or model family); the message lists the known ones."""


@dataclass(frozen=True)
class _Row:
    name: str
    default: str
    suggested: str
    range: str
    description: str


def card_path(kind: str, key: str, repo_root: Path | None = None) -> Path:
    return Path(repo_root or REPO_ROOT) / "docs" / "source" / CARD_DIRS[kind] / f"{key}.md"


def closest_first(name: str, known: list[str]) -> list[str]:
    """``known`` with the closest matches to ``name`` first (difflib), then the rest sorted."""
    close = difflib.get_close_matches(name, known, n=len(known), cutoff=0.3)
    return close + sorted(k for k in known if k not in close)


_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]<>|$~&#!])")


def md_text(value: Any) -> str:
    """Metadata text as MyST Markdown that renders as exactly that text.

    Backslash-escapes every character that can open inline markup (code, emphasis, roles,
    links, HTML, math, table cells) and folds newlines, so no block can start inside it.
    """
    return _MD_SPECIAL.sub(r"\\\1", " ".join(str(value).split()))


def md_paragraph(value: Any) -> str:
    """:func:`md_text` for text that opens a line: a leading character that would start a block
    (heading, list, quote, comment, target, ordered list) is escaped too."""
    text = md_text(value)
    if text[:1] in "+-%:=(>":
        return "\\" + text
    return re.sub(r"^(\d+)([.)])", r"\1\\\2", text)


def literal(value: Any) -> str:
    """A value as the Python literal the card's table shows (JSON arrays become lists)."""
    if isinstance(value, tuple):
        return repr(list(value))
    return repr(value)


def range_literal(spec: Any) -> str:
    """The Range cell for a metadata hyperparameter: ``(low, high)`` with ``inf``, or its choices."""
    if spec is None:
        return "—"
    if spec.range is not None:
        low, high = spec.range
        return "`({}, {})`".format("-inf" if low is None else repr(low), "inf" if high is None else repr(high))
    if spec.choices is not None:
        return f"`{literal(spec.choices)}`"
    return "—"


def _rst_to_md(text: str) -> str:
    """Docstring RST inline markup as MyST: ````x```` -> ```x```, ``:func:`f``` -> ``{func}`f```."""
    text = re.sub(r"``(.+?)``", r"`\1`", text)
    text = re.sub(r":(\w+):`", r"{\1}`", text)
    return text.replace("|", "\\|")


def _environment(repo_root: Path) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(repo_root / TEMPLATE_DIR)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,  # Markdown, not HTML: md_text does the escaping
    )
    env.filters["md"] = md_text
    env.filters["md_paragraph"] = md_paragraph
    env.filters["literal"] = literal
    env.filters["json"] = json.dumps
    return env


def _lookup(kind: str, name: str, package_root: Path | None) -> Any:
    loader = {"method": load_all_metadata, "dataset": load_all_datasets, "model": load_all_model_families}[kind]
    records = loader(package_root)
    if name not in records:
        label = {"method": "method", "dataset": "data set", "model": "model family"}[kind]
        known = closest_first(name, list(records))
        raise UnknownName(f"{name}: no {label} of that name — known: {', '.join(known) or 'none'}")
    return records[name]


def render_card(kind: str, name: str, *, repo_root: Path | None = None, package_root: Path | None = None) -> str:
    """The scaffold of card ``name`` of ``kind`` (``method``, ``dataset`` or ``model``).

    Raises :class:`UnknownName` (message lists the known names, closest first) and
    :class:`~algorithms.metadata.MetadataError` for invalid metadata.
    """
    repo_root = Path(repo_root or REPO_ROOT)
    record = _lookup(kind, name, package_root)
    template = _environment(repo_root).get_template(TEMPLATES[kind][0])
    if kind == "method":
        context = _method_context(record, repo_root)
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
    "method": ("aka", "paper", "trainer_option"),
    "dataset": ("aka", "paper"),
    "model": ("aka", "paper", "implementation"),
}


def _method_context(record: Any, repo_root: Path) -> dict[str, Any]:
    from . import codeinfo

    context: dict[str, Any] = {
        "m": record.as_dict(),
        "best_practice": record.is_best_practice,
        "section": HYPERPARAMETER_SECTION,
        "rows": [],
        "functional_example": None,
        "trainer_example": None,
        "trainer_setup": None,
        "trainer_teardown": None,
        "launch": False,
        "results_include": None,
        "vision": "vision" in record.domains,
    }
    results = repo_root / "docs" / "source" / "tables" / "results" / f"{record.key}.md.inc"
    if results.exists():
        context["results_include"] = f"../tables/results/{record.key}.md.inc"
    if record.is_best_practice:
        context["trainer_example"] = _trainer_example(record, None, {})
        parallel = (record.trainer_option or {}).get("parallel")
        from algorithms.core.distributed import DISTRIBUTED

        if parallel in DISTRIBUTED:
            context.update(launch=True, trainer_setup=_one_process_world(parallel), trainer_teardown=_TEARDOWN)
        return context

    cls = codeinfo.lookup(f"algorithms.{record.class_name}", record.path, record.key, "class_name")
    params = codeinfo.parameters(cls)
    suggested: dict[str, Any] = {}
    for name, param in params.items():
        if name in record.plumbing:
            continue
        spec = record.hyperparameters.get(name)
        if spec is not None:
            suggested[name] = spec.suggested
        description = _rst_to_md(param.description or "")
        if spec is not None and spec.note:
            description = f"{description} {md_text(spec.note)}".strip()
        context["rows"].append(_Row(
            name=name,
            default="required" if param.default is codeinfo.REQUIRED else f"`{literal(param.default)}`",
            suggested=f"`{literal(spec.suggested)}`" if spec is not None else "—",
            range=range_literal(spec),
            description=description or "—",
        ))
    functional = codeinfo.lookup(f"algorithms.functional.{record.functional}", record.path, record.key,
                                 "functional")
    context["functional_example"] = _functional_example(record, codeinfo.parameters(functional), suggested)
    context["trainer_example"] = _trainer_example(record, record.class_name, suggested)
    return context


def _data_lines(record: Any, needs: set[str]) -> list[str]:
    lines = []
    if "images" in needs:
        lines.append(f"images = torch.rand({_BATCH}, 3, 32, 32)" if "vision" in record.domains
                     else f"images = torch.randn({_BATCH}, 16)")
    if "labels" in needs:
        lines.append(f"labels = torch.randint(0, {_CLASSES}, ({_BATCH},))")
    if "logits" in needs:
        lines.append(f"logits = torch.randn({_BATCH}, {_CLASSES})")
    return lines


def _call_args(positional: list[str], keywords: dict[str, Any]) -> str:
    return ", ".join(positional + [f"{k}={literal(v)}" for k, v in keywords.items()])


def _functional_example(record: Any, params: dict[str, Any], suggested: dict[str, Any]) -> str:
    from .codeinfo import REQUIRED

    positional, needs = [], set()
    for name, param in params.items():
        if param.default is REQUIRED:
            arg = _EXAMPLE_ARGS.get(name, f"{name}  # TODO: an example value for {name}")
            positional.append(arg)
            needs.add(arg)
    keywords = {k: v for k, v in suggested.items() if k in params}
    lines = ["import torch", "import algorithms.functional as cf", ""]
    lines += _data_lines(record, needs)
    lines.append(f"result = cf.{record.functional}({_call_args(positional, keywords)})")
    return "\n".join(lines)


def _one_process_world(parallel: str) -> str:
    """Hidden set-up that makes this process a one-process torchrun world, so a distributed
    example runs in the test suite as written."""
    lines = [
        "# A one-process torchrun world, so the example runs in the test suite; undone below.",
        "import os",
        "import socket",
        "",
        "_saved_environ = dict(os.environ)",
        "with socket.socket() as _s:",
        '    _s.bind(("127.0.0.1", 0))',
        "    _port = _s.getsockname()[1]",
        'os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_port), RANK="0", WORLD_SIZE="1",',
        '                  LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")',
    ]
    if parallel == "deepspeed":
        lines += ["import deepspeed  # an optional extra: without it the test skips this card, naming it"]
    return "\n".join(lines)


_TEARDOWN = "\n".join([
    "import torch.distributed",
    "",
    "if torch.distributed.is_initialized():",
    "    torch.distributed.destroy_process_group()",
    "os.environ.clear()",
    "os.environ.update(_saved_environ)",
])


def _trainer_example(record: Any, class_name: str | None, suggested: dict[str, Any]) -> str:
    vision = "vision" in record.domains
    features = "3 * 32 * 32" if vision else "16"
    lines = ["import torch"]
    if class_name:
        lines.append(f"from algorithms import {class_name}")
    lines += [
        "from algorithms.core import Trainer",
        "",
        f"model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear({features}, {_CLASSES}))",
        "train_dataloader = [",
        f"    ({'torch.rand(8, 3, 32, 32)' if vision else 'torch.randn(8, 16)'}, torch.randint(0, {_CLASSES}, (8,)))",
        "    for _ in range(2)",
        "]",
    ]
    options = "".join(f", {k}={literal(v)}" for k, v in (record.trainer_option or {}).items())
    algorithms = f", algorithms=[{class_name}({_call_args([], suggested)})]" if class_name else ""
    lines += [
        f'trainer = Trainer(model, train_dataloader, max_duration="1ep"{algorithms}{options})',
        "trainer.fit()",
    ]
    return "\n".join(lines)


def _builder_example(kind: str, entry: dict[str, Any], path: Path) -> str:
    """A How-to-Use example that calls the builder named in the metadata (arguments it requires
    are left as TODO for the author)."""
    from . import codeinfo

    if kind == "model":
        first = entry["members"][0]
        size = first["input_size"]
        return "\n".join([
            "import torch",
            f"from {entry['module']} import {first['builder']}",
            "",
            f"model = {first['builder']}()",
            f"logits = model(torch.rand(2, 3, {size}, {size}))",
        ])
    builder = codeinfo.lookup(f"{entry['module']}.{entry['builder']}", path, entry["key"], "builder")
    required = [name for name, p in codeinfo.parameters(builder).items() if p.default is codeinfo.REQUIRED]
    lines = [f"from {entry['module']} import {entry['builder']}", ""]
    if required:
        lines.append(f"# TODO: values for the required argument(s) {', '.join(required)}")
    lines.append(f"data = {entry['builder']}({', '.join(f'{name}=...' for name in required)})")
    return "\n".join(lines)
