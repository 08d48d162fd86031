"""Run the composability matrix: every method alone, in pairs, in every precision and parallel mode.

Example (the committed CPU results; ``nox -s matrix`` runs this with ``--force``):

    python tools/composability_matrix.py

Every ``kind: method`` of the metadata registry trains 6 batches of 8 seeded synthetic 16-pixel
images of 10 classes on a small convolutional model (any image size), with its metadata's
suggested hyperparameters: alone; with every other method that shares a domain, in both orders;
in each precision mode (fp32, fp16, bf16, amp_fp16, amp_bf16); and in each distributed mode the
machine runs (ddp, fsdp, deepspeed where it is installed; in fp32 and in amp_bf16, 2 processes
under torchrun, one launch per mode). Each cell ends as runs, refused, interaction or fails
(``algorithms/composability.schema.json``), judged by each method's ``observable`` effects and
explained by its ``interactions`` notes, and by correctness checks that no note explains: EMA's
and SWA's averages equal an fp64 average of the weights they were given, the first batch's loss
equals label smoothing's and mixing's definitions, and SAM(rho=0) ends where the same run without
SAM does (a SAM cell's only extra training). The output (default
``results/composability/<cpu|gpu>-<hardware>.json``) is validated before it is written; a cell
that fails is one line at the end and the exit status is 1 (the file is still written).

    python tools/composability_matrix.py --kinds solo,pair --out /tmp/pairs.json  # a subset

Two sections beside the cells: ``loops``, every method alone in the project's Trainer, an own
Loop, the Hugging Face Trainer (MethodsTrainer) and Lightning (MethodsCallback), and ``models``,
the language-model methods on Hugging Face GPT-2, BERT and RoBERTa built from small configs; each
cell acted, inactive, refused, failed or not run (transformers or Lightning missing). To rerun
only them, into the committed file:

    python tools/composability_matrix.py --kinds loops,models --merge

Beside the methods' cells, one cell per published recipe (``algorithms/recipes.py``) trains its
whole stack together (fp32, one process); to rerun only them, into the committed file:

    python tools/composability_matrix.py --kinds recipe --merge

A method added to a committed matrix needs only its own cells (alone, in each mode, in a pair
either way round, in each loop and on each model), run and put in their places in the file:

    python tools/composability_matrix.py --only activation_checkpointing --merge

A precision added to the parallel cells needs only its cells, put in their places the same way:

    python tools/composability_matrix.py --kinds parallel --precisions amp_bf16 --merge
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from methods_tools.matrix import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main(doc=__doc__))
