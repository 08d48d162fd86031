"""The published recipes (algorithms.recipes) as stacks of this library's methods: every member is a
method of the library, its published arguments are its constructor's parameters and the stack is
built with them, in the published order; the changes made to run them small touch only what they
name; bad names are one-line errors."""

from __future__ import annotations

import inspect

import pytest

import algorithms
from algorithms.metadata import load_all_metadata
from algorithms.recipes import RECIPES, SMALL_SCALE, get_recipe, small_scale_hparams

# Composer's recipes, by member class, as mosaicml/examples' resnet_imagenet main.py builds them
# (commit daddaeff7a53): the same names and order must come out of the module.
PUBLISHED_ORDER = {
    "mild": ["BlurPool", "ChannelsLast", "EMA", "ProgressiveResizing", "LabelSmoothing"],
    "medium": ["BlurPool", "ChannelsLast", "EMA", "ProgressiveResizing", "LabelSmoothing", "MixUp", "SAM"],
    "hot": [
        "BlurPool",
        "ChannelsLast",
        "EMA",
        "ProgressiveResizing",
        "LabelSmoothing",
        "MixUp",
        "SAM",
        "ColOut",
        "RandAugment",
        "StochasticDepth",
    ],
}


@pytest.fixture(scope="module")
def records():
    return load_all_metadata()


def test_the_three_recipes_are_composers_in_order_of_budget():
    assert list(RECIPES) == ["mild", "medium", "hot"]
    epochs = [r.training["epochs"] for r in RECIPES.values()]
    assert epochs == sorted(epochs) == [36, 135, 270]  # mosaicml/examples yamls/resnet50.yaml


@pytest.mark.parametrize("key", list(RECIPES))
def test_every_member_is_a_method_of_this_library_with_its_constructors_parameters(key, records):
    recipe = RECIPES[key]
    assert recipe.missing == ()  # every member exists here; a missing one would be listed with its reason
    for member in recipe.members:
        record = records[member.key]
        assert record.kind == "method"
        cls = getattr(algorithms, record.class_name)
        accepted = inspect.signature(cls).parameters
        unknown = set(member.hparams) - set(accepted)
        assert not unknown, f"{key}: {member.key}: {sorted(unknown)} are not {cls.__name__}'s parameters"


@pytest.mark.parametrize("key", list(RECIPES))
def test_the_stack_is_built_in_the_published_order_with_the_published_arguments(key):
    recipe = RECIPES[key]
    stack = recipe.algorithms()
    assert [type(a).__name__ for a in stack] == PUBLISHED_ORDER[key]
    for member, algorithm in zip(recipe.members, stack, strict=True):
        held = algorithm.hyperparameters()
        for name, value in member.hparams.items():
            assert held[name] == value, f"{key}: {type(algorithm).__name__}.{name}"


def test_published_values_that_differ_between_recipes():
    # the figures of the source, by recipe: label smoothing, MixUp's alpha, SAM's interval, the resizing
    smoothing = {k: dict(RECIPES[k].hparams())["label_smoothing"]["smoothing"] for k in RECIPES}
    assert smoothing == {"mild": 0.08, "medium": 0.1, "hot": 0.13}
    assert RECIPES["medium"].hparams()["sam"] == {"rho": 0.5, "interval": 10}
    assert RECIPES["hot"].hparams()["sam"] == {"rho": 0.5, "interval": 5}
    assert RECIPES["hot"].hparams()["progressive_resizing"]["initial_scale"] == 0.6
    assert RECIPES["hot"].hparams()["stochastic_depth"]["target_layer_name"] == "ResNetBottleneck"


def test_every_recipe_names_its_figure_with_setting_hardware_and_source():
    for recipe in RECIPES.values():
        figure = recipe.figure
        assert figure.setting and figure.hardware and figure.source
        assert figure.url.startswith("https://")


def test_the_small_scale_changes_touch_only_the_members_they_name():
    hot = RECIPES["hot"]
    small = small_scale_hparams(hot)
    published = hot.hparams()
    for key in published:
        expected = {**published[key], **SMALL_SCALE[key][0]} if key in SMALL_SCALE else published[key]
        assert small[key] == expected
    assert small["ema"] == {"half_life": "10ba", "update_interval": "1ba"}
    # a recipe without a changed member keeps it as published: Mild has no Stochastic Depth
    assert "stochastic_depth" not in small_scale_hparams(RECIPES["mild"])
    assert [type(a).__name__ for a in hot.algorithms(small)] == PUBLISHED_ORDER["hot"]


def test_bad_names_are_one_line_errors():
    with pytest.raises(ValueError, match=r"^recipe 'spicy': not a published recipe — use one of mild, medium, hot$"):
        get_recipe("spicy")
    with pytest.raises(ValueError, match=r"cutmix not in the recipe — change only its members"):
        RECIPES["mild"].hparams({"cutmix": {"alpha": 1.0}})
    with pytest.raises(ValueError, match="give one entry per member"):
        RECIPES["mild"].algorithms({"ema": {}})
