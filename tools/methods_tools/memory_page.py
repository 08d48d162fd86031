"""The generated parts of "Memory: what fits, and what it costs" (``docs/source/memory.md``, whose
prose is written by hand and pulls them in with ``{include}``), rendered from
:mod:`algorithms.memory` at every build:

- ``tables/memory/configurations.md.inc`` (``memory_configurations.md.inc.j2``): per training
  configuration (:data:`CONFIGURATIONS`), the bytes per parameter that its weights, gradients and
  optimizer state take on each device and in host memory, as formulas in the number of devices N
  (and the trainable share f), and what this project measured (:func:`measured_memory`);
- ``tables/memory/activations.md.inc`` (``memory_activations.md.inc.j2``): per option that
  changes the activations (:data:`ACTIVATIONS`), the bytes one transformer layer keeps, and what
  this project measured;
- ``tables/memory/examples.md.inc`` (``memory_examples.md.inc.j2``): the calculator's answers
  (:func:`algorithms.memory.plan_memory`) for the worked examples (:data:`EXAMPLES`).

A configuration's card is linked where the metadata has it, so a card added later is linked
without a change here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from algorithms.memory import (
    MemoryEstimate,
    MemoryPlan,
    TrainingOptions,
    activation_coefficients,
    estimate_memory,
    parameter_bytes,
    plan_memory,
)

from .docsgen import Content, Site

__all__ = [
    "ACTIVATIONS",
    "BAND",
    "CONFIGURATIONS",
    "EXAMPLES",
    "NOT_MEASURED",
    "PAGE",
    "PARTS",
    "Configuration",
    "Example",
    "MEASURED_AS",
    "MeasuredAs",
    "NOT_MEASURED_WHY",
    "OUTSIDE_BAND",
    "BAND_NOTES",
    "measured_memory",
    "render_memory",
]

PAGE = Path("memory.md")  # written by hand: it includes the parts below
PAGE_SOURCE = "tools/methods_tools/memory_page.py"
PARTS = Path("tables") / "memory"
SHOWN_DEVICES = 8  # the N of the table's worked-out column
NOT_MEASURED = "not measured yet"


@dataclass(frozen=True)
class Configuration:
    """One row of the table: ``key`` is the stable name a measurement is looked up by."""

    key: str
    label: str
    card: str | None  # the method card that says how to use it, linked when it exists
    options: TrainingOptions


CONFIGURATIONS: tuple[Configuration, ...] = (
    Configuration("fp32", "fp32, Adam", None, TrainingOptions("fp32", "adam")),
    Configuration("fp32_sgd", "fp32, SGD with momentum", None, TrainingOptions("fp32", "sgd_momentum")),
    Configuration("amp", "AMP (autocast), AdamW", "mixed_precision", TrainingOptions("amp", "adamw")),
    Configuration("mixed", "Mixed precision, fp32 master weights, Adam", None, TrainingOptions("mixed", "adam")),
    Configuration("half", "Half precision, Adam", "half_precision", TrainingOptions("half", "adam")),
    Configuration("ddp", "DDP, AMP", "ddp", TrainingOptions("amp", parallel="ddp")),
    Configuration("fsdp", "FSDP, AMP", "fsdp", TrainingOptions("amp", parallel="fsdp")),
    Configuration(
        "fsdp_offload", "FSDP, CPU offload, AMP", "fsdp", TrainingOptions("amp", parallel="fsdp", offload="all")
    ),
    Configuration("zero1", "ZeRO-1, mixed precision", "deepspeed_zero", TrainingOptions("mixed", "adam", "zero1")),
    Configuration("zero2", "ZeRO-2, mixed precision", "deepspeed_zero", TrainingOptions("mixed", "adam", "zero2")),
    Configuration("zero3", "ZeRO-3, mixed precision", "deepspeed_zero", TrainingOptions("mixed", "adam", "zero3")),
    Configuration(
        "zero2_offload",
        "ZeRO-2, optimizer offload",
        "deepspeed_zero",
        TrainingOptions("mixed", "adam", "zero2", offload="optimizer"),
    ),
    Configuration(
        "zero3_offload",
        "ZeRO-3, full offload",
        "deepspeed_zero",
        TrainingOptions("mixed", "adam", "zero3", offload="all"),
    ),
    Configuration("lora", "LoRA, AMP", "lora", TrainingOptions("amp", trainable_fraction=0.01)),
)

#: The rows of the activations table: what changes the activations, not the bytes per parameter.
ACTIVATIONS: tuple[Configuration, ...] = (
    Configuration(
        "activations_16bit", "16-bit: AMP, mixed or half precision", "mixed_precision", TrainingOptions("amp")
    ),
    Configuration("activations_fp32", "fp32", None, TrainingOptions("fp32")),
    Configuration(
        "flash_attention",
        "16-bit, attention scores recomputed (FlashAttention)",
        None,
        TrainingOptions(flash_attention=True),
    ),
    Configuration(
        "checkpointing",
        "16-bit, activation checkpointing",
        "activation_checkpointing",
        TrainingOptions(activation_checkpointing=True),
    ),
    Configuration(
        "accumulation",
        "16-bit, gradient accumulation over k micro-batches",
        None,
        TrainingOptions(accumulation_steps=4),
    ),
)


@dataclass(frozen=True)
class MeasuredAs:
    """What the training comparison (``tools/compare_training.py``) ran for a row: its
    configuration's label, and that configuration in the accounting's terms (the comparison trains
    with SGD with momentum, one state value a parameter, on ``nproc`` processes)."""

    config: str
    precision: str
    parallel: str = "ddp"
    offload: str = "none"

    def options(self) -> TrainingOptions:
        return TrainingOptions(self.precision, "sgd_momentum", self.parallel, self.offload)


#: The rows the comparison measures, by key. The rest say why not (:data:`NOT_MEASURED_WHY`).
MEASURED_AS: dict[str, MeasuredAs] = {
    "fp32_sgd": MeasuredAs("fp32:single", "fp32"),
    "amp": MeasuredAs("amp_bf16:single", "amp"),
    "half": MeasuredAs("bf16:single", "half"),
    "ddp": MeasuredAs("fp32:ddp", "fp32"),
    "fsdp": MeasuredAs("fp32:fsdp", "fp32", "fsdp"),
    "fsdp_offload": MeasuredAs("fp32:fsdp:offload", "fp32", "fsdp", "all"),
    "zero1": MeasuredAs("fp32:deepspeed:1", "fp32", "zero1"),
    "zero2": MeasuredAs("fp32:deepspeed:2", "fp32", "zero2"),
    "zero3": MeasuredAs("fp32:deepspeed:3", "fp32", "zero3"),
    "zero2_offload": MeasuredAs("fp32:deepspeed:2+offload", "fp32", "zero2", "optimizer"),
    "zero3_offload": MeasuredAs("fp32:deepspeed:3+offload", "fp32", "zero3", "all"),
}

#: Why a row has no measurement.
NOT_MEASURED_WHY: dict[str, str] = {
    "fp32": "not measured: the comparison trains with SGD with momentum (the next row)",
    "mixed": "not measured: the comparison runs no DeepSpeed fp16 or bf16 mode with float32 master weights",
    "lora": "not measured: the comparison trains every parameter",
    **{
        c.key: "not measured: the comparison's model is a CNN (resnet20), and these counts are a transformer layer's"
        for c in ACTIVATIONS
    },
}

#: How far a measured figure may sit from the accounting and still agree with it. The accounting
#: counts parameters alone, and the measurement the buffers too (batch norm's running statistics:
#: 0.6 % of resnet20's weights), so a few per cent apart is agreement; 10 % is well clear of that.
BAND = 0.10

#: Why a row's measurement sits outside :data:`BAND`, by key. The build checks both ways: a row
#: outside the band without a reason here, or with one here inside it, stops it.
#: What takes a measurement outside :data:`BAND`, each by a short name that a row's cell gives and
#: the line under the table explains.
BAND_NOTES: dict[str, str] = {
    "whole gradients": (
        "every gradient stays whole until the end of the backward pass (4 B a parameter, not 4/N): the model "
        "fits one reduce bucket, as it would DeepSpeed's default bucket of 5e8 elements, so ZeRO reduces all "
        "of it at once"
    ),
    "gathered weights": (
        "each parameter below DeepSpeed's stage3_param_persistence_threshold (1e5 elements: every one of "
        "resnet20's) stays gathered on every rank beside its partition (weights 6 B a parameter, not 4/N)"
    ),
}

#: Why a row's measurement sits outside :data:`BAND`, by key: names of :data:`BAND_NOTES`. The
#: build checks both ways: a row outside the band without a reason here, or with one here inside
#: it, stops it.
OUTSIDE_BAND: dict[str, tuple[str, ...]] = {
    "zero2": ("whole gradients",),
    "zero2_offload": ("whole gradients",),
    "zero3": ("whole gradients", "gathered weights"),
    "zero3_offload": ("whole gradients", "gathered weights"),
}


def _measured_entry(site: Site, config: str) -> tuple[Path, Mapping[str, Any], Mapping[str, Any]] | None:
    """The newest results file whose ``config`` succeeded with tensor-memory figures and a
    parameter count, with that configuration's summary entry and a successful run."""
    for path, document in sorted(site.results, key=lambda item: item[1]["environment"]["date"], reverse=True):
        entry = next((s for s in document["summary"] if s["config"] == config), None)
        run = next(
            (r for r in document["runs"] if r["config"] == config and r["status"] == "ok" and r.get("parameters")),
            None,
        )
        if entry is not None and run is not None and entry.get("tensor_memory"):
            return path, entry, run
    return None


