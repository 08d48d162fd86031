"""The generated part of "Recipes" (``docs/source/recipes.md``, whose prose is written by hand and
pulls it in with ``{include}``), rendered at every build from :mod:`algorithms.recipes` and the
committed results:

- ``tables/recipes/recipes.md.inc`` (``recipes.md.inc.j2``): per published recipe, what it is for,
  its sourced figure (setting, hardware, source), its members with the published arguments (each
  linked to its card where the site has that card), the training settings around the stack, the
  members this library lacks, the composability matrix's outcome for the stack run together
  (``kind: recipe`` cells of ``results/composability/*.json``), and its measured effect against the
  baseline with intervals (the recipes workload's rows of ``results/effects/*.json``);
- ``tables/recipes/small_scale.md.inc``: what this project changes to run the stacks small
  (:data:`algorithms.recipes.SMALL_SCALE`, and the matrix's :data:`.matrix.RECIPE_CELL_CHANGES`).

A recipe without a matrix cell or a measurement says so ("not run yet"), never a blank.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from algorithms.recipes import RECIPES, SMALL_SCALE, SOURCE, Recipe

from .docsgen import Content, Site
from .effects_pages import PROCESS_MEMORY_LABEL, TENSOR_MEMORY_LABEL, quality_text, ratio_text
from .markup import literal

__all__ = ["PAGE", "PARTS", "MemberView", "RecipeView", "recipe_view", "render_recipes"]

PAGE = Path("recipes.md")  # written by hand: it includes the parts below
PARTS = Path("tables") / "recipes"
NOT_RUN = "not run yet"


@dataclass(frozen=True)
class MemberView:
    key: str
    name: str
    card: str | None  # the method card, linked where the site has it
    call: str  # ``EMA(half_life='100ba', update_interval='20ba')``: the published arguments
    here: str | None  # what this project changes at small scale, or None


@dataclass(frozen=True)
class Measured:
    """A recipe's row of an effects file, as the page words it."""

    file: str
    hardware: str
    date: str
    setting: str
    quality: str
    throughput: str
    memory: str
    memory_label: str  # torch's accounting where every pair has it, else the process's peak
    pairs: int
    baseline: str
    status: str | None  # None when measured; else why there is no effect ("did not act: ...")


@dataclass(frozen=True)
class RecipeView:
    recipe: Recipe
    members: tuple[MemberView, ...]
    training: str
    matrix: tuple[str, ...]  # one line per matrix file
    measured: tuple[Measured, ...]


def _card(site: Site, key: str) -> str | None:
    """The method card of ``key`` where the site has it (its metadata and its card file)."""
    known = {r.key for r in site.methods}
    return key if key in known and (site.source_dir / "method_cards" / f"{key}.md").is_file() else None


def _call(name: str, hparams: Mapping[str, Any]) -> str:
    return f"{name}({', '.join(f'{k}={literal(v)}' for k, v in hparams.items())})"


def _names(site: Site) -> dict[str, tuple[str, str]]:
    """Each method key's display name and class name."""
    return {r.key: (r.name, r.class_name) for r in site.methods}


def matrix_lines(recipe: Recipe, matrices: Sequence[tuple[Path, Mapping[str, Any]]]) -> tuple[str, ...]:
    """One line per matrix file: the outcome of the recipe's stack run together, and where."""
    from .matrix import RECIPE_KIND

    lines = []
    for path, document in matrices:
        cell = next((c for c in document["cells"] if c["kind"] == RECIPE_KIND and c.get("recipe") == recipe.key), None)
        where = f"{document['environment']['hardware']}, results/composability/{path.name}"
        if cell is None:
            lines.append(f"{NOT_RUN} ({where})")
            continue
        outcome = {"runs": "✓ runs", "refused": "refused", "interaction": "⚠ interaction", "fails": "✗ fails"}[
            cell["outcome"]
        ]
        seen = (
            f"every member's effect seen ({len(cell['seen'])} effects)"
            if not cell["missing"]
            else (f"not seen: {', '.join(cell['missing'])}")
        )
        checks = (
            f", checks passed: {', '.join(cell['checks'])}" if cell.get("checks") and cell["outcome"] == "runs" else ""
        )
        detail = f"; {cell['detail']}" if cell["detail"] else ""
        lines.append(f"{outcome}: {seen}{checks}{detail} ({cell['precision']}, one process; {where})")
    return tuple(lines)


