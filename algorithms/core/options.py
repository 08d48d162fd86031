"""The names of the Trainer's options and of the reference workloads, declared once, without torch.

The Trainer checks its arguments against these, and the training comparison
(``tools/compare_training.py``) parses its configurations with them, so the two cannot disagree.
The reference models and data sets are named by their metadata (``algorithms/models/*.metadata.json``
and ``algorithms/data/*.metadata.json``), which also serves their cards.
"""

from __future__ import annotations

from functools import cache

__all__ = [
    "DISTRIBUTED",
    "MATRIX_PARALLELS",
    "PARALLELS",
    "PRECISIONS",
    "dataset_names",
    "model_input_sizes",
    "model_names",
]

#: Numeric precisions of ``Trainer(precision=...)``.
PRECISIONS = ("fp32", "fp16", "bf16", "amp_fp16", "amp_bf16")
#: Parallel modes of ``Trainer(parallel=...)``.
PARALLELS = ("single", "dp", "ddp", "fsdp", "deepspeed", "accelerate")
#: The parallel modes that run one process per device under ``torchrun`` (or ``accelerate launch``).
DISTRIBUTED = ("ddp", "fsdp", "deepspeed", "accelerate")
#: The distributed modes the composability matrix runs. ``accelerate`` has no column: under its DDP,
#: FSDP and DeepSpeed configurations it runs the same torch and DeepSpeed wrappers the other columns
#: test, and the committed matrix would have to be rerun for one.
MATRIX_PARALLELS = ("ddp", "fsdp", "deepspeed")


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
    """The reference models of ``algorithms.models.get_model``."""
    return tuple(model_input_sizes())


@cache
def dataset_names() -> tuple[str, ...]:
    """The data sets of ``algorithms.data.get_dataset``."""
    from ..metadata import load_all_datasets

    return tuple(load_all_datasets())
