"""The built site: metadata text reaches the page as plain text, and nothing loads from another host."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from docs_support import HOSTILE, RAW_MARKUP, SYNTHETIC, sphinx_build, write_source_tree
from methods_tools.markup import one_line

bs4 = pytest.importorskip("bs4", reason="BeautifulSoup comes with the [docs] extra (furo needs it)")

LOADING_TAGS = {
    "script": "src",
    "link": "href",
    "img": "src",
    "iframe": "src",
    "source": "src",
    "audio": "src",
    "video": "src",
    "embed": "src",
    "object": "data",
}


def soup(path: Path) -> bs4.BeautifulSoup:
    return bs4.BeautifulSoup(path.read_text(encoding="utf-8"), "html.parser")


@pytest.fixture(scope="module")
def hostile_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from docs_support import write_metadata

    root = tmp_path_factory.mktemp("hostile")
    meta = write_metadata(root / "metadata", SYNTHETIC)
    src = write_source_tree(root / "source", SYNTHETIC)
    result = sphinx_build(src, root / "html", "-D", f"methods_metadata_root={meta}")
    assert result.returncode == 0, f"docs build failed:\n{result.stderr[-6000:]}"
    return root / "html"


def test_table_shows_metadata_text_verbatim(hostile_site):
    page = soup(hostile_site / "tables" / "algorithms_table.html")
    rows = {tr.find("a")["href"]: tr.find_all("td") for tr in page.select("table tbody tr")}
    assert set(rows) == {f"../method_cards/{key}.html" for key in SYNTHETIC}
    for key, entry in SYNTHETIC.items():
        name, _, _, tldr = rows[f"../method_cards/{key}.html"]  # name, kind, domains, TL;DR
        assert name.get_text() == one_line(entry["name"])
        assert tldr.get_text() == one_line(entry["tldr"])
        for cell in (name, tldr):  # text only: no element but the row's own link
            assert {tag.name for tag in cell.find_all(True)} <= {"p", "a", "span"}
            assert len(cell.find_all("a")) == (0 if cell is tldr else 1)


def test_overview_shows_metadata_text_verbatim(hostile_site):
    page = soup(hostile_site / "method_cards" / "methods_overview.html")
    cards = page.select(".ml-overview-item")
    assert len(cards) == len(SYNTHETIC)
    texts = {card.select_one(".sd-card-title").get_text(strip=True): card.get_text(" ", strip=True) for card in cards}
    hostile = texts[one_line(SYNTHETIC["hostile"]["name"])]
    assert one_line(HOSTILE) in hostile
    # its figure at scale, as text: the figure, the setting's first clause, the hardware and the source
    (box,) = [
        c
        for c in cards
        if c.select_one(".sd-card-title").get_text(strip=True) == one_line(SYNTHETIC["hostile"]["name"])
    ]
    scale = box.select_one(".ml-at-scale")
    assert scale.get_text(" ", strip=True) == (
        f"At scale: {one_line(HOSTILE)} <i>x</i> <script>alert(2)</script>; hardware: [z](javascript:alert(1)) "
        "<b>raw</b>. Source: **Mallory** ](javascript:alert(1))."
    )
    assert {tag.name for tag in scale.find_all(True)} <= {"div", "p", "strong"}


def test_landing_shows_sourced_figures_as_text(hostile_site):
    page = soup(hostile_site / "index.html")
    (table,) = page.select("table.ml-at-scale-table")
    (row,) = [tr for tr in table.select("tbody tr") if one_line(HOSTILE) in tr.get_text(" ", strip=True)]
    name, figure, source = row.find_all("td")
    assert name.get_text(strip=True) == one_line(SYNTHETIC["hostile"]["name"])
    assert figure.get_text(" ", strip=True) == one_line(HOSTILE)
    assert source.get_text(" ", strip=True) == (
        "<i>x</i> <script>alert(2)</script>; hardware: [z](javascript:alert(1)) <b>raw</b>. "
        "**Mallory** ](javascript:alert(1))"
    )
    assert [a["href"] for a in row.find_all("a")] == [
        "method_cards/hostile.html",
        "https://example.invalid/a%20b%29%28c%3Cd%3E",
    ]
    assert {tag.name for tag in figure.find_all(True)} <= {"p"}
    assert {tag.name for tag in source.find_all(True)} <= {"p", "a"}


def test_no_markup_from_metadata_anywhere(hostile_site):
    for path in hostile_site.rglob("*.html"):
        page = soup(path)
        assert not [s for s in page.find_all("script") if not s.get("src") and "alert" in s.get_text()], path
        assert not page.find_all(["b", "i"], string=re.compile(r"^(raw|rst|x|et al)$")), path
        assert not page.find_all("img", src="x"), path
        assert not page.select('a[href^="javascript:"]'), path


def _external(ref: str) -> bool:
    return bool(re.match(r"^([a-z][a-z0-9+.-]*:|//)", ref.strip(), flags=re.I)) and not ref.startswith("data:")


def test_built_site_loads_nothing_from_other_hosts(real_site):
    """Every script, style sheet, image and font the pages load is a file of the site itself."""
    offenders = []
    for path in real_site.rglob("*.html"):
        for tag, attr in LOADING_TAGS.items():
            for element in soup(path).find_all(tag):
                ref = element.get(attr)
                if ref and (tag != "link" or {"stylesheet", "preload", "icon"} & set(element.get("rel", []))):
                    if _external(ref):
                        offenders.append(f"{path.relative_to(real_site)}: <{tag} {attr}={ref}>")
    for path in real_site.rglob("*.css"):
        for ref in re.findall(r"url\(\s*['\"]?([^'\")]+)", path.read_text(encoding="utf-8", errors="replace")):
            if _external(ref):
                offenders.append(f"{path.relative_to(real_site)}: url({ref})")
            elif not ref.startswith(("data:", "#")):
                assert (path.parent / ref.split("?")[0].split("#")[0]).exists(), f"{path}: missing {ref}"
    assert offenders == []


def test_real_site_lists_every_method(real_site):
    from algorithms.metadata import load_all_metadata

    keys = set(load_all_metadata())
    table = soup(real_site / "tables" / "algorithms_table.html")
    assert {a["href"] for a in table.select("table tbody tr td:first-child a")} == {
        f"../method_cards/{k}.html" for k in keys
    }
    overview = soup(real_site / "method_cards" / "methods_overview.html")
    assert {a["href"] for a in overview.select(".ml-overview-item a.sd-stretched-link")} == {f"{k}.html" for k in keys}
    for key in keys:
        assert (real_site / "method_cards" / f"{key}.html").exists()


def raw_markup(page: bs4.BeautifulSoup) -> list[str]:
    """The lines of a page's text (outside code, scripts and the search box) that read as raw markup."""
    main = page.select_one("article") or page.body or page
    for tag in main.select("pre, code, script, style, .highlight, form"):
        tag.decompose()
    return [line.strip() for line in main.get_text("\n").splitlines() if RAW_MARKUP.search(line.strip())]


