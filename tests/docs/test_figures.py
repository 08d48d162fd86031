"""The method figures: drawn by running each method on real photographs (or, for a method that
selects rows, on a seeded synthetic batch), declared in metadata, cached by their inputs, and
failing the build with the method's name when they cannot be drawn."""

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
SELECTION = [r for r in WITH_FIGURE if r.raw["figure"]["kind"] == "selection"]


def test_every_input_changing_method_declares_a_figure_of_its_batch():
    augmenting = {k for k, r in RECORDS.items() if r.kind == "method" and "augmentation" in r.tags}
    assert augmenting and augmenting <= {r.key for r in WITH_FIGURE if r.raw["figure"]["kind"] == "batch"}


def test_the_photographs_are_real_and_ship_with_the_package():
    photos = figures.photos()
    assert photos.shape == (len(figures.PHOTOS), 3, figures.PHOTO_SIZE, figures.PHOTO_SIZE)
    assert 0 <= float(photos.min()) and float(photos.max()) <= 1 and float(photos.std()) > 0.1


BATCH_LIKE = [r for r in WITH_FIGURE if r.raw["figure"]["kind"] in ("batch", "targets", "selection")]
SURGERY = [r for r in WITH_FIGURE if r.raw["figure"]["kind"] == "surgery"]
PLOT = [r for r in WITH_FIGURE if r.raw["figure"]["kind"] == "plot"]


@pytest.mark.parametrize("record", BATCH_LIKE, ids=[r.key for r in BATCH_LIKE])
def test_the_caption_gives_the_exact_call_and_it_runs(record):
    """The card's caption quotes a call a reader can run as written, with the figure's seed."""
    region = regions(render_card("method", record.key))["figure"].body
    (call,) = re.findall(r"`(cf\.[^`]+)`", region)
    assert call == figures.figure_call(record)
    photos = figures.photos()
    namespace = {
        "cf": cf,
        "torch": torch,
        "photos": photos,
        "labels": torch.arange(photos.shape[0]),
        "logits": torch.zeros(1, figures.TARGET_CLASSES),
        "label": torch.tensor([5]),
    }
    if record.raw["figure"]["kind"] == "selection":
        inputs, labels, model = figures.selection_batch()
        namespace.update(inputs=inputs, labels=labels, model=model, F=torch.nn.functional)
    first, second = eval(call, namespace), eval(call, namespace)  # noqa: S307 (the caption's own code)
    first = first[0] if isinstance(first, tuple) else first
    second = second[0] if isinstance(second, tuple) else second
    assert torch.equal(first, second)  # the seed in the caption makes it repeat
    if record.raw["figure"]["kind"] == "batch":
        assert first.shape[:2] == photos.shape[:2]  # the photographs, each still in colour
        assert first.shape != photos.shape or not torch.equal(first, photos)  # the method changed them (or their size)
    if record.raw["figure"]["kind"] == "selection":
        assert 0 < first.shape[0] < namespace["inputs"].shape[0]  # it kept some rows, not all


@pytest.mark.parametrize("record", SURGERY, ids=[r.key for r in SURGERY])
@pytest.mark.slow
def test_a_surgery_figure_shows_the_captions_call_changing_the_reference_model(record):
    """The caption's call, run here on the named reference model, changes the classes of as many
    modules as the figure says, and the shown submodule is there before and after."""
    spec = record.raw["figure"]
    region = regions(render_card("method", record.key))["figure"].body
    (call,) = re.findall(r"`(cf\.[^`]+)`", region)
    assert call == figures.figure_call(record) and f"`{spec['module']}`" in region and f"`{spec['model']}`" in region
    import algorithms.models

    torch.manual_seed(spec["seed"])
    model = getattr(algorithms.models, spec["model"])(10)
    before = {name: type(m) for name, m in model.named_modules()}
    result = eval(call, {"cf": cf, "torch": torch, "model": model})  # noqa: S307 (the caption's own code)
    after = {name: type(m) for name, m in (result if hasattr(result, "named_modules") else model).named_modules()}
    changed = sum(after.get(name) is not cls for name, cls in before.items() if name)
    shown_before, shown_after, figure_changed = figures.surgery_views(record)
    assert changed == figure_changed and changed > 0
    assert shown_before and shown_after and shown_before != shown_after