def _bytes_per_parameter(entry: Mapping[str, Any], parameters: int, at: str) -> float:
    """Weights, gradients and optimizer state of the process with the largest peak, per parameter
    (``at``: the spread's ``median``, ``min`` or ``max``); a gradient figure the mode keeps in
    buffers of its own (None) counts nothing."""
    tensor = entry["tensor_memory"]
    parts = (tensor[name] for name in ("weights_bytes", "gradients_bytes", "optimizer_bytes"))
    return sum(part[at] for part in parts if part is not None) / parameters


def measured_memory(site: Site, configuration: Configuration) -> str | None:
    """What this project measured of ``configuration``, as the table shows it, or why it did not
    (:data:`NOT_MEASURED_WHY`); None where the row could be measured but no committed results file
    holds its figures (the table then says :data:`NOT_MEASURED`).

    The measurement is the tensor memory that the comparison's configuration (:data:`MEASURED_AS`)
    recorded: weights, gradients and optimizer state per parameter of the model, on the process
    with the largest peak, median (and range) over its runs, beside the accounting of that same
    configuration (:func:`algorithms.memory.parameter_bytes` with the comparison's optimizer and
    processes: the device's bytes and the host's, as on a CPU both are the same memory; autocast's
    16-bit copies are not weights, and the measurement counts them with the activations). A ratio
    outside :data:`BAND` shows its reason from :data:`OUTSIDE_BAND`; a ValueError (one line, the
    file) where a reason is missing, or stated for a ratio inside the band.
    """
    key = configuration.key
    measured_as = MEASURED_AS.get(key)
    if measured_as is None:
        return NOT_MEASURED_WHY.get(key)
    found = _measured_entry(site, measured_as.config)
    if found is None:
        return None
    path, entry, run = found
    parameters = run["parameters"]
    median = _bytes_per_parameter(entry, parameters, "median")
    low, high = (_bytes_per_parameter(entry, parameters, at) for at in ("min", "max"))
    accounting = parameter_bytes(
        measured_as.precision,
        "sgd_momentum",
        parallel=measured_as.parallel,
        devices=entry["world_size"],
        offload=measured_as.offload,
    )
    expected = accounting.weights + accounting.gradients + accounting.optimizer_state + accounting.host
    ratio = median / expected
    figure = f"{median:.1f}" if f"{low:.1f}" == f"{high:.1f}" else f"{median:.1f} ({low:.1f}–{high:.1f})"
    text = f"{measured_as.config}: {figure} B, {ratio:.2f}x the accounting's {_number(expected)}"
    reason = OUTSIDE_BAND.get(key)
    inside = abs(ratio - 1) <= BAND
    if inside and reason is not None:
        raise ValueError(
            f"{PAGE_SOURCE}: {key}: measured {ratio:.2f}x the accounting, inside the ±{BAND:.0%} band, yet "
            f"OUTSIDE_BAND gives a reason — delete it from methods_tools/memory_page.py ({path.name})"
        )
    if not inside:
        if reason is None:
            raise ValueError(
                f"{PAGE_SOURCE}: {key}: measured {ratio:.2f}x the accounting ({path.name}), outside the "
                f"±{BAND:.0%} band — say why in OUTSIDE_BAND in methods_tools/memory_page.py, or fix the accounting"
            )
        text += f"; outside ±{BAND:.0%}: {', '.join(reason)} (below)"
    return text


