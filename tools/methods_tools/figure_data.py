"""What the method cards' ``plot`` figures draw: one function per figure, named by ``data`` in the
method's ``metadata.json`` figure entry, run by :mod:`.figures` at every docs build.

Each function computes its figure from the method's own code (its functional form, its
``Algorithm`` in the Trainer, its modules) and returns ``{"type": "image", "values": 2-D}``,
``{"type": "lines", "x": [...], "series": {label: [...]}}`` or ``{"type": "bars", "labels":
[...], "series": {label: [...]}}``, with optional ``title``, ``xlabel`` and ``ylabel``. A function
that takes ``generator`` is given one seeded with the figure entry's ``seed``.

They live here, not in ``algorithms``: the runtime package holds what training runs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from fractions import Fraction
from typing import Any

import torch
from torch import nn

from algorithms.core.algorithm import Algorithm
from algorithms.core.distributed import unwrap_model
from algorithms.core.event import Event
from algorithms.core.state import State

__all__ = [
    "Recorder",
    "activation_memory_per_block",
    "alibi_head_bias",
    "blurpool_filter",
    "channels_last_strides",
    "clipping_trajectory",
    "drop_rate_per_block",
    "ema_trajectory",
    "ghost_chunk_statistics",
    "groupnorm_error",
    "gyro_dropout_masks",
    "layer_freezing_schedule",
    "layernorm_error",
    "sam_trajectory",
    "sequence_length_schedule",
    "standardized_filter_histogram",
    "swa_trajectory",
]


class Recorder(Algorithm):
    """Records ``read(state)`` after every batch, in ``values``: a figure's view of a run."""

    activity = {"values_recorded": "values recorded for the figure"}

    def __init__(self, read: Callable[[State], float]):
        self._read = read
        self.values: list[float] = []

    def match(self, event: Event, state: State) -> bool:
        return event is Event.BATCH_END

    def apply(self, event: Event, state: State, logger: Any | None = None) -> None:
        self.values.append(self._read(state))
        self.report(logger, "values_recorded")


def _one_weight_run(
    method: Algorithm,
    read: Callable[[State], float],
    steps: int,
    lr: float,
    noise: float,
    generator: torch.Generator | None,
) -> tuple[list[float], list[float]]:
    """A one-weight model ``y = w * 1`` from ``w = 0``, trained by SGD with ``method`` in the Trainer
    on the squared error to targets drawn from ``N(2, noise**2)``: the weight and ``read(state)``
    after every batch."""
    from algorithms.core.trainer import Trainer

    model = torch.nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        model.weight.zero_()
    targets = 2.0 + noise * torch.randn(steps, generator=generator)
    batches = [(torch.ones(1, 1), t.reshape(1, 1)) for t in targets]
    weights = Recorder(lambda state: unwrap_model(state.model).weight.item())
    other = Recorder(read)
    Trainer(
        model,
        batches,
        f"{steps}ba",
        optimizer=torch.optim.SGD(model.parameters(), lr=lr),
        loss_fn=lambda out, target: 0.5 * ((out - target) ** 2).mean(),
        algorithms=[method, weights, other],
        device="cpu",
    ).fit()
    return weights.values, other.values


