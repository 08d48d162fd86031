"""What every page of the site asks for is in the site, and the build's cache is not published."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _assigned(path: Path, name: str) -> object:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    values = [ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == name]
    assert values, f"{path} sets no {name}"
    return values[-1]


def test_the_favicon_is_bundled():
    """Without one every page's request for /favicon.ico is a 404; the site loads nothing from other hosts."""
    favicon = _assigned(ROOT / "docs/source/conf.py", "html_favicon")
    assert not str(favicon).startswith(("http:", "https:", "//"))
    assert (ROOT / "docs/source" / favicon).is_file()


def test_the_docs_session_keeps_the_doctrees_out_of_the_published_html():
    """Sphinx puts its pickled cache (about 10 MB) in ``<html>/.doctrees`` unless told where else."""
    call = next(
        node
        for node in ast.walk(ast.parse((ROOT / "noxfile.py").read_text(encoding="utf-8")))
        if isinstance(node, ast.Call)
        and any(isinstance(a, ast.Constant) and a.value == "sphinx-build" for a in node.args)
    )
    args = [a.value for a in call.args if isinstance(a, ast.Constant)]
    doctrees, html = args[args.index("-d") + 1], args[-1]
    assert html == "docs/build/html" and not Path(doctrees).is_relative_to(html)