@pytest.mark.parametrize("record", PLOT, ids=[r.key for r in PLOT])
def test_a_plot_figure_draws_what_the_captions_call_returns(record):
    """The caption's call is a function of the docs tooling's figure_data, it repeats with the
    seed, and it returns a drawable dict."""
    region = regions(render_card("method", record.key))["figure"].body
    (call,) = re.findall(r"`(methods_tools\.[^`]+)`", region)
    assert call == figures.figure_call(record) and call.startswith("methods_tools.figure_data.")
    import methods_tools.figure_data

    namespace = {"torch": torch, "methods_tools": methods_tools}
    first = eval(call, namespace)  # noqa: S307 (the caption's own code)
    second = figures.plot_data(record)
    assert first.keys() == second.keys() and first["type"] in ("image", "lines", "bars")
    for key in ("values", "x", "series"):
        if key in first:
            assert repr(first[key]) == repr(second[key])  # the seed in the caption makes it repeat


def test_the_figure_kinds_surgery_and_plot_draw_from_the_methods_code(tmp_path, monkeypatch):
    """A synthetic surgery method (ReLU -> GELU) and a plot function: the surgery view counts the
    replaced modules of resnet20 from the model itself, and a bad plot return is one clear error."""
    import types

    from methods_tools import figure_data

    import algorithms.models
    from algorithms.surgery import replace_module_classes

    def apply_gelu(model):
        replace_module_classes(model, {torch.nn.ReLU: lambda m, i: torch.nn.GELU()})
        return model

    def data(n=3):
        return {"type": "lines", "x": list(range(n)), "series": {"y": [i * i for i in range(n)]}}

    def bad():
        return [1, 2]

    module = types.ModuleType("algorithms.fake_surgery.fake_surgery")
    module.apply_gelu = apply_gelu
    apply_gelu.__module__ = module.__name__
    monkeypatch.setitem(__import__("sys").modules, module.__name__, module)
    for f in (data, bad):  # a plot's data function lives in the docs tooling
        f.__module__ = figure_data.__name__
        monkeypatch.setattr(figure_data, f.__name__, f, raising=False)
    monkeypatch.setattr(figures, "_functional", lambda record: apply_gelu)
    relus = sum(isinstance(m, torch.nn.ReLU) for m in algorithms.models.resnet20(10).modules())
    record = types.SimpleNamespace(
        key="fake_surgery",
        functional="apply_gelu",
        raw={
            "figure": {
                "kind": "surgery",
                "model": "resnet20",
                "module": "layer1.0",
                "arguments": {},
                "seed": 0,
                "alt": "x",
            }
        },
    )
    before, after, changed = figures.surgery_views(record)
    assert changed == relus and any("ReLU" in line for line in before) and any("GELU" in line for line in after)
    assert figures.figure_call(record) == "cf.apply_gelu(model)"
    svg = figures._draw(record, "sha256:test")
    assert svg.lstrip().startswith("<") and "GELU" in svg and f"{relus} modules changed class" in svg
    record.raw["figure"] = {"kind": "plot", "data": "data", "arguments": {"n": 4}, "seed": 0, "alt": "x"}
    assert figures.plot_data(record)["series"]["y"] == [0, 1, 4, 9]
    assert figures.figure_call(record) == "methods_tools.figure_data.data(n=4)"
    assert "<svg" in figures._draw(record, "sha256:test")
    record.raw["figure"]["arguments"] = {}
    monkeypatch.setattr(figure_data, "data", lambda: {"type": "image", "values": [[0.0, 1.0], [2.0, 3.0]]})
    assert "<svg" in figures._draw(record, "sha256:test")
    monkeypatch.setattr(figure_data, "data", lambda: {"type": "bars", "labels": ["a", "b"], "series": {"s": [1, 2]}})
    assert "<svg" in figures._draw(record, "sha256:test")
    record.raw["figure"].update(data="bad", arguments={})
    with pytest.raises(figures.FigureError, match="returned list"):
        figures.plot_data(record)
    record.raw["figure"]["data"] = "missing"
    with pytest.raises(figures.FigureError, match="'missing' is not in"):
        figures.plot_data(record)


