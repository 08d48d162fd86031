"""The built site in a real browser: headless Chromium (Debian's ``chromium``), driven by Playwright.

The site is built by the ``real_site`` fixture (as ``nox -s docs`` builds it) and served from
127.0.0.1; every request to anything else is recorded and aborted, and the test fails if there
was one. A screenshot of the overview is saved as ``overview.png`` in ``$METHODS_SCREENSHOT_DIR``
when that is set, else in the test's temporary directory (never in the checkout).
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import os
import re
import shutil
import threading
from pathlib import Path

import pytest
from docs_support import RAW_MARKUP

from algorithms.metadata import load_all_datasets, load_all_metadata, load_all_model_families

pytestmark = pytest.mark.slow  # the site built and driven in Chromium

playwright_api = pytest.importorskip(
    "playwright.sync_api", reason="Playwright is not installed: install the project's [dev] extra"
)

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def find_chromium() -> str | None:
    for candidate in (
        os.environ.get("METHODS_CHROMIUM"),
        "/usr/bin/chromium",
        shutil.which("chromium"),
        shutil.which("chromium-browser"),
    ):
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
        pytest.skip(
            "no Chromium found (looked at $METHODS_CHROMIUM, /usr/bin/chromium, PATH): "
            "install Debian's package with apt-get install -y chromium (.ci/run does)"
        )
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
        ".ml-overview-item",
        "items => items.filter(i => i.offsetParent !== null)"
        ".map(i => i.querySelector('a.sd-stretched-link').getAttribute('href'))",
    )
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
            expected = {
                k for k, r in records.items() if value in {"domain": r.domains, "tag": r.tags, "kind": (r.kind,)}[facet]
            }
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


#: A query and the cards it must find first, in any order: the card whose name or aka (its metadata)
#: the query matches. Before the cards' index entries, "bf16" put Mixed Precision 27th of 34 pages,
#: "DDP" the DDP card 13th and "FSDP" its card 16th.
SEARCHES = {
    "bf16": {"half_precision", "mixed_precision"},
    "DDP": {"ddp"},
    "FSDP": {"fsdp"},
    "label smoothing": {"label_smoothing"},
    "EMA": {"ema"},
    "DeepSpeed": {"deepspeed_zero"},
    "AMP": {"mixed_precision"},
}


@pytest.mark.parametrize("query", list(SEARCHES))
def test_search_ranks_the_card_whose_name_or_aka_matches_first(page, site_url, query):
    """Sphinx's own scorer, in the browser: an index entry the query covers outranks any word of the text."""
    page.goto(site_url + "search.html?q=" + query.replace(" ", "+"))
    page.wait_for_function(
        "(document.querySelector('#search-results .search-summary')?.textContent || '').startsWith('Search finished')",
        timeout=30_000,
    )
    hrefs = page.eval_on_selector_all("#search-results li a", "links => links.map(a => a.getAttribute('href'))")
    ranked = list(dict.fromkeys(h.split("#")[0] for h in hrefs))  # pages, in the order shown
    expected = SEARCHES[query]
    assert set(ranked[: len(expected)]) == {f"method_cards/{key}.html" for key in expected}, ranked[:5]


# --- accessibility: axe-core (vendored, pinned) on every generated page kind, in both themes ---------

AXE = Path(__file__).parent / "vendor" / "axe-core" / "axe.min.js"
AXE_SHA256 = "29348999450cdf2849a8e70b7912fc2da85a849da39c0d0d5394f51d4a9ed95c"  # axe-core 4.14.1
WCAG_AA = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
BLOCKING = ("serious", "critical")


def page_kinds() -> dict[str, str]:
    """One page of every kind the site generates, by kind."""
    records = load_all_metadata()
    method = next(k for k, r in records.items() if r.kind == "method")
    best_practice = next(k for k, r in records.items() if r.kind == "best_practice")
    return {
        "home": "index.html",
        "overview": "method_cards/methods_overview.html",
        "table": "tables/algorithms_table.html",
        "composability": "tables/composability.html",
        "method card": f"method_cards/{method}.html",
        "best-practice card": f"method_cards/{best_practice}.html",
        "dataset card": f"dataset_cards/{next(iter(load_all_datasets()))}.html",
        "model card": f"model_cards/{next(iter(load_all_model_families()))}.html",
        "training configurations": "training_configurations.html",
        "choosing methods": "choosing_methods.html",
        "memory": "memory.html",
        "measurements": "measurements.html",
        "writing a method": "writing_cards.html",
    }


