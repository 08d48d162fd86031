"""The memory accounting (``algorithms.memory``) against the papers' own figures and against small
cases worked out by hand; the fit decision at its boundary; the refusals."""

from __future__ import annotations

import numpy as np
import pytest

from algorithms.memory import (
    TrainingOptions,
    activation_bytes,
    activation_coefficients,
    estimate_memory,
    parameter_bytes,
    plan_memory,
)

GB = 1e9


# --- The ZeRO paper (Rajbhandari et al., 2020, arXiv 1910.02054) -----------------------------


@pytest.mark.parametrize(
    ("parallel", "paper_gb", "exact_gb"),
    [
        # Figure 1: Ψ = 7.5B parameters, K = 12, N_d = 64 devices, per device:
        ("ddp", 120, 16 * 7.5),  # (2 + 2 + K)Ψ = 16 × 7.5
        ("zero1", 31.4, 4 * 7.5 + 12 * 7.5 / 64),  # 2Ψ + 2Ψ + KΨ/N_d = 30 + 1.40625
        ("zero2", 16.6, 2 * 7.5 + 14 * 7.5 / 64),  # 2Ψ + (2 + K)Ψ/N_d = 15 + 1.640625
        ("zero3", 1.9, 16 * 7.5 / 64),  # (2 + 2 + K)Ψ/N_d = 1.875
    ],
)
def test_model_states_are_the_zero_papers_figure_1(parallel, paper_gb, exact_gb):
    per = parameter_bytes("mixed", "adam", parallel=parallel, devices=64)
    assert per.device * 7.5e9 / GB == pytest.approx(exact_gb, rel=1e-12)
    assert round(per.device * 7.5e9 / GB, 1) == paper_gb  # as the figure prints it
    # the whole estimate's model states are the same bytes (the activations come on top)
    estimate = estimate_memory(
        7.5e9,
        layers=1,
        hidden=1,
        heads=1,
        seq_len=1,
        batch_size=64,
        devices=64,
        options=TrainingOptions(precision="mixed", optimizer="adam", parallel=parallel),
    )
    assert estimate.model_states / GB == pytest.approx(exact_gb, rel=1e-12)


def test_mixed_precision_adam_is_16_bytes_and_gpt2_1_5b_needs_24_gb():
    """Section 3.1: 2Ψ fp16 weights + 2Ψ fp16 gradients + 12Ψ (fp32 weights, momentum, variance);
    "a model such as GPT-2 with 1.5B parameters ... at least 24 GB"."""
    per = parameter_bytes("mixed", "adam")
    assert (per.weights, per.gradients, per.optimizer_state, per.weight_copies, per.host) == (2, 2, 12, 0, 0)
    assert per.device * 1.5e9 / GB == 24


def test_fsdp_counts_as_zero_stage_3():
    assert parameter_bytes("amp", parallel="fsdp", devices=8) == parameter_bytes("amp", parallel="zero3", devices=8)


# --- Each precision and optimizer, by hand -------------------------------------------------


@pytest.mark.parametrize(
    ("precision", "optimizer", "expected"),
    [
        # (weights, 16-bit copies, gradients, optimizer state)
        ("fp32", "adam", (4, 0, 4, 8)),  # two fp32 moments
        ("fp32", "sgd_momentum", (4, 0, 4, 4)),  # one fp32 momentum buffer
        ("fp32", "sgd", (4, 0, 4, 0)),
        ("amp", "adamw", (4, 2, 4, 8)),  # fp32 model and state, autocast's 16-bit weight copies
        ("mixed", "sgd_momentum", (2, 0, 2, 8)),  # K = 4 (master) + 4 (momentum)
        ("mixed", "sgd", (2, 0, 2, 4)),  # K = 4: the master weights alone
        ("half", "adam", (2, 0, 2, 4)),  # two 16-bit moments
    ],
)
def test_bytes_per_parameter_of_each_precision_and_optimizer(precision, optimizer, expected):
    per = parameter_bytes(precision, optimizer)
    assert (per.weights, per.weight_copies, per.gradients, per.optimizer_state) == expected
    assert per.device == sum(expected) and per.host == 0