# --- Formulas: which bytes scale with 1/N and with f, read off the library ---------------------


def _number(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".") or "0"


def _term(value: float, scaled: bool, sharded: bool) -> str:
    number = "" if scaled and value == 1 else _number(value)
    return f"{number}{'f' if scaled else ''}{'/N' if sharded else ''}"


_COMPONENTS = ("weights", "weight_copies", "gradients", "optimizer_state", "host")


def _kinds(options: TrainingOptions) -> dict[str, tuple[float, bool, bool]]:
    """Per component: its bytes at N = 1 and f = 1, whether they shrink with N, and with f."""

    def bytes_at(devices: int, fraction: float) -> dict[str, float]:
        per = parameter_bytes(
            options.precision,
            options.optimizer,
            parallel=options.parallel,
            devices=devices,
            offload=options.offload,
            trainable_fraction=fraction,
        )
        return per._asdict()

    one, two, half = bytes_at(1, 1.0), bytes_at(2, 1.0), bytes_at(1, 0.5)
    adapted = options.trainable_fraction < 1
    return {
        c: (one[c], one[c] > 0 and two[c] == one[c] / 2, adapted and one[c] > 0 and half[c] == one[c] / 2)
        for c in _COMPONENTS
    }


def _formula(kinds: list[tuple[float, bool, bool]]) -> str:
    """The sum of ``kinds``, like terms added: ``2 + 14/N``, ``6 + 12f``; ``0`` when empty."""
    groups: dict[tuple[bool, bool], float] = {}
    for value, sharded, scaled in kinds:
        if value:
            groups[(scaled, sharded)] = groups.get((scaled, sharded), 0) + value
    order = [(False, False), (False, True), (True, False), (True, True)]
    terms = [_term(groups[k], k[0], k[1]) for k in order if k in groups]
    return " + ".join(terms) or "0"


