"""Generate the "Training configurations" page, its charts and the best-practice cards' result rows.

Reads every committed ``results/*.json`` (written by ``tools/compare_training.py``, validated
against ``algorithms/results.schema.json``) and writes:

- ``training_configurations.md``: per results file, its hardware and settings, a table like the
  source experiment's, and a chart of time and memory per configuration;
- ``tables/results/<stem>.svg``: those charts (matplotlib, byte-stable: fixed hash salt, no date or creator,
  text kept as text);
- ``tables/results/<key>.md.inc``: for each best practice, the measured rows of its Trainer
  option beside the ``fp32:single`` baseline, which its card pulls in with ``{include}`` (the
  ``.inc`` suffix keeps Sphinx from reading the snippet as a page of its own).

Runs at the start of every docs build (conf.py); by hand:
python docs/source/tables/update_training_results.py [--check]
"""

from __future__ import annotations

import io
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE.parents[2]) not in sys.path:  # run as a script from a checkout
    sys.path[:0] = [str(HERE.parents[2]), str(HERE.parents[2] / "tools")]

from methods_tools.files import generator_cli  # noqa: E402
from methods_tools.markup import md_code, md_text, one_line  # noqa: E402
from methods_tools.results import RESULTS_DIR, discover_results, load_results  # noqa: E402

from algorithms.metadata import load_all_metadata  # noqa: E402

PAGE = Path("training_configurations.md")
SNIPPETS = Path("tables") / "results"
MIB = 2**20

# Quoted from the source experiment, NOT measured by this project: a hand-run fine-tuning of a
# pretrained ResNet-50 on CIFAR-10 (5 epochs, batch 128) on four Tesla P40 GPUs. Only the figures
# the project's issue quotes are reproduced; None is a figure not quoted there.
SOURCE_EXPERIMENT = [
    # configuration, time (s), GPU memory (GB), accuracy (%)
    ("Single precision (fp32)", 1979, 11.24, 85),
    ("Half precision (fp16)", 1946, 5.79, 75),
    ("Automatic mixed precision", 1546, 6.02, 85),
    ("DataParallel, 4 GPUs", 742, None, None),
    ("DistributedDataParallel, 4 GPUs", 560, 3.12, None),
    ("Fully Sharded Data Parallel, 4 GPUs", 581, 2.88, None),
    ("DeepSpeed", None, None, None),
]

# Precision modes shown together on a precision best practice's card.
PRECISION_FAMILY = {"amp_fp16": ("amp_fp16", "amp_bf16"), "amp_bf16": ("amp_fp16", "amp_bf16"),
                    "fp16": ("fp16", "bf16"), "bf16": ("fp16", "bf16")}


# --------------------------------------------------------------------------------------------- cells

def _num(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def _mib(value: int | None, digits: int = 0) -> str:
    return "—" if value is None else f"{value / MIB:,.{digits}f}"


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f} %"


def _status(run: Mapping[str, Any]) -> str:
    return "ok" if run["status"] == "ok" else f"{run['status']}: {md_text(run['reason'])}"


def _memory_label(document: Mapping[str, Any]) -> str:
    kinds = {r["memory_kind"] for r in document["runs"] if r["memory_kind"]}
    if kinds == {"cuda_max_allocated"}:
        return "Peak GPU memory allocated per device (MiB)"
    return "Peak memory per process (MiB, resident set of the whole process)"


def _source_line(document: Mapping[str, Any], path: Path) -> str:
    env, s = document["environment"], document["settings"]
    cap = f", at most {s['max_batches']} batches per epoch" if s["max_batches"] else ""
    return (f"Measured with `tools/compare_training.py` on {md_text(env['hardware'])}, "
            f"{md_text(env['date'][:10])} (torch {md_text(env['torch'])}): {md_text(s['model'])} on "
            f"{md_text(s['data'])} ({s['image_size']} px), {s['epochs']} epoch(s) of batch {s['batch_size']} "
            f"per process{cap}. Results file: {md_code(f'results/{path.name}')}.")


def _load_note(document: Mapping[str, Any]) -> list[str]:
    env = document["environment"]
    load = env.get("load_average")
    if not load or load[0] <= env["cpu_count"]:
        return []
    return [f"The machine was shared: its load average was {load[0]:.1f} on {env['cpu_count']} cores when the "
            "comparison started, so the times are slower, and noisier, than the hardware alone allows.", ""]


