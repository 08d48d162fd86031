"""The data of the method cards' plot figures (tools/methods_tools/figure_data.py), each checked
against the method's own definition: the figure shows what the method's code does."""

from __future__ import annotations

import math
import warnings
from fractions import Fraction

import pytest
import torch
from methods_tools import figure_data

from algorithms.alibi.alibi import alibi_bias, alibi_slopes
from algorithms.blurpool.blurpool import BlurConv2d, blur_filter
from algorithms.gyro_dropout.gyro_dropout import GyroDropoutLayer
from algorithms.layer_freezing.layer_freezing import freeze_schedule
from algorithms.metadata import load_all_metadata
from algorithms.models import resnet20


def test_every_plot_figure_names_a_function_of_figure_data():
    plots = {
        k: r.raw["figure"]["data"]
        for k, r in load_all_metadata().items()
        if r.raw.get("figure", {}).get("kind") == "plot"
    }
    assert plots and all(callable(getattr(figure_data, name, None)) for name in plots.values()), plots
    assert set(plots.values()) <= set(figure_data.__all__)


def test_the_recorder_reads_the_state_after_every_batch():
    from algorithms.core import Trainer

    model = torch.nn.Linear(1, 1, bias=False)
    batches = [(torch.ones(1, 1), torch.ones(1, 1)) for _ in range(5)]
    recorder = figure_data.Recorder(lambda state: state.timestamp.batch)
    Trainer(model, batches, "5ba", loss_fn=torch.nn.functional.mse_loss, algorithms=[recorder], device="cpu").fit()
    assert recorder.values == [1, 2, 3, 4, 5]


def test_activation_checkpointing_the_figure_keeps_each_blocks_input_instead_of_its_activations():
    data = figure_data.activation_memory_per_block("resnet20", batch_size=2, image_size=16)
    assert data["type"] == "bars"
    assert data["labels"] == [f"layer{s}.{b}" for s in (1, 2, 3) for b in range(3)]
    # each block's input, float32: 16 channels at 16 pixels into stage 1 and the first block of
    # stage 2, 32 at 8 into the rest of stage 2 and the first of stage 3, 64 at 4 after it
    inputs = [16 * 16 * 16] * 4 + [32 * 8 * 8] * 3 + [64 * 4 * 4] * 2
    kept = data["series"]["with activation checkpointing"]
    assert kept == pytest.approx([2 * n * 4 / 1024 for n in inputs])
    without = data["series"]["without activation checkpointing"]
    assert all(w > k for w, k in zip(without, kept, strict=True))


def test_alibi_the_figure_is_the_bias_of_the_steepest_head():
    figure = figure_data.alibi_head_bias(n_heads=4, head=0, length=16)
    assert figure["type"] == "image"
    values, bias = figure["values"], alibi_bias(torch.tensor(alibi_slopes(4)), 16)[0]
    later = torch.ones(16, 16, dtype=torch.bool).triu(1)
    assert values[later].isnan().all() and torch.equal(values[~later], bias[~later])
    assert figure["values"][15, 0] == -0.25 * 15 and "slope 0.25" in figure["title"]


def test_blurpool_the_figure_is_the_filter_the_modules_apply():
    out = figure_data.blurpool_filter()
    assert out["type"] == "image"
    assert torch.equal(torch.tensor(out["values"], dtype=torch.float64), blur_filter(torch.float64))
    assert torch.equal(BlurConv2d(2, 2, 3).blur_filter[0, 0], blur_filter())


def test_channels_last_the_figure_is_the_strides_of_a_real_weight():
    out = figure_data.channels_last_strides("resnet20", "layer1.0.conv1")
    weight = resnet20().layer1[0].conv1.weight
    assert out["series"]["before (contiguous)"] == list(weight.stride())
    assert out["series"]["after (channels_last)"] == list(weight.contiguous(memory_format=torch.channels_last).stride())
    assert out["series"]["after (channels_last)"][1] == 1  # the channels are innermost