@dataclass(frozen=True)
class Row:
    key: str
    label: str
    card: str | None
    parts: str  # weights (+ autocast's copies) + gradients + optimizer state, as formulas
    device: str
    device_shown: str  # the device total at SHOWN_DEVICES (and the row's f)
    host: str
    measured: str | None


@dataclass(frozen=True)
class ActivationRow:
    key: str
    label: str
    card: str | None
    activations: str
    measured: str | None


def _activations(options: TrainingOptions) -> str:
    k = activation_coefficients(options.precision, flash_attention=options.flash_attention)
    full = f"sbh·({k.linear} + {k.quadratic}·as/h)" if k.quadratic else f"{k.linear}·sbh"
    if options.activation_checkpointing:
        return f"{k.checkpoint}·sbh, and one layer's {full} while it recomputes"
    if options.accumulation_steps > 1:
        return f"{full}, with b the batch / k"
    return full


def _card(site: Site, configuration: Configuration) -> str | None:
    return configuration.card if configuration.card in {r.key for r in site.methods} else None


def configuration_row(site: Site, configuration: Configuration) -> Row:
    """The table's row of ``configuration``, every figure from :func:`algorithms.memory.parameter_bytes`."""
    options = configuration.options
    kinds = _kinds(options)
    formula = {c: _formula([kinds[c]]) for c in _COMPONENTS}
    weights = formula["weights"]
    if kinds["weight_copies"][0]:  # autocast's 16-bit copies beside the weights they copy
        weights = f"({weights} + {formula['weight_copies']})"
    shown = parameter_bytes(
        options.precision,
        options.optimizer,
        parallel=options.parallel,
        devices=SHOWN_DEVICES,
        offload=options.offload,
        trainable_fraction=options.trainable_fraction,
    )
    return Row(
        key=configuration.key,
        label=configuration.label,
        card=_card(site, configuration),
        parts=" + ".join((weights, formula["gradients"], formula["optimizer_state"])),
        device=_formula([kinds[c] for c in _COMPONENTS if c != "host"]),
        device_shown=_number(shown.device),
        host=formula["host"],
        measured=measured_memory(site, configuration),
    )


