"""A hand-made composability matrix document (valid against algorithms/composability.schema.json)
for the page, card and check tests: every outcome kind, a note with markup characters, a detail."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from methods_tools.composability_pages import column_modes, expected_cells

from algorithms.metadata import MethodRecord

HOSTILE_NOTE = "Keep <b>order</b>: `x` *y* [z](javascript:alert(1)) | pipe {eval-rst}"


def matrix_cell(
    kind: str,
    methods: Iterable[str],
    mode: str | None = None,
    outcome: str = "runs",
    *,
    note: str | None = None,
    detail: str | None = None,
    missing: Iterable[str] = (),
) -> dict[str, Any]:
    """A cell of :func:`~methods_tools.composability_pages.cell_key` ``(kind, methods, mode)``: a
    parallel cell's mode is its column, ``ddp`` (fp32) or ``ddp+amp_bf16``."""
    parallel, precision = column_modes(mode) if kind == "parallel" and mode else ("single", "fp32")
    return {
        "kind": kind,
        "methods": list(methods),
        "precision": mode if kind == "precision" else precision,
        "parallel": parallel,
        "outcome": outcome,
        "seen": [],
        "missing": list(missing),
        "detail": detail,
        "note": note,
        "wall_s": 0.1,
    }


def matrix_document(
    records: Mapping[str, MethodRecord],
    overrides: Mapping[tuple, dict] | None = None,
    *,
    deepspeed: str | None = "0.19.8",
    drop: Iterable[tuple] = (),
) -> dict[str, Any]:
    """Every expected cell of ``records`` as ``runs``, except the cells ``overrides`` names by
    :func:`~methods_tools.composability_pages.cell_key` (their fields replaced) and those in ``drop``."""
    overrides, drop = dict(overrides or {}), set(drop)
    document: dict[str, Any] = {
        "schema_version": 1,
        "environment": {
            "hardware": "Test CPU <i>x</i>, 2 cores",
            "device_type": "cpu",
            "torch": "2.13.0",
            "deepspeed": deepspeed,
            "python": "3.12.0",
            "platform": "Linux",
            "date": "2026-12-05T10:00:00+00:00",
        },
        "settings": {"steps": 6, "epochs": 3, "batch_size": 8, "image_size": 16, "nproc": 2, "seed": 0},
        "commands": ["tools/composability_matrix.py --force"],
        "wall_s": 42.0,
        "cells": [],
    }
    parallels = ("ddp", "fsdp", "deepspeed") if deepspeed else ("ddp", "fsdp")
    for key in expected_cells(records.values(), document, parallels):
        if key in drop:
            continue
        kind, methods, mode = key
        cell = matrix_cell(kind, methods, mode)
        cell.update(overrides.get(key, {}))
        document["cells"].append(cell)
    return document
