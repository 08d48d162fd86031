"""The figure of every method that declares one, drawn by running its functional form.

A method declares its figure in its ``metadata.json`` (no shared list names it)::

    "figure": {"kind": "batch", "arguments": {"alpha": 1.0}, "seed": 0,
               "alt": "Four photographs before and after CutMix ..."}

The docs build (:func:`render_figures`, one of :data:`methods_tools.pages.GENERATORS`) calls the
method's functional form from ``algorithms.functional`` with those keyword arguments and a torch
generator seeded with ``seed``, on real photographs that ship inside scikit-image
(:data:`PHOTOS`; nothing is downloaded), and draws the result with matplotlib into
``tables/figures/<key>.svg``, which the card's generated ``figure`` region shows with a caption
that gives the exact call. The kinds:

- ``batch``: a batch of the photographs before (top row) and after (bottom row) the call, for
  methods that change inputs (CutMix, MixUp, CutOut, ...);
- ``targets``: the target distribution the call makes from a one-hot label, beside that label,
  for methods that change targets (label smoothing);
- ``selection``: for methods that keep part of a batch by its loss, with the form
  ``f(input, target, model, loss_fun, ...) -> (input, target)`` (Selective Backprop): a seeded
  synthetic batch (:func:`selection_batch`) scored by a small seeded classifier, each example's
  loss against its loss rank, the examples the call keeps highlighted, and how often each rank is
  kept over :data:`SELECTION_DRAWS` calls;
- ``surgery``: for methods that change a model, ``f(model, **arguments)``: a fresh reference model
  (``model``, a builder of ``algorithms.models``, built under ``seed``) before (above) and after
  (below) the call, as the structure of its submodule ``module``, with how many modules of the
  whole model changed class or went;
- ``plot``: the function ``data`` of :mod:`.figure_data` (the docs tooling, not the runtime
  package), called with the arguments (and the seeded generator, if it takes one), returns what
  to draw: ``{"type": "image", "values": 2-D}``, ``{"type": "lines", "x": [...], "series":
  {label: [...]}}`` or ``{"type": "bars", "labels": [...], "series": {label: [...]}}``, each with
  optional ``title``, ``xlabel`` and ``ylabel``: a method's filter, schedule or bias matrix,
  computed by running the method's own code.

A figure carries the hash of its inputs (the figure entry, the method's source, a plot's data
code, the drawing code, the versions of torch, matplotlib and scikit-image) as its
``dc:identifier``; an unchanged figure in the output folder is reused, not drawn again. Figures
are build outputs and are never committed. A figure that cannot be drawn is one problem line
naming the method and the reason.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import inspect
import json
from collections.abc import Callable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

from .docsgen import SVG_STYLE, Content, Site, pyplot, reuse_or_draw, svg_text, text_measure, wrap_text

__all__ = [
    "FIGURES",
    "PHOTOS",
    "FigureError",
    "figure_call",
    "figure_caption",
    "figure_path",
    "plot_data",
    "render_figures",
    "selection_batch",
    "selection_counts",
    "surgery_views",
]

FIGURES = Path("tables") / "figures"
#: The photographs a batch figure shows: scikit-image's bundled sample images, by function name.
PHOTOS = ("astronaut", "chelsea", "coffee", "rocket")
PHOTO_SIZE = 128
TARGET_CLASSES = 10
#: A selection figure's synthetic batch: examples, classes, and the calls its keep frequency counts.
SELECTION_EXAMPLES = 64
SELECTION_CLASSES = 4
SELECTION_DRAWS = 500
#: Every figure is at most 4.3 inches wide with text of at least 10 pt (9.5 pt inside a heat map's
#: cells), as the effects and narrow training charts: a phone's 358 px column shows it at about
#: 11 px or more, and a desktop at its natural size.
WIDTH, FONT_PT, CELL_PT = 4.3, 10, 9.5
#: A surgery figure's module structure, in characters per line (its 10 pt monospace fills the width).
STRUCTURE_WIDTH = 48


class FigureError(ValueError):
    """A figure that cannot be drawn: one line naming the method and the reason."""


def figure_path(key: str) -> Path:
    return FIGURES / f"{key}.svg"


def _arguments(arguments: Mapping[str, Any]) -> str:
    return ", ".join(f"{name}={value!r}" for name, value in arguments.items())


def figure_call(record: Any) -> str:
    """The exact call a figure shows, as a reader would type it (the caption quotes it)."""
    spec = record.raw["figure"]
    if spec["kind"] == "plot":
        data = _data_function(record)
        extra = _arguments(spec["arguments"])
        generator = (
            f"generator=torch.Generator().manual_seed({spec['seed']})"
            if "generator" in inspect.signature(data).parameters
            else ""
        )
        return f"{data.__module__}.{data.__name__}({', '.join(p for p in (extra, generator) if p)})"
    if spec["kind"] == "surgery":
        return f"cf.{record.functional}({', '.join(p for p in ('model', _arguments(spec['arguments'])) if p)})"
    inputs = "photos, labels" if _takes_target(record) else "photos"
    if spec["kind"] == "targets":
        inputs = "logits, label"
    elif spec["kind"] == "selection":
        inputs = "inputs, labels, model, F.cross_entropy"
    extra = _arguments(spec["arguments"])
    generator = f"generator=torch.Generator().manual_seed({spec['seed']})" if _takes_generator(record) else ""
    return f"cf.{record.functional}({', '.join(p for p in (inputs, extra, generator) if p)})"


def figure_caption(record: Any) -> str:
    """The caption of a method's figure, in Markdown: what it shows and the exact call that made it."""
    from .markup import md_code

    call = md_code(figure_call(record))
    spec = record.raw["figure"]
    kind = spec["kind"]
    if kind == "surgery":
        return (
            f"The submodule `{spec['module']}` of a fresh `{spec['model']}` (`algorithms.models."
            f"{spec['model']}`) before (above) and after (below) {call}; the count is of the modules "
            f"of the whole model that changed class; drawn by every docs build."
        )
    if kind == "plot":
        return f"What {call} computes, drawn by every docs build."
    if kind == "targets":
        return f"A one-hot label over 10 classes and the target that {call} makes of it."
    if kind == "selection":
        return (
            f"{SELECTION_EXAMPLES} synthetic examples (`inputs`, random 3 x 8 x 8 images with `labels` of "
            f"{SELECTION_CLASSES} classes) scored by a small seeded convolutional classifier (`model`), by "
            f"loss rank: the examples {call} keeps are filled, and the line is how often each rank is kept "
            f"over {SELECTION_DRAWS} calls continuing the same generator; drawn by every docs build."
        )
    return (
        f"The photographs {', '.join(PHOTOS)} of scikit-image's sample data, before (top) and after (bottom) "
        f"{call}, drawn by every docs build."
    )