def measured_rows(recipe: Recipe, effects: Sequence[tuple[Path, Mapping[str, Any]]]) -> tuple[Measured, ...]:
    """The recipe's rows of the effects files that measure recipes (their workload's ``recipes``)."""
    from .measure import WORKLOADS

    rows = []
    for path, document in effects:
        settings = document["settings"]
        workload = WORKLOADS.get(settings["workload"])
        if workload is None or not workload.recipes:
            continue
        entry = next((e for e in document["summary"] if e["method"] == recipe.key), None)
        base = next((e for e in document["summary"] if e["status"] == "baseline" and e["model"] is None), None)
        if entry is None:
            continue
        env = document["environment"]
        size = settings["image_size"]
        setting = (
            f"{settings['model']} on {settings['data']} at {size}x{size} px, {settings['epochs']} epochs of batch "
            f"{settings['batch_size']}, {settings['precision']}, one process"
        )
        b = base["baseline"] if base else None
        baseline = (
            f"{100 * b['mean']:.1f} % test accuracy (95 % t interval {100 * b['low']:.1f} to {100 * b['high']:.1f} %)"
            if b and b["metric"] == "accuracy"
            else "no baseline"
        )
        measured = entry["status"] == "measured"
        rows.append(
            Measured(
                file=f"results/effects/{path.name}",
                hardware=env["hardware"],
                date=env["date"][:10],
                setting=setting,
                quality=_recipes_family(quality_text(entry["quality"])) if measured else "",
                throughput=ratio_text(entry["throughput"], "throughput") if measured else "",
                memory=ratio_text(entry["memory"], "memory") if measured else "",
                memory_label=TENSOR_MEMORY_LABEL if entry.get("tensor_memory") else PROCESS_MEMORY_LABEL,
                pairs=len(entry["seeds"]),
                baseline=baseline,
                status=None if measured else f"{entry['status'].replace('_', ' ')}: {entry['reason']}",
            )
        )
    return tuple(rows)


def _recipes_family(text: str) -> str:
    """Holm's family of a recipes file is its recipes: "over 3 recipes", not "over 3 methods"."""
    return re.sub(r"(Holm's correction over \d+) methods?\b", lambda m: f"{m[1]} recipes", text)


def recipe_view(site: Site, recipe: Recipe) -> RecipeView:
    names = _names(site)
    members = []
    for m in recipe.members:
        name, class_name = names.get(m.key, (m.key, m.key))
        changes = SMALL_SCALE.get(m.key)
        here = ", ".join(f"{k}={literal(v)}" for k, v in changes[0].items()) if changes else None
        members.append(MemberView(m.key, name, _card(site, m.key), _call(class_name, m.hparams), here))
    training = "; ".join(f"{k.replace('_', ' ')}: {v}" for k, v in recipe.training.items())
    return RecipeView(
        recipe=recipe,
        members=tuple(members),
        training=training,
        matrix=matrix_lines(recipe, site.matrices),
        measured=measured_rows(recipe, site.effects),
    )


def render_recipes(site: Site) -> dict[Path, Content]:
    """The page's two generated parts."""
    from .matrix import RECIPE_CELL_CHANGES

    names = _names(site)
    return {
        PARTS / "recipes.md.inc": site.render(
            "recipes.md.inc.j2",
            recipes=[recipe_view(site, r) for r in RECIPES.values()],
            source=SOURCE,
            not_run=NOT_RUN,
        ),
        PARTS / "small_scale.md.inc": site.render(
            "recipes_small_scale.md.inc.j2",
            changes=[(names.get(k, (k,))[0], h, why) for k, (h, why) in SMALL_SCALE.items()],
            cell_changes=[(names.get(k, (k,))[0], h) for k, h in RECIPE_CELL_CHANGES.items()],
            literal=literal,
        ),
    }