def test_the_selection_batch_is_the_same_at_every_call_and_leaves_torchs_generator_alone():
    state = torch.random.get_rng_state()
    first, second = figures.selection_batch(), figures.selection_batch()
    assert torch.equal(torch.random.get_rng_state(), state)
    assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1])
    assert torch.equal(first[2](first[0]), second[2](second[0])) and not first[2].training
    inputs, labels, _ = first
    assert (
        inputs.shape == (figures.SELECTION_EXAMPLES, 3, 8, 8)
        and len(set(map(tuple, inputs.flatten(1).tolist()))) == figures.SELECTION_EXAMPLES
    )  # unique rows: a kept row is found by its input
    assert set(labels.tolist()) == set(range(figures.SELECTION_CLASSES))


@pytest.mark.parametrize("record", SELECTION, ids=[r.key for r in SELECTION])
def test_a_selection_figure_shows_the_captions_call_and_how_often_each_rank_is_kept(record):
    """What the figure plots, against the caption's call run here: losses by rank from the lowest,
    the rows that call keeps, and keep counts over the further calls, most often at high ranks."""
    spec = record.raw["figure"]
    losses, kept, counts = figures.selection_counts(
        figures._functional(record), spec["arguments"], spec["seed"], draws=50
    )
    inputs, labels, model = figures.selection_batch()
    with torch.no_grad():
        by_rank = torch.nn.functional.cross_entropy(model(inputs), labels, reduction="none").sort(stable=True)
    assert torch.equal(losses, by_rank.values)
    kept_inputs = getattr(cf, record.functional)(
        inputs,
        labels,
        model,
        torch.nn.functional.cross_entropy,
        **spec["arguments"],
        generator=torch.Generator().manual_seed(spec["seed"]),
    )[0]
    kept_rows = {tuple(row) for row in kept_inputs.flatten(1).tolist()}
    assert kept.tolist() == [tuple(row) in kept_rows for row in inputs[by_rank.indices].flatten(1).tolist()]
    assert int(counts.sum()) == 50 * int(kept.sum()) and int(counts.max()) <= 50
    quarter = figures.SELECTION_EXAMPLES // 4
    assert int(counts[-quarter:].sum()) > 2 * int(counts[:quarter].sum())


def test_a_selection_figure_caption_says_what_it_shows_and_quotes_the_call():
    for record in SELECTION:
        caption = figures.figure_caption(record)
        assert f"`{figures.figure_call(record)}`" in caption and "photographs" not in caption
        assert f"{figures.SELECTION_EXAMPLES} synthetic examples" in caption
    for record in WITH_FIGURE:
        if record.raw["figure"]["kind"] != "selection":  # the other kinds' captions, as the cards show them
            region = regions(render_card("method", record.key))["figure"].body
            assert figures.figure_caption(record) in region


@pytest.mark.slow
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
    assert line.startswith("cutout: figure: cutout_batch failed on the figure's inputs: ValueError: length=3.0")
    assert not (tmp_path / "out").exists()  # nothing written


def test_the_built_card_shows_its_figure_with_its_alt_text(real_site):
    bs4 = pytest.importorskip("bs4")
    for record in WITH_FIGURE:
        html = bs4.BeautifulSoup((real_site / "method_cards" / f"{record.key}.html").read_text("utf-8"), "html.parser")
        image = html.select_one("article figure img")
        assert image is not None, record.key
        assert image["src"].endswith(f"{record.key}.svg") and image["alt"] == record.raw["figure"]["alt"]
        assert (real_site / "method_cards" / Path(image["src"])).resolve().exists()
        assert figures.figure_call(record) in html.select_one("article figure figcaption").get_text()