def _functional(record: Any) -> Callable[..., Any]:
    """The functional form, from the method's own folder (as ``algorithms.functional`` exports it)."""
    import importlib

    return getattr(importlib.import_module(f"algorithms.{record.key}"), record.functional)


def _data_function(record: Any) -> Callable[..., Any]:
    """A plot figure's ``data`` function, from :mod:`.figure_data`."""
    from . import figure_data

    name = record.raw["figure"]["data"]
    data = getattr(figure_data, name, None)
    if not callable(data):
        raise FigureError(
            f"the plot's data function {name!r} is not in {figure_data.__name__} — define it there or "
            f"fix 'data' in algorithms/{record.key}/metadata.json"
        )
    return data


def _reference_model(name: str, seed: int) -> Any:
    """A fresh reference model ``algorithms.models.<name>`` with 10 outputs, built under ``seed``."""
    import torch

    import algorithms.models as models

    builder = getattr(models, name, None)
    if not callable(builder):
        builders = (n for n in models.__all__ if n[0].islower() and n not in ("get_model", "lm_loss"))
        raise FigureError(f"model {name!r} is not a builder of algorithms.models — use one of {', '.join(builders)}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return builder(10)


def _structure(module: Any, width: int = STRUCTURE_WIDTH) -> list[str]:
    """The module's ``repr`` in lines of at most ``width`` characters: a longer line goes on under
    its own indent, four spaces further in (nothing is cut)."""
    import textwrap

    lines = []
    for line in repr(module).splitlines():
        indent = " " * (len(line) - len(line.lstrip()))
        lines += textwrap.wrap(
            line, width, initial_indent="", subsequent_indent=indent + "    ", drop_whitespace=True
        ) or [line]
    return lines


def surgery_views(record: Any) -> tuple[list[str], list[str], int]:
    """What a surgery figure shows: the structure of the figure's submodule before and after the
    call, and how many modules of the whole model changed class or went."""
    import copy

    spec = record.raw["figure"]
    model = _reference_model(spec["model"], spec["seed"])
    before = copy.deepcopy(model)
    result = _functional(record)(model, **spec["arguments"])
    after = result if hasattr(result, "named_modules") else model
    try:
        shown_before, shown_after = before.get_submodule(spec["module"]), after.get_submodule(spec["module"])
    except AttributeError:
        raise FigureError(
            f"module {spec['module']!r} is not a submodule of {spec['model']} — fix 'module' in "
            f"algorithms/{record.key}/metadata.json"
        ) from None
    classes = {name: type(m) for name, m in after.named_modules()}
    changed = sum(classes.get(name) is not type(m) for name, m in before.named_modules() if name)
    return _structure(shown_before), _structure(shown_after), changed


def plot_data(record: Any) -> Mapping[str, Any]:
    """What a plot figure's ``data`` function returns for the figure's arguments, checked."""
    import torch

    spec = record.raw["figure"]
    data = _data_function(record)
    extra = (
        {"generator": torch.Generator().manual_seed(spec["seed"])}
        if "generator" in inspect.signature(data).parameters
        else {}
    )
    out = data(**spec["arguments"], **extra)
    kinds = {"image": ("values",), "lines": ("x", "series"), "bars": ("labels", "series")}
    if not isinstance(out, Mapping) or out.get("type") not in kinds:
        raise FigureError(
            f"{data.__name__} returned {type(out).__name__}, not a dict whose 'type' is one of {', '.join(kinds)}"
        )
    missing = [k for k in kinds[out["type"]] if k not in out]
    if missing:
        raise FigureError(f"{data.__name__}: a {out['type']} plot needs {', '.join(map(repr, missing))}")
    return out


def _values(values: Any) -> Any:
    import torch

    return torch.as_tensor(values, dtype=torch.float64).detach().cpu().numpy()


def _draw_plot(plt: Any, record: Any) -> Any:
    out = plot_data(record)
    kind = out["type"]
    if kind == "image":
        values = _values(out["values"])
        if values.ndim != 2:
            raise FigureError(f"an image plot needs 2-D values, got shape {tuple(values.shape)}")
        fig, ax = plt.subplots(figsize=(WIDTH, 3.7))
        shown = ax.imshow(values, cmap="viridis", interpolation="nearest")
        fig.colorbar(shown, ax=ax)
        if values.size <= 64:  # small matrices carry their numbers
            for i in range(values.shape[0]):
                for j in range(values.shape[1]):
                    ax.text(
                        j,
                        i,
                        f"{values[i, j]:.3g}",
                        ha="center",
                        va="center",
                        fontsize=CELL_PT,
                        color="white" if values[i, j] < values.mean() else "black",
                    )
    else:
        series = {str(k): _values(v) for k, v in out["series"].items()}
        fig, ax = plt.subplots(figsize=(WIDTH, 3.4))
        if kind == "lines":
            x = _values(out["x"])
            for label, y in series.items():
                ax.plot(x, y, label=label)
        else:
            labels = [str(label) for label in out["labels"]]
            width = 0.8 / max(len(series), 1)
            for i, (label, y) in enumerate(series.items()):
                ax.bar(
                    [p + (i - (len(series) - 1) / 2) * width for p in range(len(labels))], y, width=width, label=label
                )
            ax.set_xticks(
                range(len(labels)),
                labels,
                rotation=45 if len(labels) > 8 else 0,
                ha="right" if len(labels) > 8 else "center",
            )
        if len(series) > 1:  # above the axes: at this width a legend inside covers the data
            ax.legend(frameon=False, loc="lower left", bbox_to_anchor=(0, 1.02), borderaxespad=0)
        ax.grid(alpha=0.3)
    _labels(fig, ax, out.get("title", ""), out.get("xlabel", ""), out.get("ylabel", ""))
    return fig


def _labels(fig: Any, ax: Any, title: str, xlabel: str, ylabel: str) -> None:
    """The title (the figure's, over everything, so that it is never cut off at the side) and the
    axis labels, each wrapped to the width its side of the figure gives it."""
    measure = text_measure(fig)
    if title:
        fig.suptitle("\n".join(wrap_text(title, WIDTH - 0.2, measure)), fontsize=FONT_PT)
    ax.set_xlabel("\n".join(wrap_text(xlabel, WIDTH - 0.8, measure)) if xlabel else "")
    ax.set_ylabel("\n".join(wrap_text(ylabel, fig.get_figheight() - 0.8, measure)) if ylabel else "")


def _draw_surgery(plt: Any, record: Any) -> Any:
    before, after, changed = surgery_views(record)
    # before above after, each as tall as its lines, so that the 10 pt monospace reads on a phone
    line = FONT_PT / 72 * 1.2
    heights = [0.35 + line * len(before), 0.35 + line * len(after)]
    fig, axes = plt.subplots(2, 1, figsize=(WIDTH, sum(heights) + 0.2), height_ratios=heights)
    for ax, title, text in ((axes[0], "before", before), (axes[1], f"after ({changed} modules changed class)", after)):
        ax.set_axis_off()
        ax.set_title(title, loc="left", fontsize=FONT_PT, fontweight="bold")
        # an SVG collapses leading spaces: the indents that show the nesting are no-break spaces
        shown = [line.replace(" ", "\u00a0", len(line) - len(line.lstrip(" "))) for line in text]
        ax.text(
            0, 1, "\n".join(shown), family="monospace", fontsize=FONT_PT, va="top", ha="left", transform=ax.transAxes
        )
    return fig


def _parameters(record: Any) -> list[str]:
    return list(inspect.signature(_functional(record)).parameters)


def _takes_target(record: Any) -> bool:
    return len(_parameters(record)) > 1 and _parameters(record)[1] in ("target", "targets", "labels")


def _takes_generator(record: Any) -> bool:
    return "generator" in _parameters(record)


@cache  # importlib.metadata scans every installed distribution: once per process, not per figure
def _versions() -> dict[str, str | None]:
    versions = {}
    for package in ("torch", "matplotlib", "scikit-image"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    return versions


def _key(record: Any) -> str:
    """The hash of everything the figure is drawn from."""
    module = inspect.getmodule(_functional(record))
    kind = record.raw["figure"]["kind"]
    models = None
    if kind == "surgery":  # the reference model's code is an input too
        import algorithms.models as reference

        models = [
            inspect.getsource(m)
            for m in sorted(
                {inspect.getmodule(getattr(reference, n)) for n in reference.__all__}, key=lambda m: m.__name__
            )
        ]
    inputs = {
        "figure": record.raw["figure"],
        "key": record.key,
        "functional": record.functional,
        "source": inspect.getsource(module) if module else None,
        "data": inspect.getsource(inspect.getmodule(_data_function(record))) if kind == "plot" else None,
        "drawing": _DRAWING_CODE,
        "models": models,
        "versions": _versions(),
    }
    return "sha256:" + hashlib.sha256(json.dumps(inputs, sort_keys=True, default=str).encode()).hexdigest()


def photos() -> Any:
    """The sample photographs as a float batch ``(N, 3, PHOTO_SIZE, PHOTO_SIZE)`` in ``[0, 1]``: each
    centre-cropped to a square and resized."""
    try:
        import skimage.data
    except ImportError:
        raise FigureError(
            "scikit-image is not installed: the method figures draw its sample photographs — "
            "install the project's [docs] extra (pip install -e '.[docs]')"
        ) from None
    import torch
    import torch.nn.functional as F

    batch = []
    for name in PHOTOS:
        image = torch.from_numpy(getattr(skimage.data, name)().copy()).permute(2, 0, 1).float() / 255
        side = min(image.shape[1:])
        top, left = (image.shape[1] - side) // 2, (image.shape[2] - side) // 2
        square = image[:, top : top + side, left : left + side]
        batch.append(
            F.interpolate(
                square[None], size=(PHOTO_SIZE, PHOTO_SIZE), mode="bilinear", antialias=True, align_corners=False
            )[0]
        )
    return torch.stack(batch).clamp_(0, 1)


def selection_batch() -> tuple[Any, Any, Any]:
    """``(inputs, labels, model)`` of a selection figure, the same at every call: random images
    ``(SELECTION_EXAMPLES, 3, 8, 8)``, labels of ``SELECTION_CLASSES`` classes, and a small
    convolutional classifier in eval mode whose weights are drawn from the same seeded generator
    (torch's global generator is not touched)."""
    import torch

    g = torch.Generator().manual_seed(0)
    inputs = torch.randn(SELECTION_EXAMPLES, 3, 8, 8, generator=g)
    labels = torch.randint(0, SELECTION_CLASSES, (SELECTION_EXAMPLES,), generator=g)
    with torch.random.fork_rng(devices=[]):  # the layers' default initialization draws from it
        model = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3),
            torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1),
            torch.nn.Flatten(),
            torch.nn.Linear(8, SELECTION_CLASSES),
        )
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=g) * 0.5)  # losses from about 0.1 to 6
    return inputs, labels, model.eval()


