"""Gyro Dropout: see :mod:`algorithms.gyro_dropout.gyro_dropout`."""

from .gyro_dropout import GyroDropout, GyroDropoutLayer, apply_gyro_dropout

__all__ = ["GyroDropout", "GyroDropoutLayer", "apply_gyro_dropout"]
