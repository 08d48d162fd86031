"""The names of the Trainer's options, declared once, without torch (and without reading any file).

The Trainer checks its arguments against these, and the training comparison
(``tools/compare_training.py``) parses its configurations with them, so the two cannot disagree.
The reference workloads are named beside them, by their metadata: :mod:`algorithms.models.names`
and :mod:`algorithms.data.names`.
"""

from __future__ import annotations

__all__ = [
    "DISTRIBUTED",
    "MATRIX_PARALLELS",
    "PARALLELS",
    "PRECISIONS",
    "REFUSAL_MODES",
]

#: Numeric precisions of ``Trainer(precision=...)``.
PRECISIONS = ("fp32", "fp16", "bf16", "amp_fp16", "amp_bf16")
#: Parallel modes of ``Trainer(parallel=...)``.
PARALLELS = ("single", "dp", "ddp", "fsdp", "deepspeed", "accelerate")
#: What ``Algorithm.unsupported_parallel`` may refuse: a parallel mode by name, or ``deepspeed:3``,
#: DeepSpeed's ZeRO stage 3, which shards the parameters as ``fsdp`` does (a method that keeps a
#: whole copy of the model cannot run under either).
REFUSAL_MODES = (*PARALLELS, "deepspeed:3")
#: The parallel modes that run one process per device under ``torchrun`` (or ``accelerate launch``).
DISTRIBUTED = ("ddp", "fsdp", "deepspeed", "accelerate")
#: The distributed modes the composability matrix runs. ``accelerate`` has no column: under its DDP,
#: FSDP and DeepSpeed configurations it runs the same torch and DeepSpeed wrappers the other columns
#: test, and the committed matrix would have to be rerun for one.
MATRIX_PARALLELS = ("ddp", "fsdp", "deepspeed")