def activation_row(site: Site, configuration: Configuration) -> ActivationRow:
    """The activations table's row of ``configuration``, from :func:`algorithms.memory.activation_coefficients`."""
    return ActivationRow(
        key=configuration.key,
        label=configuration.label,
        card=_card(site, configuration),
        activations=_activations(configuration.options),
        measured=measured_memory(site, configuration),
    )


# --- Worked examples ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Example:
    title: str
    model: str  # where the shape comes from
    parameters: int
    layers: int
    hidden: int
    heads: int
    seq_len: int
    batch_size: int  # sequences per optimizer step, over all devices
    devices: int
    memory_gb: float
    precision: str = "amp"
    optimizer: str = "adamw"
    flash_attention: bool = False


EXAMPLES: tuple[Example, ...] = (
    Example(
        "GPT-2 small on one GPU of 16 GB",
        "GPT-2 small: 124M parameters, 12 layers, width 768, 12 heads",
        124_439_808,
        layers=12,
        hidden=768,
        heads=12,
        seq_len=1024,
        batch_size=16,
        devices=1,
        memory_gb=16,
    ),
    Example(
        "A 1.3B model on 8 GPUs of 80 GB",
        "OPT-1.3B's shape: 1.3B parameters, 24 layers, width 2048, 32 heads",
        1_300_000_000,
        layers=24,
        hidden=2048,
        heads=32,
        seq_len=2048,
        batch_size=64,
        devices=8,
        memory_gb=80,
    ),
    Example(
        "A 7B model on 8 GPUs of 80 GB",
        "Llama 2 7B's shape: 6.74B parameters, 32 layers, width 4096, 32 heads",
        6_738_415_616,
        layers=32,
        hidden=4096,
        heads=32,
        seq_len=4096,
        batch_size=32,
        devices=8,
        memory_gb=80,
        flash_attention=True,
    ),
)

# The memory options an example's table compares, each with and without checkpointing.
_EXAMPLE_OPTIONS = (
    ("ddp", "none"),
    ("zero1", "none"),
    ("zero2", "none"),
    ("zero3", "none"),
    ("zero2", "optimizer"),
    ("zero3", "all"),
)
_EXAMPLE_LABELS = {
    ("ddp", "none"): "DDP (every device holds everything)",
    ("zero1", "none"): "ZeRO-1",
    ("zero2", "none"): "ZeRO-2",
    ("zero3", "none"): "ZeRO-3 or FSDP",
    ("zero2", "optimizer"): "ZeRO-2, optimizer offloaded",
    ("zero3", "all"): "ZeRO-3 or FSDP, everything offloaded",
}


def gb(nbytes: float) -> str:
    """Bytes as GB (10⁹ bytes): ``179.6 GB``, ``0.25 GB``; ``none`` for 0."""
    if not nbytes:
        return "none"
    value = nbytes / 1e9
    return f"{value:.1f} GB" if value >= 1 else f"{value:.2f} GB"


@dataclass(frozen=True)
class ExampleRow:
    label: str
    model_states: str
    host: str
    kept: MemoryEstimate
    checkpointed: MemoryEstimate


