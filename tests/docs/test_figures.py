"""The method figures: drawn by running each method on real photographs, declared in metadata,
cached by their inputs, and failing the build with the method's name when they cannot be drawn."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from methods_tools import figures, pages
from methods_tools.cards import regions
from methods_tools.scaffold import render_card

import algorithms.functional as cf
from algorithms.metadata import PACKAGE_ROOT, load_all_metadata

pytest.importorskip("skimage", reason="scikit-image comes with the [docs] extra: the figures draw its photographs")
pytest.importorskip("matplotlib", reason="matplotlib comes with the [docs] extra")

RECORDS = load_all_metadata()
WITH_FIGURE = [r for r in RECORDS.values() if "figure" in r.raw]


def test_every_input_changing_method_declares_a_figure_of_its_batch():
    augmenting = {k for k, r in RECORDS.items() if r.kind == "method" and "augmentation" in r.tags}
    assert augmenting and augmenting <= {r.key for r in WITH_FIGURE if r.raw["figure"]["kind"] == "batch"}


def test_the_photographs_are_real_and_ship_with_the_package():
    photos = figures.photos()
    assert photos.shape == (len(figures.PHOTOS), 3, figures.PHOTO_SIZE, figures.PHOTO_SIZE)
    assert 0 <= float(photos.min()) and float(photos.max()) <= 1 and float(photos.std()) > 0.1


@pytest.mark.parametrize("record", WITH_FIGURE, ids=[r.key for r in WITH_FIGURE])
def test_the_caption_gives_the_exact_call_and_it_runs(record):
    """The card's caption quotes a call a reader can run as written, with the figure's seed."""
    region = regions(render_card("method", record.key))["figure"].body
    (call,) = re.findall(r"`(cf\.[^`]+)`", region)
    assert call == figures.figure_call(record)
    photos = figures.photos()
    namespace = {"cf": cf, "torch": torch, "photos": photos, "labels": torch.arange(photos.shape[0]),
                 "logits": torch.zeros(1, figures.TARGET_CLASSES), "label": torch.tensor([5])}
    first, second = eval(call, namespace), eval(call, namespace)  # noqa: S307 (the caption's own code)
    first = first[0] if isinstance(first, tuple) else first
    second = second[0] if isinstance(second, tuple) else second
    assert torch.equal(first, second)  # the seed in the caption makes it repeat
    if record.raw["figure"]["kind"] == "batch":
        assert first.shape == photos.shape and not torch.equal(first, photos)  # the method changed them


def test_figures_are_drawn_once_then_reused_while_their_inputs_are_unchanged(tmp_path, monkeypatch):
    generated = pages.generate(out_dir=tmp_path, generators=[figures.render_figures])
    assert generated.problems == []
    assert set(generated.outputs) == {figures.figure_path(r.key) for r in WITH_FIGURE}
    for path, svg in generated.outputs.items():
        assert svg.lstrip().startswith("<?xml") and "<dc:identifier>sha256:" in svg, path
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(svg)

    def never(*args, **kwargs):
        raise AssertionError("an unchanged figure was drawn again")

    monkeypatch.setattr(figures, "_draw", never)
    again = pages.generate(out_dir=tmp_path, generators=[figures.render_figures])
    assert again.problems == [] and again.outputs == generated.outputs


def test_a_figure_that_cannot_be_drawn_is_one_problem_naming_the_method(tmp_path):
    package = tmp_path / "algorithms"
    for record in RECORDS.values():
        target = package / record.path.relative_to(PACKAGE_ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(record.path.read_text())
    path = package / "cutout" / "metadata.json"
    data = json.loads(path.read_text())
    data["cutout"]["figure"]["arguments"] = {"length": 3.0}
    path.write_text(json.dumps(data))
    generated = pages.generate(out_dir=tmp_path / "out", metadata_root=package, generators=[figures.render_figures])
    assert generated.outputs == {}
    (line,) = generated.problems
    assert line.startswith("cutout: figure: cutout_batch failed on the sample photographs: ValueError: length=3.0")
    assert not (tmp_path / "out").exists()  # nothing written


def test_the_built_card_shows_its_figure_with_its_alt_text(real_site):
    bs4 = pytest.importorskip("bs4")
    for record in WITH_FIGURE:
        html = bs4.BeautifulSoup((real_site / "method_cards" / f"{record.key}.html").read_text("utf-8"),
                                 "html.parser")
        image = html.select_one("article figure img")
        assert image is not None, record.key
        assert image["src"].endswith(f"{record.key}.svg") and image["alt"] == record.raw["figure"]["alt"]
        assert (real_site / "method_cards" / Path(image["src"])).resolve().exists()
        assert figures.figure_call(record) in html.select_one("article figure figcaption").get_text()
