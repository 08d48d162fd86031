"""Composer's published ResNet-50 recipes (Mild, Medium, Hot), stated once, as stacks of this library's methods.

MosaicML released three recipes for training a ResNet-50 on ImageNet, each a set of speed-up
methods with their hyperparameters for one training budget (the "Mosaic ResNet"). :data:`RECIPES`
holds them as published in the recipes' code, ``examples/benchmarks/resnet_imagenet/main.py`` of
mosaicml/examples (commit daddaeff7a53, which names them ``mild``, ``medium`` and ``hot``; Composer's
own ``composer/yamls/recipes/resnet50_{mild,medium,spicy}.yaml``, removed in its commit 3f557fa5b,
held the same stacks, Hot under the name "spicy"). Each member is this library's method of the same
name, with Composer's arguments, which are this library's constructor parameters of the same names
and meanings; a member this library lacked would be listed in ``missing`` with the reason.

Besides its methods, a recipe sets the training around them (binary cross entropy, a 176-pixel
training crop, its number of epochs): :attr:`Recipe.training` lists them; they are settings of
a training run, not methods, and :meth:`Recipe.algorithms` builds only the methods.

Example::

    >>> from algorithms.recipes import RECIPES
    >>> [type(a).__name__ for a in RECIPES["mild"].algorithms()]
    ['BlurPool', 'ChannelsLast', 'EMA', 'ProgressiveResizing', 'LabelSmoothing']

:data:`SMALL_SCALE` is what this project changes to run the stacks on its small workloads (the
composability matrix and the effects harness), with the reason for each change.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "RECIPES",
    "SMALL_SCALE",
    "SOURCE",
    "Figure",
    "Member",
    "Missing",
    "Recipe",
    "get_recipe",
    "small_scale_hparams",
]

#: Where the members and their hyperparameters are read from.
SOURCE = {
    "name": "mosaicml/examples, examples/benchmarks/resnet_imagenet (main.py and yamls/resnet50.yaml)",
    "url": "https://github.com/mosaicml/examples/tree/daddaeff7a535273ff984b0134da4839c70a45b3/"
    "examples/benchmarks/resnet_imagenet",
    "commit": "daddaeff7a535273ff984b0134da4839c70a45b3",
}


@dataclass(frozen=True)
class Member:
    """One method of a recipe: this library's method ``key`` and the arguments the recipe gives it
    (the others keep their defaults, which are Composer's)."""

    key: str
    hparams: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Missing:
    """A method of the recipe that this library does not have, and why."""

    name: str
    reason: str


@dataclass(frozen=True)
class Figure:
    """The recipe's published figure: what it says, the setting and hardware, and where it is said."""

    text: str
    setting: str
    hardware: str
    source: str
    url: str


@dataclass(frozen=True)
class Recipe:
    """A published recipe: its name, what it is for, its methods in the published order, the
    training settings around them, and its sourced figure."""

    key: str
    name: str
    purpose: str
    members: tuple[Member, ...]
    training: Mapping[str, Any]
    figure: Figure
    missing: tuple[Missing, ...] = ()

    def hparams(self, changes: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, dict[str, Any]]:
        """Each member's arguments, by method key, with ``changes[key]`` laid over them (a member
        ``changes`` names must be one of the recipe's)."""
        changes = changes or {}
        keys = [m.key for m in self.members]
        unknown = sorted(set(changes) - set(keys))
        if unknown:
            raise ValueError(
                f"{self.key}: {', '.join(unknown)} not in the recipe — change only its members: {', '.join(keys)}"
            )
        return {m.key: {**m.hparams, **changes.get(m.key, {})} for m in self.members}

    def algorithms(self, hparams: Mapping[str, Mapping[str, Any]] | None = None, **plumbing: Any) -> list[Any]:
        """The recipe's stack: one of this library's Algorithms per member, in the published order,
        built with ``hparams`` (default :meth:`hparams`: the published arguments) and, of
        ``plumbing`` (e.g. ``input_key``), the arguments a member's constructor takes."""
        import inspect

        import algorithms
        from algorithms.metadata import PACKAGE_ROOT, load_metadata

        hparams = self.hparams() if hparams is None else hparams
        if set(hparams) != {m.key for m in self.members}:
            raise ValueError(f"{self.key}: hparams name {sorted(hparams)} — give one entry per member")
        built = []
        for member in self.members:
            cls = getattr(algorithms, load_metadata(PACKAGE_ROOT / member.key / "metadata.json").class_name)
            accepted = inspect.signature(cls).parameters
            built.append(cls(**hparams[member.key], **{k: v for k, v in plumbing.items() if k in accepted}))
        return built


_TRAINING = {
    "model": "torchvision ResNet-50",
    "data": "ImageNet-1k",
    "loss": "binary cross entropy",
    "train_crop": 176,
    "eval_resize": 232,
    "eval_crop": 224,
    "optimizer": "DecoupledSGDW (lr 2.048, momentum 0.875, weight decay 5e-4), batch 2048, "
    "cosine decay after 8 warm-up epochs",
    "precision": "amp_fp16",
}
_DEEP_DIVE = "https://www.databricks.com/blog/mosaic-resnet-deep-dive"
_SETTING = "ResNet-50 on ImageNet, evaluated at 224 px"
_HARDWARE = "8x NVIDIA A100"
# The members shared by all three recipes, in the published order.
_BLURPOOL = Member("blurpool")
_CHANNELS_LAST = Member("channels_last")
_EMA = Member("ema", {"half_life": "100ba", "update_interval": "20ba"})

#: The three recipes, by key, in order of training budget.
RECIPES: Mapping[str, Recipe] = {
    "mild": Recipe(
        key="mild",
        name="Mild",
        purpose="short training runs",
        members=(
            _BLURPOOL,
            _CHANNELS_LAST,
            _EMA,
            Member("progressive_resizing", {"initial_scale": 0.5, "delay_fraction": 0.4, "finetune_fraction": 0.2}),
            Member("label_smoothing", {"smoothing": 0.08}),
        ),
        training={**_TRAINING, "epochs": 36},
        figure=Figure(
            text="under 60 epochs, 75 to 78.1 % top-1; 75.9 % in 23.8 minutes",
            setting=_SETTING,
            hardware=_HARDWARE,
            source="MosaicML, Mosaic ResNet Deep Dive (2022)",
            url=_DEEP_DIVE,
        ),
    ),
    "medium": Recipe(
        key="medium",
        name="Medium",
        purpose="longer training runs",
        members=(
            _BLURPOOL,
            _CHANNELS_LAST,
            _EMA,
            Member("progressive_resizing", {"initial_scale": 0.5, "delay_fraction": 0.4, "finetune_fraction": 0.2}),
            Member("label_smoothing", {"smoothing": 0.1}),
            Member("mixup", {"alpha": 0.2}),
            Member("sam", {"rho": 0.5, "interval": 10}),
        ),
        training={**_TRAINING, "epochs": 135},
        figure=Figure(
            text="60 to 240 epochs, 78.1 to 79.5 % top-1",
            setting=_SETTING,
            hardware=_HARDWARE,
            source="MosaicML, Mosaic ResNet Deep Dive (2022)",
            url=_DEEP_DIVE,
        ),
    ),
    "hot": Recipe(
        key="hot",
        name="Hot",
        purpose="the longest training runs, to maximize accuracy",
        members=(
            _BLURPOOL,
            _CHANNELS_LAST,
            _EMA,
            Member("progressive_resizing", {"initial_scale": 0.6, "delay_fraction": 0.2, "finetune_fraction": 0.2}),
            Member("label_smoothing", {"smoothing": 0.13}),
            Member("mixup", {"alpha": 0.25}),
            Member("sam", {"rho": 0.5, "interval": 5}),
            Member("colout", {"p_col": 0.05, "p_row": 0.05}),
            Member("randaugment", {"depth": 1, "severity": 9}),
            Member(
                "stochastic_depth",
                {
                    "target_layer_name": "ResNetBottleneck",
                    "stochastic_method": "sample",
                    "drop_distribution": "linear",
                    "drop_rate": 0.1,
                },
            ),
        ),
        training={**_TRAINING, "epochs": 270},
        figure=Figure(
            text="270 epochs in its configuration; no accuracy of its own is quoted here. Of the three recipes "
            "together, MosaicML reports higher accuracy up to 3.8x faster than ResNet Strikes Back "
            "(Wightman et al., 2021)",
            setting=_SETTING,
            hardware=_HARDWARE,
            source="mosaicml/examples resnet_imagenet README; MosaicML, Mosaic ResNet blog post (2022)",
            url="https://www.databricks.com/blog/mosaic-resnet",
        ),
    ),
}

#: What this project changes to run the recipes on its small workloads (a few dozen batches of
#: small images on a small ResNet), by member, with the reason: ``{key: (changes, reason)}``.
SMALL_SCALE: Mapping[str, tuple[Mapping[str, Any], str]] = {
    "ema": (
        {"half_life": "10ba", "update_interval": "1ba"},
        "a half-life of 100 batches, updated every 20, leaves the average near the initial weights "
        "over a run of a few dozen batches; the metadata's suggested 10ba, updated every batch, is used",
    ),
    "stochastic_depth": (
        {"target_layer_name": "BasicBlock"},
        "ResNet-50's blocks are bottlenecks; the small ResNets have basic blocks, so the same drop "
        "rates apply to those",
    ),
}


def small_scale_hparams(recipe: Recipe) -> dict[str, dict[str, Any]]:
    """``recipe``'s member arguments with :data:`SMALL_SCALE`'s changes to its members."""
    keys = {m.key for m in recipe.members}
    return recipe.hparams({k: changes for k, (changes, _) in SMALL_SCALE.items() if k in keys})


def get_recipe(key: str) -> Recipe:
    """The recipe ``key``; ``ValueError`` (one line, naming the recipes) for another name."""
    if key not in RECIPES:
        raise ValueError(f"recipe {key!r}: not a published recipe — use one of {', '.join(RECIPES)}")
    return RECIPES[key]
