"""How many bytes training needs on each device, and whether a model fits: the ZeRO paper's
accounting of the model states, and a per-layer estimate of a transformer's activations.

**Model states** (Rajbhandari et al., 2020, "ZeRO: Memory Optimizations Toward Training Trillion
Parameter Models", arXiv 1910.02054, section 3.1). Mixed-precision training with Adam keeps, per
parameter, 2 bytes of 16-bit weights, 2 bytes of 16-bit gradients and K = 12 bytes of optimizer
state (float32 master weights, momentum and variance): 16 bytes. Over N data-parallel devices,
ZeRO stage 1 partitions the optimizer state, stage 2 the gradients as well, and stage 3 the
weights as well: per device, ``(2 + 2 + K)Ψ``, ``2Ψ + 2Ψ + KΨ/N``, ``2Ψ + (2 + K)Ψ/N`` and
``(2 + 2 + K)Ψ/N`` bytes for Ψ parameters. The same counting gives the other configurations here.

**Activations** (Korthikanti et al., 2022, "Reducing Activation Recomputation in Large Transformer
Models", arXiv 2205.05198, section 4): one transformer layer keeps ``s·b·h·(34 + 5·a·s/h)`` bytes
for the backward pass in 16-bit training, for sequence length s, micro-batch b, hidden size h and
a attention heads (a 4h-wide MLP, dropout masks of 1 byte). With full recomputation a layer keeps
only its 16-bit input, ``2·s·b·h`` bytes. It is an estimate: it leaves out the embeddings, the
logits and the loss, and assumes attention stores its ``a·s²`` scores unless ``flash_attention``.

Which configuration is which:

- ``precision="fp32"``: float32 weights, gradients, optimizer state and activations.
- ``precision="amp"``: ``torch.autocast`` (the Trainer's ``amp_bf16`` and ``amp_fp16``): float32
  weights, gradients and optimizer state, 16-bit activations, and the 16-bit copies of the weights
  that autocast makes and keeps for the backward pass (2 bytes per parameter).
- ``precision="mixed"``: ZeRO's accounting (DeepSpeed's bf16 and fp16 modes): 16-bit weights and
  gradients; the optimizer keeps float32 master weights beside its state.
- ``precision="half"``: everything in 16 bits (the Trainer's ``bf16`` and ``fp16``), the optimizer
  state too.
- ``parallel="ddp"``: every device holds everything (one device is ``"ddp"`` with ``devices=1``);
  ``"zero1"``, ``"zero2"``, ``"zero3"``: ZeRO's stages; ``"fsdp"`` (fully sharded) counts as stage 3.
- ``offload="optimizer"``: ZeRO-Offload, at stages 1 to 3: the optimizer state, and at stages 2
  and 3 the gradients' partition, live in host memory.
- ``offload="all"``: weights, gradients and optimizer state in host memory (FSDP's CPU offload,
  DeepSpeed's stage 3 with both offloads); stage 3 and FSDP only.
- ``trainable_fraction``: LoRA and other adapters: only that share of the parameters has gradients
  and optimizer state; the frozen rest keeps its weights alone.
- ``accumulation_steps``: gradient accumulation over k micro-batches: the activations of ``b/k``.
- ``activation_checkpointing``: full recomputation of every layer.

Sizes are bytes; a GB is 10⁹ bytes, as the ZeRO paper counts (16 bytes × 7.5B parameters = 120
GB). A card sold as "80 GB" holds 80 GiB (85.9 × 10⁹ bytes): passing ``memory_gb=80`` keeps about
7 % of it for the CUDA context and the allocator's cache, which the accounting does not count.

Example, the ZeRO paper's Figure 1 (7.5B parameters, Adam, 64 devices, model states only)::

    >>> from algorithms.memory import parameter_bytes
    >>> for stage in ("ddp", "zero1", "zero2", "zero3"):
    ...     per = parameter_bytes("mixed", "adam", parallel=stage, devices=64)
    ...     print(stage, round(per.device * 7.5e9 / 1e9, 1), "GB")
    ddp 120.0 GB
    zero1 31.4 GB
    zero2 16.6 GB
    zero3 1.9 GB

Does a 1.3B-parameter model train on 8 GPUs of 80 GB, and how?

    >>> from algorithms.memory import plan_memory
    >>> plans = plan_memory(1.3e9, layers=24, hidden=2048, heads=32, seq_len=2048, batch_size=64,
    ...                     devices=8, memory_gb=80)
    >>> best = next(p for p in plans if p.fits)
    >>> best.options.describe(), round(best.estimate.device / 1e9, 1)
    ('DDP, 4 accumulation steps', 62.5)
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Any, NamedTuple

__all__ = [
    "OFFLOADS",
    "OPTIMIZERS",
    "PARALLEL",
    "PRECISIONS",
    "ActivationCoefficients",
    "MemoryEstimate",
    "MemoryPlan",
    "ParameterBytes",
    "TrainingOptions",
    "activation_bytes",
    "activation_coefficients",
    "estimate_memory",
    "parameter_bytes",
    "plan_memory",
]

GB = 10**9


@dataclass(frozen=True)
class _Precision:
    weights: int  # bytes per weight the model holds
    gradients: int  # bytes per gradient value
    master: int  # bytes of the optimizer's float32 master copy of a weight (mixed precision)
    state: int  # bytes per optimizer state value (Adam's momentum, its variance)
    weight_copies: int  # bytes per 16-bit copy of a weight that autocast keeps for the backward
    activation: int  # bytes per activation value


#: Bytes per value of each precision.
PRECISIONS: dict[str, _Precision] = {
    "fp32": _Precision(weights=4, gradients=4, master=0, state=4, weight_copies=0, activation=4),
    "amp": _Precision(weights=4, gradients=4, master=0, state=4, weight_copies=2, activation=2),
    "mixed": _Precision(weights=2, gradients=2, master=4, state=4, weight_copies=0, activation=2),
    "half": _Precision(weights=2, gradients=2, master=0, state=2, weight_copies=0, activation=2),
}

#: Optimizer state values per parameter.
OPTIMIZERS: dict[str, int] = {"adam": 2, "adamw": 2, "sgd_momentum": 1, "sgd": 0}

#: The ZeRO stage of each parallel mode: 1 shards the optimizer state, 2 the gradients too, 3 the weights too.
PARALLEL: dict[str, int] = {"ddp": 0, "zero1": 1, "zero2": 2, "zero3": 3, "fsdp": 3}

#: What each offload moves to host memory.
OFFLOADS: tuple[str, ...] = ("none", "optimizer", "all")

_LABELS = {"ddp": "DDP", "zero1": "ZeRO-1", "zero2": "ZeRO-2", "zero3": "ZeRO-3", "fsdp": "FSDP"}


# ---------------------------------------------------------------------------------------------
# Input checks: one line each, naming the argument and what to pass.


def _choice(name: str, value: Any, choices: Any) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name}={value!r} is not known — use one of {', '.join(map(repr, choices))}")
    return str(value)


def _whole(name: str, value: Any, minimum: int = 1) -> int:
    """``value`` as an int (NumPy integers and whole floats such as ``7.5e9`` accepted)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name}={value!r}: pass a whole number")
    if isinstance(value, numbers.Integral):
        number = int(value)
    else:
        as_float = float(value)
        if not math.isfinite(as_float) or not as_float.is_integer():
            raise ValueError(f"{name}={value!r}: pass a whole number")
        number = int(as_float)
    if number < minimum:
        raise ValueError(f"{name}={number}: must be at least {minimum}")
    return number


