"""Run the parallel cells of the composability matrix, one after another: one process of a torchrun launch.

Launched by :mod:`methods_tools.matrix` as ``python -m torch.distributed.run --standalone
--nproc_per_node N -m methods_tools.matrix_worker CELLS.json RUNS.json``, once per parallel mode
(its cells in each precision, fp32 and amp_bf16).
Every process trains every cell of ``CELLS.json`` (:func:`methods_tools.matrix.run_cell`); rank 0
writes what it saw, ``{cell label: CellRun}``, to ``RUNS.json`` after each cell, so a launch that
dies keeps the cells before it. The process group is joined here with a short timeout, so a cell
that fails on one rank only ends the others' wait in a minute rather than in half an hour.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from methods_tools.files import write_atomic
from methods_tools.matrix import Cell, Settings, decide, describe, run_cell

COLLECTIVE_TIMEOUT = datetime.timedelta(seconds=60)


def main(argv: list[str] | None = None) -> int:
    from algorithms.core.distributed import destroy_process_group
    from algorithms.metadata import load_all_metadata

    spec_path, out_path = (argv if argv is not None else sys.argv[1:])[:2]
    spec = json.loads(Path(spec_path).read_text())
    settings = Settings(**spec["settings"])
    cells = [Cell.from_dict(c) for c in spec["cells"]]
    backend = "nccl" if torch.cuda.is_available() and cells[0].parallel != "deepspeed" else "gloo"
    dist.init_process_group(backend=backend, timeout=COLLECTIVE_TIMEOUT)
    rank = dist.get_rank()
    records = load_all_metadata()
    runs: dict[str, dict] = {}
    for i, cell in enumerate(cells, start=1):
        run = run_cell(cell, settings, records)
        if rank == 0:
            runs[cell.label] = run.to_json()
            write_atomic(Path(out_path), json.dumps(runs), force=True)
            entry = decide(cell, run, {k: r for k, r in records.items() if r.kind == "method"})
            print(
                f"progress: {cell.parallel} {i}/{len(cells)} {' + '.join(cell.methods)} {cell.precision}: "
                f"{describe(entry)}",
                file=sys.stderr,
                flush=True,
            )
        dist.barrier()
    destroy_process_group()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    raise SystemExit(main())
