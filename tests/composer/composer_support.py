"""The smallest stand-ins for the Composer test machinery that the modules of this folder use.

Composer's test models (``tests/common/models.py``) wrap a ``torch.nn.Sequential`` as ``module``
and bind its layers to the model under their own names as well (``model.conv1 is
model.module[0]``), which the surgery tests rely on; the stand-ins here have that structure. A
Composer model is called on the whole ``(input, target)`` batch; these are called on the input,
as every model of this library is. ``minimal_state`` is Composer's fixture of that name: a State
of 100 epochs over a 100-batch loader, seed 0.
"""

from __future__ import annotations

import torch
from torch import nn

from algorithms.core import State
from algorithms.core.time import Duration


class _Classifier(nn.Module):
    """Composer's ``ComposerClassifier`` without its metrics and loss: ``module(input)``."""

    def __init__(self, module: nn.Module):
        super().__init__()
        self.module = module

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return self.module(input)


class SimpleModel(_Classifier):
    """Composer's ``SimpleModel``: pool, flatten, linear, ReLU, linear, softmax; ``fc1``, ``fc2``."""

    def __init__(self, num_features: int = 1, num_classes: int = 2, num_hidden: int = 8, bias: bool = True):
        fc1 = nn.Linear(num_features, num_hidden, bias=bias)
        fc2 = nn.Linear(num_hidden, num_classes, bias=bias)
        super().__init__(nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), fc1, nn.ReLU(), fc2, nn.Softmax(dim=-1)))
        self.fc1, self.fc2 = fc1, fc2


class SimpleConvModel(_Classifier):
    """Composer's ``SimpleConvModel``: two strided 3 x 3 convolutions (to 8, then 4 channels), an
    optional norm, pooling and two linear layers; ``conv1`` and ``conv2`` bound to the model."""

    def __init__(self, num_channels: int = 3, num_classes: int = 2, norm: str | None = None, norm_affine: bool = True):
        conv1 = nn.Conv2d(num_channels, 8, kernel_size=(3, 3), padding=1, stride=2)
        conv2 = nn.Conv2d(8, 4, kernel_size=(3, 3), padding=1, stride=2)
        norms = {
            None: lambda: nn.Identity(),
            "batch": lambda: nn.BatchNorm2d(4, affine=norm_affine),
            "instance": lambda: nn.InstanceNorm2d(4, affine=norm_affine),
            "layer": lambda: nn.LayerNorm(4, elementwise_affine=norm_affine),
            "group": lambda: nn.GroupNorm(2, 4, affine=norm_affine),
        }
        net = nn.Sequential(
            conv1,
            conv2,
            norms[norm](),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(4, 16),
            nn.Linear(16, num_classes),
        )
        super().__init__(net)
        self.num_channels, self.num_classes = num_channels, num_classes
        self.conv1, self.conv2 = conv1, conv2


class ConvModel(_Classifier):
    """Composer's ``ConvModel``: a strided convolution from 32 channels, a strided one from 8, an
    unstrided one, batch norm, max and average pooling, two linear layers; each bound by name."""

    def __init__(self):
        conv_args = {"kernel_size": (3, 3), "padding": 1, "bias": False}
        layers = {
            "conv1": nn.Conv2d(32, 8, stride=2, **conv_args),  # stride > 1
            "conv2": nn.Conv2d(8, 32, stride=2, **conv_args),  # stride > 1 but in_channels < 16
            "conv3": nn.Conv2d(32, 64, stride=1, **conv_args),  # stride 1
            "bn": nn.BatchNorm2d(64),
            "pool1": nn.MaxPool2d(kernel_size=(2, 2), stride=2, padding=1),
            "pool2": nn.AdaptiveAvgPool2d(1),
            "flatten": nn.Flatten(),
            "linear1": nn.Linear(64, 48),
            "linear2": nn.Linear(48, 10),
        }
        super().__init__(nn.Sequential(*layers.values()))
        for name, layer in layers.items():
            setattr(self, name, layer)


