"""Methods Library: runnable PyTorch training methods.

``from algorithms import CutMix`` gives a method's :class:`~algorithms.core.Algorithm` class;
``import algorithms.functional as cf`` gives the functional forms.

The exports are an explicit table, :data:`EXPORTS` (class name -> the method folder that defines
it), imported lazily (PEP 562): ``import algorithms`` imports no method, reads no file and does not
import torch until a class is used. The same names are imported under ``TYPE_CHECKING`` for IDEs
and type checkers. ``python tools/new_card.py NAME --new`` writes a new method's two lines, and
``tests/test_exports.py`` holds both lists equal to the methods' ``metadata.json``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import attach

__version__ = "0.1.0"

#: Each method's Algorithm class -> its folder under ``algorithms``, in the folders' order.
EXPORTS = {
    "ActivationCheckpointing": "activation_checkpointing",
    "Alibi": "alibi",
    "AugMix": "augmix",
    "BlurPool": "blurpool",
    "ChannelsLast": "channels_last",
    "ColOut": "colout",
    "CutMix": "cutmix",
    "CutOut": "cutout",
    "EMA": "ema",
    "Factorize": "factorize",
    "GatedLinearUnits": "gated_linear_units",
    "GhostBatchNorm": "ghost_batchnorm",
    "GradientClipping": "gradient_clipping",
    "GyroDropout": "gyro_dropout",
    "LabelSmoothing": "label_smoothing",
    "LayerFreezing": "layer_freezing",
    "LowPrecisionGroupNorm": "low_precision_groupnorm",
    "LowPrecisionLayerNorm": "low_precision_layernorm",
    "MixUp": "mixup",
    "ProgressiveResizing": "progressive_resizing",
    "RandAugment": "randaugment",
    "SAM": "sam",
    "SelectiveBackprop": "selective_backprop",
    "SeqLengthWarmup": "seq_length_warmup",
    "SqueezeExcite": "squeeze_excite",
    "StochasticDepth": "stochastic_depth",
    "SWA": "swa",
    "WeightStandardization": "weight_standardization",
}

if TYPE_CHECKING:
    from .activation_checkpointing import ActivationCheckpointing as ActivationCheckpointing
    from .alibi import Alibi as Alibi
    from .augmix import AugMix as AugMix
    from .blurpool import BlurPool as BlurPool
    from .channels_last import ChannelsLast as ChannelsLast
    from .colout import ColOut as ColOut
    from .cutmix import CutMix as CutMix
    from .cutout import CutOut as CutOut
    from .ema import EMA as EMA
    from .factorize import Factorize as Factorize
    from .gated_linear_units import GatedLinearUnits as GatedLinearUnits
    from .ghost_batchnorm import GhostBatchNorm as GhostBatchNorm
    from .gradient_clipping import GradientClipping as GradientClipping
    from .gyro_dropout import GyroDropout as GyroDropout
    from .label_smoothing import LabelSmoothing as LabelSmoothing
    from .layer_freezing import LayerFreezing as LayerFreezing
    from .low_precision_groupnorm import LowPrecisionGroupNorm as LowPrecisionGroupNorm
    from .low_precision_layernorm import LowPrecisionLayerNorm as LowPrecisionLayerNorm
    from .mixup import MixUp as MixUp
    from .progressive_resizing import ProgressiveResizing as ProgressiveResizing
    from .randaugment import RandAugment as RandAugment
    from .sam import SAM as SAM
    from .selective_backprop import SelectiveBackprop as SelectiveBackprop
    from .seq_length_warmup import SeqLengthWarmup as SeqLengthWarmup
    from .squeeze_excite import SqueezeExcite as SqueezeExcite
    from .stochastic_depth import StochasticDepth as StochasticDepth
    from .swa import SWA as SWA
    from .weight_standardization import WeightStandardization as WeightStandardization

__getattr__, __dir__, __all__ = attach(__name__, EXPORTS)
