"""Stochastic Depth on torchvision's and timm's ResNet blocks, checked against its definition
(Huang et al., 2016): in training a block drops its residual branch with probability ``p`` and
returns its shortcut through the block's final activation (the input itself where the shortcut is
the identity, as Composer's block does: it follows a ReLU, so it equals its ReLU); at ``p = 0`` it is
the original block; in evaluation the branch is scaled by ``1 - p``. The branch is written out from
each library's block (torchvision) or read off the library's own forward with the shortcut zeroed
and the final activation removed (timm), not from the code under test.
"""

from __future__ import annotations

import copy
import math
import subprocess
import sys

import pytest

torchvision = pytest.importorskip("torchvision", reason="torchvision is not installed: run nox -s models")
timm = pytest.importorskip("timm", reason="timm is not installed: run nox -s models")

import torch  # noqa: E402
from timm.models import resnet as timm_resnet  # noqa: E402
from torch import nn  # noqa: E402
from torchvision.models import resnet as tv_resnet  # noqa: E402

import algorithms.functional as cf  # noqa: E402
from algorithms import StochasticDepth  # noqa: E402
from algorithms.core import Trainer  # noqa: E402
from algorithms.stochastic_depth import StochasticResidual, registry  # noqa: E402


def _projection(inplanes, outplanes, stride):
    return nn.Sequential(nn.Conv2d(inplanes, outplanes, 1, stride=stride, bias=False), nn.BatchNorm2d(outplanes))


#: (id, kind, builder of a block, input channels); each kind with an identity and a projection shortcut.
BLOCKS = [
    ("torchvision-basic", "BasicBlock", lambda: tv_resnet.BasicBlock(8, 8), 8),
    ("torchvision-basic-proj", "BasicBlock", lambda: tv_resnet.BasicBlock(4, 8, 2, _projection(4, 8, 2)), 4),
    ("torchvision-bottleneck", "Bottleneck", lambda: tv_resnet.Bottleneck(16, 4), 16),
    ("torchvision-bottleneck-proj", "Bottleneck", lambda: tv_resnet.Bottleneck(8, 4, 2, _projection(8, 16, 2)), 8),
    ("timm-basic", "BasicBlock", lambda: timm_resnet.BasicBlock(8, 8), 8),
    ("timm-basic-proj", "BasicBlock", lambda: timm_resnet.BasicBlock(4, 8, 2, _projection(4, 8, 2)), 4),
    ("timm-bottleneck", "Bottleneck", lambda: timm_resnet.Bottleneck(16, 4), 16),
    ("timm-bottleneck-proj", "Bottleneck", lambda: timm_resnet.Bottleneck(8, 4, 2, _projection(8, 16, 2)), 8),
]
IDS = [b[0] for b in BLOCKS]


def _block(builder):
    """A block in eval-ready state: non-trivial running statistics from one training pass."""
    torch.manual_seed(0)
    block = builder()
    block(torch.randn(8, _channels(block), 6, 6))
    return block


def _channels(block):
    return block.conv1.in_channels


def _stochastic(block, kind, p, method="block"):
    """The block made stochastic with drop rate p (a one-block model, so the linear rule gives p)."""
    return cf.apply_stochastic_depth(nn.Sequential(block), kind, method, drop_rate=p)[0]


def _activation(block):
    """The block's final activation, by its library's name for it."""
    if isinstance(block, tv_resnet.BasicBlock | tv_resnet.Bottleneck):
        return block.relu
    return block.act2 if isinstance(block, timm_resnet.BasicBlock) else block.act3


def _shortcut(block, x):
    return x if block.downsample is None else block.downsample(x)


def _branch(block, x):
    """The residual branch, by the definition of each library's block."""
    if isinstance(block, tv_resnet.BasicBlock):
        return block.bn2(block.conv2(block.relu(block.bn1(block.conv1(x)))))
    if isinstance(block, tv_resnet.Bottleneck):
        out = block.relu(block.bn1(block.conv1(x)))
        return block.bn3(block.conv3(block.relu(block.bn2(block.conv2(out)))))
    # timm: its own forward with a zero shortcut and no final activation is its branch.
    probe = copy.deepcopy(block)
    probe.downsample = _Zero(probe.downsample)
    setattr(probe, "act2" if isinstance(block, timm_resnet.BasicBlock) else "act3", nn.Identity())
    return probe(x)


class _Zero(nn.Module):
    def __init__(self, downsample):
        super().__init__()
        self.downsample = downsample

    def forward(self, x):
        return torch.zeros_like(x if self.downsample is None else self.downsample(x))


def _input(block, n=3):
    # A block's input follows a ReLU in these networks: non-negative.
    return torch.relu(torch.randn(n, _channels(block), 6, 6, generator=torch.Generator().manual_seed(1)))


@pytest.mark.parametrize(("name", "kind", "builder", "channels"), BLOCKS, ids=IDS)
def test_the_block_becomes_stochastic_and_keeps_its_tensors_and_names(name, kind, builder, channels):
    block = _block(builder)
    keys = block.state_dict().keys()
    stochastic = _stochastic(block, kind, 0.3)
    assert isinstance(stochastic, StochasticResidual) and isinstance(stochastic, type(block))
    assert type(stochastic).__name__ == f"Stochastic{name.split('-')[0].title()}{kind}"
    assert stochastic.state_dict().keys() == keys
    assert all(p is q for p, q in zip(stochastic.parameters(), block.parameters(), strict=True))


