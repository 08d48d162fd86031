"""Shared pieces of the docs generators in ``docs/source/tables/update_*.py``.

Each generator is a module with ``render(metadata_root=None, source_dir=None) -> {Path: content}``
(every output, full content) and a ``generator_cli`` command line. ``conf.py`` finds them by glob
and writes their outputs at the start of every build; the tests and the scale benchmark call
``render`` with a synthetic metadata tree and a temporary source directory.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import jinja2

from algorithms.metadata import MethodRecord, load_all_metadata

from .markup import md_code, md_text, md_url, one_line, safe_token

__all__ = ["css_class_value", "jinja_environment", "kind_label", "load_methods", "method_option",
           "render_methods_page"]

KIND_LABELS = {"method": "method", "best_practice": "best practice"}


def jinja_environment(template_dir: Path) -> jinja2.Environment:
    """Templates beside the generator; a typo in a template is an error, not an empty string."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(template_dir)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,  # Markdown, not HTML: every metadata value goes through an md_* filter
    )
    env.filters.update(md_text=md_text, md_code=md_code, md_url=md_url, one_line=one_line,
                       token=safe_token, kind_label=kind_label, css=css_class_value)
    return env


def render_methods_page(template_dir: Path, template: str, output: Path,
                        metadata_root: Path | None = None) -> dict[Path, str]:
    """``{output: text}``: ``template`` rendered with ``methods``, the (record, option) pairs in
    display-name order."""
    methods = [(record, method_option(record)) for record in load_methods(metadata_root)]
    return {output: jinja_environment(template_dir).get_template(template).render(methods=methods)}


def load_methods(metadata_root: Path | None = None) -> list[MethodRecord]:
    """Every method record, in display-name order (case-insensitive, then key)."""
    records: Mapping[str, MethodRecord] = load_all_metadata(metadata_root)
    return sorted(records.values(), key=lambda r: (r.name.casefold(), r.key))


def css_class_value(value: str, what: str) -> str:
    """A vocabulary value as docutils writes it in a class name (it turns ``_`` into ``-``), so the
    generated Markdown, the HTML and the filter script all use the same spelling."""
    return safe_token(value, what).replace("_", "-")


def kind_label(kind: str) -> str:
    return KIND_LABELS[safe_token(kind, "kind")]


def method_option(record: MethodRecord) -> str | None:
    """What a user writes to turn the method on: the functional form, or the Trainer option."""
    if record.functional:
        return f"cf.{record.functional}"
    if record.trainer_option:
        (name, value), = record.trainer_option.items()
        literal = json.dumps(value) if isinstance(value, str) else repr(value)
        return f"{name}={literal}"
    return None