def test_the_vendored_axe_core_is_the_pinned_release():
    assert hashlib.sha256(AXE.read_bytes()).hexdigest() == AXE_SHA256


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_no_serious_or_critical_accessibility_violation(browser, site_url, real_site, theme):
    """WCAG 2.1 AA as axe-core checks it, on every page kind, in furo's light and dark themes."""
    context = browser.new_context(color_scheme=theme)
    context.add_init_script(f"localStorage.setItem('theme', '{theme}')")  # furo's own theme switch
    page = context.new_page()
    found = []
    try:
        for kind, path in page_kinds().items():
            assert (real_site / path).exists(), path
            page.goto(site_url + path)
            page.wait_for_load_state("load")
            assert page.evaluate("document.body.dataset.theme") == theme, (kind, path)
            page.add_script_tag(path=str(AXE))
            violations = page.evaluate(
                """async tags =>
                (await axe.run(document, {runOnly: {type: 'tag', values: tags}})).violations.map(v => (
                    {id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.map(n => n.target.join(' '))}))""",
                WCAG_AA,
            )
            found += [
                f"{theme} {kind} ({path}): {v['impact']} {v['id']} ({v['help']}) at {node}"
                for v in violations
                if v["impact"] in BLOCKING
                for node in v["nodes"]
            ]
    finally:
        context.close()
    assert not found, "\n".join(found)


# What a reader sees of a page: the article's text outside code, scripts and the search form.
ARTICLE_TEXT = """() => {
    const article = (document.querySelector('article') || document.body).cloneNode(true);
    article.querySelectorAll('pre, code, script, style, .highlight, form').forEach(e => e.remove());
    return article.innerText;
}"""
SCREEN_WIDTHS = (1400, 390)
# The pages a screenshot is kept of, at each width and theme.
SCREENSHOTS = ("home", "overview", "method card", "composability", "training configurations", "choosing methods")


