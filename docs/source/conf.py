"""Sphinx configuration of the Methods Library site.

Build: ``nox -s docs`` (or ``sphinx-build -W --keep-going -b html docs/source docs/build/html``).
The generated pages (``methods_tools.pages``: table, overview, training results, navigation) are
rendered at the start of each build (``_ext/methods_library.py``), so they never go stale and are
never committed. Metadata is loaded only through ``algorithms.metadata``. The site is offline:
KaTeX's CSS and fonts are bundled in ``_static/katex`` (the extension ships the matching JS), and
nothing loads from another host.
"""

from __future__ import annotations

import sys
from pathlib import Path

import sphinxcontrib.katex

DOCS_SOURCE = Path(__file__).resolve().parent
REPO_ROOT = DOCS_SOURCE.parents[1]
for path in (REPO_ROOT, REPO_ROOT / "tools", DOCS_SOURCE / "_ext"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

project = "Methods Library"
author = "Methods Library maintainers"
copyright = "the Methods Library maintainers"  # noqa: A001 (Sphinx's name)

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx_design",
    "sphinxcontrib.katex",
    "methods_library",
    "methods_choosing",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "**/.*", "tables/*.j2"]
templates_path: list[str] = []
# Metadata text, option names (--check) and code-like prose must appear exactly as written.
smartquotes = False

myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence"]
myst_heading_anchors = 3

autodoc_member_order = "bysource"
autodoc_typehints = "description"
napoleon_google_docstring = True
napoleon_numpy_docstring = False

# KaTeX: the CSS and fonts are bundled (the default CSS path is a CDN); the JS ships with the
# extension. The bundle must match the extension's KaTeX version.
KATEX_BUNDLED_VERSION = "0.16.22"
if sphinxcontrib.katex.katex_version != KATEX_BUNDLED_VERSION:
    raise RuntimeError(
        f"sphinxcontrib-katex expects KaTeX {sphinxcontrib.katex.katex_version}, but _static/katex "
        f"holds {KATEX_BUNDLED_VERSION} — update the bundle (see _static/katex/README.md)"
    )
katex_css_path = "katex/katex.min.css"
katex_prerender = False

html_theme = "furo"
html_title = "Methods Library"
html_static_path = ["_static"]
html_favicon = "_static/favicon.svg"  # bundled: every page asked for /favicon.ico and got a 404
html_css_files = ["methods_overview.css", "methods_choosing.css"]
html_js_files = ["methods_overview.js", "methods_landmarks.js", "methods_sortable.js", "methods_scroll.js"]
html_copy_source = False
html_show_sourcelink = False
html_theme_options = {"navigation_with_keys": True}
