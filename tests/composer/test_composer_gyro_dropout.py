"""Composer's tests of Gyro Dropout (``tests/algorithms/test_gyro_dropout.py``), re-expressed with
this library's imports. Composer checks each element in a Python loop; the same comparisons run
here as one tensor comparison."""

from __future__ import annotations

import torch

from algorithms.gyro_dropout import GyroDropoutLayer


def _layer() -> GyroDropoutLayer:
    return GyroDropoutLayer(iters_per_epoch=196, max_epoch=100, p=0.5, sigma=256, tau=16)


def test_gyro_dropout_masking():
    """Composer's ``test_gyro_dropout_masking``: the output is the input times the layer's mask
    times ``1 / (1 - p)``, element by element."""
    batch_size, output_feature = 256, 512
    x = torch.randn(batch_size, output_feature)
    dropout_layer = _layer()
    y = dropout_layer(x)
    mask, p = dropout_layer.dropout_mask, dropout_layer.p
    assert mask.shape == (batch_size, output_feature)
    assert torch.equal(x * mask * (1 / (1 - p)), y)


def test_gyro_dropout_mask_pattern():
    """Composer's ``test_gyro_dropout_mask_pattern``: for every unit, the examples from each one at
    a multiple of ``tau`` to the next take that example's mask value."""
    batch_size, output_feature = 256, 512
    x = torch.randn(batch_size, output_feature)
    dropout_layer = _layer()
    _ = dropout_layer(x)
    mask, tau = dropout_layer.dropout_mask, dropout_layer.tau
    pivots = mask[torch.arange(batch_size) // tau * tau]  # row j's pivot: row j - j % tau
    assert torch.equal(mask, pivots)
