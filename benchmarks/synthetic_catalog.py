"""A synthetic checkout of the Methods Library with N generated methods, for the scale benchmarks.

:func:`make_catalog` writes a tree shaped like this repository: the runtime package ``algorithms/``
with its real core, models, data sets, best practices and schemas but, instead of the real method
folders, N generated ones (each a functional form, an ``Algorithm`` class and ``metadata.json``
with a ``figure`` that the docs build draws by running the code); ``tools/``; ``docs/source/``
(configuration, extension, templates, the best-practice, data-set and model-family cards, and a
card per generated method rendered by the scaffold, its prompts replaced by prose with inline and
display math); ``results/`` (the real training results, and a composability matrix of the
generated methods in which every cell runs).

The tree's tools find everything relative to themselves (``methods_tools.REPO_ROOT``) and its
``docs/source/conf.py`` puts the tree first on ``sys.path``, so ``python tools/check_cards.py``
and ``sphinx-build docs/source ...`` run inside it exactly as in a checkout, on its methods.
Whatever needs the generated code imported (rendering the cards) runs in a subprocess whose
``sys.path`` starts with the tree (:func:`tree_python`).

Of the generated methods, every third has a ``batch`` figure (scikit-image's photographs before and
after the functional form, as CutMix's), the others a ``plot`` figure (a function the catalog adds
to its copy of ``methods_tools.figure_data``, as Gyro Dropout's is there). The copy's export tables
(``algorithms/__init__.py``, ``algorithms/functional.py``) name the generated methods. Domains go
round the schema's list, so the matrix's pairs (methods that share a domain) are spread over all of
them; every fourth method notes an interaction with an earlier one of its domain, which the matrix
shows.

    python benchmarks/synthetic_catalog.py /tmp/catalog --methods 30
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
PACKAGE = REPO_ROOT / "algorithms"
DOCS_SOURCE = REPO_ROOT / "docs" / "source"

DOMAINS = ("vision", "nlp", "speech", "tabular", "general")
TAGS = ("speedup", "regularization", "augmentation", "curriculum", "optimization", "memory")
#: What the tree's own docs build writes into its source (``.gitignore`` lists them in a checkout).
GENERATED_TOP = ("training_configurations.md",)


@dataclass(frozen=True)
class Catalog:
    """A synthetic checkout: its root and the keys of its generated methods."""

    root: Path
    keys: tuple[str, ...]

    @property
    def package(self) -> Path:
        return self.root / "algorithms"

    @property
    def docs_source(self) -> Path:
        return self.root / "docs" / "source"

    def card(self, key: str) -> Path:
        return self.docs_source / "method_cards" / f"{key}.md"


def method_key(i: int) -> str:
    return f"synthetic_{i:04d}"


def class_name(i: int) -> str:
    return f"Synthetic{i:04d}"


def functional_name(i: int) -> str:
    return f"synthetic_{i:04d}_batch"


METHOD_CODE = '''"""Synthetic Method {i:04d}: dims a random band of rows in every image (generated for benchmarks)."""

from __future__ import annotations

from typing import Any

import torch

from ..core.algorithm import Algorithm
from ..core.event import Event
from ..core.parameters import Parameters, Real
from ..core.state import State

__all__ = ["{cls}", "{fn}", "{data}"]

PARAMETERS = Parameters(
    strength=Real(low=0, high=1, note="How much the band is dimmed."),
    band=Real(low=0, high=1, low_open=True, note="The band's height as a fraction of the image's."),
)


def {fn}(input: torch.Tensor, strength: float = 0.5, band: float = {band},
        generator: torch.Generator | None = None) -> torch.Tensor:
    """Multiply a random band of rows of each image by ``1 - strength``.

    Args:
        input: a batch ``(N, C, H, W)``; not modified.
        strength: how much the band is dimmed, in ``[0, 1]``.
        band: the band's height as a fraction of the image's, in ``(0, 1]``.
        generator: torch generator for the bands' positions (default: torch's global one).

    Returns:
        A new tensor with the input's shape, dtype and device.
    """
    PARAMETERS.check(strength=strength, band=band)
    n, height = input.shape[0], input.shape[-2]
    rows = max(1, int(band * height))
    top = torch.randint(0, height - rows + 1, (n, 1), generator=generator)
    index = torch.arange(height)
    inside = (index >= top) & (index < top + rows)  # (N, H)
    scale = 1 - strength * inside.to(input.dtype)
    return input * scale.to(input.device)[:, None, :, None]


class {cls}(Algorithm):
    """Synthetic Method {i:04d} as a training-loop algorithm: after the data loader, :func:`{fn}`
    dims a random band of rows in each image of the batch.

    Args:
        strength: how much the band is dimmed, in ``[0, 1]``.
        band: the band's height as a fraction of the image's, in ``(0, 1]``.
        input_key: where the images are in the batch.
    """

    def __init__(self, strength: float = 0.5, band: float = {band}, input_key: int | str = 0):
        PARAMETERS.check(strength=strength, band=band)
        self.strength = strength
        self.band = band
        self.input_key = input_key

    def match(self, event: Event, state: State) -> bool:
        return event is Event.AFTER_DATALOADER

    def apply(self, event: Event, state: State, logger: Any | None = None) -> None:
        images = state.batch_get_item(self.input_key)
        state.batch_set_item(self.input_key, {fn}(images, self.strength, self.band,
                                                  generator=self.generator(state)))
'''

INIT_CODE = '''"""Synthetic Method {i:04d}: see :mod:`algorithms.{key}.{key}`."""

from .{key} import {cls}, {fn}

__all__ = ["{cls}", "{fn}"]
'''

# A method's plot figure draws a function of the docs tooling (methods_tools.figure_data).
DATA_CODE = '''

def {data}(steps: int = 40, strength: float = 0.5) -> dict[str, Any]:
    """Synthetic Method {i:04d}'s figure: the strength a run that ramps the dimming in over its first
    {ramp} % uses at each step."""
    t = torch.linspace(0, 1, steps)
    return {{"type": "lines", "x": t, "series": {{"strength": strength * (t / {ramp_fraction}).clamp(max=1)}},
            "xlabel": "fraction of training", "ylabel": "strength"}}
'''


def _band(i: int) -> float:
    return (1, 2, 3)[i % 3] / 8


def _names(i: int) -> dict[str, object]:
    ramp = 10 + i % 9 * 10
    return {
        "i": i,
        "key": method_key(i),
        "cls": class_name(i),
        "fn": functional_name(i),
        "data": f"synthetic_{i:04d}_schedule",
        "band": _band(i),
        "ramp": ramp,
        "ramp_fraction": ramp / 100,
    }


def figure_data_code(i: int) -> str:
    """The function of ``methods_tools.figure_data`` that generated method ``i``'s plot figure draws
    (every method but each third one, whose figure is a batch); empty for the others."""
    return "" if i % 3 == 0 else DATA_CODE.format(**_names(i))


def method_files(i: int) -> dict[str, str]:
    """``{file name: content}`` of generated method ``i``'s folder."""
    names = _names(i)
    key, cls, fn, data, ramp = (names[k] for k in ("key", "cls", "fn", "data", "ramp"))
    if i % 3 == 0:
        figure = {
            "kind": "batch",
            "arguments": {"strength": 0.75},
            "seed": i,
            "alt": "Four photographs before and after, each with one band of rows darkened.",
        }
    else:
        figure = {
            "kind": "plot",
            "data": data,
            "arguments": {"steps": 40, "strength": 0.5},
            "seed": 0,
            "alt": f"A line rising from 0 to 0.5 over the first {ramp} % of training, then flat.",
        }
    entry = {
        "name": f"Synthetic Method {i:04d}",
        "kind": "method",
        "class_name": cls,
        "functional": fn,
        "tldr": f"Dims a random band of rows in every training image; generated method number {i}.",
        "attribution": "Benchmark et al., 2026",
        "link": f"https://example.invalid/synthetic/{i:04d}",
        "domains": [DOMAINS[i % len(DOMAINS)]],
        "tags": [TAGS[i % len(TAGS)], TAGS[(i + 1) % len(TAGS)]],
        "summary": "Each image gets one band of rows, at a random height, multiplied by one minus the strength.",
        "use": "Image classification; it is generated for the scale benchmarks and trains nothing useful.",
        "figure": figure,
        "math_equivalent": False,
        "observable": ["changed_inputs"],
        "hyperparameters": {
            "strength": {"suggested": 0.5, "note": "Half the band's brightness."},
            "band": {"suggested": _band(i)},
        },
        "plumbing": ["input_key"],
    }
    if i >= len(DOMAINS) and i % 4 == 0:  # a known interaction with an earlier method of its domain
        entry["interactions"] = {method_key(i - len(DOMAINS)): "The order matters: the later one dims the band."}
    return {
        "__init__.py": INIT_CODE.format(**names),
        f"{key}.py": METHOD_CODE.format(**names),
        "metadata.json": json.dumps({"$schema": "../metadata.schema.json", key: entry}, indent=2) + "\n",
    }