def test_ema_the_figure_is_the_classs_average_of_a_noisy_weight():
    out = figure_data.ema_trajectory(steps=40, half_life="5ba", generator=torch.Generator().manual_seed(0))
    weight, average = out["series"].values()
    assert out["type"] == "lines" and out["x"] == list(range(1, 41)) and len(weight) == len(average) == 40
    smoothing = math.exp(-math.log(2) / 5)
    expected = [weight[0]]
    for w in weight[1:]:
        expected.append(smoothing * expected[-1] + (1 - smoothing) * w)
    assert average == pytest.approx(expected, abs=1e-5)
    steps = torch.tensor(weight).diff().abs().mean()
    assert torch.tensor(average).diff().abs().mean() < steps / 2  # smoother than the weight


def test_swa_the_figure_is_the_classs_mean_of_a_noisy_weight():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a model without batch norm needs no pass over the data
        out = figure_data.swa_trajectory(
            steps=40,
            swa_start="10ba",
            swa_end="30ba",
            update_interval="5ba",
            generator=torch.Generator().manual_seed(0),
        )
    weight, mean = out["series"].values()
    assert out["type"] == "lines" and len(weight) == len(mean) == 40
    assert all(math.isnan(m) for m in mean[:9] + mean[30:])
    snapshots = [weight[i - 1] for i in (10, 15, 20, 25)]
    assert mean[28] == pytest.approx(sum(snapshots) / 4, abs=1e-6)  # batch 29: four snapshots


def test_ghost_batchnorm_the_figure_data_shows_each_ghost_batch_normalized():
    out = figure_data.ghost_chunk_statistics(
        ghost_batch_size=16, batch_size=64, channel=0, generator=torch.Generator().manual_seed(0)
    )
    assert out["type"] == "bars" and out["labels"] == ["1-16", "17-32", "33-48", "49-64"]
    for name in ("GhostBatchNorm2d: mean", "GhostBatchNorm2d: std - 1"):
        assert all(abs(v) < 1e-3 for v in out["series"][name])
    assert max(abs(v) for v in out["series"]["BatchNorm2d: mean"]) > 1e-3  # plain chunks stray
    again = figure_data.ghost_chunk_statistics(generator=torch.Generator().manual_seed(0))
    assert again == out


def test_gradient_clipping_the_figure_is_computed_by_the_clipping():
    out = figure_data.clipping_trajectory("norm", 1.0, steps=40, generator=torch.Generator().manual_seed(0))
    before, after = out["series"]["before clipping"], out["series"]["after clipping"]
    assert out["type"] == "lines" and len(out["x"]) == len(before) == len(after) == 40
    assert any(b > 1.0 for b in before)
    for b, a in zip(before, after, strict=True):
        assert a == pytest.approx(min(b, 1.0), rel=1e-5)


def test_gyro_dropout_the_figure_shows_the_layers_own_masks():
    data = figure_data.gyro_dropout_masks(
        units=32, batch_size=16, p=0.5, sigma=16, tau=4, generator=torch.Generator().manual_seed(0)
    )
    values = data["values"]
    assert data["type"] == "image" and values.shape == (16, 32)
    layer = GyroDropoutLayer(100, 1, 0.5, 16, 4).train()
    layer.generator = torch.Generator().manual_seed(0)
    layer(torch.ones(16, 32))
    # each example's mask by the definition: run k = floor(i * tau / N) takes selected mask k
    runs = [i * layer.tau // 16 for i in range(16)]
    assert torch.equal(values, torch.stack([layer.preselect_masks[layer.selected[k]] for k in runs]))
    assert len({tuple(row.tolist()) for row in values}) <= 4


def test_layer_freezing_the_figure_is_the_schedule_and_resnet20s_frozen_layers():
    out = figure_data.layer_freezing_schedule(freeze_start=0.5, freeze_level=1.0, points=41)
    scheduled, frozen = out["series"].values()
    assert out["type"] == "lines" and len(out["x"]) == len(scheduled) == len(frozen) == 41
    for t, s, f in zip(out["x"], scheduled, frozen, strict=True):
        linear = 0.0 if t <= 0.5 else (t - 0.5) / 0.5  # the schedule's definition
        assert s == pytest.approx(freeze_schedule(t, 0.5, 1.0)) == pytest.approx(linear)
        assert f == int(s * 42) / 43  # resnet20's 43 layers, the classifier kept trainable


UNIT_ROUNDOFF = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}