@pytest.mark.parametrize(
    "html",
    [
        "<article><p>.. py:class:: CutMix(alpha=1.0)</p></article>",
        "<article><p>:param alpha: the concentration</p></article>",
        "<article><p>See :func:`cutmix_batch`.</p></article>",
        "<article><p>```{autoclass} algorithms.CutMix</p></article>",
        "<article><p>:::{dropdown} Details</p></article>",
    ],
)
def test_raw_markup_is_found_in_a_page(html):
    assert raw_markup(bs4.BeautifulSoup(html, "html.parser"))


def test_markup_inside_code_is_not_raw_markup():
    html = "<article><pre>.. autoclass:: x</pre><p>Write <code>```{card-facts} tldr</code> in a card.</p></article>"
    assert raw_markup(bs4.BeautifulSoup(html, "html.parser")) == []


def test_no_page_shows_raw_markup(real_site):
    offenders = {}
    for path in sorted(real_site.rglob("*.html")):
        if "_static" in path.parts or path.name in ("search.html", "genindex.html"):
            continue
        found = raw_markup(soup(path))
        if found:
            offenders[str(path.relative_to(real_site))] = found[:3]
    assert offenders == {}


def test_every_cards_api_reference_renders_as_documentation(real_site):
    from algorithms.metadata import load_all_metadata

    for key, record in load_all_metadata().items():
        page = soup(real_site / "method_cards" / f"{key}.html")
        section = page.select_one("section#api-reference")
        assert section is not None, key
        documented = {dl.select_one("dt")["id"] for dl in section.select("dl.py") if dl.select_one("dt[id]")}
        if record.kind == "method":
            assert {f"algorithms.{record.class_name}", f"algorithms.functional.{record.functional}"} <= documented, key
        else:
            assert section.select("dl.py.class"), key
        assert section.select("dl.field-list, dd p"), key  # parameters and descriptions, not raw text


