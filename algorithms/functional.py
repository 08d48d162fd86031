"""The functional form of every method: pure functions of tensors.

``import algorithms.functional as cf``; signatures of the forms Composer also has match
``composer.functional``, so switching is a change of import.

Like the classes in :mod:`algorithms`, the forms are an explicit table, :data:`EXPORTS` (function
name -> the module under ``algorithms`` that defines it, a method's folder or a shared module such
as :mod:`algorithms.targets`), imported on first use and imported under ``TYPE_CHECKING`` for
type checkers. A method may export several forms (Selective Backprop: ``select_using_loss`` and
``should_selective_backprop``); its ``metadata.json`` names the one its card shows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import attach

#: Each functional form -> the module under ``algorithms`` that defines it, in the modules' order.
EXPORTS = {
    "apply_activation_checkpointing": "activation_checkpointing",
    "apply_alibi": "alibi",
    "augmix_image": "augmix",
    "apply_blurpool": "blurpool",
    "apply_channels_last": "channels_last",
    "colout_batch": "colout",
    "cutmix_batch": "cutmix",
    "cutout_batch": "cutout",
    "compute_ema": "ema",
    "apply_factorization": "factorize",
    "apply_gated_linear_units": "gated_linear_units",
    "apply_ghost_batchnorm": "ghost_batchnorm",
    "apply_gradient_clipping": "gradient_clipping",
    "apply_gyro_dropout": "gyro_dropout",
    "smooth_labels": "label_smoothing",
    "freeze_layers": "layer_freezing",
    "apply_low_precision_groupnorm": "low_precision_groupnorm",
    "apply_low_precision_layernorm": "low_precision_layernorm",
    "mixup_batch": "mixup",
    "resize_batch": "progressive_resizing",
    "randaugment_image": "randaugment",
    "sam_perturbation": "sam",
    "select_using_loss": "selective_backprop",
    "should_selective_backprop": "selective_backprop",
    "set_batch_sequence_length": "seq_length_warmup",
    "apply_squeeze_excite": "squeeze_excite",
    "apply_stochastic_depth": "stochastic_depth",
    "update_swa_average": "swa",
    "interpolate_targets": "targets",
    "mixed_targets": "targets",
    "apply_weight_standardization": "weight_standardization",
}

if TYPE_CHECKING:
    from .activation_checkpointing import apply_activation_checkpointing as apply_activation_checkpointing
    from .alibi import apply_alibi as apply_alibi
    from .augmix import augmix_image as augmix_image
    from .blurpool import apply_blurpool as apply_blurpool
    from .channels_last import apply_channels_last as apply_channels_last
    from .colout import colout_batch as colout_batch
    from .cutmix import cutmix_batch as cutmix_batch
    from .cutout import cutout_batch as cutout_batch
    from .ema import compute_ema as compute_ema
    from .factorize import apply_factorization as apply_factorization
    from .gated_linear_units import apply_gated_linear_units as apply_gated_linear_units
    from .ghost_batchnorm import apply_ghost_batchnorm as apply_ghost_batchnorm
    from .gradient_clipping import apply_gradient_clipping as apply_gradient_clipping
    from .gyro_dropout import apply_gyro_dropout as apply_gyro_dropout
    from .label_smoothing import smooth_labels as smooth_labels
    from .layer_freezing import freeze_layers as freeze_layers
    from .low_precision_groupnorm import apply_low_precision_groupnorm as apply_low_precision_groupnorm
    from .low_precision_layernorm import apply_low_precision_layernorm as apply_low_precision_layernorm
    from .mixup import mixup_batch as mixup_batch
    from .progressive_resizing import resize_batch as resize_batch
    from .randaugment import randaugment_image as randaugment_image
    from .sam import sam_perturbation as sam_perturbation
    from .selective_backprop import select_using_loss as select_using_loss
    from .selective_backprop import should_selective_backprop as should_selective_backprop
    from .seq_length_warmup import set_batch_sequence_length as set_batch_sequence_length
    from .squeeze_excite import apply_squeeze_excite as apply_squeeze_excite
    from .stochastic_depth import apply_stochastic_depth as apply_stochastic_depth
    from .swa import update_swa_average as update_swa_average
    from .targets import interpolate_targets as interpolate_targets
    from .targets import mixed_targets as mixed_targets
    from .weight_standardization import apply_weight_standardization as apply_weight_standardization

__getattr__, __dir__, __all__ = attach(__name__, EXPORTS, package="algorithms")