def test_lora_keeps_gradients_and_optimizer_state_for_the_trainable_share_only():
    # AMP, AdamW, 1 % trainable: 4 (all weights) + 2 (their 16-bit copies) + 4 × 0.01 + 8 × 0.01 = 6.12
    per = parameter_bytes("amp", "adamw", trainable_fraction=0.01)
    assert per.device == pytest.approx(6.12)
    assert (per.weights, per.weight_copies) == (4, 2)
    # mixed precision: the frozen weights need no master copy either: 2 + (2 + 12) × 0.5 = 9
    assert parameter_bytes("mixed", "adam", trainable_fraction=0.5).device == 9


# --- Offload moves bytes off the device; it does not make them ---------------------------------


def test_zero2_optimizer_offload_leaves_the_16_bit_weights_on_the_device():
    """ZeRO-Offload at stage 2: the device keeps its fp16 weights (DeepSpeed's own estimator,
    estimate_zero2_model_states_mem_needs with cpu_offload=True: gpu_mem = 2 * total_params);
    the host keeps the partition of the gradients and of the optimizer state: (2 + 12)/8."""
    per = parameter_bytes("mixed", "adam", parallel="zero2", devices=8, offload="optimizer")
    assert (per.weights, per.gradients, per.optimizer_state) == (2, 0, 0)
    assert per.device == 2 and per.host == 14 / 8


def test_zero1_optimizer_offload_keeps_the_unpartitioned_gradients_on_the_device():
    per = parameter_bytes("mixed", "adam", parallel="zero1", devices=4, offload="optimizer")
    assert (per.device, per.host) == (2 + 2, 12 / 4)


def test_full_offload_leaves_only_autocasts_copies_on_the_device():
    per = parameter_bytes("amp", "adamw", parallel="fsdp", devices=4, offload="all")
    # weights 4/4, gradients 4/4 and AdamW's 8/4 move; the 16-bit copies (2/4) are made on the device
    assert (per.weights, per.gradients, per.optimizer_state, per.weight_copies) == (0, 0, 0, 0.5)
    assert per.host == 16 / 4


@pytest.mark.parametrize(("parallel", "offload"), [("zero1", "optimizer"), ("zero3", "optimizer"), ("zero3", "all")])
def test_offload_moves_bytes_from_the_device_to_the_host_and_keeps_their_sum(parallel, offload):
    stay = parameter_bytes("mixed", "adam", parallel=parallel, devices=8)
    moved = parameter_bytes("mixed", "adam", parallel=parallel, devices=8, offload=offload)
    assert moved.device < stay.device and moved.host > 0
    assert moved.device + moved.host == pytest.approx(stay.device)


# --- Activations (Korthikanti et al., 2022, arXiv 2205.05198) -------------------------------


def test_activation_coefficients_are_the_papers_in_16_bits():
    """Section 4.1: s·b·h·(34 + 5·a·s/h) bytes per layer in 16 bits; with full recomputation 2·s·b·h
    (Table 2); selective recomputation (and FlashAttention) removes the 5·a·s/h term: 34·s·b·h."""
    assert tuple(activation_coefficients("amp")) == (34, 5, 2)
    assert tuple(activation_coefficients("half")) == (34, 5, 2)
    assert tuple(activation_coefficients("mixed", flash_attention=True)) == (34, 0, 2)
    # fp32: the 16 values of s·b·h and the 2 of a·s²·b at 4 bytes, the 1-byte masks unchanged
    assert tuple(activation_coefficients("fp32")) == (16 * 4 + 2, 2 * 4 + 1, 4)


def test_activation_bytes_by_hand():
    # s = 4, b = 2, h = 8, a = 2, 3 layers, 16 bits:
    # one layer: s·b·h·34 + a·s²·b·5 = 64 × 34 + 2 × 16 × 2 × 5 = 2176 + 320 = 2496
    shape = {"layers": 3, "hidden": 8, "heads": 2, "seq_len": 4, "microbatch": 2}
    assert activation_bytes(**shape, precision="amp") == 3 * 2496
    # full recomputation: each layer keeps its input, 2·s·b·h = 128, and the layer in its backward
    # holds its full set: 3 × 128 + 2496 = 2880
    assert activation_bytes(**shape, precision="amp", activation_checkpointing=True) == 2880
    # fp32: 64 × 66 + 64 × 9 = 4224 + 576 = 4800 per layer
    assert activation_bytes(**shape, precision="fp32") == 3 * 4800
    # FlashAttention: no scores kept: 64 × 34 = 2176 per layer
    assert activation_bytes(**shape, precision="amp", flash_attention=True) == 3 * 2176


