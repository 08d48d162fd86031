"""Train one model under several precision and parallel configurations and compare them.

Example (the committed CPU results):

    python tools/compare_training.py --model resnet20 --data digits --image-size 8 --epochs 2 \
        --batch-size 32 --max-batches 6 --nproc 2 --repeats 3 --force

(The digits are 8x8 images, so 8 pixels lose nothing and keep the run to minutes on two CPU cores.)

(``--configs`` defaults to every precision in one process plus fp32 under dp, ddp, fsdp and
deepspeed with ZeRO stages 1 and 2, the source's table, fp32 through Hugging Face Accelerate
with each file of ``configs/accelerate/`` (``fp32:accelerate:ddp``, ``:fsdp`` and ``:deepspeed``),
and the memory-bound modes: ZeRO stage 3 (``fp32:deepspeed:3``), DeepSpeed's CPU offload
(``fp32:deepspeed:2+offload``, ``fp32:deepspeed:3+offload``) and FSDP's (``fp32:fsdp:offload``);
see ``methods_tools.compare.parse_configs``.)

Threads are matched: every run has ``--threads`` intra-op threads in all (default ``--nproc``),
a single-process run all of them, each process of a distributed run its share, so no speed-up
comes from one configuration having more threads than another.

Each run is a process of its own (ddp, fsdp and deepspeed under torchrun; an Accelerate
configuration under ``accelerate launch --config_file configs/accelerate/<name>.yaml``, with
``ACCELERATE_USE_CPU=true`` on a machine without GPUs). Every configuration
runs ``--repeats`` times (default 3), interleaved: round 1 runs each configuration once, then
round 2, and so on. Per configuration the file holds every run and the median and range of the
total time, the first epoch (warm-up), the epochs after it (steady state), the steady-state
throughput, the peak memory, accuracy and loss. A multi-process speed-up above the process count
is re-measured once and, still above it, flagged: the page does not publish it. Failures and
configurations this machine cannot run are recorded with the reason. Writes a results JSON
(default ``results/<cpu|gpu>-<hardware>-<date>.json``) validated against
``algorithms/results.schema.json``; the docs build renders it (``tools/generate_pages.py``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from methods_tools import compare  # noqa: E402
from methods_tools.files import write_atomic  # noqa: E402

DEFAULT_CONFIGS = ",".join(
    [
        "fp32:single",
        "fp16:single",
        "bf16:single",
        "amp_fp16:single",
        "amp_bf16:single",
        "fp32:dp",
        "fp32:ddp",
        "fp32:fsdp",
        "fp32:deepspeed:1",
        "fp32:deepspeed:2",
        "fp32:accelerate:ddp",
        "fp32:accelerate:fsdp",
        "fp32:accelerate:deepspeed",
        "fp32:deepspeed:3",
        "fp32:deepspeed:2+offload",
        "fp32:deepspeed:3+offload",
        "fp32:fsdp:offload",
    ]
)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="tools/compare_training.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="resnet20", help=f"one of {', '.join(compare.model_names())}")
    p.add_argument("--data", default="digits", help=f"one of {', '.join(compare.dataset_names())}")
    p.add_argument("--data-root", help="cifar10: the extracted cifar-10-batches-py directory")
    p.add_argument("--image-size", type=int, help="resize inputs (default: the model's own, 32 or 224)")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=32, help="per process (per device)")
    p.add_argument("--max-batches", type=int, help="cap on batches per epoch, for smoke runs")
    p.add_argument(
        "--configs",
        default=DEFAULT_CONFIGS,
        help="comma-separated precision:parallel[:zero_stage or Accelerate file], e.g. "
        "fp32:single,amp_bf16:ddp,fp32:deepspeed:1,fp32:accelerate:fsdp; fp32:deepspeed:3 is ZeRO stage 3, and "
        "+offload (fp32:deepspeed:2+offload, fp32:fsdp:offload) offloads what the mode partitions to CPU memory",
    )
    p.add_argument("--nproc", type=int, default=2, help="processes for ddp, fsdp, deepspeed and accelerate")
    p.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="runs of each configuration, interleaved in rounds (reported as median and range)",
    )
    p.add_argument(
        "--threads",
        type=int,
        help="torch's intra-op threads each run has in all, split evenly over its processes (default: --nproc, "
        "so one a process in a distributed run; a multiple of --nproc)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--workers", type=int, default=0, help="data loader worker processes per training process")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds allowed per run of a configuration")
    p.add_argument("--out", type=Path, help="results file (default: results/<cpu|gpu>-<hardware>-<date>.json)")
    p.add_argument("--force", action="store_true", help="overwrite an existing results file")
    args = p.parse_args(argv)
    threads = args.nproc if args.threads is None else args.threads

    problems = compare.check_options(
        args.model,
        args.data,
        args.data_root,
        args.epochs,
        args.batch_size,
        args.max_batches,
        args.nproc,
        args.repeats,
        threads_in_all=threads,
    )
    try:
        configs = compare.parse_configs(args.configs)
    except ValueError as exc:
        problems.extend(str(exc).splitlines())
    out = args.out or compare.default_output_path(compare.environment())
    if out.exists() and not args.force:
        problems.append(f"{out}: exists — pass --force to overwrite it, or choose --out")
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 1

    options = compare.CompareOptions(
        model=args.model,
        data=args.data,
        epochs=args.epochs,
        batch_size=args.batch_size,
        configs=configs,
        nproc=args.nproc,
        max_batches=args.max_batches,
        data_root=args.data_root,
        image_size=args.image_size,
        seed=args.seed,
        lr=args.lr,
        workers=args.workers,
        timeout_s=args.timeout,
        repeats=args.repeats,
        threads_in_all=threads,
        command=compare.format_command(argv),
    )
    document = compare.run_comparison(options, progress=lambda line: print(line, file=sys.stderr, flush=True))
    write_atomic(out, json.dumps(document, indent=2) + "\n", force=args.force)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