@dataclass(frozen=True)
class ExampleView:
    example: Example
    per_device: int  # sequences per device per step
    rows: tuple[ExampleRow, ...]
    memory: int  # bytes of one device
    first_fit: MemoryPlan | None  # the calculator's first plan that fits
    plans: int  # how many combinations the calculator weighed


def example_view(example: Example) -> ExampleView:
    """One worked example: a row per memory option (left out where it holds what an earlier row
    holds: sharding over one device), and the calculator's first choice."""
    shape = {
        "layers": example.layers,
        "hidden": example.hidden,
        "heads": example.heads,
        "seq_len": example.seq_len,
        "batch_size": example.batch_size,
    }
    base = TrainingOptions(example.precision, example.optimizer, flash_attention=example.flash_attention)
    rows, seen = [], set()
    for parallel, offload in _EXAMPLE_OPTIONS:
        options = replace(base, parallel=parallel, offload=offload)
        kept = estimate_memory(example.parameters, **shape, devices=example.devices, options=options)
        if (kept.device, kept.host) in seen:
            continue
        seen.add((kept.device, kept.host))
        checkpointed = estimate_memory(
            example.parameters,
            **shape,
            devices=example.devices,
            options=replace(options, activation_checkpointing=True),
        )
        label = _EXAMPLE_LABELS[(parallel, offload)]
        if example.devices == 1:
            label = label.replace("DDP (every device holds everything)", "One device").replace(" or FSDP", "")
        rows.append(ExampleRow(label, gb(kept.model_states), gb(kept.host), kept, checkpointed))
    plans = plan_memory(
        example.parameters,
        **shape,
        devices=example.devices,
        memory_gb=example.memory_gb,
        precision=example.precision,
        optimizer=example.optimizer,
        flash_attention=example.flash_attention,
    )
    memory = plans[0].memory
    return ExampleView(
        example=example,
        per_device=example.batch_size // example.devices,
        rows=tuple(rows),
        memory=memory,
        first_fit=next((p for p in plans if p.fits), None),
        plans=len(plans),
    )


@dataclass(frozen=True)
class MeasuredFrom:
    """A results file the measured column read, as the line under the table names it."""

    file: str
    hardware: str
    date: str
    settings: Mapping[str, Any]


def measured_from(site: Site) -> list[MeasuredFrom]:
    """The results files that give the table's measured figures, newest first."""
    used = {found[0] for m in MEASURED_AS.values() if (found := _measured_entry(site, m.config)) is not None}
    return [
        MeasuredFrom(
            f"results/{path.name}", doc["environment"]["hardware"], doc["environment"]["date"][:10], doc["settings"]
        )
        for path, doc in sorted(site.results, key=lambda item: item[1]["environment"]["date"], reverse=True)
        if path in used
    ]


def band_notes(site: Site) -> list[tuple[str, str]]:
    """The :data:`BAND_NOTES` that a measured row of the table gives, in their order."""
    used = {
        name
        for key, names in OUTSIDE_BAND.items()
        if key in MEASURED_AS and _measured_entry(site, MEASURED_AS[key].config) is not None
        for name in names
    }
    return [(name, text) for name, text in BAND_NOTES.items() if name in used]


def render_memory(site: Site) -> dict[Path, Content]:
    """The page's three generated parts."""
    return {
        PARTS / "configurations.md.inc": site.render(
            "memory_configurations.md.inc.j2",
            rows=[configuration_row(site, c) for c in CONFIGURATIONS],
            shown_devices=SHOWN_DEVICES,
            not_measured=NOT_MEASURED,
            sources=measured_from(site),
            band=BAND,
            notes=band_notes(site),
        ),
        PARTS / "activations.md.inc": site.render(
            "memory_activations.md.inc.j2",
            rows=[activation_row(site, c) for c in ACTIVATIONS],
            not_measured=NOT_MEASURED,
        ),
        PARTS / "examples.md.inc": site.render(
            "memory_examples.md.inc.j2", examples=[example_view(e) for e in EXAMPLES], gb=gb
        ),
    }
