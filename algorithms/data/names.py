"""The data sets by name, as their metadata (``algorithms/data/*.metadata.json``) lists them: what
:func:`~algorithms.data.get_dataset` loads and the training comparison accepts."""

from __future__ import annotations

from functools import cache

__all__ = ["dataset_names"]


@cache
def dataset_names() -> tuple[str, ...]:
    """The data sets of :func:`algorithms.data.get_dataset`."""
    from ..metadata import load_all_datasets

    return tuple(load_all_datasets())
