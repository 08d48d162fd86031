"""The one set of escaping filters and the one Jinja environment every page renders with."""

from __future__ import annotations

from types import MappingProxyType

import jinja2
import pytest
from methods_tools import markup
from methods_tools.docsgen import FILTERS, jinja_environment
from methods_tools.markup import json_literal, literal, md_code, md_paragraph, md_text, md_url, one_line, rst_text

HOSTILE_TEXTS = [
    '<script>alert("x")</script>',
    "```{eval-rst}\n.. raw:: html\n```",
    "{role}`x`",
    "{math}`x`",
    "$x$",
    "| a | b |",
    "**b** _i_ [l](u) ![i](x)",
    "# heading",
    "1. list",
    "1) list",
    "- item",
    "+ item",
    "* item",
    "> quote",
    "% comment",
    ":::{note}",
    "(target)=",
    "===",
    "---",
    ".. raw:: html",
    "&amp; &#60;",
    "a\\b",
    "    indented code",
    "\n\n# after blank lines",
]


def _html_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def _commonmark(source: str) -> str:
    markdown_it = pytest.importorskip("markdown_it", reason="markdown-it-py comes with the [docs] extra")
    return markdown_it.MarkdownIt("commonmark").enable("table").render(source)


@pytest.mark.parametrize("text", HOSTILE_TEXTS)
def test_md_text_renders_as_the_same_plain_text(text):
    """The definition of escaping: inside a line (where md_text goes), CommonMark renders md_text(x)
    as exactly the text x."""
    assert _commonmark(f"Before {md_text(text)} after") == f"<p>Before {_html_escape(one_line(text))} after</p>\n"


@pytest.mark.parametrize("text", HOSTILE_TEXTS)
def test_rst_text_renders_as_the_same_plain_text(text):
    """Inside a line of reStructuredText (the landing page's captions), docutils reads rst_text(x)
    as exactly the text x: one paragraph, no markup."""
    core = pytest.importorskip("docutils.core", reason="docutils comes with the [docs] extra (Sphinx needs it)")
    doctree = core.publish_doctree(f"Before {rst_text(text)} after", settings_overrides={"report_level": 5})
    assert [node.tagname for node in doctree.children] == ["paragraph"]
    assert [node.tagname for node in doctree.children[0].children] == ["#text"]
    assert doctree.astext() == f"Before {one_line(text)} after"


def test_md_text_leaves_inert_punctuation_readable():
    assert (
        md_text("Cut-and-paste, 1.0 (the paper's value); a/b = 50% + c: d?")
        == "Cut-and-paste, 1.0 (the paper's value); a/b = 50% + c: d?"
    )
    assert (
        md_text("*a* `b` [c] <d> $e$ {f} #g |h| ~i~ &j; \\k _l_ !m")
        == r"\*a\* \`b\` \[c\] \<d\> \$e\$ \{f\} \#g \|h\| \~i\~ \&j; \\k \_l\_ \!m"
    )


@pytest.mark.parametrize("text", HOSTILE_TEXTS)
def test_md_paragraph_at_line_start_is_one_plain_paragraph(text):
    """A paragraph of its own (between blank lines, as a card's TL;DR is) stays one paragraph of text."""
    assert _commonmark(f"Before.\n\n{md_paragraph(text)}\n\nAfter.\n") == (
        f"<p>Before.</p>\n<p>{_html_escape(one_line(text))}</p>\n<p>After.</p>\n"
    )


def test_md_paragraph_escapes_a_block_opener_even_where_inline_escaping_would_not(monkeypatch):
    """The line-start rule holds on its own: with no inline escaping at all, a leading block opener
    is still escaped, and only the opener."""
    monkeypatch.setattr(markup, "md_text", one_line)
    assert md_paragraph("# Title") == "\\# Title"
    assert md_paragraph("- a - b") == "\\- a - b"
    assert md_paragraph("> q") == "\\> q"
    assert md_paragraph("1. first") == "1\\. first"
    assert md_paragraph("12) twelfth") == "12\\) twelfth"
    assert md_paragraph("(target)=") == "\\(target)="
    assert md_paragraph("% x") == "\\% x"
    assert md_paragraph(":::{note}") == "\\:::{note}"
    assert md_paragraph("=") == "\\="
    assert md_paragraph("Plain 1. text") == "Plain 1. text"
    assert md_paragraph("2026 was a year") == "2026 was a year"


def test_literal_is_the_python_literal_with_arrays_as_lists():
    assert literal("amp_bf16") == "'amp_bf16'"
    assert literal(0.5) == "0.5" and literal(None) == "None" and literal(True) == "True"
    assert literal((0.0, None)) == "[0.0, None]"  # a JSON array, frozen into a tuple by the loader
    assert literal([1, (2, 3)]) == "[1, [2, 3]]"
    assert literal(MappingProxyType({"a": (1,)})) == "{'a': [1]}"
    assert literal("<script>") == "'<script>'"  # a literal, not escaped: it goes inside md_code


def test_json_literal_accepts_frozen_metadata():
    assert json_literal(MappingProxyType({"precision": "amp_bf16", "r": (1, None)})) == (
        '{"precision": "amp_bf16", "r": [1, null]}'
    )


def test_md_code_and_md_url():
    assert md_code("a`b") == "`` a`b ``"
    assert md_url("https://x.invalid/a b)(<c>") == "https://x.invalid/a%20b%29%28%3Cc%3E"
    with pytest.raises(ValueError, match="only https://"):
        md_url("javascript:alert(1)")


def test_one_environment_holds_every_filter(tmp_path):
    assert set(FILTERS) == {
        "md_text",
        "md_paragraph",
        "md_code",
        "md_url",
        "one_line",
        "token",
        "kind_label",
        "first_clause",
        "css",
        "literal",
        "json",
        "rst_text",
        "index_entry",
    }
    (tmp_path / "t.md.j2").write_text(
        "{{ tldr | md_paragraph }}\n{{ key | token }} {{ kind | kind_label }} {{ tag | css('tag') }}\n"
        "{{ option | literal | md_code }} {{ option | json }}\n"
    )
    env = jinja_environment(tmp_path)
    assert set(FILTERS) <= set(env.filters)
    text = env.get_template("t.md.j2").render(
        tldr="# <script>", key="cutmix", kind="best_practice", tag="data_augmentation", option=(1, 2)
    )
    assert text == "\\# \\<script\\>\ncutmix best practice data-augmentation\n`[1, 2]` [1, 2]\n"


def test_a_template_typo_is_an_error_not_an_empty_string(tmp_path):
    (tmp_path / "t.j2").write_text("{{ recrod.name }}")
    with pytest.raises(jinja2.UndefinedError):
        jinja_environment(tmp_path).get_template("t.j2").render(record={})


def test_token_refuses_what_is_not_a_vocabulary_value(tmp_path):
    (tmp_path / "t.j2").write_text("{{ key | token('method key') }}")
    with pytest.raises(ValueError, match="not a valid method key"):
        jinja_environment(tmp_path).get_template("t.j2").render(key="a b")