class _Mean(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=1)


class SimpleTransformerBase(nn.Module):
    """Composer's ``SimpleTransformerBase``: an embedding, then a two-layer
    ``torch.nn.TransformerEncoder`` (d_model 16, 2 heads, dropout 0.3) with a final LayerNorm."""

    def __init__(self, vocab_size: int = 10, d_model: int = 16):
        super().__init__()
        embedding = nn.Embedding(vocab_size, 16)
        layer = nn.TransformerEncoderLayer(d_model=d_model, nhead=2, dim_feedforward=d_model, dropout=0.3)
        transformer = nn.TransformerEncoder(layer, num_layers=2, norm=nn.LayerNorm(d_model), enable_nested_tensor=False)
        self.net = nn.Sequential(embedding, transformer)
        self.embedding, self.transformer = embedding, transformer

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return self.net(input)


class SimpleTransformerClassifier(_Classifier):
    """Composer's ``SimpleTransformerClassifier``: :class:`SimpleTransformerBase`, the mean over
    the sequence, dropout and a linear classifier."""

    def __init__(self, vocab_size: int = 10, num_classes: int = 2):
        transformer_base = SimpleTransformerBase(vocab_size=vocab_size, d_model=16)
        classifier = nn.Linear(16, num_classes)
        super().__init__(nn.Sequential(transformer_base, _Mean(), nn.Dropout(0.3), classifier))
        self.transformer_base, self.classifier = transformer_base, classifier


def transformer_classifier_batch(vocab_size: int = 10, num_classes: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    """Composer's ``dummy_transformer_classifier_batch``: 8 sequences of 32 tokens, and labels."""
    return torch.randint(0, vocab_size, (8, 32)), torch.randint(0, num_classes, (8,))


def minimal_state(model: nn.Module | None = None, max_duration: str = "100ep", dataloader_len: int = 100) -> State:
    """Composer's ``minimal_state`` fixture: ``SimpleModel`` (or ``model``) for 100 epochs of 100 batches."""
    return State(
        model=model if model is not None else SimpleModel(),
        max_duration=Duration.parse(max_duration),
        seed=0,
        dataloader_len=dataloader_len,
    )


def counted(algorithm, state: State, event=None) -> dict[str, int]:
    """Run ``algorithm.apply`` at ``event`` (``Event.INIT`` by default) with its own log, as the
    Engine does, and return its activity counters: what this library logs where Composer's
    algorithms call ``logger.log_hyperparameters`` with their counts."""
    from algorithms.core import Event, MethodLog

    log = MethodLog().scope(algorithm)
    algorithm.apply(Event.INIT if event is None else event, state, log)
    return dict(log.activity)


def random_classification_batches(
    shape: tuple[int, ...] = (1, 1, 1), size: int = 100, num_classes: int = 2, batch_size: int = 1
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Composer's ``RandomClassificationDataset`` (``size`` examples of ``shape`` drawn from a
    normal distribution, random labels) in a loader of ``batch_size``, as a list of batches."""
    x, y = torch.randn(size, *shape), torch.randint(0, num_classes, (size,))
    return [(x[i : i + batch_size], y[i : i + batch_size]) for i in range(0, size, batch_size)]


class SimpleModelWithDropout(_Classifier):
    """Composer's ``SimpleModelWithDropout``: flatten, linear to 512, ReLU, dropout 0.5, linear, softmax."""

    def __init__(self, num_features: int = 64, num_classes: int = 10):
        fc1, fc2, dropout = nn.Linear(num_features, 512), nn.Linear(512, num_classes), nn.Dropout(0.5)
        super().__init__(nn.Sequential(nn.Flatten(), fc1, nn.ReLU(), dropout, fc2, nn.Softmax(dim=-1)))
        self.fc1, self.fc2, self.dropout = fc1, fc2, dropout