def selection_counts(
    form: Callable[..., Any], arguments: Mapping[str, Any], seed: int, draws: int = SELECTION_DRAWS
) -> tuple[Any, Any, Any]:
    """What a selection figure shows, in loss-rank order (rank 0 the lowest loss): each example's
    cross-entropy loss, whether the first call of ``form`` (the caption's) keeps it, and in how
    many of ``draws`` calls continuing that call's generator it is kept. An example is found among
    the kept rows by its input, which is unique in the random batch."""
    import torch
    import torch.nn.functional as F

    inputs, labels, model = selection_batch()
    with torch.no_grad():
        losses = F.cross_entropy(model(inputs), labels, reduction="none")
    order = torch.argsort(losses, stable=True)
    flat = inputs.flatten(1)
    generator = torch.Generator().manual_seed(seed)
    counts = torch.zeros(SELECTION_EXAMPLES, dtype=torch.long)
    first = None
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: one thread is many times faster on a busy machine
    try:
        for _ in range(draws):
            kept_inputs = form(inputs, labels, model, F.cross_entropy, **arguments, generator=generator)[0]
            matches = (kept_inputs.flatten(1)[:, None, :] == flat[None]).all(dim=2)  # (kept, examples)
            if not bool((matches.sum(dim=1) == 1).all()):
                raise FigureError("a kept row is not a row of the batch")
            kept = matches.any(dim=0)
            counts += kept
            first = kept if first is None else first
    finally:
        torch.set_num_threads(threads)
    return losses[order], first[order], counts[order]