def test_a_whole_configuration_by_hand():
    """1,000 parameters, 2 layers of width 4 with 1 head, 8 sequences of 2 tokens on 2 devices in
    2 accumulation steps (a micro-batch of 8 / (2 × 2) = 2), AMP, AdamW, ZeRO-2:
    weights 4 × 1000 = 4000, copies 2 × 1000 = 2000, gradients 4 × 1000 / 2 = 2000, AdamW
    8 × 1000 / 2 = 4000; activations per layer s·b·h·34 + a·s²·b·5 = 16 × 34 + 8 × 5 = 584, × 2."""
    estimate = estimate_memory(
        1000,
        layers=2,
        hidden=4,
        heads=1,
        seq_len=2,
        batch_size=8,
        devices=2,
        options=TrainingOptions(precision="amp", optimizer="adamw", parallel="zero2", accumulation_steps=2),
    )
    assert estimate.microbatch == 2
    assert (estimate.weights, estimate.weight_copies, estimate.gradients, estimate.optimizer_state) == (
        4000,
        2000,
        2000,
        4000,
    )
    assert estimate.activations == 2 * 584
    assert estimate.device == 12000 + 1168 and estimate.host == 0


def test_gradient_accumulation_divides_the_activations_and_not_the_model_states():
    shape = {"layers": 4, "hidden": 64, "heads": 4, "seq_len": 32, "batch_size": 16}
    one = estimate_memory(10**6, **shape, options=TrainingOptions(accumulation_steps=1))
    four = estimate_memory(10**6, **shape, options=TrainingOptions(accumulation_steps=4))
    assert (one.microbatch, four.microbatch) == (16, 4)
    assert four.activations == one.activations / 4  # linear in the micro-batch without recomputation
    assert four.model_states == one.model_states


# --- Does it fit? ---------------------------------------------------------------------------


def test_the_fit_decision_at_its_boundary():
    # 10⁹ parameters, fp32 SGD (4 + 4 bytes), one device: 8 × 10⁹ bytes; one layer of width 1000,
    # 1 head, one sequence of 1 token: fp32 activations 1 × 1 × 1000 × 66 + 1 × 1 × 1 × 9 = 66,009.
    # Total: 8,000,066,009 bytes.
    shape = {"layers": 1, "hidden": 1000, "heads": 1, "seq_len": 1, "batch_size": 1, "devices": 1}
    common = {"precision": "fp32", "optimizer": "sgd"}
    exactly = plan_memory(10**9, **shape, memory_gb=8.000066009, **common)
    assert exactly[0].options.describe() == "DDP" and exactly[0].estimate.device == 8_000_066_009
    assert exactly[0].fits and exactly[0].headroom == 0
    short = plan_memory(10**9, **shape, memory_gb=8.000066008, **common)
    assert not short[0].fits and short[0].headroom == -1
    # what still fits a byte short keeps fewer bytes on the device
    assert all(p.estimate.device <= 8_000_066_008 for p in short if p.fits)
    assert any(p.fits for p in short)


def test_plans_cover_the_options_cheapest_first_and_only_once():
    plans = plan_memory(
        10**8, layers=4, hidden=256, heads=4, seq_len=128, batch_size=8, devices=1, memory_gb=16, precision="mixed"
    )
    described = [p.options.describe() for p in plans]
    assert described[0] == "DDP" and plans[0].options.describe(devices=1) == "one device"
    # on one device ZeRO without offload holds what DDP holds: left out
    assert not any(d.startswith("ZeRO") and "offload" not in d for d in described)
    assert len(set(described)) == len(described)
    # accumulation steps divide the per-device batch of 8: 1, 2, 4, 8
    assert {p.options.accumulation_steps for p in plans} == {1, 2, 4, 8}
    # no offload before any offload, and within each offload checkpointing after none
    order = [(("none", "optimizer", "all").index(p.options.offload), p.options.activation_checkpointing) for p in plans]
    assert order == sorted(order)


def test_more_devices_shard_more():
    shape = {"layers": 2, "hidden": 64, "heads": 2, "seq_len": 16, "batch_size": 8, "memory_gb": 1}
    one = plan_memory(10**8, **shape, devices=1, precision="mixed")
    eight = plan_memory(10**8, **shape, devices=8, precision="mixed")
    zero3 = next(p for p in eight if p.options.describe() == "ZeRO-3")
    ddp = next(p for p in one if p.options.describe() == "DDP")
    assert zero3.estimate.model_states == ddp.estimate.model_states / 8 == 16 * 10**8 / 8