def activation_memory_per_block(
    model: str = "resnet20", batch_size: int = 8, image_size: int = 32, generator: torch.Generator | None = None
) -> dict[str, Any]:
    """Activation checkpointing: for each residual block of a fresh reference ``model`` in training,
    on a batch of ``batch_size`` random images, the KiB autograd keeps for the backward pass from the
    block's forward, counted by ``torch.autograd.graph.saved_tensors_hooks`` (each storage once; the
    weights, which are kept anyway, left out): without the method, the activations the block's layers save; with
    ``apply_activation_checkpointing``, what the checkpoint keeps (the block's input)."""
    import copy

    from algorithms import models
    from algorithms.activation_checkpointing.activation_checkpointing import apply_activation_checkpointing
    from algorithms.models.resnet import BasicBlock, Bottleneck

    seed = int(torch.randint(0, 2**31, (), generator=generator))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        plain = getattr(models, model)().train()
        x = torch.randn(batch_size, 3, image_size, image_size)
    checkpointed = apply_activation_checkpointing(copy.deepcopy(plain))

    def kept(net: nn.Module) -> tuple[list[str], list[float]]:
        blocks = [(name, m) for name, m in net.named_modules() if isinstance(m, (BasicBlock, Bottleneck))]
        held: list[dict[int, int]] = [{} for _ in blocks]  # per block: storage -> bytes, each storage once
        current: list[int | None] = [None]
        weights = {p.untyped_storage().data_ptr() for p in net.parameters()}

        def pack(t: torch.Tensor) -> torch.Tensor:
            storage = t.untyped_storage()
            if current[0] is not None and storage.data_ptr() not in weights:
                held[current[0]][storage.data_ptr()] = storage.nbytes()
            return t

        handles = []
        for i, (_, block) in enumerate(blocks):
            handles.append(block.register_forward_pre_hook(lambda m, args, i=i: current.__setitem__(0, i)))
            handles.append(block.register_forward_hook(lambda m, args, out: current.__setitem__(0, None)))
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            net(x)
        for handle in handles:
            handle.remove()
        return [name for name, _ in blocks], [sum(sizes.values()) / 1024 for sizes in held]

    labels, without = kept(plain)
    _, with_it = kept(checkpointed)
    return {
        "type": "bars",
        "labels": labels,
        "series": {"without activation checkpointing": without, "with activation checkpointing": with_it},
        "title": f"What autograd keeps from each block of {model} ({batch_size} images of {image_size} pixels)",
        "xlabel": "block",
        "ylabel": "KiB of activations kept for the backward pass",
    }


def alibi_head_bias(n_heads: int = 4, head: int = 0, length: int = 16) -> dict[str, Any]:
    """ALiBi: the bias one head adds to its attention logits."""
    from algorithms.alibi.alibi import alibi_bias, alibi_slopes

    bias = alibi_bias(torch.tensor(alibi_slopes(n_heads)), length)[head]
    later = torch.ones(length, length, dtype=torch.bool).triu(1)
    slope = alibi_slopes(n_heads)[head]
    return {
        "type": "image",
        "values": bias.masked_fill(later, float("nan")),  # masked keys: left blank
        "title": f"ALiBi bias of head {head + 1} of {n_heads} (slope {slope:g}); masked keys blank",
        "xlabel": "key position j",
        "ylabel": "query position i",
    }


def blurpool_filter() -> dict[str, Any]:
    """BlurPool: the filter ``blur_filter`` returns, which every BlurConv2d and BlurMaxPool2d
    applies to each channel."""
    from algorithms.blurpool.blurpool import blur_filter

    return {
        "type": "image",
        "values": blur_filter(torch.float64).tolist(),
        "title": "BlurPool's filter (sums to 1)",
        "xlabel": "column",
        "ylabel": "row",
    }


def channels_last_strides(model: str = "resnet20", module: str = "layer1.0.conv1") -> dict[str, Any]:
    """Channels Last: the strides of a fresh reference model's convolution weight, in elements,
    before and after ``apply_channels_last``."""
    from algorithms import models
    from algorithms.channels_last.channels_last import apply_channels_last

    network = getattr(models, model)()
    weight = network.get_submodule(module).weight
    before = list(weight.stride())
    apply_channels_last(network)
    after = list(network.get_submodule(module).weight.stride())
    shape = " x ".join(map(str, weight.shape))
    return {
        "type": "bars",
        "labels": ["out channel", "in channel", "row", "column"],
        "series": {"before (contiguous)": before, "after (channels_last)": after},
        "title": f"Strides of {model} {module}.weight ({shape})",
        "xlabel": "dimension",
        "ylabel": "stride (elements)",
    }


def ema_trajectory(
    steps: int = 150,
    half_life: str = "10ba",
    lr: float = 0.3,
    noise: float = 1.0,
    generator: torch.Generator | None = None,
) -> dict[str, Any]:
    """EMA: one weight of a one-weight model trained by SGD on noisy targets, and its EMA, per step.

    The weight jumps around 2, the targets' mean, and the EMA class (``half_life``) in the Trainer
    averages the jumps away.
    """
    from algorithms.ema.ema import EMA

    ema = EMA(half_life=half_life)
    weights, averages = _one_weight_run(ema, lambda state: ema.ema_model.weight.item(), steps, lr, noise, generator)
    return {
        "type": "lines",
        "x": list(range(1, steps + 1)),
        "series": {"weight": weights, f"EMA (half_life={half_life!r})": averages},
        "title": f"SGD on noisy targets around 2 (lr {lr}), one weight",
        "xlabel": "batch",
        "ylabel": "weight",
    }