@pytest.mark.parametrize("width", SCREEN_WIDTHS)
def test_every_page_kind_fits_the_screen_and_shows_no_raw_markup(browser, site_url, real_site, width, tmp_path):
    """At a desktop's and a phone's width, in light and dark: no page body scrolls sideways (a wide
    table or chart scrolls inside its own frame), and no reST or MyST shows as text. Screenshots of
    the main pages go to $METHODS_SCREENSHOT_DIR (else the test's temporary directory)."""
    out = Path(os.environ.get("METHODS_SCREENSHOT_DIR") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    problems = []
    for theme in ("light", "dark"):
        context = browser.new_context(viewport={"width": width, "height": 900}, color_scheme=theme)
        context.add_init_script(f"localStorage.setItem('theme', '{theme}')")
        page = context.new_page()
        try:
            for kind, path in page_kinds().items():
                page.goto(site_url + path)
                page.wait_for_load_state("load")
                body_width = page.evaluate("document.documentElement.scrollWidth")
                if body_width > width:
                    problems.append(f"{theme} {width}px {kind} ({path}): the page is {body_width}px wide")
                raw = [
                    line.strip() for line in page.evaluate(ARTICLE_TEXT).splitlines() if RAW_MARKUP.search(line.strip())
                ]
                problems += [f"{theme} {width}px {kind} ({path}): raw markup {line!r}" for line in raw[:3]]
                if kind in SCREENSHOTS:
                    page.screenshot(path=str(out / f"{kind.replace(' ', '-')}-{width}-{theme}.png"))
        finally:
            context.close()
    assert problems == []
    assert len(list(out.glob(f"*-{width}-*.png"))) == 2 * len(SCREENSHOTS)


def test_the_card_puts_the_answer_before_the_implementer_notes(page, site_url):
    """A reader's order: the TL;DR and the Should-I-use-it box first; the attribution, the
    differences from Composer (collapsed) and the API reference last."""
    page.set_viewport_size({"width": 390, "height": 900})
    page.goto(site_url + "method_cards/cutmix.html")
    headings = page.eval_on_selector_all("article section > h2", "hs => hs.map(h => h.firstChild.textContent)")
    assert headings[0] == "TL;DR" and headings[-3:] == ["Attribution", "Differences from Composer", "API Reference"]
    box = page.locator("article .ml-verdict")
    assert box.count() == 1 and box.bounding_box()["y"] < 900 * 1.5  # within the first screen and a half
    differences = page.locator("section#differences-from-composer details")
    assert differences.count() == 1 and differences.get_attribute("open") is None  # collapsed
    differences.locator("summary").click()
    assert differences.get_attribute("open") is not None


# --- the landing page and filtered overview URLs --------------------------------------------------


def test_the_landing_page_counts_what_the_metadata_holds(real_site):
    from bs4 import BeautifulSoup

    records = load_all_metadata().values()
    html = BeautifulSoup((real_site / "index.html").read_text(encoding="utf-8"), "html.parser")
    table = next(t for t in html.select("article table") if "What the library holds" in t.get_text())
    rows = {
        tr.select("td")[0].get_text(strip=True): [int(td.get_text(strip=True)) for td in tr.select("td")[1:]]
        for tr in table.select("tbody tr")
    }
    kinds = ("method", "best_practice")
    total = rows.pop("All domains")
    assert total == [sum(1 for r in records if r.kind == k) for k in kinds]
    # each entry counted once, on the row of the set of domains it serves, so the rows add up to the total
    for served in {tuple(sorted(r.domains)) for r in records}:
        label = f"{served[0]} only" if len(served) == 1 else f"{', '.join(served[:-1])} and {served[-1]}"
        assert rows.pop(label) == [
            sum(1 for r in records if tuple(sorted(r.domains)) == served and r.kind == k) for k in kinds
        ], label
    assert rows == {}
    assert html.select_one('form[role="search"][action="search.html"] input[name="q"]') is not None
    images = [img["src"] for img in html.select("article figure img")]
    for effects in _measured_effects():  # every committed effects file with a measured row: its forest plot
        assert any(src.endswith(f"/{effects.stem}.svg") for src in images), (effects.name, images)


def _measured_effects() -> list[Path]:
    """The committed effects files of methods with a measured row: those the overview charts and
    tabulates (a file of recipes is the recipes page's)."""
    from methods_tools.effects_pages import measures_recipes
    from methods_tools.results import discover_effects, load_effects

    documents = [(path, load_effects(path)) for path in discover_effects()]
    return [
        path
        for path, document in documents
        if not measures_recipes(document) and any(e["status"] == "measured" for e in document["summary"])
    ]


def test_the_landing_pages_goals_open_the_overview_filtered(page, site_url):
    records = load_all_metadata()
    page.goto(site_url + "index.html")
    links = page.eval_on_selector_all(
        "article a[href*='methods_overview.html?tag=']", "links => links.map(a => a.getAttribute('href'))"
    )
    assert len(links) >= 3
    for href in links:
        tag = href.split("?tag=")[1]
        page.goto(site_url + href)
        assert visible_cards(page) == {k for k, r in records.items() if tag in r.tags}, href
        assert page.input_value("#ml-filter-tag") == tag.replace("_", "-")


def test_an_overview_url_with_filters_opens_filtered_and_follows_changes(page, site_url):
    records = load_all_metadata()
    page.goto(site_url + "method_cards/methods_overview.html?kind=best_practice&domain=general")
    assert visible_cards(page) == {
        k for k, r in records.items() if r.kind == "best_practice" and "general" in r.domains
    }
    page.select_option("#ml-filter-kind", "")
    page.select_option("#ml-filter-tag", "speedup")
    assert page.evaluate("location.search") == "?domain=general&tag=speedup"
    page.reload()
    assert visible_cards(page) == {k for k, r in records.items() if "general" in r.domains and "speedup" in r.tags}
    page.goto(site_url + "method_cards/methods_overview.html?tag=no-such-tag")
    assert visible_cards(page) == set(records)  # an unknown value filters nothing


def test_the_overview_filters_work_from_the_keyboard_alone(page, site_url):
    records = load_all_metadata()
    page.goto(site_url + "method_cards/methods_overview.html")
    # tab from the top of the page to the first filter: at most once past every focusable element
    # (the sidebar lists every card before it)
    stops = page.locator("a[href], button, input, select, textarea, [tabindex]").count()
    for _ in range(stops + 1):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.id") == "ml-filter-domain":
            break
    else:
        pytest.fail("the domain filter cannot be reached with Tab")
    page.keyboard.press("ArrowDown")  # the first domain
    domain = page.input_value("#ml-filter-domain")
    assert domain and visible_cards(page) == {k for k, r in records.items() if domain.replace("-", "_") in r.domains}
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "ml-filter-tag"


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        pass


def test_the_effects_table_sorts_from_the_keyboard(page, site_url, real_site):
    """Each header of the overview's effects table is a button: Enter sorts by that column,
    ascending then descending, and the header says so (aria-sort); a ratio sorts by its value, and
    one with no detectable difference by the middle of its interval."""
    measured = _measured_effects()
    if not measured:
        pytest.skip("no committed effects file with a measured row: the overview has no effects table")
    page.goto(site_url + "method_cards/methods_overview.html")
    tables = page.locator(".ml-effects-table table")
    # one table per effects file with a measured row (the vision and the language-model workloads)
    assert tables.count() == len(measured)
    for i in range(tables.count()):
        headers = tables.nth(i).locator("thead th")
        assert headers.count() >= 5 and tables.nth(i).locator("thead th button").count() == headers.count()
    table = tables.first
    rows = table.locator("tbody tr")
    speed = (
        "rows => rows.map(r => { const t = r.cells[2].textContent.trim().replace(/\u2212/g, '-');"
        " const n = parseFloat(t); if (!isNaN(n)) return n;"
        " const ends = t.slice(t.indexOf('(')).match(/[+-]?\\d+(?:\\.\\d+)?/g);"
        " return (parseFloat(ends[0]) + parseFloat(ends[1])) / 2; })"
    )
    table.locator("thead button").nth(2).focus()
    page.keyboard.press("Enter")
    ascending = rows.evaluate_all(speed)
    assert ascending == sorted(ascending)
    assert table.locator("thead th").nth(2).get_attribute("aria-sort") == "ascending"
    page.keyboard.press("Enter")
    assert rows.evaluate_all(speed) == sorted(ascending, reverse=True)
    assert table.locator("thead th").nth(2).get_attribute("aria-sort") == "descending"
    # each row's method links to its card; its figure at scale links to the source it quotes
    cards = table.locator("tbody tr td:first-child a").evaluate_all("links => links.map(a => a.getAttribute('href'))")
    assert cards and all(href.endswith(".html") and "://" not in href for href in cards)
    sources = table.locator("tbody tr td:last-child a").evaluate_all("links => links.map(a => a.getAttribute('href'))")
    assert all(href.startswith("https://") for href in sources)


def _screen(browser, site_url, width: int, theme: str = "light"):
    context = browser.new_context(viewport={"width": width, "height": 900}, color_scheme=theme)
    context.add_init_script(f"localStorage.setItem('theme', '{theme}')")
    return context, context.new_page()


# About six screens of a desktop: the most the Choosing page may take, its measurements collapsed.
CHOOSING_MOST_PX = 9000


def test_the_choosing_page_fits_about_six_desktop_screens(browser, site_url):
    context, page = _screen(browser, site_url, 1400)
    try:
        page.goto(site_url + "choosing_methods.html")
        page.wait_for_load_state("load")
        height = page.evaluate("document.documentElement.scrollHeight")
        assert height < CHOOSING_MOST_PX, f"the Choosing page is {height}px tall at 1400px"
        # what is collapsed is there, one click away: every list's measurements
        assert page.locator(".ml-choices details.ml-measured").count() >= 4
    finally:
        context.close()


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_on_a_phone_the_charts_read_and_a_wide_table_says_it_scrolls(browser, site_url, theme):
    """At 390 px the training page shows the stacked chart, whose smallest text is at least 11 px,
    and a table wider than the column shows the line that says it scrolls, and fades on its right."""
    context, page = _screen(browser, site_url, 390, theme)
    try:
        page.goto(site_url + "training_configurations.html")
        page.wait_for_load_state("load")
        shown = page.evaluate(
            """async () => Promise.all([...document.querySelectorAll('article img')]
                 .filter(i => i.offsetParent !== null)
                 .map(async i => ({cls: i.className, width: i.getBoundingClientRect().width,
                                   svg: await (await fetch(i.src)).text()})))"""
        )
        assert shown and all("ml-chart-narrow" in chart["cls"] for chart in shown), shown
        for chart in shown:
            view = float(re.search(r'viewBox="0 0 ([\d.]+) ', chart["svg"]).group(1))
            smallest = min(float(v) for v in re.findall(r"font-size: ([\d.]+)px", chart["svg"]))
            assert smallest * chart["width"] / view >= 11, (smallest, chart["width"], view)
        frames = page.locator(".table-wrapper.ml-scrolls")
        assert frames.count() >= 1  # the training tables have more columns than a phone shows
        frame = frames.first
        hint = page.locator(".table-wrapper.ml-scrolls >> xpath=preceding-sibling::*[1]").first
        assert hint.is_visible() and "Scroll sideways" in hint.inner_text()
        assert "ml-more-right" in frame.get_attribute("class")
        assert page.evaluate(
            "getComputedStyle(document.querySelector('.table-wrapper.ml-scrolls')).maskImage"
        ).startswith("linear-gradient")
        frame.evaluate("f => { f.scrollLeft = f.scrollWidth; f.dispatchEvent(new Event('scroll')); }")
        page.wait_for_function(
            "!document.querySelector('.table-wrapper.ml-scrolls').classList.contains('ml-more-right')"
        )
        assert "ml-more-left" in frame.get_attribute("class")
    finally:
        context.close()