@pytest.mark.parametrize(("name", "kind", "builder", "channels"), BLOCKS, ids=IDS)
def test_at_rate_zero_it_is_the_original_block_in_both_modes(name, kind, builder, channels):
    block = _block(builder)
    reference = copy.deepcopy(block)
    stochastic = _stochastic(block, kind, 0.0)
    x = _input(block)
    for mode in (True, False):
        stochastic.train(mode), reference.train(mode)
        torch.testing.assert_close(stochastic(x), reference(x), rtol=0, atol=0)


@pytest.mark.parametrize(("name", "kind", "builder", "channels"), BLOCKS, ids=IDS)
def test_at_rate_one_in_training_it_is_the_activated_shortcut(name, kind, builder, channels):
    block = _block(builder)
    stochastic = _stochastic(block, kind, 1.0).train()
    x = _input(block)
    with torch.no_grad():
        expected = _activation(block)(_shortcut(block, x).clone())
        out = stochastic(x)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    if block.downsample is None:
        assert out is x  # nothing computed: the input itself, as Composer's block


@pytest.mark.parametrize(("name", "kind", "builder", "channels"), BLOCKS, ids=IDS)
@pytest.mark.parametrize("method", ["block", "sample"])
def test_in_evaluation_the_branch_is_scaled_by_its_survival_probability(name, kind, builder, channels, method):
    block = _block(builder).eval()
    x = _input(block)
    with torch.no_grad():
        expected = _activation(block)((1 - 0.3) * _branch(block, x) + _shortcut(block, x))
        stochastic = _stochastic(block, kind, 0.3, method).eval()
        torch.testing.assert_close(stochastic(x), expected)


def _five_sigma(frequency, p, n):
    """A binomial frequency within 5 standard deviations of p: a false alarm below 6e-7 per check,
    and the seeds are fixed, so the test cannot flake."""
    return abs(frequency - p) <= 5 * math.sqrt(p * (1 - p) / n)


@pytest.mark.parametrize(("name", "kind", "builder", "channels"), [b for b in BLOCKS if "proj" not in b[0]])
@pytest.mark.parametrize("p", [0.2, 0.7])
def test_the_share_of_dropped_passes_and_examples_matches_p(name, kind, builder, channels, p):
    """Block mode: 600 training passes of one example, dropped when the block returns its input
    object. Sample mode: one batch of 2000, an example dropped when its output is its input (the
    identity shortcut through the ReLU). Both within 5 binomial standard deviations of p."""
    block = _block(builder)
    stochastic = _stochastic(block, kind, p).train()
    x = _input(block, n=1)
    torch.manual_seed(2)
    with torch.no_grad():
        dropped = sum(stochastic(x) is x for _ in range(600))
    assert _five_sigma(dropped / 600, p, 600), dropped / 600
    stochastic.stochastic_method = "sample"
    batch = _input(block, n=2000)
    with torch.no_grad():
        out = stochastic(batch)
    per_example = (out == batch).flatten(1).all(dim=1).double().mean().item()
    assert _five_sigma(per_example, p, 2000), per_example


MODELS = [
    ("torchvision resnet50", lambda: torchvision.models.resnet50(weights=None, num_classes=10), "Bottleneck", 16),
    ("torchvision resnet18", lambda: torchvision.models.resnet18(weights=None, num_classes=10), "BasicBlock", 8),
    ("timm resnet18", lambda: timm.create_model("resnet18", pretrained=False, num_classes=10), "BasicBlock", 8),
    ("timm resnet26", lambda: timm.create_model("resnet26", pretrained=False, num_classes=10), "Bottleneck", 8),
]


@pytest.mark.parametrize(("name", "builder", "kind", "count"), MODELS, ids=[m[0] for m in MODELS])
def test_every_block_of_the_model_is_converted_with_the_papers_rates(name, builder, kind, count):
    """ResNet-50 has 3 + 4 + 6 + 3 Bottlenecks, ResNet-18 2 + 2 + 2 + 2 BasicBlocks, timm's
    ResNet-26 2 + 2 + 2 + 2 Bottlenecks; block l of L drops with 0.4 * l / L. The model trains a step."""
    torch.manual_seed(0)
    model = builder()
    keys = model.state_dict().keys()
    cf.apply_stochastic_depth(model, kind, drop_rate=0.4)
    blocks = [m for m in model.modules() if isinstance(m, StochasticResidual)]
    assert len(blocks) == count
    assert [b.drop_rate for b in blocks] == pytest.approx([0.4 * (i + 1) / count for i in range(count)])
    assert model.state_dict().keys() == keys
    model(torch.randn(2, 3, 32, 32)).sum().backward()
    assert model.fc.weight.grad is not None


def test_the_library_is_imported_only_for_a_model_that_holds_its_blocks():
    code = (
        "import sys, algorithms.functional as cf\n"
        "from algorithms.models import resnet20\n"
        "cf.apply_stochastic_depth(resnet20(), 'BasicBlock')\n"
        "assert 'torchvision' not in sys.modules and 'timm' not in sys.modules, 'imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    assert {"torchvision.models.resnet.BasicBlock", "timm.models.resnet.Bottleneck"} <= set(registry.known())


def test_in_the_trainer_it_converts_a_torchvision_resnet_and_acts():
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(4, 3, 32, 32, generator=g), torch.randint(0, 10, (4,), generator=g)) for _ in range(2)]
    model = torchvision.models.resnet50(weights=None, num_classes=10)
    trainer = Trainer(model, batches, "2ba", seed=0, device="cpu", algorithms=[StochasticDepth("Bottleneck")])
    trainer.fit()
    assert trainer.method_log.records["StochasticDepth"]["activity"] == {"modules_replaced": 16}
    assert trainer.method_log.acted("StochasticDepth")