def swa_trajectory(
    steps: int = 120,
    swa_start: str = "0.5dur",
    swa_end: str = "0.85dur",
    update_interval: str = "5ba",
    lr: float = 0.3,
    noise: float = 1.0,
    generator: torch.Generator | None = None,
) -> dict[str, Any]:
    """SWA: one weight of a one-weight model trained by SGD on noisy targets, and SWA's running
    mean (NaN where there is none), per step.

    The SWA class in the Trainer averages a snapshot every ``update_interval`` from
    ``swa_start``; at ``swa_end`` the weight becomes the mean and training goes on from it.
    """
    from algorithms.swa.swa import SWA

    swa = SWA(swa_start=swa_start, swa_end=swa_end, update_interval=update_interval)

    def mean(state: State) -> float:
        return swa.swa_model.weight.item() if swa.swa_model is not None else float("nan")

    weights, means = _one_weight_run(swa, mean, steps, lr, noise, generator)
    return {
        "type": "lines",
        "x": list(range(1, steps + 1)),
        "series": {"weight": weights, f"SWA mean (every {update_interval})": means},
        "title": f"SGD on noisy targets around 2 (lr {lr}); SWA from {swa_start} to {swa_end}",
        "xlabel": "batch",
        "ylabel": "weight",
    }


def ghost_chunk_statistics(
    ghost_batch_size: int = 16, batch_size: int = 64, channel: int = 0, generator: torch.Generator | None = None
) -> dict[str, Any]:
    """Ghost BatchNorm: how far the mean and the standard deviation of each ghost batch stray from
    0 and 1, in one channel of a fresh ResNet-20's first batch norm (``bn1``) in training, on
    ``batch_size`` real 16-pixel digits, before and after ``apply_ghost_batchnorm``."""
    from algorithms.data import digits
    from algorithms.ghost_batchnorm.ghost_batchnorm import apply_ghost_batchnorm
    from algorithms.models import resnet20

    train = digits(image_size=16).train
    seed = int(torch.randint(0, 2**31, (), generator=generator))
    index = torch.randperm(len(train), generator=generator)[:batch_size]
    images = torch.stack([train[int(i)][0] for i in index])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = resnet20(10)
    with torch.no_grad():
        features = model.conv1(images)
        plain = model.bn1(features)
        apply_ghost_batchnorm(model, ghost_batch_size)
        ghost = model.bn1(features)
    chunks = math.ceil(batch_size / ghost_batch_size)
    series = {}
    for label, out in (("BatchNorm2d", plain), ("GhostBatchNorm2d", ghost)):
        parts = out[:, channel].tensor_split(chunks)
        series[f"{label}: mean"] = [float(p.mean()) for p in parts]
        series[f"{label}: std - 1"] = [float(p.std(correction=0)) - 1 for p in parts]
    return {
        "type": "bars",
        "labels": [f"{int(p[0]) + 1}-{int(p[-1]) + 1}" for p in torch.arange(batch_size).tensor_split(chunks)],
        "series": series,
        "title": f"bn1 of ResNet-20, channel {channel}, in training: each ghost batch's statistics",
        "xlabel": f"examples of each ghost batch (ghost_batch_size={ghost_batch_size}, batch of {batch_size})",
        "ylabel": "mean, and standard deviation - 1",
    }


