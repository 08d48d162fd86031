"""The one Jinja environment of the docs: every generated page and the card scaffold render with it.

:func:`jinja_environment` holds the whole set of filters (:data:`FILTERS`); the escaping ones
come from :mod:`.markup`. :class:`Site` is what every page generator reads; the generators
themselves are listed in :mod:`.pages`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2

from algorithms.metadata import MethodRecord

from .files import Content
from .markup import json_literal, literal, md_code, md_paragraph, md_text, md_url, one_line, rst_text, safe_token

__all__ = [
    "FILTERS",
    "KIND_LABELS",
    "Content",
    "Site",
    "css_class_value",
    "first_clause",
    "jinja_environment",
    "kind_label",
    "method_option",
    "sorted_methods",
    "text_measure",
    "wrap_text",
]


KIND_LABELS = {"method": "method", "best_practice": "best practice"}


def css_class_value(value: str, what: str = "token") -> str:
    """A vocabulary value as docutils writes it in a class name (it turns ``_`` into ``-``), so the
    generated Markdown, the HTML and the filter script all use the same spelling."""
    return safe_token(value, what).replace("_", "-")


def index_entry(text: str) -> str:
    """``text`` as one entry of an ``index`` directive in a fenced block: one line, without a
    backtick (three would end the fence), the ``;`` that would split it into sub-entries or the
    ``!`` that would mark it main (the template marks it). Sphinx does not parse an entry as markup,
    and escapes it where it shows it (the general index)."""
    return one_line(text).replace("`", "'").replace(";", ",").lstrip("!").strip()


def first_clause(text: str) -> str:
    """``text`` up to its first ``;`` (whitespace folded): the main clause of a sourced setting or
    hardware, where a compact view shows it and the card gives the whole."""
    return one_line(text).split("; ", 1)[0]


def kind_label(kind: str) -> str:
    """``best_practice`` -> ``best practice``: how a page names a record's kind."""
    return KIND_LABELS[safe_token(kind, "kind")]


FILTERS: Mapping[str, Callable[..., str]] = {
    "md_text": md_text,  # inline text: paragraph, table cell, heading, directive argument
    "md_paragraph": md_paragraph,  # text that starts a line of its own
    "md_code": md_code,  # an inline code span, verbatim
    "md_url": md_url,  # an https:// link destination
    "rst_text": rst_text,  # inline text in reStructuredText (the landing page)
    "one_line": one_line,  # whitespace folded, nothing escaped (directive options: Sphinx escapes them)
    "index_entry": index_entry,  # one entry of an index directive
    "token": safe_token,  # a closed-vocabulary value (key, domain, tag, kind), refused otherwise
    "kind_label": kind_label,
    "first_clause": first_clause,  # not escaping: an escaping filter follows it
    "css": css_class_value,
    "literal": literal,  # a Python literal (JSON arrays as lists)
    "json": json_literal,
}


def jinja_environment(
    template_dir: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], *, bytecode_cache: bool = False
) -> jinja2.Environment:
    """The environment for the templates in ``template_dir`` (a folder, or folders searched in order).

    A typo in a template is an error, not an empty string (``StrictUndefined``). Nothing is
    escaped automatically: the output is Markdown or reStructuredText, not HTML, so every
    metadata value goes through one of :data:`FILTERS`. ``bytecode_cache``: keep the compiled
    templates in ``__pycache__/`` of the (first) folder, as Python keeps its bytecode, so that a
    process renders without compiling them again (about 0.3 s for the page templates).
    """
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(template_dir),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters.update(FILTERS)
    if bytecode_cache:
        first = template_dir if isinstance(template_dir, (str, os.PathLike)) else template_dir[0]
        env.bytecode_cache = TemplateBytecodeCache(Path(first) / "__pycache__")
    return env


class TemplateBytecodeCache(jinja2.FileSystemBytecodeCache):
    """Jinja's cache of compiled templates in ``directory``, made on first use; a template whose
    source changed is compiled again, and a folder that cannot be written only means no cache."""

    def __init__(self, directory: Path):
        super().__init__(str(directory))

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            os.makedirs(self.directory, exist_ok=True)
            super().dump_bytecode(bucket)
        except OSError:
            pass