def prose(i: int, paragraph: int) -> str:
    """A paragraph of an author's prose, with inline and display math, where the scaffold left a prompt."""
    return (
        f"Paragraph {paragraph} of generated method {i}: the band's brightness is multiplied by $1 - s$ "
        f"for a strength $s \\in [0, 1]$, and `strength=0.5` is the default.\n\n"
        f"$$\n\\tilde{{x}}_{{c,h,w}} = x_{{c,h,w}} \\, (1 - s \\, [h_0 \\le h < h_0 + b H])\n$$"
    )


_PROMPT = re.compile(r"<!-- TODO\(new_card\):.*?-->", re.DOTALL)
#: The prompt the scaffold writes as a comment inside the functional example's code.
_CODE_PROMPT = re.compile(r"# TODO\(new_card\):[^\n]*")


def fill_prompts(text: str, i: int) -> str:
    """The scaffold's card with every prompt replaced by prose (a code prompt by a comment)."""
    count = iter(range(1, 100))
    text = _PROMPT.sub(lambda m: prose(i, next(count)), text)
    return _CODE_PROMPT.sub(f"# generated method {i}: its effect is checked by the benchmark's own tests", text)


CHOOSING_PAGE = "choosing_methods.md"  # hand-written scenarios of the real methods


def copy_checkout(root: Path, *, methods: bool = True) -> Path:
    """Copy this checkout's package, tools, examples, docs source and results to ``root`` (which must not
    exist), without the pages a docs build generates; ``methods=False`` leaves out the method
    folders, their cards and the measurements of them (effects, composability matrix)."""
    root = Path(root)
    if root.exists():
        raise FileExistsError(f"{root}: exists — give a new folder")
    method_folders = {p.parent.name for p in PACKAGE.glob("*/metadata.json")}
    cache = shutil.ignore_patterns("__pycache__", "*.pyc")

    def package_ignore(folder: str, names: list[str]) -> set[str]:
        ignored = set(cache(folder, names))
        return ignored | (method_folders & set(names) if Path(folder) == PACKAGE and not methods else set())

    shutil.copytree(PACKAGE, root / "algorithms", ignore=package_ignore)
    shutil.copytree(REPO_ROOT / "tools", root / "tools", ignore=cache)
    # the "Use it in your own loop" page includes the runnable examples
    shutil.copytree(REPO_ROOT / "examples", root / "examples", ignore=cache)
    source = root / "docs" / "source"
    source.mkdir(parents=True)
    for path in DOCS_SOURCE.iterdir():
        if path.is_file() and path.name not in GENERATED_TOP:
            shutil.copy2(path, source / path.name)
    if not methods:  # its scenarios name the real methods: one page, with none
        (source / CHOOSING_PAGE).write_text(
            "# Choosing methods\n\nThis catalog's methods are synthetic.\n", encoding="utf-8"
        )
    for folder in ("_ext", "_static", "templates", "dataset_cards", "model_cards"):
        shutil.copytree(DOCS_SOURCE / folder, source / folder, ignore=cache)
    (source / "tables").mkdir()
    for template in (DOCS_SOURCE / "tables").glob("*.j2"):
        shutil.copy2(template, source / "tables" / template.name)
    (source / "method_cards").mkdir()
    practices = {p.name.removesuffix(".metadata.json") for p in (PACKAGE / "core").glob("*.metadata.json")}
    for card in (DOCS_SOURCE / "method_cards").glob("*.md"):
        # best practices keep their cards; the overview is generated
        if card.stem in practices or (methods and card.stem in method_folders):
            shutil.copy2(card, source / "method_cards" / card.name)
    (root / "results").mkdir()
    for path in (REPO_ROOT / "results").glob("*.json"):  # the training results the best practices show
        shutil.copy2(path, root / "results" / path.name)
    if methods:
        for folder in ("effects", "composability"):
            shutil.copytree(REPO_ROOT / "results" / folder, root / "results" / folder)
    return root