def clipping_trajectory(
    clipping_type: str = "norm",
    clipping_threshold: float = 1.0,
    steps: int = 40,
    lr: float = 0.1,
    generator: torch.Generator | None = None,
) -> dict[str, Any]:
    """Gradient clipping: a small network trained by SGD on random batches with
    ``apply_gradient_clipping`` before each step: the total gradient norm per step before and
    after the clipping."""
    from algorithms.gradient_clipping.gradient_clipping import apply_gradient_clipping

    g = generator if generator is not None else torch.Generator().manual_seed(0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(torch.randint(0, 2**31, (), generator=g)))
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    before, after = [], []
    for _ in range(steps):
        x, y = torch.randn(32, 16, generator=g) * 3, torch.randint(0, 4, (32,), generator=g)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        before.append(float(torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])))
        apply_gradient_clipping(model, clipping_type, clipping_threshold, fsdp_enabled=False)
        after.append(float(torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])))
        opt.step()
    return {
        "type": "lines",
        "x": list(range(1, steps + 1)),
        "series": {"before clipping": before, "after clipping": after},
        "title": f"clipping_type={clipping_type!r}, clipping_threshold={clipping_threshold}",
        "xlabel": "step",
        "ylabel": "total gradient norm",
    }


def gyro_dropout_masks(
    units: int = 32,
    batch_size: int = 16,
    p: float = 0.5,
    sigma: int = 16,
    tau: int = 4,
    generator: torch.Generator | None = None,
) -> dict[str, Any]:
    """Gyro Dropout: the mask each example of one training batch gets from a fresh
    ``GyroDropoutLayer`` drawing from ``generator``, as an image (examples x units)."""
    from algorithms.gyro_dropout.gyro_dropout import GyroDropoutLayer

    layer = GyroDropoutLayer(iters_per_epoch=100, max_epoch=1, p=p, sigma=sigma, tau=tau).train()
    layer.generator = generator
    with torch.no_grad():
        mask = layer(torch.ones(batch_size, units)) * (1 - p)
    return {
        "type": "image",
        "values": mask,
        "title": f"One batch: {tau} of {sigma} pre-selected masks, {batch_size // tau} examples each (p={p})",
        "xlabel": "unit",
        "ylabel": "example (1 kept, 0 dropped)",
    }


def layer_freezing_schedule(freeze_start: float = 0.5, freeze_level: float = 1.0, points: int = 41) -> dict[str, Any]:
    """Layer freezing: the scheduled fraction of layers frozen over training, and the fraction of
    resnet20's layers ``freeze_layers`` freezes at each point (whole layers: a staircase)."""
    from algorithms.layer_freezing.layer_freezing import _layers, freeze_layers
    from algorithms.models import resnet20

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = resnet20(10)
    n = len(_layers(model))
    x = [i / (points - 1) for i in range(points)]
    scheduled, frozen = [], []
    for duration in x:
        depth, fraction = freeze_layers(model, None, duration, freeze_start, freeze_level)
        scheduled.append(fraction)
        frozen.append(depth / n)
    return {
        "type": "lines",
        "x": x,
        "series": {"scheduled fraction": scheduled, f"resnet20: layers frozen / {n}": frozen},
        "title": f"freeze_start={freeze_start}, freeze_level={freeze_level}",
        "xlabel": "fraction of training done",
        "ylabel": "fraction of layers frozen",
    }


def _largest_differences(low: nn.Module, reference: nn.Module, x: torch.Tensor, series: dict[str, list[float]]) -> None:
    """Append to ``series`` the largest absolute difference between ``low`` under CPU autocast in
    bfloat16 and in float16 and ``reference`` in float32, on ``x``."""
    with torch.no_grad():
        expected = reference(x)
        for label, dtype in (("bfloat16", torch.bfloat16), ("float16", torch.float16)):
            with torch.autocast("cpu", dtype=dtype):
                out = low(x)
            series.setdefault(label, []).append(float((out.float() - expected).abs().max()))


