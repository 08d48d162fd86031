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
  kept over :data:`SELECTION_DRAWS` calls.

A figure carries the hash of its inputs (the figure entry, the method's source, the drawing code,
the versions of torch, matplotlib and scikit-image) as its ``dc:identifier``; an unchanged figure
in the output folder is reused, not drawn again. Figures are build outputs and are never
committed. A figure that cannot be drawn is one problem line naming the method and the reason.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import inspect
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .docsgen import SVG_STYLE, Content, Site, pyplot, reuse_or_draw, svg_text

__all__ = ["FIGURES", "PHOTOS", "FigureError", "figure_call", "figure_caption", "figure_path", "render_figures",
           "selection_batch", "selection_counts"]

FIGURES = Path("tables") / "figures"
#: The photographs a batch figure shows: scikit-image's bundled sample images, by function name.
PHOTOS = ("astronaut", "chelsea", "coffee", "rocket")
PHOTO_SIZE = 128
TARGET_CLASSES = 10
#: A selection figure's synthetic batch: examples, classes, and the calls its keep frequency counts.
SELECTION_EXAMPLES = 64
SELECTION_CLASSES = 4
SELECTION_DRAWS = 500


class FigureError(ValueError):
    """A figure that cannot be drawn: one line naming the method and the reason."""


def figure_path(key: str) -> Path:
    return FIGURES / f"{key}.svg"


def _arguments(arguments: Mapping[str, Any]) -> str:
    return ", ".join(f"{name}={value!r}" for name, value in arguments.items())


def figure_call(record: Any) -> str:
    """The exact call a figure shows, as a reader would type it (the caption quotes it)."""
    spec = record.raw["figure"]
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
    kind = record.raw["figure"]["kind"]
    if kind == "targets":
        return f"A one-hot label over 10 classes and the target that {call} makes of it."
    if kind == "selection":
        return (f"{SELECTION_EXAMPLES} synthetic examples (`inputs`, random 3 x 8 x 8 images with `labels` of "
                f"{SELECTION_CLASSES} classes) scored by a small seeded convolutional classifier (`model`), by "
                f"loss rank: the examples {call} keeps are filled, and the line is how often each rank is kept "
                f"over {SELECTION_DRAWS} calls continuing the same generator; drawn by every docs build.")
    return (f"The photographs {', '.join(PHOTOS)} of scikit-image's sample data, before (top) and after (bottom) "
            f"{call}, drawn by every docs build.")


def _functional(record: Any) -> Callable[..., Any]:
    """The functional form, from the method's own folder (as ``algorithms.functional`` exports it)."""
    import importlib

    return getattr(importlib.import_module(f"algorithms.{record.key}"), record.functional)


def _parameters(record: Any) -> list[str]:
    return list(inspect.signature(_functional(record)).parameters)


def _takes_target(record: Any) -> bool:
    return len(_parameters(record)) > 1 and _parameters(record)[1] in ("target", "targets", "labels")


def _takes_generator(record: Any) -> bool:
    return "generator" in _parameters(record)


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
    inputs = {"figure": record.raw["figure"], "key": record.key, "functional": record.functional,
              "source": inspect.getsource(module) if module else None, "drawing": _DRAWING_CODE,
              "versions": _versions()}
    return "sha256:" + hashlib.sha256(json.dumps(inputs, sort_keys=True, default=str).encode()).hexdigest()