def _draw_selection(plt: Any, record: Any, spec: Mapping[str, Any]) -> Any:
    """Loss against loss rank, the kept examples filled, and the keep frequency of each rank."""
    import torch

    if not _takes_generator(record):
        raise FigureError(f"{record.functional} takes no generator=: a selection figure needs seeded draws")
    losses, kept, counts = selection_counts(_functional(record), spec["arguments"], spec["seed"])
    ranks = torch.arange(len(losses)).numpy()
    fig, ax = plt.subplots(figsize=(WIDTH, 4.0))
    ax.scatter(
        ranks[~kept.numpy()], losses[~kept].numpy(), s=18, facecolors="none", edgecolors="#8c8c8c", label="not kept"
    )
    ax.scatter(
        ranks[kept.numpy()],
        losses[kept].numpy(),
        s=18,
        color="#dd8452",
        label=f"kept by {record.functional} ({int(kept.sum())} of {len(losses)})",
    )
    ax.set_xlabel("loss rank (0 = lowest loss)")
    ax.set_ylabel("example's loss")
    ax.grid(alpha=0.3)
    frequency = ax.twinx()
    frequency.plot(
        ranks,
        (counts.double() / SELECTION_DRAWS).numpy(),
        color="#4c72b0",
        label=f"fraction of {SELECTION_DRAWS} calls keeping the rank",
    )
    frequency.set_ylim(0, 1.05)
    frequency.set_ylabel("fraction kept")
    handles = ax.get_legend_handles_labels()[0] + frequency.get_legend_handles_labels()[0]
    # under the axes: at a phone's width the labels would cover the points
    ax.legend(handles=handles, frameon=False, loc="upper left", bbox_to_anchor=(-0.15, -0.2), borderaxespad=0)
    return fig