def _real(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name}={value!r}: pass a number")
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{name}={value!r}: pass a finite number")
    return number


def _fraction(name: str, value: Any) -> float:
    number = _real(name, value)
    if not 0 < number <= 1:
        raise ValueError(f"{name}={number}: must be in (0, 1] — the share of the parameters that train")
    return number


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool) and type(value).__name__ not in ("bool_", "bool"):  # NumPy's bool too
        raise TypeError(f"{name}={value!r}: pass True or False")
    return bool(value)


# ---------------------------------------------------------------------------------------------
# The configuration.


@dataclass(frozen=True)
class TrainingOptions:
    """One training configuration; every field is checked when it is made (ValueError or
    TypeError, one line, for an unknown name, a fraction outside (0, 1], a step count below 1,
    or an offload the parallel mode does not have).

    Args:
        precision: ``"fp32"``, ``"amp"``, ``"mixed"`` or ``"half"`` (see the module's table).
        optimizer: ``"adam"``, ``"adamw"`` (2 state values per parameter), ``"sgd_momentum"`` (1)
            or ``"sgd"`` (none).
        parallel: ``"ddp"`` (replicated), ``"zero1"``, ``"zero2"``, ``"zero3"`` or ``"fsdp"``.
        offload: ``"none"``, ``"optimizer"`` (ZeRO stages 1 to 3) or ``"all"`` (stage 3, FSDP).
        activation_checkpointing: recompute every layer in the backward pass.
        accumulation_steps: micro-batches per optimizer step (gradient accumulation).
        trainable_fraction: the share of the parameters that train (LoRA: the adapters' share).
        flash_attention: attention recomputes its scores in the backward instead of storing them
            (FlashAttention, torch's ``scaled_dot_product_attention`` kernels): Korthikanti et
            al.'s ``5·a·s/h`` term is gone, as under their selective recomputation.
    """

    precision: str = "amp"
    optimizer: str = "adamw"
    parallel: str = "ddp"
    offload: str = "none"
    activation_checkpointing: bool = False
    accumulation_steps: int = 1
    trainable_fraction: float = 1.0
    flash_attention: bool = False

    def __post_init__(self) -> None:
        checked = {
            "precision": _choice("precision", self.precision, tuple(PRECISIONS)),
            "optimizer": _choice("optimizer", self.optimizer, tuple(OPTIMIZERS)),
            "parallel": _choice("parallel", self.parallel, tuple(PARALLEL)),
            "offload": _choice("offload", self.offload, OFFLOADS),
            "activation_checkpointing": _flag("activation_checkpointing", self.activation_checkpointing),
            "accumulation_steps": _whole("accumulation_steps", self.accumulation_steps),
            "trainable_fraction": _fraction("trainable_fraction", self.trainable_fraction),
            "flash_attention": _flag("flash_attention", self.flash_attention),
        }
        for name, value in checked.items():
            object.__setattr__(self, name, value)
        stage = PARALLEL[self.parallel]
        if self.offload == "optimizer" and self.parallel == "fsdp":
            raise ValueError(
                "parallel='fsdp', offload='optimizer': FSDP offloads the weights, gradients and "
                "optimizer state together — pass offload='all'"
            )
        if self.offload == "optimizer" and stage < 1:
            raise ValueError(
                "parallel='ddp', offload='optimizer': ZeRO-Offload partitions the optimizer state first — "
                "pass parallel='zero1', 'zero2' or 'zero3'"
            )
        if self.offload == "all" and stage < 3:
            raise ValueError(
                f"parallel={self.parallel!r}, offload='all': only a fully sharded mode offloads the weights — "
                "pass parallel='zero3' or 'fsdp', or offload='optimizer'"
            )

    @property
    def stage(self) -> int:
        """The ZeRO stage of :attr:`parallel` (0 for DDP, 3 for FSDP)."""
        return PARALLEL[self.parallel]

    def describe(self, devices: int | None = None) -> str:
        """The memory options in words, e.g. ``"ZeRO-2, optimizer offload, activation
        checkpointing"``; DDP on ``devices=1`` is ``"one device"``."""
        parts = ["one device" if self.parallel == "ddp" and devices == 1 else _LABELS[self.parallel]]
        if self.offload != "none":
            parts.append(f"{self.offload} offload" if self.offload == "optimizer" else "full offload")
        if self.activation_checkpointing:
            parts.append("activation checkpointing")
        if self.accumulation_steps > 1:
            parts.append(f"{self.accumulation_steps} accumulation steps")
        return ", ".join(parts)