def photos() -> Any:
    """The sample photographs as a float batch ``(N, 3, PHOTO_SIZE, PHOTO_SIZE)`` in ``[0, 1]``: each
    centre-cropped to a square and resized."""
    try:
        import skimage.data
    except ImportError:
        raise FigureError("scikit-image is not installed: the method figures draw its sample photographs — "
                          "install the project's [docs] extra (pip install -e '.[docs]')") from None
    import torch
    import torch.nn.functional as F

    batch = []
    for name in PHOTOS:
        image = torch.from_numpy(getattr(skimage.data, name)().copy()).permute(2, 0, 1).float() / 255
        side = min(image.shape[1:])
        top, left = (image.shape[1] - side) // 2, (image.shape[2] - side) // 2
        square = image[:, top:top + side, left:left + side]
        batch.append(F.interpolate(square[None], size=(PHOTO_SIZE, PHOTO_SIZE), mode="bilinear",
                                   antialias=True, align_corners=False)[0])
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
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                                    torch.nn.Flatten(), torch.nn.Linear(8, SELECTION_CLASSES))
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=g) * 0.5)  # losses from about 0.1 to 6
    return inputs, labels, model.eval()


def selection_counts(form: Callable[..., Any], arguments: Mapping[str, Any], seed: int,
                     draws: int = SELECTION_DRAWS) -> tuple[Any, Any, Any]:
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
    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    ax.scatter(ranks[~kept.numpy()], losses[~kept].numpy(), s=18, facecolors="none", edgecolors="#8c8c8c",
               label="not kept")
    ax.scatter(ranks[kept.numpy()], losses[kept].numpy(), s=18, color="#dd8452",
               label=f"kept by {record.functional} ({int(kept.sum())} of {len(losses)})")
    ax.set_xlabel("loss rank (0 = lowest loss)")
    ax.set_ylabel("example's loss")
    ax.grid(alpha=0.3)
    frequency = ax.twinx()
    frequency.plot(ranks, (counts.double() / SELECTION_DRAWS).numpy(), color="#4c72b0",
                   label=f"fraction of {SELECTION_DRAWS} calls keeping the rank")
    frequency.set_ylim(0, 1.05)
    frequency.set_ylabel("fraction kept")
    handles = ax.get_legend_handles_labels()[0] + frequency.get_legend_handles_labels()[0]
    ax.legend(handles=handles, frameon=False, loc="upper left")
    return fig


def _draw(record: Any, key: str) -> str:
    """Run the call and draw it as one SVG (text kept as text, no date)."""
    import torch

    plt = pyplot("the method figures need it", FigureError)

    spec = record.raw["figure"]
    form = _functional(record)
    generator = {"generator": torch.Generator().manual_seed(spec["seed"])} if _takes_generator(record) else {}
    with plt.rc_context(SVG_STYLE):
        if spec["kind"] == "batch":
            before = photos()
            labels = torch.arange(before.shape[0])
            args = (before, labels) if _takes_target(record) else (before,)
            after = form(*args, **spec["arguments"], **generator)
            after = after[0] if isinstance(after, tuple) else after
            fig, axes = plt.subplots(2, before.shape[0], figsize=(1.6 * before.shape[0], 3.5))
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
            fig, ax = plt.subplots(figsize=(6, 2.6))
            classes = torch.arange(TARGET_CLASSES).numpy()
            ax.bar(classes - 0.2, one_hot.numpy(), width=0.4, label="one-hot label", color="#4c72b0")
            ax.bar(classes + 0.2, target.numpy(), width=0.4, label=f"after {record.functional}", color="#dd8452")
            ax.set_xticks(classes)
            ax.set_xlabel("class")
            ax.set_ylabel("target probability")
            ax.legend(frameon=False)
            ax.grid(axis="y", alpha=0.3)
        elif spec["kind"] == "selection":
            fig = _draw_selection(plt, record, spec)
        else:
            raise FigureError(f"figure kind {spec['kind']!r} is not known — use batch, targets or selection")
        fig.tight_layout()
        return svg_text(plt, fig, key)


# A change to the drawing redraws.
_DRAWING_CODE = "".join(inspect.getsource(f) for f in (_draw, photos, selection_batch, selection_counts,
                                                        _draw_selection))


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
            raise FigureError(f"{record.key}: figure: {record.functional} failed on the sample photographs: "
                              f"{type(exc).__name__}: {exc} — fix the figure's arguments in "
                              f"algorithms/{record.key}/metadata.json or the method") from None
    return outputs