def _draw(record: Any, key: str) -> str:
    """Run the call and draw it as one SVG (text kept as text, no date)."""
    import torch

    plt = pyplot("the method figures need it", FigureError)

    spec = record.raw["figure"]
    form = _functional(record)
    generator = {"generator": torch.Generator().manual_seed(spec["seed"])} if _takes_generator(record) else {}
    with plt.rc_context({**SVG_STYLE, "font.size": FONT_PT}):
        if spec["kind"] == "batch":
            before = photos()
            labels = torch.arange(before.shape[0])
            args = (before, labels) if _takes_target(record) else (before,)
            after = form(*args, **spec["arguments"], **generator)
            after = after[0] if isinstance(after, tuple) else after
            side = (WIDTH - 0.5) / before.shape[0]  # each photograph's side, in inches
            fig, axes = plt.subplots(2, before.shape[0], figsize=(WIDTH, 2 * side + 0.3))
            for row, (title, images) in enumerate((("before", before), ("after", after))):
                for column, image in enumerate(images):
                    ax = axes[row][column]
                    ax.imshow(image.permute(1, 2, 0).clamp(0, 1).numpy(), interpolation="nearest")
                    ax.set_xticks([])
                    ax.set_yticks([])
                    if column == 0:
                        ax.set_ylabel(title)
        elif spec["kind"] == "targets":
            label = torch.tensor([TARGET_CLASSES // 2])
            logits = torch.zeros(1, TARGET_CLASSES)
            target = form(logits, label, **spec["arguments"], **generator)[0]
            one_hot = torch.nn.functional.one_hot(label, TARGET_CLASSES)[0].float()
            fig, ax = plt.subplots(figsize=(WIDTH, 2.9))
            classes = torch.arange(TARGET_CLASSES).numpy()
            ax.bar(classes - 0.2, one_hot.numpy(), width=0.4, label="one-hot label", color="#4c72b0")
            ax.bar(classes + 0.2, target.numpy(), width=0.4, label=f"after {record.functional}", color="#dd8452")
            ax.set_xticks(classes)
            ax.set_xlabel("class")
            ax.set_ylabel("target probability")
            ax.legend(frameon=False, loc="lower left", bbox_to_anchor=(0, 1.02), borderaxespad=0)  # above the axes
            ax.grid(axis="y", alpha=0.3)
        elif spec["kind"] == "selection":
            fig = _draw_selection(plt, record, spec)
        elif spec["kind"] == "surgery":
            fig = _draw_surgery(plt, record)
        elif spec["kind"] == "plot":
            fig = _draw_plot(plt, record)
        else:
            raise FigureError(
                f"figure kind {spec['kind']!r} is not known — use batch, targets, selection, surgery or plot"
            )
        fig.tight_layout()
        return svg_text(plt, fig, key)


# A change to the drawing redraws.
_DRAWING_CODE = "".join(
    inspect.getsource(f)
    for f in (
        _draw,
        photos,
        selection_batch,
        selection_counts,
        _draw_selection,
        surgery_views,
        _structure,
        _reference_model,
        plot_data,
        _draw_plot,
        _draw_surgery,
        _labels,
        wrap_text,
        text_measure,
    )
) + repr((WIDTH, FONT_PT, CELL_PT, STRUCTURE_WIDTH))


def _figure(record: Any, previous: Path) -> str:
    key = _key(record)
    return reuse_or_draw(previous, key, lambda: _draw(record, key))


def render_figures(site: Site) -> dict[Path, Content]:
    """One SVG per method whose metadata declares a figure."""
    outputs: dict[Path, Content] = {}
    for record in site.methods:
        if "figure" not in record.raw:
            continue
        path = figure_path(record.key)
        try:
            outputs[path] = _figure(record, site.out_dir / path)
        except FigureError as exc:
            raise FigureError(f"{record.key}: figure: {exc}") from None
        except Exception as exc:  # the method itself failed on the photographs
            raise FigureError(
                f"{record.key}: figure: {record.functional} failed on the figure's inputs: "
                f"{type(exc).__name__}: {exc} — fix the figure's arguments in "
                f"algorithms/{record.key}/metadata.json or the method"
            ) from None
    return outputs