def groupnorm_error(
    channels: int = 32,
    group_counts: tuple[int, ...] | list[int] = (1, 2, 4, 8, 16, 32),
    generator: torch.Generator | None = None,
) -> dict[str, Any]:
    """Low Precision GroupNorm: the largest absolute difference between ``LPGroupNorm`` under CPU
    autocast (bfloat16, float16) and ``nn.GroupNorm`` in float32, for each group count, on a
    seeded standard normal batch ``(8, channels, 8, 8)`` with seeded weights and biases."""
    from algorithms.low_precision_groupnorm.low_precision_groupnorm import apply_low_precision_groupnorm

    x = torch.randn(8, channels, 8, 8, generator=generator)
    series: dict[str, list[float]] = {"bfloat16": [], "float16": []}
    for groups in group_counts:
        reference = nn.GroupNorm(groups, channels)
        with torch.no_grad():
            reference.weight.copy_(1 + 0.1 * torch.randn(channels, generator=generator))
            reference.bias.copy_(0.1 * torch.randn(channels, generator=generator))
        low = apply_low_precision_groupnorm(nn.Sequential(reference), precision="amp_bf16")[0]
        _largest_differences(low, reference, x, series)
    return {
        "type": "bars",
        "labels": [str(g) for g in group_counts],
        "series": series,
        "title": f"LPGroupNorm under autocast against nn.GroupNorm in float32, {channels} channels",
        "xlabel": "num_groups",
        "ylabel": "largest absolute difference",
    }


def layernorm_error(
    width: int = 64,
    offsets: tuple[float, ...] | list[float] = (0, 1, 4, 16, 64),
    generator: torch.Generator | None = None,
) -> dict[str, Any]:
    """Low Precision LayerNorm: the largest absolute difference between ``LPLayerNorm`` under CPU
    autocast (bfloat16, float16) and ``nn.LayerNorm`` in float32, on seeded rows of ``width``
    standard normal values shifted by each offset (a mean large against the spread, as residual
    streams grow, is where rounding the input costs most), with seeded weights and biases."""
    from algorithms.low_precision_layernorm.low_precision_layernorm import apply_low_precision_layernorm

    reference = nn.LayerNorm(width)
    with torch.no_grad():
        reference.weight.copy_(1 + 0.1 * torch.randn(width, generator=generator))
        reference.bias.copy_(0.1 * torch.randn(width, generator=generator))
    low = apply_low_precision_layernorm(nn.Sequential(reference), precision="amp_bf16")[0]
    noise = torch.randn(256, width, generator=generator)
    series: dict[str, list[float]] = {"bfloat16": [], "float16": []}
    for offset in offsets:
        _largest_differences(low, reference, noise + offset, series)
    return {
        "type": "lines",
        "x": [float(o) for o in offsets],
        "series": series,
        "title": f"LPLayerNorm under autocast against nn.LayerNorm in float32, width {width}",
        "xlabel": "mean of the input (its standard deviation is 1)",
        "ylabel": "largest absolute difference",
    }


def _valley_loss(w: torch.Tensor) -> torch.Tensor:
    """A 2-D loss whose minima, w_1 = 0, form a valley that is sharp near w_2 = 0 and flatter away
    from it: the curvature across the valley is 1 + 10 / (1 + w_2^2)."""
    return 0.5 * w[..., 0] ** 2 * (1 + 10 / (1 + w[..., 1] ** 2))


def _worst_nearby(w: torch.Tensor, rho: float, directions: int = 64) -> float:
    """``max_{||e|| = rho} L(w + e)`` over ``directions`` evenly spaced directions."""
    angles = torch.arange(directions, dtype=w.dtype) * (2 * math.pi / directions)
    return float(_valley_loss(w.detach() + rho * torch.stack([angles.cos(), angles.sin()], dim=1)).max())


def sam_trajectory(
    steps: int = 150, lr: float = 0.05, rho: float = 0.3, start: Iterable[float] = (0.5, 0.3)
) -> dict[str, Any]:
    """SAM: plain gradient descent and SAM (``SAMOptimizer`` around the same SGD, its
    ``first_step`` given the closure the Trainer would give) from the same start on a valley of
    minima that is sharp at one end: per step, each run's loss ``L(w)`` and the worst loss within
    ``rho`` of it, what SAM minimises. Both reach the valley floor; gradient descent stops where it
    lands, SAM goes on along the floor to where the valley is flatter."""
    from algorithms.sam.sam import SAMOptimizer

    series: dict[str, list[float]] = {}
    for name in ("gradient descent", "SAM"):
        w = torch.tensor(list(start), dtype=torch.float64, requires_grad=True)
        base = torch.optim.SGD([w], lr=lr)
        opt = SAMOptimizer(base, rho=rho) if name == "SAM" else base
        losses, worst = [], []
        for _ in range(steps + 1):
            opt.zero_grad()
            loss = _valley_loss(w)
            loss.backward()
            losses.append(float(loss.detach()))
            worst.append(_worst_nearby(w, rho))
            if isinstance(opt, SAMOptimizer):
                opt.first_step(lambda w=w: _valley_loss(w).backward())
            opt.step()
        series[f"{name}: L(w)"] = losses
        series[f"{name}: max L within rho"] = worst
    return {
        "type": "lines",
        "x": list(range(steps + 1)),
        "series": series,
        "title": f"A valley of minima, sharp at one end (rho={rho}, lr={lr})",
        "xlabel": "step",
        "ylabel": "loss",
    }


