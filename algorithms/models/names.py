"""The reference models by name, as their model-family metadata (``algorithms/models/*.metadata.json``)
lists them: what :func:`~algorithms.models.get_model` builds and the training comparison accepts."""

from __future__ import annotations

from functools import cache

__all__ = ["model_input_sizes", "model_names"]


@cache
def model_input_sizes() -> dict[str, int]:
    """Reference model name (its builder in ``algorithms.models``) -> the input size it is built for."""
    from ..metadata import load_all_model_families

    return {
        member["builder"]: member["input_size"]
        for family in load_all_model_families().values()
        if family.raw["module"] == "algorithms.models"
        for member in family.raw["members"]
    }


def model_names() -> tuple[str, ...]:
    """The reference models of :func:`algorithms.models.get_model`."""
    return tuple(model_input_sizes())
