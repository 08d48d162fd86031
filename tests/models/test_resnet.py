"""The reference ResNets: torchvision's names and shapes, CIFAR depths, forward shapes."""

from __future__ import annotations

import pytest
import torch

from algorithms.metadata import load_all_model_families
from algorithms.models import get_model
from algorithms.models.names import model_input_sizes, model_names

BN = ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")


def torchvision_state_shapes(kind: str, layers: list[int], num_classes: int = 1000) -> dict[str, tuple]:
    """torchvision's resnet18/resnet50 ``state_dict`` names and shapes, written out from the
    architecture (He et al. 2016, torchvision/models/resnet.py): a 7x7 stem of 64 channels, four
    stages of widths 64..512, the stride on the first block of stages 2-4, and a ``downsample``
    (1x1 conv + BN) on every first block whose input shape differs from its output."""
    shapes: dict[str, tuple] = {"conv1.weight": (64, 3, 7, 7)}

    def bn(prefix: str, c: int) -> None:
        for name in BN:
            shapes[f"{prefix}.{name}"] = () if name == "num_batches_tracked" else (c,)

    bn("bn1", 64)
    expansion = 1 if kind == "basic" else 4
    in_planes = 64
    for stage, (blocks, width) in enumerate(zip(layers, [64, 128, 256, 512], strict=True), start=1):
        for j in range(blocks):
            p = f"layer{stage}.{j}"
            if kind == "basic":
                shapes[f"{p}.conv1.weight"] = (width, in_planes, 3, 3)
                bn(f"{p}.bn1", width)
                shapes[f"{p}.conv2.weight"] = (width, width, 3, 3)
                bn(f"{p}.bn2", width)
            else:
                shapes[f"{p}.conv1.weight"] = (width, in_planes, 1, 1)
                bn(f"{p}.bn1", width)
                shapes[f"{p}.conv2.weight"] = (width, width, 3, 3)
                bn(f"{p}.bn2", width)
                shapes[f"{p}.conv3.weight"] = (width * 4, width, 1, 1)
                bn(f"{p}.bn3", width * 4)
            if j == 0 and (stage > 1 or in_planes != width * expansion):
                shapes[f"{p}.downsample.0.weight"] = (width * expansion, in_planes, 1, 1)
                bn(f"{p}.downsample.1", width * expansion)
            in_planes = width * expansion
    shapes["fc.weight"] = (num_classes, 512 * expansion)
    shapes["fc.bias"] = (num_classes,)
    return shapes


# Parameter counts torchvision documents for its resnet18 and resnet50 weights (1000 classes),
# and the number of entries in their state dicts.
TORCHVISION = {
    "resnet18": ("basic", [2, 2, 2, 2], 11_689_512, 122),
    "resnet50": ("bottleneck", [3, 4, 6, 3], 25_557_032, 320),
}


@pytest.mark.parametrize("name", sorted(TORCHVISION))
def test_224_pixel_models_have_torchvision_names_and_shapes(name):
    kind, layers, n_params, n_entries = TORCHVISION[name]
    model = get_model(name, num_classes=1000)
    expected = torchvision_state_shapes(kind, layers)
    got = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    assert got == expected
    assert len(got) == n_entries
    assert sum(p.numel() for p in model.parameters()) == n_params
    # A state dict in torchvision's layout (here: the written-out shapes) loads strictly.
    fake = {
        k: torch.zeros(s, dtype=torch.long if k.endswith("num_batches_tracked") else torch.float32)
        for k, s in expected.items()
    }
    model.load_state_dict(fake, strict=True)


@pytest.mark.parametrize(("name", "blocks_per_stage"), [("resnet20", 3), ("resnet56", 9)])
def test_cifar_resnets_have_depth_6n_plus_2(name, blocks_per_stage):
    model = get_model(name, num_classes=10)
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d) and m.kernel_size == (3, 3)]
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    # Depth counts the weighted layers on the main path: 3x3 convs plus the classifier.
    assert len(convs) + len(linears) == 6 * blocks_per_stage + 2
    assert [getattr(model, f"layer{i}")[0].conv1.out_channels for i in (1, 2, 3)] == [16, 32, 64]
    assert model.fc.in_features == 64


RESNETS = sorted(m["builder"] for m in load_all_model_families()["resnet"].raw["members"])


def test_every_resnet_member_is_a_reference_model():
    assert set(RESNETS) <= set(model_names()) and "resnet20_gn" in RESNETS


@pytest.mark.parametrize("name", RESNETS)
def test_forward_shape_and_input_size(name):
    model = get_model(name, num_classes=7).eval()
    size = 64 if model_input_sizes()[name] == 224 else 32  # 224-px models pool adaptively; keep the test small
    with torch.no_grad():
        assert model(torch.randn(2, 3, size, size)).shape == (2, 7)


def test_unknown_model():
    with pytest.raises(ValueError, match="resnet20"):
        get_model("vgg16", 10)


def test_resnet20_gn_is_resnet20_with_group_norms():
    gn, bn = get_model("resnet20_gn", 10), get_model("resnet20", 10)
    norms = [m for m in gn.modules() if isinstance(m, torch.nn.GroupNorm)]
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in gn.modules())
    assert len(norms) == sum(isinstance(m, torch.nn.BatchNorm2d) for m in bn.modules()) == 21
    assert all(m.num_groups == 8 for m in norms) and {m.num_channels for m in norms} == {16, 32, 64}
    assert sum(p.numel() for p in gn.parameters()) == sum(p.numel() for p in bn.parameters())
    assert [n for n, _ in gn.named_parameters()] == [n for n, _ in bn.named_parameters()]
    assert list(gn.buffers()) == []  # no running statistics
    # a group norm's output does not depend on the rest of the batch
    gn.train()
    x = torch.randn(4, 3, 32, 32)
    torch.testing.assert_close(gn(x)[:1], gn(x[:1]))


def test_group_norm_has_at_most_as_many_groups_as_channels():
    from algorithms.models.resnet import group_norm

    assert group_norm(64).num_groups == 8 and group_norm(4).num_groups == 4