def test_card_templates_are_not_pages(real_site):
    """A card kind's sections exist once, in its Jinja template, which is no page of the site."""
    assert not (real_site / "templates").exists()


@pytest.mark.slow
def test_sidebar_stays_small_when_a_section_has_many_cards(tmp_path):
    """Above the card limit a sidebar shows the section's non-card pages plus the current card only
    (the whole list in every page made furo's build time grow with the square of the card count)."""
    from docs_support import write_metadata

    meta = write_metadata(tmp_path / "metadata", SYNTHETIC)
    src = write_source_tree(tmp_path / "source", SYNTHETIC)
    result = sphinx_build(
        src, tmp_path / "html", "-D", f"methods_metadata_root={meta}", "-D", "methods_nav_card_limit=2"
    )
    assert result.returncode == 0, result.stderr[-4000:]
    for key, entry in SYNTHETIC.items():
        page = soup(tmp_path / "html" / "method_cards" / f"{key}.html")
        captions = {c.get_text(): c.find_next_sibling("ul") for c in page.select(".sidebar-tree p.caption")}
        methods_section = captions["Methods Library"]
        links = [a["href"] for a in methods_section.select("a")]
        pages_of_the_library = [
            "methods_overview.html",
            "../tables/algorithms_table.html",
            "../tables/composability.html",
            "../measurements.html",
        ]
        # a best practice's card is in its own section (grouped by kind), which holds 1 card: under the limit
        practice = entry["kind"] == "best_practice"
        assert links == pages_of_the_library + ([] if practice else ["#"])
        own = captions["Best Practices"] if practice else methods_section
        assert own.select_one("li.current a").get_text() == f"Card {key}"
    # past the limit a card is reached from the home page through the overview and the table, which list them all
    index = soup(tmp_path / "html" / "index.html")
    assert {"method_cards/methods_overview.html", "tables/algorithms_table.html"} <= {
        a["href"].split("?")[0] for a in index.select("article a")
    }
    overview = soup(tmp_path / "html" / "method_cards" / "methods_overview.html")
    assert {a["href"] for a in overview.select(".ml-overview-item a.sd-stretched-link")} == {
        f"{key}.html" for key in SYNTHETIC
    }


@pytest.mark.slow
def test_bad_metadata_fails_the_build_with_one_line_per_problem(tmp_path):
    from docs_support import method_entry, write_metadata

    broken = {**method_entry("Broken"), "domains": ["space"], "link": "http://insecure.invalid"}
    meta = write_metadata(tmp_path / "metadata", {"broken": broken})
    src = write_source_tree(tmp_path / "source", ["broken"])
    result = sphinx_build(src, tmp_path / "html", "-D", f"methods_metadata_root={meta}")
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if "broken/metadata.json" in line]
    assert len(errors) == 2
    assert any("/broken/domains/0" in e for e in errors) and any("/broken/link" in e for e in errors)
    assert not (src / "method_cards" / "methods_overview.md").exists()  # nothing generated from bad input