def tree_python(root: Path, code: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter whose ``sys.path`` starts with the tree and its tools
    (``sys.argv[1:]`` is ``args``); raise with its stderr when it fails."""
    prelude = f"import sys; sys.path[:0] = [{str(root)!r}, {str(root / 'tools')!r}]\n"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [sys.executable, "-c", prelude + code, *args],
        cwd=root,
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
    if out.returncode != 0:
        raise RuntimeError(f"in {root}: {out.stderr[-4000:]}")
    return out


# Run inside the tree: every generated card from the scaffold, and a matrix whose every cell runs.
_FINISH = r"""
import json, re, sys
from pathlib import Path
from algorithms.core.options import DISTRIBUTED
from algorithms.metadata import load_all_metadata
from methods_tools.files import write_atomic
from methods_tools.matrix import cell_note, plan_cells
from methods_tools.scaffold import card_source

root, fill = Path(sys.argv[1]), __import__("synthetic_catalog").fill_prompts
records = load_all_metadata(root / "algorithms")
for key, record in records.items():
    if key.startswith("synthetic_"):
        card = card_source("method", key, repo_root=root, package_root=root / "algorithms", record=record)
        write_atomic(root / "docs/source/method_cards" / f"{key}.md", fill(card, int(key.split("_")[1])))
cells = []
for cell in plan_cells(records, parallels=DISTRIBUTED):
    methods, note = list(cell.methods), cell_note(cell, records)
    cells.append({"kind": cell.kind, "methods": methods, "precision": cell.precision, "parallel": cell.parallel,
                  "outcome": "interaction" if note else "runs", "seen": [f"{m}.{records[m].observable[0]}"
                  for m in methods], "missing": [], "detail": None, "note": note, "wall_s": 0.1})
matrix = {"$schema": "../../algorithms/composability.schema.json", "schema_version": 1,
          "environment": {"hardware": "synthetic", "device_type": "cpu", "torch": "2.13.0+cpu", "python": "3.11",
                          "platform": "synthetic", "date": "2026-01-01T00:00:00Z", "deepspeed": "0.0.0"},
          "settings": {"steps": 6, "epochs": 3, "batch_size": 8, "image_size": 16, "nproc": 2, "seed": 0},
          "commands": ["python tools/composability_matrix.py --force"], "wall_s": 0.1 * len(cells), "cells": cells}
write_atomic(root / "results/composability/cpu-synthetic.json", json.dumps(matrix) + "\n")
"""


def _set_exports(path: Path, entries: list[tuple[str, str]]) -> None:
    """Replace the ``EXPORTS`` table of ``path`` (and its ``TYPE_CHECKING`` imports) by ``entries``,
    ``(name, module)`` pairs, in the modules' order."""
    entries = sorted(entries, key=lambda e: (e[1], e[0].lower()))
    table = "".join(f'    "{name}": "{module}",\n' for name, module in entries)
    imports = "".join(f"    from .{module} import {name} as {name}\n" for name, module in entries)
    text = path.read_text(encoding="utf-8")
    text = re.sub(r"(?m)^EXPORTS = \{\n(?:    .*\n)*\}\n", lambda _: "EXPORTS = {\n" + table + "}\n", text)
    text = re.sub(r"(?m)^if TYPE_CHECKING:\n(?:    .*\n)*", lambda _: "if TYPE_CHECKING:\n" + imports, text)
    path.write_text(text, encoding="utf-8")


def make_catalog(root: Path, n: int) -> Catalog:
    """Write a synthetic checkout of ``n`` generated methods at ``root`` (which must not exist)."""
    if n < 1:
        raise ValueError(f"n={n}: a catalog needs at least one method")
    root = copy_checkout(root, methods=False)
    keys = []
    for i in range(n):
        folder = root / "algorithms" / method_key(i)
        folder.mkdir()
        for name, content in method_files(i).items():
            (folder / name).write_text(content, encoding="utf-8")
        keys.append(method_key(i))
    with (root / "tools" / "methods_tools" / "figure_data.py").open("a", encoding="utf-8") as figure_data:
        figure_data.write("".join(figure_data_code(i) for i in range(n)))
    # The export tables name the generated methods, as the scaffold's lines would.
    shared = [("interpolate_targets", "targets")]
    _set_exports(root / "algorithms" / "__init__.py", [(class_name(i), method_key(i)) for i in range(n)])
    _set_exports(
        root / "algorithms" / "functional.py", [(functional_name(i), method_key(i)) for i in range(n)] + shared
    )
    tree_python(root, f"sys.path.append({str(Path(__file__).parent)!r})\n" + _FINISH, str(root))
    return Catalog(root, tuple(keys))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", type=Path, help="a new folder for the checkout")
    parser.add_argument("--methods", type=int, default=30, help="how many methods to generate (default 30)")
    args = parser.parse_args(argv)
    try:
        catalog = make_catalog(args.root, args.methods)
    except (FileExistsError, ValueError) as exc:
        parser.error(str(exc))
    print(f"{len(catalog.keys)} generated methods in {catalog.root}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