# ---------------------------------------------------------------------------------------------
# Per parameter.


class ParameterBytes(NamedTuple):
    """Bytes per parameter of the model that each device (and its process's host memory) holds."""

    weights: float
    weight_copies: float  # 16-bit copies of the weights that autocast keeps (precision="amp")
    gradients: float
    optimizer_state: float  # the optimizer's master weights and its state values
    host: float  # what the offload moved to host memory

    @property
    def device(self) -> float:
        """Bytes per parameter in the device's memory."""
        return self.weights + self.weight_copies + self.gradients + self.optimizer_state


def _parameter_bytes(options: TrainingOptions, devices: int) -> ParameterBytes:
    precision, stage, f = PRECISIONS[options.precision], options.stage, options.trainable_fraction

    def shard(nbytes: float, from_stage: int) -> float:
        return nbytes / devices if stage >= from_stage else nbytes

    weights = shard(precision.weights, 3)
    copies = shard(precision.weight_copies, 3)
    gradients = shard(precision.gradients * f, 2)
    optimizer = shard((precision.master + OPTIMIZERS[options.optimizer] * precision.state) * f, 1)
    host = 0.0
    if options.offload in ("optimizer", "all"):
        host, optimizer = host + optimizer, 0.0
        if stage >= 2:  # the gradients' partition goes with the optimizer state it updates
            host, gradients = host + gradients, 0.0
    if options.offload == "all":
        host, weights = host + weights, 0.0
    return ParameterBytes(weights, copies, gradients, optimizer, host)


