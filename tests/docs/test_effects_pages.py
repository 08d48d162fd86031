"""The measured effects as the site shows them (``methods_tools.effects_pages``): every card's
snippet and the overview's tables and charts, from effects files of schema version 4.

Every figure reads as evidence: a change or ratio with its 95 % interval and verdict, "no
detectable difference" first where there is none, "no practical difference" with its margin, an
interval's ends with their signs visible, and a quality verdict of better or worse with whether it
holds after Holm's correction; a row without an effect shows its reason and no number; each row
names the command that measured it; every table says it was measured at small scale and quotes
the figure at scale, escaped."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from docs_support import HOSTILE, SYNTHETIC
from methods_tools import effects_pages, pages, summaries
from methods_tools.docsgen import Site, jinja_environment, sorted_methods
from methods_tools.effects_pages import render_effects
from methods_tools.markup import md_code, md_text, rst_text
from methods_tools.measurements_page import render_measurements
from methods_tools.results import effects_problems, load_effects

from algorithms.metadata import discover_metadata_files, validate_files

CMD_A = "python tools/measure_methods.py --only alpha_trick --seeds 3"
CMD_B = "python tools/measure_methods.py --only hostile,zeta_method --seeds 3 --resume"

ENV = {
    "hardware": "Test CPU, 2 cores (CPU only)",
    "device_type": "cpu",
    "device_name": "Test CPU",
    "device_count": 1,
    "cpu_model": "Test CPU",
    "cpu_count": 2,
    "torch": "2.0.0",
    "cuda": None,
    "python": "3.11.0",
    "platform": "Linux",
    "date": "2026-01-02T03:04:05Z",
    "load_average": [0.5, 0.5, 0.5],
}
VISION = {
    "workload": "vision",
    "model": "resnet20",
    "data": "digits",
    "image_size": 16,
    "seq_len": None,
    "epochs": 4,
    "batch_size": 64,
    "max_batches": None,
    "lr": 0.05,
    "optimizer": "sgd",
    "precision": "fp32",
    "eval_examples": None,
    "metric": "accuracy",
    "throughput_unit": "images",
    "chance_accuracy": 0.1,
    "test_fraction": 0.8,
    "schedule": "onecycle",
    "threads": 1,
}
NLP = {
    **VISION,
    "workload": "nlp",
    "model": "transformer_tiny",
    "data": "stdlib_text",
    "image_size": None,
    "seq_len": 64,
    "epochs": 1,
    "max_batches": 20,
    "lr": 0.003,
    "optimizer": "adamw",
    "eval_examples": 256,
    "metric": "loss",
    "throughput_unit": "tokens",
    "chance_accuracy": None,
    "test_fraction": None,
    "schedule": "constant",
}
SEEDS = [0, 1, 2]
T_INTERVAL, BOOTSTRAP = "paired t, 95 %", "bootstrap over seed pairs, 95 %"


def change(
    metric: str,
    change: float,
    low: float,
    high: float,
    verdict: str,
    *,
    p_value: float = 0.02,
    p_holm: float = 0.02,
    family: int = 1,
) -> dict:
    return {
        "metric": metric,
        "baseline": 0.9 if metric == "accuracy" else 2.0,
        "change": change,
        "low": low,
        "high": high,
        "pairs": 3,
        "interval": T_INTERVAL,
        "margin": 0.001 if metric == "accuracy" else 0.01,
        "p_value": p_value,
        "p_holm": p_holm,
        "holm_family": family,
        "verdict": verdict,
    }


def ratio(value: float, low: float, high: float, verdict: str, margin: float = 0.01) -> dict:
    return {
        "ratio": value,
        "low": low,
        "high": high,
        "pairs": 3,
        "interval": BOOTSTRAP,
        "margin": margin,
        "verdict": verdict,
    }


def entry(
    method: str,
    status: str,
    command: str,
    *,
    model=None,
    precision=None,
    reason=None,
    quality=None,
    throughput=None,
    memory=None,
    activity=None,
    hparams=None,
    baseline=None,
) -> dict:
    return {
        "method": method,
        "model": model,
        "precision": precision,
        "hparams": hparams or {},
        "seeds": SEEDS if status in ("measured", "baseline", "did_not_act") else [],
        "status": status,
        "reason": reason,
        "commands": [command],
        "activity": activity,
        "quality": quality,
        "throughput": throughput,
        "memory": memory,
        "baseline": baseline,
    }


def baseline(command: str, metric: str = "accuracy", **kw) -> dict:
    mean, low, high = (0.91, 0.89, 0.93) if metric == "accuracy" else (2.05, 2.0, 2.1)
    return entry(
        "baseline",
        "baseline",
        command,
        baseline={
            "metric": metric,
            "mean": mean,
            "low": low,
            "high": high,
            "throughput_median": 2075.7,
            "throughput_min": 1654.9,
            "throughput_max": 2496.6,
        },
        **kw,
    )


def document(settings: dict, summary: list[dict], commands=(CMD_A, CMD_B)) -> dict:
    """A valid effects document of ``summary``, with a run per seed of each of its rows."""
    runs = []
    for e in summary:
        for seed in SEEDS:
            ok = e["status"] in ("measured", "baseline", "did_not_act")
            runs.append(
                {
                    "method": e["method"],
                    "model": e["model"],
                    "precision": e["precision"],
                    "seed": seed,
                    "hparams": e["hparams"],
                    "status": "ok" if ok else e["status"],
                    "reason": None if ok else e["reason"],
                    "date": ENV["date"],
                    "load_average": [0.5, 0.5, 0.5],
                    "wall_s": 10.0 if ok else None,
                    "samples": 640 if ok else None,
                    "throughput": 2000.0 if ok else None,
                    "peak_memory_bytes": 2**30 if ok else None,
                    "memory_kind": "cpu_peak_rss" if ok else None,
                    "accuracy": (0.9 if settings["metric"] == "accuracy" else None) if ok else None,
                    "loss": 2.0 if ok else None,
                    "command": e["commands"][0],
                    "eval_s": 1.0 if ok else None,
                    "job_s": 12.0 if ok else None,
                    "tokens": (40960 if settings["seq_len"] else None) if ok else None,
                    "activity": None
                    if e["method"] == "baseline" or not ok
                    else {k: int(v) for k, v in (e["activity"] or {}).items()},
                    "acted": None if e["method"] == "baseline" or not ok else e["status"] == "measured",
                }
            )
    doc = {
        "$schema": "../../algorithms/effects.schema.json",
        "schema_version": 4,
        "environment": ENV,
        "settings": dict(settings),  # a copy: a test that changes one file's settings changes no other's
        "commands": list(commands),
        "runs": runs,
        "summary": summary,
    }
    assert effects_problems(doc) == []
    return doc


def vision_document() -> dict:
    """Alpha Trick measured (by CMD_A), the hostile method did not act, Zeta failed and is not
    applicable in amp_fp16 (by CMD_B, the file's last command)."""
    return document(
        VISION,
        [
            baseline(CMD_A),
            entry(
                "alpha_trick",
                "measured",
                CMD_A,
                hparams={"p": 0.5},
                activity={"batches_mixed": 10.0},
                quality=change("accuracy", 0.012, 0.004, 0.020, "better"),
                throughput=ratio(0.87, 0.83, 0.93, "worse"),
                memory=ratio(1.0, 0.98, 1.03, "no detectable difference"),
            ),
            entry(
                "hostile",
                "did_not_act",
                CMD_B,
                activity={"layers_frozen": 0.0},
                reason="its recorded activity was zero in all 8 runs (layers frozen 0)",
            ),
            entry("zeta_method", "failed", CMD_B, reason="KeyError: 'weight' <b>bold</b> *star*"),
            entry(
                "zeta_method",
                "not_applicable",
                CMD_B,
                precision="amp_fp16",
                reason="amp_fp16 needs a GPU: this machine has none",
            ),
        ],
    )


def nlp_document() -> dict:
    """Zeta measured in amp_bf16 (a lower loss), Alpha Trick with no detectable difference."""
    return document(
        NLP,
        [
            baseline(CMD_A, "loss"),
            baseline(CMD_A, "loss", precision="amp_bf16"),
            entry(
                "alpha_trick",
                "measured",
                CMD_A,
                quality=change("loss", 0.002, -0.006, 0.009, "no detectable difference", p_holm=0.6, family=2),
                throughput=ratio(1.01, 0.9, 1.1, "no detectable difference"),
                memory=None,
            ),
            entry(
                "zeta_method",
                "measured",
                CMD_A,
                precision="amp_bf16",
                quality=change("loss", -0.05, -0.08, -0.02, "better", p_value=0.04, p_holm=0.08, family=2),
                throughput=ratio(1.42, 1.3, 1.55, "better"),
                memory=ratio(0.8, 0.75, 0.85, "better"),
            ),
        ],
        commands=(CMD_A,),
    )


AT_SCALE = {
    "figure": "+1.4 points top-1",
    "setting": "ResNet-50 on ImageNet, 90 epochs",
    "hardware": "8 V100 GPUs",
    "source": "Yun et al., 2019",
    "url": "https://arxiv.org/abs/1905.04899",
}


def site(metadata: Path, root: Path, documents: dict[str, dict], at_scale: dict[str, dict] | None = None) -> Site:
    """The site of ``metadata`` (whose records get ``at_scale``'s figures) and ``documents``
    (name -> effects document), written under ``root/results/effects`` and loaded as the build does."""
    effects_dir = root / "results" / "effects"
    effects_dir.mkdir(parents=True, exist_ok=True)
    (root / "model_cards").mkdir(exist_ok=True)
    for family in ("resnet", "transformer"):  # the cards of the workloads' models, which the lines link
        (root / "model_cards" / f"{family}.md").write_text(f"# {family}\n", encoding="utf-8")
    effects = []
    for name, doc in sorted(documents.items()):
        path = effects_dir / name
        path.write_text(json.dumps(doc), encoding="utf-8")
        effects.append((path, load_effects(path)))
    records, problems = validate_files(discover_metadata_files(metadata))
    assert problems == []
    records = {
        k: dataclasses.replace(r, at_scale=at_scale[k], raw={**r.raw, "at_scale": at_scale[k]})
        if k in (at_scale or {})
        else r
        for k, r in records.items()
    }
    return Site(
        source_dir=root,
        out_dir=root,
        env=jinja_environment(pages.TEMPLATE_DIR),
        methods=sorted_methods(records),
        results=[],
        effects=effects,
    )


def rendered(metadata: Path, root: Path, documents: dict[str, dict], at_scale=None) -> dict[Path, str]:
    s = site(metadata, root, documents, at_scale)
    for generator in (pages.methods_overview, render_effects, pages.landing):
        s.rendered.update(generator(s))
    return dict(s.rendered)


def card(out: dict[Path, str], key: str) -> str:
    return out[Path(f"tables/effects/{key}.md.inc")]


def overview(out: dict[Path, str]) -> str:
    return out[Path("method_cards/methods_overview.md")]


def table_rows(text: str, key: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("| [") and f"]({key}.md)" in line]


# --------------------------------------------------------------------------------------------- measured rows


def test_a_measured_row_shows_each_change_with_its_interval_and_verdict(synthetic_metadata, tmp_path):
    out = rendered(synthetic_metadata, tmp_path, {"vision-test.json": vision_document()})
    text = card(out, "alpha_trick")
    holds = "holds after Holm's correction over 1 method"
    assert f"| Test accuracy, change | +1.2 points (+0.4 to +2.0): better; {holds} |" in text
    assert "| Throughput (images/s), ratio | 0.87x (0.83–0.93): slower |" in text
    assert "| Peak memory of the process (resident set), ratio | no detectable difference (0.98–1.03x) |" in text
    assert (
        "| Baseline | 91.0 % test accuracy (95 % t interval 89.0 to 93.0 %; chance 10 %); median 2,076 images/s "
        "(range 1,655–2,497 over 3 seeds) |"
    ) in text
    assert f"| Seed pairs | 3 (change in quality: {T_INTERVAL}; ratios: {BOOTSTRAP}) |" in text
    assert "| Paired t-test of the change in quality | p = 0.020; Holm-adjusted over 1 method, p = 0.020 |" in text
    assert "| What it did (mean per run) | batches mixed 10 |" in text
    assert "`Thing(p=0.5)`" in text and "`results/effects/vision-test.json`" in text

    (row,) = table_rows(overview(out), "alpha_trick")
    assert row == (
        f"| [Alpha Trick](alpha_trick.md) | +1.2 points (+0.4 to +2.0): better; {holds} | 0.87x (0.83–0.93): slower | "
        "no detectable difference (0.98–1.03x) | 3 | none quoted |"
    )
    assert (
        "| Method | Test accuracy, change (95 % interval) | Throughput (images/s), ratio (95 % interval) |"
        in overview(out)
    )


def with_tensor_memory(doc: dict) -> dict:
    """``doc`` measured with tensor memory: every successful run has its figures, and the measured
    and baseline rows their medians (Alpha Trick: 1.5 MiB at peak against the baseline's 2 MiB)."""
    doc = json.loads(json.dumps(doc))
    mib = 2**20

    def figures(peak: float) -> dict:
        return {
            "peak_bytes": peak,
            "weights_bytes": mib / 4,
            "gradients_bytes": mib / 4,
            "optimizer_bytes": mib / 4,
            "activations_bytes": peak - 3 * mib / 4,
            "how": "cpu_profiler",
        }

    for run in doc["runs"]:
        if run["status"] == "ok":
            peak = int(1.5 * mib) if run["method"] == "alpha_trick" else 2 * mib
            run["tensor_memory"] = {**figures(peak), "warmup_batches": 1, "batches": 2}
    for row in doc["summary"]:
        row["tensor_memory"] = (
            figures(1.5 * mib)
            if row["method"] == "alpha_trick"
            else figures(2.0 * mib)
            if row["method"] == "baseline"
            else None
        )
        if row["method"] == "alpha_trick":
            row["memory"] = ratio(0.75, 0.7, 0.8, "better")
    assert effects_problems(doc) == []
    return doc


def test_tensor_memory_names_its_figure_and_shows_its_split(synthetic_metadata, tmp_path):
    out = rendered(synthetic_metadata, tmp_path, {"vision-test.json": with_tensor_memory(vision_document())})
    text = card(out, "alpha_trick")
    assert "| Peak tensor memory (torch's accounting), ratio | 0.75x (0.70–0.80): less memory |" in text
    assert (
        "| Tensor memory (median over the seed pairs) | peak 1.50 MiB: weights 0.25 MiB, gradients 0.25 MiB, "
        "optimizer state 0.25 MiB, activations 0.75 MiB; baseline peak 2.00 MiB: weights 0.25 MiB, gradients "
        "0.25 MiB, optimizer state 0.25 MiB, activations 1.25 MiB |"
    ) in text
    assert "resident set" not in text
    page = overview(out)
    assert "Memory is the peak tensor memory, by torch's own accounting, measured over a few batches" in page
    # A file measured before tensor memory shows neither the split nor that sentence.
    old = rendered(synthetic_metadata, tmp_path / "old", {"vision-test.json": vision_document()})
    assert "Tensor memory" not in card(old, "alpha_trick") and "tensor memory" not in overview(old)


def test_the_workload_line_links_its_models_card_or_names_a_model_no_family_lists(synthetic_metadata, tmp_path):
    assert effects_pages.model_member("torchvision_resnet18") == ("ResNet-18 (torchvision)", "torchvision_resnet")
    assert effects_pages.model_member("hf_gpt2_tiny") == ("GPT-2 (tiny config)", "hf_gpt2")
    assert effects_pages.model_member("my_own_net") == ("", None)
    doc = vision_document()
    doc["settings"]["model"] = "my_own_net"
    text = card(rendered(synthetic_metadata, tmp_path / "a", {"vision-test.json": doc}), "alpha_trick")
    assert "**Vision workload, small scale:** `my_own_net` on digits (16 px images)" in text
    s = site(synthetic_metadata, tmp_path / "b", {"vision-test.json": vision_document()})
    (tmp_path / "b" / "model_cards" / "resnet.md").unlink()  # a site without the model's card links none
    assert (
        "**Vision workload, small scale:** `resnet20` on digits"
        in render_effects(s)[Path("tables/effects/alpha_trick.md.inc")]
    )


def test_a_language_models_row_is_a_loss_in_nats_and_tokens_per_second(synthetic_metadata, tmp_path):
    out = rendered(synthetic_metadata, tmp_path, {"nlp-test.json": nlp_document()})
    text = card(out, "zeta_method")
    assert (
        "| Validation loss (lower is better), change | −0.05 nats (−0.08 to −0.02): better; does not hold after "
        "Holm's correction over 2 methods |" in text
    )
    assert "| Paired t-test of the change in quality | p = 0.040; Holm-adjusted over 2 methods, p = 0.080 |" in text
    assert "| Throughput (tokens/s), ratio | 1.42x (1.30–1.55): faster |" in text
    assert "0.80x (0.75–0.85): less memory" in text
    assert "accuracy" not in text.lower()
    # measured in another precision: said so, against the baseline of that precision
    assert (
        "Zeta was measured in `amp_bf16` instead of `fp32` (its metadata's workload), against a baseline of "
        "the same model and precision" in text
    )
    assert (
        "| Baseline (amp\\_bf16) | validation loss 2.050 nats (95 % t interval 2.000 to 2.100); median 2,076 "
        "tokens/s" in text
    )
    assert (
        "{doc}`Transformer-tiny </model_cards/transformer>` (`transformer_tiny`) on stdlib\\_text "
        "(windows of 64 tokens)" in text
    )
    assert "| Throughput (tokens/s), ratio | not measured |" not in text
    assert "| Peak memory of the process (resident set), ratio | not measured |" in card(out, "alpha_trick")


# --------------------------------------------------------------------------------------------- (b) no difference


def test_no_detectable_difference_reads_first_with_its_interval_not_as_a_number(synthetic_metadata, tmp_path):
    out = rendered(synthetic_metadata, tmp_path, {"nlp-test.json": nlp_document()})
    text = card(out, "alpha_trick")
    assert "| Validation loss (lower is better), change | no detectable difference (−0.006 to +0.009 nats) |" in text
    assert "| Throughput (tokens/s), ratio | no detectable difference (0.90–1.10x) |" in text
    assert "+0.002" not in text and "1.01x" not in text  # the point estimates are not offered as effects
    (row,) = table_rows(overview(out), "alpha_trick")
    cells = [c.strip() for c in row.split(" | ")]
    assert cells[1].startswith("no detectable difference (") and cells[2].startswith("no detectable difference (")


HOLDS = "holds after Holm's correction over 22 methods"
FAILS = "does not hold after Holm's correction over 22 methods"


@pytest.mark.parametrize(
    ("quality", "expected"),
    [
        (
            change("accuracy", 0.002, -0.006, 0.009, "no detectable difference"),
            "no detectable difference (−0.6 to +0.9 points)",
        ),
        (
            change("accuracy", -0.031, -0.05, -0.012, "worse", p_holm=0.01, family=22),
            f"−3.1 points (−5.0 to −1.2): worse; {HOLDS}",
        ),
        (
            change("loss", 0.0004, -0.0003, 0.0011, "no detectable difference"),
            "no detectable difference (−0.0003 to +0.0011 nats)",
        ),
        # an end that decided the verdict never reads as zero: not "(−2.0 to 0.0): worse"
        (
            change("accuracy", -0.0102, -0.0201, -0.0002, "worse", p_holm=0.64, family=22),
            f"−1.02 points (−2.01 to −0.02): worse; {FAILS}",
        ),
        # nor "(0.0 to +1.5): better"; every figure of the line at the same decimals
        (
            change("accuracy", 0.0075, 0.00004, 0.015, "better", p_holm=0.04, family=22),
            f"+0.750 points (+0.004 to +1.500): better; {HOLDS}",
        ),
        # an end of an inconclusive interval shows on which side of zero it lies
        (
            change("accuracy", -0.0056, -0.0114, 0.0003, "no detectable difference"),
            "no detectable difference (−1.14 to +0.03 points)",
        ),
        (
            change("accuracy", 0.0005, 0.0001, 0.0009, "no practical difference"),
            "+0.05 points (+0.01 to +0.09): no practical difference (within ±0.1 points)",
        ),
        (
            change("loss", 0.004, -0.002, 0.006, "no practical difference"),
            "+0.004 nats (−0.002 to +0.006): no practical difference (within ±0.01 nats)",
        ),
    ],
)
def test_a_quality_change_is_formatted_with_its_interval(quality, expected):
    assert effects_pages.quality_text(quality) == expected


@pytest.mark.parametrize(
    ("what", "value", "expected"),
    [
        ("throughput", ratio(1.2, 1.1, 1.3, "better"), "1.20x (1.10–1.30): faster"),
        ("memory", ratio(1.0141, 1.0134, 1.0148, "worse"), "1.014x (1.013–1.015): more memory"),
        ("memory", None, "not measured"),
        # the end that decided "faster" does not read as 1.00x
        ("throughput", ratio(1.05, 1.003, 1.1, "better", 0.02), "1.050x (1.003–1.100): faster"),
        ("throughput", ratio(0.95, 0.9, 0.9996, "worse", 0.02), "0.9500x (0.9000–0.9996): slower"),
        (
            "memory",
            ratio(1.0039, 1.0039, 1.0439, "no practical difference"),
            "1.004x (1.004–1.044): no practical difference (within ±1 %)",
        ),
        (
            "throughput",
            ratio(1.0, 0.97, 1.01, "no practical difference", 0.02),
            "1.000x (0.970–1.010): no practical difference (within ±2 %)",
        ),
    ],
)
def test_a_ratio_is_formatted_with_its_interval(what, value, expected):
    assert effects_pages.ratio_text(value, what) == expected


def holm_document() -> dict:
    """Three measured rows corrected together: Alpha Trick better and holding, Zeta worse but not
    holding after Holm's correction, Zeta in amp_bf16 no practical difference."""
    doc = vision_document()
    rows = [e for e in doc["summary"] if e["status"] in ("baseline", "measured")]
    rows[1]["quality"] = change("accuracy", 0.012, 0.004, 0.020, "better", p_value=0.004, p_holm=0.012, family=3)
    rows.append(
        entry(
            "zeta_method",
            "measured",
            CMD_A,
            quality=change("accuracy", -0.01, -0.019, -0.001, "worse", p_value=0.03, p_holm=0.06, family=3),
            throughput=ratio(1.0, 0.9, 1.1, "no detectable difference"),
            memory=ratio(1.004, 1.002, 1.006, "no practical difference"),
        )
    )
    rows.append(
        entry(
            "zeta_method",
            "measured",
            CMD_A,
            precision="amp_bf16",
            quality=change(
                "accuracy", 0.0005, 0.0001, 0.0009, "no practical difference", p_value=0.03, p_holm=0.06, family=3
            ),
            throughput=ratio(1.0, 0.9, 1.1, "no detectable difference"),
            memory=None,
        )
    )
    rows.append(baseline(CMD_A, precision="amp_bf16"))
    return document(VISION, rows)


def test_each_file_says_which_quality_verdicts_hold_after_holms_correction(synthetic_metadata, tmp_path):
    out = rendered(synthetic_metadata, tmp_path, {"vision-test.json": holm_document()})
    page = overview(out)
    assert (
        "**Multiple comparisons.** The 3 changes in quality of this file are 3 tests side by side, so some could "
        "come out better or worse by chance alone; Holm's correction over 3 methods keeps the chance of any false "
        "verdict among them at 5 %. Of the 2 verdicts of better or worse, 1 holds after it (Alpha Trick) and 1 "
        "does not (Zeta)."
    ) in page
    (zeta, zeta_bf16) = table_rows(page, "zeta_method")
    assert "−1.0 points (−1.9 to −0.1): worse; does not hold after Holm's correction over 3 methods" in zeta
    assert "1.004x (1.002–1.006): no practical difference (within ±1 %)" in zeta
    # no difference is claimed, so there is nothing to correct
    assert "+0.05 points (+0.01 to +0.09): no practical difference (within ±0.1 points) |" in zeta_bf16
    assert "Holm" not in zeta_bf16
    landing = " ".join(out[Path("tables/landing.rst.inc")].split())
    assert rst_text(
        "After Holm's correction over 3 methods, 1 of these 2 changes in test accuracy hold (Alpha Trick)."
    ) in (landing)
    chart = out[Path("tables/effects/vision-test.svg")]
    assert ">no practical difference<" in chart and ">no detectable difference<" in chart


def test_the_measurements_page_states_every_margin_the_verdicts_use(synthetic_metadata, tmp_path):
    from methods_tools.evidence import MARGIN_REASONS

    s = site(synthetic_metadata, tmp_path, {})
    page = render_measurements(s, matrices=[])[Path("tables/measurements/verdicts.md.inc")]
    rows = [line for line in page.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert [row.split(" | ")[:2] for row in rows] == [
        ["| Change in test accuracy", "±0.1 points"],
        ["| Change in a language model's validation loss", "±0.01 nats"],
        ["| Throughput, ratio", "±2 %"],
        ["| Peak memory, ratio", "±1 %"],
    ]
    for reason in MARGIN_REASONS.values():
        assert md_text(reason) in page
    assert "±0.1 points of accuracy, ±0.01 nats of loss, ±2 % of throughput and ±1 % of memory" in overview(
        rendered(synthetic_metadata, tmp_path, {"vision-test.json": vision_document()})
    )


# --------------------------------------------------------------------------------------------- (a) no effect

NUMBERS = re.compile(r"\d\.\d+x|points|nats|[+−-]\d+\.\d|better|worse|no detectable difference")


def test_a_row_without_an_effect_shows_its_reason_and_no_number(synthetic_metadata, tmp_path):
    out = rendered(synthetic_metadata, tmp_path, {"vision-test.json": vision_document()})
    hostile = card(out, "hostile")
    assert (
        "No effect is reported — did not act: its recorded activity was zero in all 8 runs (layers frozen 0)."
        in hostile
    )
    zeta = card(out, "zeta_method")
    assert "No effect is reported — failed: KeyError: 'weight' \\<b\\>bold\\</b\\> \\*star\\*." in zeta
    assert "No effect is reported — not applicable here: amp\\_fp16 needs a GPU: this machine has none." in zeta
    for text in (hostile, zeta):
        assert "|---|" not in text and "+0.000" not in text
        body = text.split("workload, small scale:**")[1]
        assert not NUMBERS.search(body.replace("Baseline", "")), NUMBERS.search(body)

    page = overview(out)
    assert table_rows(page.split("Without an effect")[0], "hostile") == []  # not in the table of effects
    assert "| [Zeta](zeta_method.md) | failed: KeyError: 'weight' \\<b\\>bold\\</b\\> \\*star\\* |" in page
    assert "| [Zeta (amp\\_fp16)](zeta_method.md) | not applicable here: amp\\_fp16 needs a GPU" in page
    assert "did not act: its recorded activity was zero in all 8 runs (layers frozen 0) |" in page
    chart = out[Path("tables/effects/vision-test.svg")]
    assert "Not plotted, no effect:" in chart and "did not act" in chart
    assert re.search(
        r":alt: Forest plot of 1 methods .* Not plotted: .*Zeta: failed; Zeta \(amp_fp16\): not "
        r"applicable here\.",
        page,
    )


def test_a_file_without_a_measured_row_has_no_chart_and_lists_its_rows(synthetic_metadata, tmp_path):
    doc = vision_document()
    doc = document(VISION, [e for e in doc["summary"] if e["status"] != "measured"])
    out = rendered(synthetic_metadata, tmp_path, {"vision-test.json": doc})
    assert not any(p.suffix == ".svg" for p in out)
    page = overview(out)
    assert "No method of this file has a measured effect yet." in page and "ml-effects-table" not in page
    assert "did not act: its recorded activity" in page
    assert ".. figure::" not in out[Path("tables/landing.rst.inc")]
    assert "has not measured Alpha Trick yet." in card(out, "alpha_trick")


# --------------------------------------------------------------------------------------------- (c) commands


def test_the_command_shown_for_a_row_is_the_command_that_measured_it(synthetic_metadata, tmp_path):
    out = rendered(synthetic_metadata, tmp_path, {"vision-test.json": vision_document()})
    alpha, zeta = card(out, "alpha_trick"), card(out, "zeta_method")
    assert f"Command that measured this row: {md_code(CMD_A)}." in alpha
    assert CMD_B not in alpha  # the file's last command did not measure this row
    assert zeta.count(f"Command that measured this row: {md_code(CMD_B)}.") == 2 and CMD_A not in zeta
    page = overview(out)
    assert f"Measured by:\n- {md_code(CMD_A)}\n- {md_code(CMD_B)}\n" in page


# --------------------------------------------------------------------------------------------- (d) scale


def test_every_table_says_it_is_small_scale_and_quotes_the_figure_at_scale(synthetic_metadata, tmp_path):
    out = rendered(
        synthetic_metadata,
        tmp_path,
        {"vision-test.json": vision_document(), "nlp-test.json": nlp_document()},
        at_scale={"alpha_trick": AT_SCALE},
    )
    alpha = card(out, "alpha_trick")
    quoted = (
        "At scale: +1.4 points top-1 (ResNet-50 on ImageNet, 90 epochs; hardware: 8 V100 GPUs), as quoted by "
        "[Yun et al., 2019](https://arxiv.org/abs/1905.04899)."
    )
    # each file's part of the card: one line (workload and its model's card, hardware, date, file, the
    # shared page), then its table; the figure at scale once, after every file's part
    parts = alpha.split("**")[1:]
    assert [title for title in parts[::2]] == ["Text workload, small scale:", "Vision workload, small scale:"]
    for part in parts[1::2]:
        assert part.index("Test CPU, 2 cores (CPU only), 2026-01-02") < part.index("|---|")
        assert "not what the method does at scale: {ref}`how the effects are measured <measurements-effects>`" in part
    assert alpha.count(quoted) == 1 and alpha.rindex("|---|") < alpha.index(quoted)
    assert (
        " {doc}`ResNet-20 </model_cards/resnet>` (`resnet20`) on digits (16 px images), Test CPU, 2 cores (CPU "
        "only), 2026-01-02; results file `results/effects/vision-test.json`."
    ) in alpha
    # the workload's settings, versions and seeds are on the shared page, not on every card
    assert "seeds 0, 1, 2" not in alpha and "torch 2.0.0" not in alpha
    assert "At scale: no figure at scale is quoted." in card(out, "zeta_method")
    page = overview(out)
    (row,) = table_rows(page.split("### Vision")[1], "alpha_trick")
    assert row.endswith("| +1.4 points top-1 ([Yun et al., 2019](https://arxiv.org/abs/1905.04899)) |")
    assert page.count("Measured at small scale on a CPU") == 2


def test_the_shared_page_gives_each_files_workload_seeds_versions_and_load(synthetic_metadata, tmp_path):
    """What every card would repeat is on "How the cards' evidence is measured", once per file."""
    doc = vision_document()
    for run in doc["runs"]:
        run["load_average"] = [3.5, 3.0, 2.5]  # above the 2 cores: a shared machine
    s = site(synthetic_metadata, tmp_path, {"vision-test.json": doc, "nlp-test.json": nlp_document()})
    page = render_measurements(s, matrices=[])[Path("tables/measurements/effects.md.inc")]
    assert [line for line in page.splitlines() if line.startswith("### ")] == [
        "### Text: transformer\\_tiny on stdlib\\_text, Test CPU, 2 cores (CPU only), 2026-01-02",
        "### Vision: resnet20 on digits, Test CPU, 2 cores (CPU only), 2026-01-02",
    ]
    assert (
        "Measured at small scale on a CPU with `tools/measure_methods.py`: Test CPU, 2 cores (CPU only), "
        "2026-01-02 (torch 2.0.0, Python 3.11.0); {doc}`ResNet-20 </model_cards/resnet>` (`resnet20`) on digits "
        "(16 px images), 4 epoch(s) of batch 64, "
        "sgd (learning rate 0.05, onecycle schedule), fp32, one process of 1 thread, seeds 0, 1, 2."
    ) in page
    assert page.count("not what it does at scale") == 2
    assert page.count("The machine was shared") == 1 and "reached 3.5 on 2 cores" in page
    assert f"Commands that measured it: {md_code(CMD_A)}; {md_code(CMD_B)}." in page
    assert f"Command that measured it: {md_code(CMD_A)}." in page
    # a card names its file's load in a few words
    assert "a shared machine (load average up to 3.5 on 2 cores)" in card(
        rendered(synthetic_metadata, tmp_path, {"vision-test.json": doc}), "alpha_trick"
    )

    empty = render_measurements(site(synthetic_metadata, tmp_path / "none", {}), matrices=[])
    assert "No effects file is committed yet" in empty[Path("tables/measurements/effects.md.inc")]


def test_a_method_that_is_not_measured_still_quotes_its_figure_at_scale(synthetic_metadata, tmp_path):
    out = rendered(synthetic_metadata, tmp_path, {}, at_scale={"alpha_trick": {**AT_SCALE, "url": None}})
    text = card(out, "alpha_trick")
    assert "has not measured Alpha Trick yet." in text
    assert (
        "At scale: +1.4 points top-1 (ResNet-50 on ImageNet, 90 epochs; hardware: 8 V100 GPUs), as quoted by "
        "Yun et al., 2019." in text
    )


# --------------------------------------------------------------------------------------------- (e) escaping


def test_metadata_and_results_text_is_escaped(synthetic_metadata, tmp_path):
    hostile_scale = {
        "figure": HOSTILE,
        "setting": "<i>x</i> `y`",
        "hardware": "[z](javascript:alert(1))",
        "source": "**Mallory** ](javascript:alert(1))",
        "url": "https://example.invalid/a b)(c<d>",
    }
    out = rendered(
        synthetic_metadata,
        tmp_path,
        {"vision-test.json": vision_document()},
        at_scale={"hostile": hostile_scale, "alpha_trick": hostile_scale},
    )
    for text in (card(out, "hostile"), card(out, "alpha_trick"), overview(out)):
        assert "<script>" not in text and "<i>x</i>" not in text
        assert not re.search(r"(?<!\\)\]\(javascript", text)  # no link to javascript: (an escaped "]" opens none)
        assert md_text(HOSTILE) in text
        assert "(https://example.invalid/a%20b%29%28c%3Cd%3E)" in text
    name = md_text("Evil *Name* <b>x</b> `code` {eval-rst}")
    assert f"| [{name}](hostile.md) | did not act:" in overview(out)
    bad = {**AT_SCALE, "url": "javascript:alert(1)"}
    with pytest.raises(ValueError, match="only https:// links are allowed"):
        rendered(
            synthetic_metadata, tmp_path / "bad", {"vision-test.json": vision_document()}, at_scale={"alpha_trick": bad}
        )


# --------------------------------------------------------------------------------------------- charts


def test_the_chart_is_a_forest_plot_with_its_text_kept_as_text(synthetic_metadata, tmp_path):
    out = rendered(
        synthetic_metadata, tmp_path, {"nlp-test.json": nlp_document(), "vision-test.json": vision_document()}
    )
    chart = out[Path("tables/effects/nlp-test.svg")]
    assert "<dc:identifier>sha256:" in chart
    for text in (
        ">Alpha Trick<",
        ">Zeta (amp_bf16)<",
        "(log scale)",
        ">1x<",
        "Text: transformer_tiny on stdlib_text",
        ">no detectable difference<",
    ):
        assert text in chart, text
    page = overview(out)
    assert "```{figure} ../tables/effects/nlp-test.svg" in page and ":class: ml-effects-chart" in page
    assert (
        "Text workload (transformer\\_tiny on stdlib\\_text, windows of 64 tokens), measured at small scale on a "
        "CPU: each measured method's change in validation loss"
    ) in page
    assert "Vision workload (resnet20 on digits, 16 px images)" in page
    # the best change in quality first: a lower loss for Zeta
    view = effects_pages.effects_file(
        Path("nlp-test.json"),
        nlp_document(),
        {r.key: r for r in sorted_methods(validate_files(discover_metadata_files(synthetic_metadata))[0])},
    )
    assert [r.key for r in view.chart_rows] == ["zeta_method", "alpha_trick"]
    landing = out[Path("tables/landing.rst.inc")]
    for chart in ("nlp-test", "vision-test"):
        assert f".. figure:: tables/effects/{chart}.svg" in landing
    # each landing chart's caption says what that chart found (by verdict, beyond its 95 % interval),
    # not the overview's description of how it is drawn
    captions = [
        " ".join(c.split())
        for c in re.findall(r"\n\n   (Text workload.*?|Vision workload.*?)\n\n", landing, flags=re.S)
    ]
    assert len(captions) == 2 and captions[0] != captions[1]
    assert captions[0].startswith(
        rst_text(
            "Text workload, transformer_tiny on stdlib_text: of 2 methods measured, "
            "Zeta (amp_bf16) lowered the validation loss; Zeta (amp_bf16) (1.42x) "
            "ran faster."
        )
    )
    assert captions[1].startswith(rst_text("Vision workload, resnet20 on digits: of "))
    assert not any("each measured method's change" in c for c in captions)


def test_a_method_that_wrecks_quality_does_not_squeeze_the_others_onto_zero(synthetic_metadata, tmp_path):
    """One row tens of points down is drawn to the axis's edge with an arrow and its value; the axis
    spans the other rows' intervals, so a change of about a point still reads as one."""
    lows = [-75.3, -18.7, -2.0, -1.1, -0.9, -0.6, 0.3, 0.6, 0.9]
    highs = [-65.7, -13.8, -0.02, 0.2, 0.4, 0.8, 1.6, 1.9, 2.2]
    low, high = effects_pages._quality_limits(lows, highs)
    assert -30 < low < -2.0 and 2.2 < high < 5  # the -70 point row is beyond the axis, the rest within
    assert effects_pages._quality_limits([-0.5], [0.5]) == pytest.approx((-0.58, 0.58))  # one row: all of it
    wrecked = vision_document()
    wrecked["summary"][2] = entry(
        "hostile",
        "measured",
        CMD_A,
        activity={"layers_frozen": 3.0},
        quality=change("accuracy", -0.705, -0.753, -0.657, "worse"),
        throughput=ratio(1.1, 0.9, 1.3, "no detectable difference"),
        memory=None,
    )
    for i, precision in enumerate(("bf16", "fp16", "amp_bf16")):  # more rows about a point from zero
        wrecked["summary"].append(
            entry(
                "alpha_trick",
                "measured",
                CMD_A,
                precision=precision,
                quality=change("accuracy", 0.002 * i, -0.008, 0.01 + 0.002 * i, "no detectable difference"),
                throughput=ratio(1.0, 0.9, 1.1, "no detectable difference"),
                memory=None,
            )
        )
    chart = rendered(synthetic_metadata, tmp_path, {"w.json": wrecked})[Path("tables/effects/w.svg")]
    assert "\u221270.5" in chart  # the value written at the edge, as text


def test_ratio_ticks_are_spread_out_from_one():
    ticks = effects_pages._ratio_ticks(0.015, 1.25)
    assert 1.0 in ticks and len(ticks) <= 5
    gaps = [b / a for a, b in zip(ticks, ticks[1:], strict=False)]
    assert min(gaps) >= (1.25 / 0.015) ** (1 / 4) * 0.999
    assert effects_pages._ratio_ticks(0.8, 1.2) == [0.8, 0.9, 1.0]


def test_the_chart_is_reused_while_its_inputs_are_unchanged(synthetic_metadata, tmp_path):
    chart = Path("tables/effects/v.svg")
    first = rendered(synthetic_metadata, tmp_path, {"v.json": vision_document()})[chart]
    (tmp_path / chart).parent.mkdir(parents=True)
    (tmp_path / chart).write_text(first.replace("</svg>", "<!-- kept --></svg>"), encoding="utf-8")
    assert "<!-- kept -->" in rendered(synthetic_metadata, tmp_path, {"v.json": vision_document()})[chart]
    changed = vision_document()
    changed["summary"][1]["throughput"]["ratio"] = 0.88
    assert "<!-- kept -->" not in rendered(synthetic_metadata, tmp_path, {"v.json": changed})[chart]


# --------------------------------------------------------------------------------------------- the build


def test_the_build_renders_the_effects_files_it_finds(synthetic_metadata, tmp_path):
    """Through pages.generate, as the docs build: a snippet for every method (not a best practice),
    the charts, and an unmeasured method says so."""
    results = tmp_path / "results"
    (results / "effects").mkdir(parents=True)
    (results / "effects" / "vision-test.json").write_text(json.dumps(vision_document()), encoding="utf-8")
    generated = pages.generate(
        tmp_path,
        metadata_root=synthetic_metadata,
        results_root=results,
        generators=(pages.methods_overview, render_effects),
    )
    assert generated.problems == []
    out = generated.outputs
    assert {p.name for p in out if p.parent == Path("tables/effects")} == {
        "alpha_trick.md.inc",
        "hostile.md.inc",
        "zeta_method.md.inc",
        "vision-test.svg",
    }
    assert "+1.2 points (+0.4 to +2.0): better" in out[Path("tables/effects/alpha_trick.md.inc")]


def test_a_bad_effects_file_is_a_problem_line_and_nothing_renders(synthetic_metadata, tmp_path):
    (tmp_path / "results" / "effects").mkdir(parents=True)
    old = vision_document()
    old["schema_version"] = 2  # no upgrade: an old file is regenerated
    (tmp_path / "results" / "effects" / "bad.json").write_text(json.dumps(old), encoding="utf-8")
    generated = pages.generate(tmp_path, metadata_root=synthetic_metadata, results_root=tmp_path / "results")
    assert generated.outputs == {}
    assert any(
        "bad.json: /schema_version: 2 is no longer read" in p and "measure again" in p for p in generated.problems
    ), generated.problems


def test_a_chart_that_cannot_be_drawn_is_a_problem_naming_the_file(synthetic_metadata, tmp_path, monkeypatch):
    results = tmp_path / "results"
    (results / "effects").mkdir(parents=True)
    (results / "effects" / "v.json").write_text(json.dumps(vision_document()), encoding="utf-8")

    def broken(view, key):
        raise OverflowError("no room")

    monkeypatch.setattr(effects_pages, "_draw_chart", broken)
    generated = pages.generate(
        tmp_path, metadata_root=synthetic_metadata, results_root=results, generators=(pages.methods_overview,)
    )
    assert generated.problems == ["results/effects/v.json: the effects chart cannot be drawn: OverflowError: no room"]


# ------------------------------------------------------------------------------------- (f) figures in their place


def _site_with(metadata: Path, root: Path, documents: dict[str, dict], **changes) -> Site:
    """:func:`site` with ``changes`` (key -> record fields) made to its metadata records."""
    s = site(metadata, root, documents, at_scale={"alpha_trick": AT_SCALE})
    s.methods = [dataclasses.replace(r, **changes.get(r.key, {})) for r in s.methods]
    return s


def _render(s: Site) -> dict[Path, str]:
    for generator in (pages.methods_overview, render_effects, pages.landing):
        s.rendered.update(generator(s))
    return dict(s.rendered)


def _grid_card(text: str, name: str) -> str:
    """The overview's grid card of ``name``: from its directive line to the fence that closes it."""
    start = text.index(f"::::{{grid-item-card}} {name}\n")
    return text[start : text.index("\n::::\n", start)]


def test_overview_card_shows_its_sourced_figure_with_setting_hardware_and_source(synthetic_metadata, tmp_path):
    hostile_scale = {
        "figure": HOSTILE,
        "setting": "<script>alert(1)</script> on ImageNet; the rest is on the card",
        "hardware": "[z](javascript:alert(1))",
        "source": "**Mallory** <b>x</b>",
        "url": "https://example.invalid/a",
    }
    out = rendered(synthetic_metadata, tmp_path, {}, at_scale={"alpha_trick": AT_SCALE, "hostile": hostile_scale})
    alpha = _grid_card(overview(out), "Alpha Trick")
    assert f"**At scale:** {md_text(AT_SCALE['figure'])}\n" in alpha
    assert (
        f"{md_text('ResNet-50 on ImageNet, 90 epochs')}; hardware: {md_text('8 V100 GPUs')}. "
        f"Source: {md_text('Yun et al., 2019')}." in alpha
    )
    hostile = _grid_card(overview(out), md_text(SYNTHETIC["hostile"]["name"]))
    assert f"**At scale:** {md_text(HOSTILE)}" in hostile
    # the setting's first clause, escaped: what follows the ";" is the card's
    assert (
        f"{md_text('<script>alert(1)</script> on ImageNet')}; hardware: {md_text('[z](javascript:alert(1))')}"
        in hostile
    )
    assert "the rest is on the card" not in hostile
    assert "<script>" not in hostile and "<b>" not in hostile
    assert not re.search(r"(?<!\\)\]\(javascript", hostile)
    # a method that quotes no figure says so, never an empty box
    assert "**At scale:** no figure is quoted." in _grid_card(overview(out), "Zeta")


def test_landing_puts_sourced_figures_before_the_toy_scale_charts(synthetic_metadata, tmp_path):
    out = rendered(
        synthetic_metadata, tmp_path, {"vision-test.json": vision_document()}, at_scale={"alpha_trick": AT_SCALE}
    )
    landing = out[pages.LANDING]
    sourced = landing.index("At scale, as the sources report it\n---")
    checked = landing.index("Checked here, at toy scale on a CPU\n---")
    chart = landing.index(".. figure:: tables/effects/vision-test.svg")
    assert sourced < checked < chart
    table = landing[sourced:checked]
    assert (
        f"   * - `{rst_text('Alpha Trick')} <method_cards/alpha_trick.html>`__\n     - {rst_text('+1.4 points top-1')}"
        in table
    )
    assert f"`{rst_text('Yun et al., 2019')} <https://arxiv.org/abs/1905.04899>`__" in table
    assert "Zeta" not in table  # it quotes no figure
    # one row per figure, each on lines of its own (reStructuredText reads a row run on as broken markup)
    with_url = {**AT_SCALE, "url": None}
    out = rendered(
        synthetic_metadata, tmp_path / "two", {}, at_scale={"alpha_trick": with_url, "zeta_method": AT_SCALE}
    )
    landing = out[pages.LANDING]
    rows = [line for line in landing[landing.index("At scale, as") :].splitlines() if line.startswith("   * - ")]
    assert rows == [
        "   * - Method",
        f"   * - `{rst_text('Alpha Trick')} <method_cards/alpha_trick.html>`__",
        f"   * - `{rst_text(SYNTHETIC['hostile']['name'])} <method_cards/hostile.html>`__",
        f"   * - `{rst_text('Zeta')} <method_cards/zeta_method.html>`__",
    ]


def test_a_method_that_shrinks_images_below_32_px_is_not_applicable_there(synthetic_metadata, tmp_path):
    """ColOut and Progressive Resizing at 8 px: a vision method whose effect is smaller images gets no
    bar and no number below the smallest image its sources train on, only its reason."""
    documents = {"vision-test.json": vision_document()}
    for side, applies in ((8, False), (31, False), (32, True)):
        documents["vision-test.json"]["settings"]["image_size"] = side
        s = _site_with(
            synthetic_metadata, tmp_path / str(side), documents, alpha_trick={"observable": ("smaller_inputs",)}
        )
        (view,) = effects_pages.effects_views(s)
        (row,) = [r for r in view.rows if r.key == "alpha_trick"]
        assert row.measured is applies, side
        if applies:
            continue
        assert row.status_label == f"not applicable at {side} px"
        assert "makes the images smaller" in row.reason and "32 px" in row.reason
        assert row.quality is row.throughput is row.memory is None
        assert row not in view.chart_rows and view.chart is None  # its only measured row: nothing to draw
        out = _render(s)
        snippet = card(out, "alpha_trick")
        assert f"not applicable at {side} px" in snippet and md_text(row.reason) in snippet
        assert "+1.2 points" not in snippet and "0.87x" not in snippet
        # the "Should I use it?" box reads the same row as the card does
        (evidence,) = summaries._effects_evidence(view, "alpha_trick")
        assert evidence.status_label == f"not applicable at {side} px"
    # a method that does not shrink images is judged at 8 px as measured
    documents["vision-test.json"]["settings"]["image_size"] = 8
    (view,) = effects_pages.effects_views(site(synthetic_metadata, tmp_path / "other", documents))
    assert [r.key for r in view.chart_rows] == ["alpha_trick"]


def test_a_gpu_speed_measured_on_a_cpu_is_not_its_cost(synthetic_metadata, tmp_path, monkeypatch):
    monkeypatch.setitem(effects_pages.GPU_SPEED, "alpha_trick", "Use.")
    cpu = vision_document()
    (view,) = effects_pages.effects_views(site(synthetic_metadata, tmp_path / "cpu", {"vision-test.json": cpu}))
    (row,) = view.rows_of("alpha_trick")
    assert row.measured and not row.speed_measurable
    assert row.throughput.startswith(effects_pages.NOT_MEASURABLE) and "0.87x" not in row.throughput
    assert row.quality.startswith("+1.2 points") and row.memory  # quality and memory still count
    assert view.speed_rows == () and "ran slower" not in view.chart_summary
    assert f" The speed of Alpha Trick is a GPU's, {effects_pages.NOT_MEASURABLE}." in view.chart_summary
    # on a GPU its throughput is its cost
    gpu = vision_document()
    gpu["environment"] = {**gpu["environment"], "device_type": "cuda"}
    (view,) = effects_pages.effects_views(site(synthetic_metadata, tmp_path / "gpu", {"vision-test.json": gpu}))
    (row,) = view.rows_of("alpha_trick")
    assert row.speed_measurable and row.throughput.startswith("0.87x")


def test_every_gpu_speed_entry_is_what_its_metadata_says():
    from algorithms.metadata import load_all_metadata

    records = load_all_metadata()
    for key, words in effects_pages.GPU_SPEED.items():
        assert words in " ".join(records[key].use.split()), key