def sorted_methods(records: Mapping[str, MethodRecord]) -> list[MethodRecord]:
    """Every method record in display-name order (case-insensitive, then key)."""
    return sorted(records.values(), key=lambda r: (r.name.casefold(), r.key))


def method_option(record: MethodRecord) -> str | None:
    """What a user writes to turn the method on: the functional form, or the Trainer option (a
    ``model`` option's value is the expression that wraps the model, written as it is)."""
    if record.functional:
        return f"cf.{record.functional}"
    if record.trainer_option:
        ((name, value),) = record.trainer_option.items()
        if name == "model":
            return f"model={value}"
        return f"{name}={json_literal(value) if isinstance(value, str) else literal(value)}"
    return None


@dataclass
class Site:
    """What every page generator reads; :func:`methods_tools.pages.generate` builds it once per run.

    Output paths are relative to the docs source (``tables/algorithms_table.md``), so the same
    render can be written into ``docs/source``, a copy of it, or any ``--out`` folder.
    """

    source_dir: Path  # the docs source tree: its card folders are inputs
    out_dir: Path  # where the pages are written, and where a previous run's charts may be reused
    env: jinja2.Environment
    methods: list[MethodRecord]  # every method and best practice, in display-name order
    results: list[tuple[Path, Mapping[str, Any]]]  # every validated results file, by file name
    effects: list[tuple[Path, Mapping[str, Any]]] = field(default_factory=list)  # every validated effects file
    matrices: list[tuple[Path, Mapping[str, Any]]] = field(default_factory=list)  # every validated matrix file
    rendered: dict[Path, Content] = field(default_factory=dict)  # what the generators before this one made

    def render(self, template: str, **context: Any) -> str:
        return self.env.get_template(template).render(**context)


def reuse_or_draw(previous: Path, key: str, draw: Callable[[], str]) -> str:
    """A generated SVG drawn from inputs whose hash is ``key``: the one at ``previous`` (the last
    run's output) when it carries the same ``dc:identifier``, else ``draw()``'s."""
    try:
        old = Path(previous).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        old = ""
    return old if f"<dc:identifier>{key}</dc:identifier>" in old else draw()


# The style every generated chart and figure is drawn in: text kept as text, byte-stable ids.
SVG_STYLE = {"svg.hashsalt": "methods-library", "svg.fonttype": "none", "font.size": 9, "text.parse_math": False}


def pyplot(needed_for: str, error: type[Exception]) -> Any:
    """matplotlib's pyplot on the headless Agg backend; ``error`` says what to install where it is missing."""
    try:
        import matplotlib
    except ImportError:
        raise error(
            f"matplotlib is not installed: {needed_for} — install the project's [docs] extra (pip install -e '.[docs]')"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def text_measure(fig: Any, **text_options: Any) -> Callable[[str], float]:
    """How wide ``fig`` draws a line of text (with ``text_options``, e.g. ``fontweight="bold"``), in inches."""
    renderer = fig.canvas.get_renderer()

    def measure(text: str) -> float:
        probe = fig.text(0, 0, text, **text_options)
        inches = probe.get_window_extent(renderer).width / fig.dpi
        probe.remove()
        return inches

    return measure


def wrap_text(text: str, width: float, measure: Callable[[str], float]) -> list[str]:
    """``text`` broken at spaces into lines no wider than ``width`` inches as ``measure`` (a line ->
    inches, e.g. :func:`text_measure`) finds them; its own line breaks are kept, and a word wider
    than the width keeps a line of its own. The charts lay themselves out from these lines, so
    that no text is cut off or overlaps at the width a phone shows them."""
    lines: list[str] = []
    for paragraph in text.split("\n"):
        line = ""
        for word in paragraph.split(" "):
            trial = f"{line} {word}" if line else word
            if line and measure(trial) > width:
                lines.append(line)
                line = word
            else:
                line = trial
        lines.append(line)
    return lines


def svg_text(plt: Any, fig: Any, key: str) -> str:
    """``fig`` as SVG text carrying ``key`` (the hash of its inputs) as its ``dc:identifier``, no
    date and no creator; the figure is closed."""
    import io

    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None, "Identifier": key})
    plt.close(fig)
    return buffer.getvalue()