def parameter_bytes(
    precision: str = "amp",
    optimizer: str = "adamw",
    *,
    parallel: str = "ddp",
    devices: int = 1,
    offload: str = "none",
    trainable_fraction: float = 1.0,
) -> ParameterBytes:
    """Bytes per parameter of the model that each of ``devices`` data-parallel devices holds.

    ``parameter_bytes("mixed", "adam")`` is the ZeRO paper's 2 + 2 + 12 = 16; with
    ``parallel="zero3", devices=64`` it is 16/64. Activations are not per parameter: see
    :func:`activation_bytes`.
    """
    options = TrainingOptions(
        precision=precision,
        optimizer=optimizer,
        parallel=parallel,
        offload=offload,
        trainable_fraction=trainable_fraction,
    )
    return _parameter_bytes(options, _whole("devices", devices))


# ---------------------------------------------------------------------------------------------
# Activations.


class ActivationCoefficients(NamedTuple):
    """One transformer layer's activation bytes: ``linear·s·b·h + quadratic·a·s²·b`` kept for the
    backward without recomputation, and ``checkpoint·s·b·h`` (its input) with full recomputation."""

    linear: int
    quadratic: int
    checkpoint: int


def activation_coefficients(precision: str = "amp", *, flash_attention: bool = False) -> ActivationCoefficients:
    """Korthikanti et al.'s per-layer counts in ``precision``: (34, 5, 2) in 16 bits.

    Their 34 is 16 tensors of s·b·h values at 2 bytes (32) and 2 dropout masks of 1 byte; their 5
    is the softmax output and its dropout at 2 bytes each (4) and the mask (1). In float32 a value
    takes 4 bytes and a mask still 1: (66, 9, 4). ``flash_attention`` drops the quadratic term.
    """
    value = PRECISIONS[_choice("precision", precision, tuple(PRECISIONS))].activation
    flash = _flag("flash_attention", flash_attention)
    return ActivationCoefficients(linear=16 * value + 2, quadratic=0 if flash else 2 * value + 1, checkpoint=value)