# --- Inputs --------------------------------------------------------------------------------


def test_numpy_scalars_and_whole_floats_are_accepted():
    plain = estimate_memory(7_500_000_000, layers=2, hidden=8, heads=2, seq_len=4, batch_size=4, devices=2)
    numpy = estimate_memory(
        np.float64(7.5e9),
        layers=np.int64(2),
        hidden=np.int32(8),
        heads=np.uint8(2),
        seq_len=4,
        batch_size=np.int64(4),
        devices=np.int16(2),
        options=TrainingOptions(
            precision=np.str_("amp"), trainable_fraction=np.float32(1.0), flash_attention=np.bool_(False)
        ),
    )
    assert numpy == plain
    assert plan_memory(10**6, layers=1, hidden=8, heads=1, seq_len=4, batch_size=2, devices=1, memory_gb=np.float32(1))


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: parameter_bytes(optimizer="lamb"), ValueError, "optimizer='lamb' is not known — use one of"),
        (lambda: parameter_bytes(precision="fp8"), ValueError, "precision='fp8' is not known"),
        (lambda: parameter_bytes(parallel="tp"), ValueError, "parallel='tp' is not known"),
        (lambda: parameter_bytes(devices=0), ValueError, "devices=0: must be at least 1"),
        (lambda: parameter_bytes(devices=-8), ValueError, "devices=-8: must be at least 1"),
        (lambda: parameter_bytes(devices=2.5), ValueError, "devices=2.5: pass a whole number"),
        (lambda: parameter_bytes(devices=True), TypeError, "devices=True: pass a whole number"),
        (lambda: parameter_bytes(trainable_fraction=0), ValueError, "trainable_fraction=0.0: must be in (0, 1]"),
        (lambda: parameter_bytes(trainable_fraction=1.5), ValueError, "trainable_fraction=1.5: must be in (0, 1]"),
        (lambda: parameter_bytes(parallel="ddp", offload="optimizer"), ValueError, "pass parallel='zero1'"),
        (lambda: parameter_bytes(parallel="zero2", offload="all"), ValueError, "pass parallel='zero3' or 'fsdp'"),
        (lambda: parameter_bytes(parallel="fsdp", offload="optimizer"), ValueError, "pass offload='all'"),
        (lambda: TrainingOptions(accumulation_steps=0), ValueError, "accumulation_steps=0: must be at least 1"),
        (lambda: TrainingOptions(activation_checkpointing="yes"), TypeError, "pass True or False"),
        (
            lambda: estimate_memory(-5, layers=1, hidden=1, heads=1, seq_len=1, batch_size=1),
            ValueError,
            "parameters=-5: must be at least 1",
        ),
        (
            lambda: estimate_memory(10, layers=1, hidden=-1, heads=1, seq_len=1, batch_size=1),
            ValueError,
            "hidden=-1: must be at least 1",
        ),
        (
            lambda: estimate_memory(10, layers=1, hidden=1, heads=1, seq_len=1, batch_size=6, devices=4),
            ValueError,
            "batch_size=6 does not split over devices=4 × accumulation_steps=1",
        ),
        (
            lambda: estimate_memory(10, layers=1, hidden=1, heads=1, seq_len=1, batch_size=1, options="amp"),
            TypeError,
            "pass a TrainingOptions",
        ),
        (
            lambda: plan_memory(10, layers=1, hidden=1, heads=1, seq_len=1, batch_size=1, devices=0, memory_gb=1),
            ValueError,
            "devices=0: must be at least 1",
        ),
        (
            lambda: plan_memory(10, layers=1, hidden=1, heads=1, seq_len=1, batch_size=1, devices=1, memory_gb=-80),
            ValueError,
            "memory_gb=-80.0: must be above 0",
        ),
        (
            lambda: plan_memory(
                10, layers=1, hidden=1, heads=1, seq_len=1, batch_size=1, devices=1, memory_gb=float("nan")
            ),
            ValueError,
            "memory_gb=nan: pass a finite number",
        ),
        (
            lambda: plan_memory(
                10, layers=1, hidden=1, heads=1, seq_len=1, batch_size=1, devices=1, memory_gb=8, optimizer="lion"
            ),
            ValueError,
            "optimizer='lion' is not known",
        ),
    ],
)
def test_nonsense_is_refused_in_one_line(call, error, message):
    with pytest.raises(error) as raised:
        call()
    text = str(raised.value)
    assert message in text and "\n" not in text