def sequence_length_schedule(
    batches: int = 100, duration: float = 0.3, min_seq_length: int = 8, max_seq_length: int = 128, step_size: int = 8
) -> dict[str, Any]:
    """Sequence length warmup: the sequence length of each batch of a run of ``batches`` batches,
    from ``SeqLengthWarmup.sequence_length``."""
    from algorithms.seq_length_warmup.seq_length_warmup import SeqLengthWarmup

    warmup = SeqLengthWarmup(duration, min_seq_length, max_seq_length, step_size)
    return {
        "type": "lines",
        "x": list(range(batches)),
        "series": {"sequence length": [warmup.sequence_length(Fraction(b, batches)) for b in range(batches)]},
        "title": f"Sequence length per batch (duration={duration})",
        "xlabel": "batch",
        "ylabel": "tokens per sequence",
    }


def drop_rate_per_block(model: str = "resnet20", drop_rate: float = 0.2) -> dict[str, Any]:
    """Stochastic depth: each block's drop probability after ``apply_stochastic_depth`` on a fresh
    reference ``model`` (``resnet20`` or ``resnet56``), read from the replaced blocks, for both
    distributions."""
    from algorithms import models
    from algorithms.stochastic_depth.stochastic_depth import _StochasticResidual, apply_stochastic_depth

    series, labels = {}, []
    for distribution in ("linear", "uniform"):
        net = apply_stochastic_depth(
            getattr(models, model)(), "BasicBlock", drop_rate=drop_rate, drop_distribution=distribution
        )
        blocks = [(name, m) for name, m in net.named_modules() if isinstance(m, _StochasticResidual)]
        labels = [name for name, _ in blocks]
        series[distribution] = [m.drop_rate for _, m in blocks]
    return {
        "type": "bars",
        "labels": labels,
        "series": series,
        "title": f"Stochastic Depth's drop rate per block of {model}, drop_rate={drop_rate}",
        "xlabel": "block",
        "ylabel": "probability of dropping the branch",
    }


def standardized_filter_histogram(
    module: str = "layer1.0.conv1", filter: int = 0, bins: int = 24, generator: torch.Generator | None = None
) -> dict[str, Any]:
    """Weight standardization: a histogram of one filter of a fresh ResNet-20's convolution
    ``module``, as initialized and as ``apply_weight_standardization`` makes the forward see it."""
    from algorithms.models import resnet20
    from algorithms.weight_standardization.weight_standardization import apply_weight_standardization

    seed = int(torch.randint(0, 2**31, (), generator=generator))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = resnet20(10)
    before = model.get_submodule(module).weight.detach()[filter].flatten().clone()
    apply_weight_standardization(model)
    after = model.get_submodule(module).weight.detach()[filter].flatten()
    low, high = float(min(before.min(), after.min())), float(max(before.max(), after.max()))
    edges = torch.linspace(low, high, bins + 1)
    centres = ((edges[:-1] + edges[1:]) / 2).tolist()

    def counts(values: torch.Tensor) -> list[int]:
        return torch.histc(values, bins=bins, min=low, max=high).int().tolist()

    return {
        "type": "lines",
        "x": centres,
        "series": {
            f"as initialized (std {float(before.std(correction=0)):.3f})": counts(before),
            f"standardized (std {float(after.std(correction=0)):.3f})": counts(after),
        },
        "title": f"{module} of ResNet-20, filter {filter}: its {before.numel()} weights",
        "xlabel": "weight",
        "ylabel": "weights per bin",
    }