def activation_bytes(
    *,
    layers: int,
    hidden: int,
    heads: int,
    seq_len: int,
    microbatch: int,
    precision: str = "amp",
    activation_checkpointing: bool = False,
    flash_attention: bool = False,
) -> float:
    """Bytes of activations one device keeps for the backward of a micro-batch (an estimate).

    Without recomputation every layer keeps its full set; with full recomputation every layer
    keeps its input, and the layer being recomputed holds its full set while its backward runs.
    """
    layers, hidden, heads = _whole("layers", layers), _whole("hidden", hidden), _whole("heads", heads)
    seq_len, microbatch = _whole("seq_len", seq_len), _whole("microbatch", microbatch)
    k = activation_coefficients(precision, flash_attention=flash_attention)
    one_layer = k.linear * seq_len * microbatch * hidden + k.quadratic * heads * seq_len**2 * microbatch
    if _flag("activation_checkpointing", activation_checkpointing):
        return layers * k.checkpoint * seq_len * microbatch * hidden + one_layer
    return float(layers * one_layer)


# ---------------------------------------------------------------------------------------------
# A whole configuration.


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes on each of :attr:`devices` devices for one configuration, by what holds them, and
    the bytes its process keeps in host memory (offload).

    The device sum is an upper bound of the peak that the accounting covers: with the gradients
    set to None between steps, the activations and the gradients are not all alive at once.
    """

    options: TrainingOptions
    devices: int
    microbatch: int  # sequences per device per forward pass
    weights: float
    weight_copies: float
    gradients: float
    optimizer_state: float
    activations: float
    host: float

    @property
    def model_states(self) -> float:
        """Weights (and their 16-bit copies), gradients and optimizer state on the device."""
        return self.weights + self.weight_copies + self.gradients + self.optimizer_state

    @property
    def device(self) -> float:
        """Everything on the device: the model states and the activations."""
        return self.model_states + self.activations


def _micro(batch_size: int, devices: int, steps: int) -> int:
    if batch_size % (devices * steps):
        raise ValueError(
            f"batch_size={batch_size} does not split over devices={devices} × accumulation_steps={steps} — "
            "pass a batch that divides evenly"
        )
    return batch_size // (devices * steps)


def estimate_memory(
    parameters: int,
    *,
    layers: int,
    hidden: int,
    heads: int,
    seq_len: int,
    batch_size: int,
    devices: int = 1,
    options: TrainingOptions | None = None,
) -> MemoryEstimate:
    """The bytes one device needs to train a transformer of ``parameters`` parameters (all of
    them, embeddings included) with ``layers`` layers of width ``hidden`` and ``heads`` heads, on
    ``batch_size`` sequences of ``seq_len`` tokens per optimizer step over ``devices``
    data-parallel devices, with ``options`` (default :class:`TrainingOptions`: AMP, AdamW, DDP).

    A ValueError when ``batch_size`` does not split evenly over the devices and the accumulation
    steps, or a size is below 1.
    """
    options = TrainingOptions() if options is None else options
    if not isinstance(options, TrainingOptions):
        raise TypeError(f"options={options!r}: pass a TrainingOptions")
    parameters, devices = _whole("parameters", parameters), _whole("devices", devices)
    batch_size = _whole("batch_size", batch_size)
    microbatch = _micro(batch_size, devices, options.accumulation_steps)
    per = _parameter_bytes(options, devices)
    activations = activation_bytes(
        layers=layers,
        hidden=hidden,
        heads=heads,
        seq_len=seq_len,
        microbatch=microbatch,
        precision=options.precision,
        activation_checkpointing=options.activation_checkpointing,
        flash_attention=options.flash_attention,
    )
    return MemoryEstimate(
        options=options,
        devices=devices,
        microbatch=microbatch,
        weights=parameters * per.weights,
        weight_copies=parameters * per.weight_copies,
        gradients=parameters * per.gradients,
        optimizer_state=parameters * per.optimizer_state,
        activations=activations,
        host=parameters * per.host,
    )


# ---------------------------------------------------------------------------------------------
# Does it fit, and how?


@dataclass(frozen=True)
class MemoryPlan:
    """One option combination: its estimate, the memory of one device, and whether it fits."""

    options: TrainingOptions
    estimate: MemoryEstimate
    memory: int  # bytes of one device
    fits: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "fits", self.estimate.device <= self.memory)

    @property
    def headroom(self) -> float:
        """Bytes left on the device (negative when it does not fit)."""
        return self.memory - self.estimate.device


def _candidates(precision: str, optimizer: str, fraction: float, flash: bool, per_device: int) -> list[TrainingOptions]:
    steps = [k for k in (1, 2, 4, 8, 16, 32, 64) if per_device % k == 0]
    out = []
    for parallel in ("ddp", "zero1", "zero2", "zero3"):
        for offload in OFFLOADS:
            for checkpointing in (False, True):
                for k in steps:
                    try:
                        out.append(
                            TrainingOptions(
                                precision=precision,
                                optimizer=optimizer,
                                parallel=parallel,
                                offload=offload,
                                activation_checkpointing=checkpointing,
                                accumulation_steps=k,
                                trainable_fraction=fraction,
                                flash_attention=flash,
                            )
                        )
                    except ValueError:  # an offload this mode does not have
                        continue
    # A rule of thumb for what each option costs in time, cheapest first: accumulation and ZeRO
    # stages 1-2 add no computation and no communication (the ZeRO paper, section 7); stage 3
    # communicates 1.5x as much as DDP; full recomputation adds about one forward pass; offload
    # adds PCIe traffic and an optimizer step on the CPU.
    out.sort(
        key=lambda o: (
            OFFLOADS.index(o.offload),
            o.activation_checkpointing,
            o.stage == 3,
            o.accumulation_steps,
            o.stage,
        )
    )
    return out


def plan_memory(
    parameters: int,
    *,
    layers: int,
    hidden: int,
    heads: int,
    seq_len: int,
    batch_size: int,
    devices: int,
    memory_gb: float,
    precision: str = "amp",
    optimizer: str = "adamw",
    trainable_fraction: float = 1.0,
    flash_attention: bool = False,
) -> tuple[MemoryPlan, ...]:
    """Does a model fit on ``devices`` devices of ``memory_gb`` GB (10⁹ bytes) each, and with
    which options? Every combination of the parallel mode (DDP, ZeRO stages 1 to 3, which FSDP
    matches), the offload, activation checkpointing and gradient accumulation (1, 2, 4, … steps
    that divide the per-device batch), each with its estimate and whether it fits.

    The plans come in a rule-of-thumb order of the time each option costs, cheapest first (see
    the page "Memory: what fits, and what it costs"), so the first plan that fits is the one to
    try first; a combination that holds the same bytes as an earlier one (ZeRO on one device
    without offload) is left out. ``batch_size`` is the global batch: sequences per optimizer
    step over all devices; a ValueError when it does not split over ``devices``.
    """
    parameters, devices = _whole("parameters", parameters), _whole("devices", devices)
    batch_size = _whole("batch_size", batch_size)
    memory = _real("memory_gb", memory_gb)
    if memory <= 0:
        raise ValueError(f"memory_gb={memory}: must be above 0")
    per_device = _micro(batch_size, devices, 1)
    shape = {"layers": layers, "hidden": hidden, "heads": heads, "seq_len": seq_len}
    # checked here, so that the loop below refuses only the offloads a mode does not have
    base = TrainingOptions(
        precision=precision, optimizer=optimizer, trainable_fraction=trainable_fraction, flash_attention=flash_attention
    )
    candidates = _candidates(base.precision, base.optimizer, base.trainable_fraction, base.flash_attention, per_device)
    plans, seen = [], set()
    for options in candidates:
        estimate = estimate_memory(parameters, batch_size=batch_size, devices=devices, options=options, **shape)
        key = (estimate.device, estimate.host, options.activation_checkpointing, options.accumulation_steps)
        if key in seen:
            continue
        seen.add(key)
        plans.append(MemoryPlan(options, estimate, round(memory * GB)))
    return tuple(plans)