# --------------------------------------------------------------------------------------------- tables

def _full_table(document: Mapping[str, Any]) -> list[str]:
    has_gpu = any(r["gpu_utilization"] is not None for r in document["runs"])
    header = ["Configuration", "Processes", "Status", "Time (s)", "Last epoch (s)", "Throughput (samples/s)",
              _memory_label(document), "Model (MiB)", *(["GPU utilisation"] if has_gpu else []),
              "Accuracy", "Loss"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in document["runs"]:
        cells = [md_code(r["config"]), str(r["world_size"]), _status(r), _num(r["wall_s"]),
                 _num(r["epoch_s"][-1] if r["epoch_s"] else None), _num(r["throughput"]),
                 _mib(r["peak_memory_bytes"]), _mib(r["model_memory_bytes"], 2)]
        if has_gpu:
            cells.append("—" if r["gpu_utilization"] is None else f"{r['gpu_utilization']:.0f} %")
        cells += [_pct(r["accuracy"]), _num(r["loss"], 3)]
        lines.append("| " + " | ".join(cells) + " |")
    notes = [f"- {md_code(r['config'])}: {md_text(r['note'])}" for r in document["runs"] if r["note"]]
    return lines + ([""] + notes if notes else [])


def _card_rows(document: Mapping[str, Any], option: str, value: Any) -> list[Mapping[str, Any]]:
    runs = document["runs"]
    if option == "precision":
        wanted = PRECISION_FAMILY.get(value, (value,))
        chosen = [r for r in runs if r["parallel"] == "single" and r["precision"] in wanted]
    elif option == "parallel":
        chosen = [r for r in runs if r["parallel"] == value]
    else:  # the comparison varies only precision and parallel: nothing measures other options
        return []
    if not chosen:
        return []
    baseline = [r for r in runs if r["config"] == "fp32:single" and r not in chosen]
    return baseline + chosen


def _card_table(document: Mapping[str, Any], rows: list[Mapping[str, Any]]) -> list[str]:
    base = next((r for r in document["runs"] if r["config"] == "fp32:single" and r["status"] == "ok"), None)
    header = ["Configuration", "Processes", "Status", "Time (s)", "Time vs fp32:single",
              _memory_label(document), "Accuracy"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        ratio = "—"
        if base is not None and r["status"] == "ok":
            ratio = f"{r['wall_s'] / base['wall_s']:.2f}x"
        lines.append("| " + " | ".join([md_code(r["config"]), str(r["world_size"]), _status(r), _num(r["wall_s"]),
                                        ratio, _mib(r["peak_memory_bytes"]), _pct(r["accuracy"])]) + " |")
    return lines


# --------------------------------------------------------------------------------------------- charts

def _chart(document: Mapping[str, Any]) -> str:
    """Time and peak memory per configuration as one SVG, identical bytes for identical input."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in document["runs"] if r["status"] == "ok"]
    labels = [r["config"] for r in ok][::-1]
    with plt.rc_context({"svg.hashsalt": "methods-library", "svg.fonttype": "none", "font.size": 9,
                         "text.parse_math": False}):
        fig, (ax_time, ax_mem) = plt.subplots(1, 2, figsize=(9, 0.35 * max(len(ok), 2) + 1.2), sharey=True)
        ax_time.barh(labels, [r["wall_s"] for r in ok][::-1], color="#4c72b0")
        ax_time.set_xlabel("training time (s)")
        ax_mem.barh(labels, [r["peak_memory_bytes"] / MIB for r in ok][::-1], color="#dd8452")
        ax_mem.set_xlabel("peak memory per device (MiB)" if ok and ok[0]["memory_kind"] == "cuda_max_allocated"
                          else "peak memory per process (MiB)")
        for ax in (ax_time, ax_mem):
            ax.grid(axis="x", alpha=0.3)
        fig.suptitle(f"{document['settings']['model']} on {document['settings']['data']}: "
                     f"{document['environment']['hardware']}, {document['environment']['date'][:10]}")
        fig.tight_layout()
        buffer = io.StringIO()
        fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
        plt.close(fig)
    return buffer.getvalue()


# --------------------------------------------------------------------------------------------- page

def _source_experiment() -> list[str]:
    lines = ["| Configuration (source experiment) | Time (s) | GPU memory (GB) | Accuracy |", "|---|---|---|---|"]
    for name, seconds, memory, accuracy in SOURCE_EXPERIMENT:
        cells = [name, "—" if seconds is None else str(seconds), "—" if memory is None else f"{memory:.2f}",
                 "—" if accuracy is None else f"{accuracy} %"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _page(documents: list[tuple[Path, Mapping[str, Any]]]) -> str:
    out = [
        "# Training configurations",
        "",
        "<!-- Generated by docs/source/tables/update_training_results.py from results/*.json; do not edit. -->",
        "",
        "The same model trained under each numeric precision and parallel mode of the `Trainer`, measured "
        "with one command, `python tools/compare_training.py` (each results file below names the command "
        "that made it; `nox -s gpu` makes the GPU one). Each configuration runs in its own process "
        "(`ddp`, `fsdp` and `deepspeed` under `torchrun`); one "
        "that fails or that the machine cannot run is listed with the reason. The batch size is per process "
        "in every mode, so a 2-process run sees twice as many samples per step. Times include the first "
        "epoch's warm-up. On the CPU, memory is the peak resident set of the whole process (the Python "
        "interpreter and torch included), so differences between configurations are small beside it; the "
        "model column is what one process holds of the parameters and buffers (an FSDP process holds its "
        "shard). Best-practice cards show their own rows of these tables.",
        "",
    ]
    if not documents:
        out += ["No results files are committed yet: run the command above and commit its output in `results/`.", ""]
    for path, document in documents:
        env = document["environment"]
        title = f"{env['hardware']}, {env['date'][:10]}"
        out += [f"## {md_text(title)}", "", _source_line(document, path), "", *_load_note(document)]
        out += _full_table(document) + [""]
        if any(r["status"] == "ok" for r in document["runs"]):
            # A directive option is an attribute value, not Markdown: Sphinx escapes it; one line is enough.
            out += [f"```{{image}} tables/results/{path.stem}.svg", f":alt: Training time and peak memory per "
                    f"configuration, {one_line(title)}", "```", ""]
        out += [f"Command: {md_code(document['settings']['command'])}", ""]
    out += [
        "## The source experiment (quoted)",
        "",
        "These figures are quoted from the hand-run experiment this comparison repeats, not measured by "
        "this project: a pretrained ResNet-50 fine-tuned on CIFAR-10 for 5 epochs at batch 128 on four "
        "Tesla P40 GPUs. It is not a paper; \"—\" is a figure not quoted here. Its DeepSpeed run did not "
        "start (\"could not get the environment working\").",
        "",
        *_source_experiment(),
        "",
    ]
    return "\n".join(out)


def _snippet(record: Any, documents: list[tuple[Path, Mapping[str, Any]]]) -> str:
    (option, value), = record.trainer_option.items()
    out = [f"<!-- Generated by docs/source/tables/update_training_results.py from results/*.json "
           f"for {record.key}; do not edit. -->", ""]
    shown = 0
    for path, document in documents:
        rows = _card_rows(document, option, value)
        if not rows:
            continue
        shown += 1
        out += [_source_line(document, path), "", *_load_note(document), *_card_table(document, rows), ""]
    if not shown:
        out += [f"No committed results file measures `{option}={value!r}` yet.", ""]
    out += ["All configurations: [Training configurations](../training_configurations.md).", ""]
    return "\n".join(out)


def render(metadata_root: Path | None = None, source_dir: Path | None = None,
           results_root: Path | None = None) -> dict[Path, str]:
    source_dir = Path(source_dir) if source_dir is not None else HERE.parent
    paths = discover_results(results_root if results_root is not None else RESULTS_DIR)
    documents = [(path, load_results(path)) for path in paths]  # ResultsError (a ValueError): one line each
    outputs: dict[Path, str] = {source_dir / PAGE: _page(documents)}
    for path, document in documents:
        if any(r["status"] == "ok" for r in document["runs"]):
            outputs[source_dir / SNIPPETS / f"{path.stem}.svg"] = _chart(document)
    for record in load_all_metadata(metadata_root).values():
        if record.is_best_practice and record.trainer_option:
            outputs[source_dir / SNIPPETS / f"{record.key}.md.inc"] = _snippet(record, documents)
    return outputs


if __name__ == "__main__":
    raise SystemExit(generator_cli(render, description=__doc__, prog="docs/source/tables/update_training_results.py"))