def test_low_precision_groupnorm_the_figure_data_is_the_real_error():
    data = figure_data.groupnorm_error(channels=16, group_counts=[1, 4, 16], generator=torch.Generator().manual_seed(0))
    assert data["type"] == "bars" and data["labels"] == ["1", "4", "16"]
    for label, dtype in (("bfloat16", torch.bfloat16), ("float16", torch.float16)):
        errors = data["series"][label]
        assert len(errors) == 3 and all(0 < e < 16 * UNIT_ROUNDOFF[dtype] * 8 for e in errors)
    assert max(data["series"]["float16"]) < min(data["series"]["bfloat16"])


def test_low_precision_layernorm_the_figure_is_the_error_against_float32_that_grows_with_the_mean():
    figure = figure_data.layernorm_error(width=64, offsets=[0, 4, 64], generator=torch.Generator().manual_seed(0))
    assert figure["type"] == "lines" and figure["x"] == [0.0, 4.0, 64.0]
    bf16, fp16 = figure["series"]["bfloat16"], figure["series"]["float16"]
    assert bf16[0] < bf16[-1] and fp16[0] < fp16[-1]
    assert all(4 < a / b < 16 for a, b in zip(bf16, fp16, strict=True))  # 3 bits fewer: about 8 times


def test_sam_the_figure_is_computed_by_the_sam_optimizer():
    out = figure_data.sam_trajectory(steps=150, lr=0.05, rho=0.3)
    s = out["series"]
    assert out["type"] == "lines" and len(out["x"]) == 151 and all(len(v) == 151 for v in s.values())
    assert s["gradient descent: L(w)"][-1] < 1e-3 and s["SAM: L(w)"][-1] < 1e-2  # both reach the floor
    assert s["SAM: max L within rho"][-1] < 0.5 * s["gradient descent: max L within rho"][-1]  # SAM's is flatter


def test_seq_length_warmup_the_figure_is_the_schedule():
    out = figure_data.sequence_length_schedule(
        batches=100, duration=0.3, min_seq_length=8, max_seq_length=128, step_size=8
    )
    assert out["type"] == "lines" and out["x"] == list(range(100))
    (series,) = out["series"].values()
    warm = Fraction(3, 10) * 100  # batches of warmup: linear from 8 at 0 to 128 at 30, in steps of 8

    def length(b: int) -> int:
        return 128 if b >= warm else min(8 + 8 * math.floor(b * ((128 - 8) // 8) / warm), 128)

    assert series == [length(b) for b in range(100)]
    assert series[0] == 8 and series[29] == 120 and series[30:] == [128] * 70


def test_stochastic_depth_the_figure_shows_the_rates_the_code_gives_resnet20():
    data = figure_data.drop_rate_per_block("resnet20", drop_rate=0.2)
    assert data["type"] == "bars"
    assert data["labels"] == [f"layer{s}.{b}" for s in (1, 2, 3) for b in range(3)]
    # the paper's rule: block l = 1 .. L drops with drop_rate * l / L
    assert data["series"]["linear"] == pytest.approx([0.2 * depth / 9 for depth in range(1, 10)])
    assert data["series"]["uniform"] == pytest.approx([0.2] * 9)


def test_weight_standardization_the_figure_data_is_one_filter_before_and_after():
    out = figure_data.standardized_filter_histogram(
        module="layer1.0.conv1", filter=0, bins=24, generator=torch.Generator().manual_seed(0)
    )
    assert out["type"] == "lines" and len(out["x"]) == 24
    before, after = out["series"].values()
    assert sum(before) == sum(after) == 16 * 3 * 3
    assert list(out["series"])[1] == "standardized (std 1.000)"
    assert figure_data.standardized_filter_histogram(generator=torch.Generator().manual_seed(0)) == out
