"""The recipes page ("Recipes: Composer's ResNet-50 stacks"): its generated part renders each
published recipe with its members, its sourced figure, the matrix's outcome for its stack and the
measured effect with its interval, from the results files it is given; a member links to its card
only where the site has the card."""

from __future__ import annotations

import re
from pathlib import Path

from methods_tools import measure, pages
from methods_tools.recipes_page import NOT_RUN, PARTS, render_recipes
from tooling.test_measure_recipes import ENV, fake_run  # tests/tooling, as a namespace package

from algorithms.recipes import RECIPES

PART = PARTS / "recipes.md.inc"


def rendered(tmp_path: Path, results: Path, cards: tuple[str, ...] = ()) -> str:
    src = tmp_path / "src"
    (src / "method_cards").mkdir(parents=True)
    for key in cards:
        (src / "method_cards" / f"{key}.md").write_text(f"# {key}\n", encoding="utf-8")
    generated = pages.generate(src, results_root=results, generators=(render_recipes,))
    assert generated.problems == []
    return generated.outputs[PART]


def sections(text: str) -> dict[str, str]:
    parts = re.split(r"^## (.+)$", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_each_recipe_renders_its_members_figure_and_measured_effect(tmp_path):
    results = tmp_path / "results"
    (results / "effects").mkdir(parents=True)
    options = measure.WORKLOADS["recipes"].options("recipes", (0, 1, 2), command="python tools/measure_methods.py")
    measure.run_measurement(options, results / "effects" / "recipes-test.json", runner=fake_run, env=ENV)
    page = sections(rendered(tmp_path, results, cards=("ema",)))
    assert list(page) == [r.name for r in RECIPES.values()]
    hot = page["Hot"]
    # every member, as published, and what the small runs change
    assert len(re.findall(r"^\| .* \| `\w+\(.*\)` \| .* \|$", hot, flags=re.M)) == len(RECIPES["hot"].members)
    assert "`SAM(rho=0.5, interval=5)`" in hot and "`ColOut(p_col=0.05, p_row=0.05)`" in hot
    assert "| `half_life='10ba', update_interval='1ba'` |" in hot
    # the card of EMA exists in this tree, the others do not: only EMA is linked
    assert "{doc}`EMA </method_cards/ema>`" in hot and "</method_cards/sam>" not in hot and "| SAM |" in hot
    # the sourced figure names its setting, hardware and source
    mild = page["Mild"]
    assert "75.9 % in 23.8 minutes" in mild and "8x NVIDIA A100" in mild and "mosaic-resnet-deep-dive" in mild
    # the fake runs: 2 points of accuracy lost per member, a tenth of a point won back per seed
    change = "Test accuracy: \u221219.90 points (\u221220.15 to \u221219.65): worse"
    assert f"{change}; holds after Holm's correction over 3 recipes" in hot
    assert "(baseline: 90.1 % test accuracy" in hot
    assert "- Peak memory of the process (resident set): 1.000x" in hot  # the fake runs have no tensor memory
    assert "Test CPU, 2 cores (CPU only), 2026-01-02" in hot and "`results/effects/recipes-test.json`" in hot
    assert "torchvision\\_resnet18 on digits at 32x32 px" in hot


def test_without_measurements_a_recipe_says_not_run_yet(tmp_path):
    page = sections(rendered(tmp_path, tmp_path / "no-results"))
    for name in ("Mild", "Medium", "Hot"):
        assert f"**Measured as one stack:** {NOT_RUN}." in page[name]
        assert "{doc}`" not in page[name]  # no card in this tree: no link
