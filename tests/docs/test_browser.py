"""The built site in a real browser: headless Chromium (Debian's ``chromium``), driven by Playwright.

The site is built by the ``real_site`` fixture (as ``nox -s docs`` builds it) and served from
127.0.0.1; every request to anything else is recorded and aborted, and the test fails if there
was one. A screenshot of the overview is saved as ``overview.png`` in ``$METHODS_SCREENSHOT_DIR``
when that is set, else in the test's temporary directory (never in the checkout).
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import threading
from pathlib import Path

import pytest

from algorithms.metadata import load_all_metadata

playwright_api = pytest.importorskip(
    "playwright.sync_api", reason="Playwright is not installed: install the project's [dev] extra")

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def find_chromium() -> str | None:
    for candidate in (os.environ.get("METHODS_CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium"),
                      shutil.which("chromium-browser")):
        if candidate and Path(candidate).exists():
            return candidate
    return None


@pytest.fixture(scope="module")
def site_url(real_site):
    handler = functools.partial(_QuietHandler, directory=str(real_site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def browser():
    chromium = find_chromium()
    if chromium is None:
        pytest.skip("no Chromium found (looked at $METHODS_CHROMIUM, /usr/bin/chromium, PATH): "
                    "install Debian's package with apt-get install -y chromium (.ci/run does)")
    with playwright_api.sync_playwright() as p:
        # A fresh profile per launch (Playwright's default); never `playwright install`.
        b = p.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
        yield b
        b.close()


@pytest.fixture
def page(browser, site_url):
    """A page whose requests outside the local server are aborted and recorded."""
    context = browser.new_context()
    outside: list[str] = []

    def guard(route):
        url = route.request.url
        if url.startswith(site_url) or url.startswith(("data:", "blob:", "about:")):
            route.continue_()
        else:
            outside.append(url)
            route.abort()

    context.route("**/*", guard)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    yield page
    context.close()
    assert outside == [], f"requests left the local server: {outside}"
    assert errors == [], f"JavaScript errors: {errors}"


def visible_cards(page) -> set[str]:
    hrefs = page.eval_on_selector_all(
        ".ml-overview-item", "items => items.filter(i => i.offsetParent !== null)"
        ".map(i => i.querySelector('a.sd-stretched-link').getAttribute('href'))")
    return {h.removesuffix(".html") for h in hrefs}


def test_overview_filters_hide_and_show_the_right_cards(page, site_url, tmp_path):
    records = load_all_metadata()
    page.goto(site_url + "method_cards/methods_overview.html")
    assert visible_cards(page) == set(records)
    facets = {
        "domain": {v for r in records.values() for v in r.domains},
        "tag": {v for r in records.values() for v in r.tags},
        "kind": {r.kind for r in records.values()},
    }
    for facet, values in facets.items():
        for value in sorted(values):
            page.select_option(f"#ml-filter-{facet}", value.replace("_", "-"))  # as docutils spells classes
            expected = {k for k, r in records.items()
                        if value in {"domain": r.domains, "tag": r.tags, "kind": (r.kind,)}[facet]}
            assert visible_cards(page) == expected, (facet, value)
            assert page.inner_text(".ml-filter-count") == f"{len(expected)} of {len(records)} shown"
        page.select_option(f"#ml-filter-{facet}", "")
        assert visible_cards(page) == set(records)
    # two facets at once: the intersection
    domain, tag = sorted(facets["domain"])[0], sorted(facets["tag"])[0]
    page.select_option("#ml-filter-domain", domain.replace("_", "-"))
    page.select_option("#ml-filter-tag", tag.replace("_", "-"))
    assert visible_cards(page) == {k for k, r in records.items() if domain in r.domains and tag in r.tags}
    page.select_option("#ml-filter-domain", "")
    page.select_option("#ml-filter-tag", "")
    screenshot = Path(os.environ.get("METHODS_SCREENSHOT_DIR") or tmp_path) / "overview.png"
    screenshot.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(screenshot), full_page=True)
    print(f"overview screenshot: {screenshot}")


# Text left over once rendered math, code and scripts are taken out: no TeX delimiter may remain.
LEFTOVER_TEXT = """() => {
  const root = document.querySelector('article').cloneNode(true);
  root.querySelectorAll('.katex, pre, code, script, style, .highlight').forEach(e => e.remove());
  return root.textContent;
}"""


def math_pages(real_site: Path) -> list[str]:
    pages = ["writing_cards.html"]
    pages += [f"method_cards/{p.name}" for p in sorted((real_site / "method_cards").glob("*.html"))]
    return [p for p in pages if 'class="math' in (real_site / p).read_text(encoding="utf-8")]


def test_math_is_rendered_by_katex(page, site_url, real_site):
    pages = math_pages(real_site)
    assert "writing_cards.html" in pages  # it shows $, $$, :math: and .. math::
    for path in pages:
        page.goto(site_url + path)
        page.wait_for_load_state("load")
        counts = page.evaluate("""() => ({
            math: document.querySelectorAll('article .math').length,
            unrendered: [...document.querySelectorAll('article .math')].filter(m => !m.querySelector('.katex')).length,
            errors: document.querySelectorAll('article .katex-error').length})""")
        assert counts["math"] > 0 and counts["unrendered"] == 0 and counts["errors"] == 0, (path, counts)
        leftover = page.evaluate(LEFTOVER_TEXT)
        for delimiter in ("$", "\\(", "\\[", "\\begin{"):
            assert delimiter not in leftover, (path, delimiter)


def test_search_finds_cutmix(page, site_url):
    page.goto(site_url + "search.html?q=CutMix")
    page.wait_for_selector("#search-results li a", timeout=20_000)
    hrefs = page.eval_on_selector_all("#search-results li a", "links => links.map(a => a.getAttribute('href'))")
    assert any(h.split("#")[0].endswith("method_cards/cutmix.html") for h in hrefs), hrefs


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        pass
