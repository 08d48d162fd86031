"""The CNN surgery methods on torchvision's and timm's models, built without weights (nothing
downloads): each functional form replaces the modules its rule names (counted from the model's
own modules, by the rule written out here), the model still runs forward and backward, and one
replaced module has the method's defining property. Each method's Algorithm class then acts in
the Trainer on a torchvision ResNet at 32x32 (a ConvNeXt for the low precision layer norm, which
ResNets do not have).
"""

from __future__ import annotations

import copy
import math
import warnings

import pytest

torchvision = pytest.importorskip("torchvision", reason="torchvision is not installed: run nox -s models")
timm = pytest.importorskip("timm", reason="timm is not installed: run nox -s models")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import algorithms  # noqa: E402
import algorithms.functional as cf  # noqa: E402
from algorithms.core import Trainer  # noqa: E402
from algorithms.surgery import NoModulesReplacedWarning, recording_replacements  # noqa: E402

MODELS = {
    "torchvision resnet50": lambda: torchvision.models.resnet50(weights=None, num_classes=10),
    "timm resnet18": lambda: timm.create_model("resnet18", pretrained=False, num_classes=10),
}


def _of(model, cls, rule=lambda m: True):
    return sum(isinstance(m, cls) and rule(m) for m in model.modules())


def _factorizable(m, minimum=512, latent=0.25):
    """Composer's rule: wide enough, not grouped, and r * (F + O) < F * O multiply-adds."""
    if isinstance(m, nn.Conv2d):
        f, o, narrow = m.in_channels * math.prod(m.kernel_size), m.out_channels, min(m.in_channels, m.out_channels)
        if m.groups != 1:
            return False
    else:
        f, o, narrow = m.in_features, m.out_features, min(m.in_features, m.out_features)
    r = max(1, int(latent * narrow))
    return narrow >= minimum and r * (f + o) < f * o


#: method -> (functional form with its defaults, the number of modules it should replace).
RULES = {
    "blurpool": (
        cf.apply_blurpool,
        lambda m: _of(m, nn.Conv2d, lambda c: max(c.stride) > 1 and c.in_channels >= 16) + _of(m, nn.MaxPool2d),
    ),
    "squeeze_excite": (
        cf.apply_squeeze_excite,
        lambda m: _of(m, nn.Conv2d, lambda c: min(c.in_channels, c.out_channels) >= 128),
    ),
    "factorize": (cf.apply_factorization, lambda m: _of(m, (nn.Conv2d, nn.Linear), _factorizable)),
    "ghost_batchnorm": (cf.apply_ghost_batchnorm, lambda m: _of(m, nn.BatchNorm2d)),
    "weight_standardization": (cf.apply_weight_standardization, lambda m: _of(m, nn.Conv2d)),
}


@pytest.mark.parametrize("model_name", MODELS)
@pytest.mark.parametrize("method", RULES)
def test_the_functional_form_replaces_what_its_rule_names_and_the_model_trains(model_name, method):
    torch.manual_seed(0)
    model = MODELS[model_name]()
    form, rule = RULES[method]
    expected = rule(model)
    assert expected > 0
    with recording_replacements() as replaced:
        form(model)
    assert len(replaced) == expected
    out = model(torch.randn(2, 3, 32, 32))
    assert out.shape == (2, 10)
    out.sum().backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


def _first(model, cls):
    return next(m for m in model.modules() if isinstance(m, cls))


@pytest.mark.parametrize("model_name", MODELS)
def test_blurpool_a_strided_convolution_sees_the_blurred_input(model_name):
    """conv(blur(x)), blur the paper's [1, 2, 1] x [1, 2, 1] / 16 per channel with reflected borders."""
    from algorithms.blurpool.blurpool import BlurConv2d

    model = MODELS[model_name]()
    originals = {name: copy.deepcopy(m) for name, m in model.named_modules() if isinstance(m, nn.Conv2d)}
    cf.apply_blurpool(model)
    name, blurred = next((n, m) for n, m in model.named_modules() if isinstance(m, BlurConv2d))
    conv = originals[name]
    x = torch.randn(2, conv.in_channels, 8, 8)
    k = torch.tensor([1.0, 2.0, 1.0])
    k = (k[:, None] * k[None, :] / 16).expand(conv.in_channels, 1, 3, 3)
    expected = conv(F.conv2d(F.pad(x, (1, 1, 1, 1), mode="reflect"), k, groups=conv.in_channels))
    torch.testing.assert_close(blurred(x), expected)


@pytest.mark.parametrize("model_name", MODELS)
def test_ghost_batchnorm_normalizes_each_chunk_with_its_own_statistics(model_name):
    model = MODELS[model_name]()
    cf.apply_ghost_batchnorm(model, ghost_batch_size=4)
    ghost = _first(model, nn.BatchNorm2d).train()
    with torch.no_grad():
        ghost.weight.uniform_(0.5, 1.5), ghost.bias.uniform_(-1, 1)
    x = torch.randn(8, ghost.num_features, 4, 4) * 3 + 1
    expected = torch.cat(
        [F.batch_norm(c, None, None, ghost.weight, ghost.bias, training=True, eps=ghost.eps) for c in x.split(4)]
    )
    torch.testing.assert_close(ghost(x), expected)


@pytest.mark.parametrize("model_name", MODELS)
def test_weight_standardization_gives_every_filter_zero_mean_and_unit_variance(model_name):
    model = MODELS[model_name]()
    cf.apply_weight_standardization(model)
    conv = [m for m in model.modules() if isinstance(m, nn.Conv2d)][-1]
    w = conv.weight.detach().flatten(1)  # the standardized weight the forward uses
    torch.testing.assert_close(w.mean(dim=1), torch.zeros(len(w)), atol=1e-5, rtol=0)
    torch.testing.assert_close(w.var(dim=1, unbiased=False), torch.ones(len(w)), atol=1e-3, rtol=0)


def _group_norm_resnet():
    return torchvision.models.resnet18(weights=None, num_classes=10, norm_layer=lambda c: nn.GroupNorm(8, c))


def test_low_precision_groupnorm_on_a_torchvision_resnet_with_group_norms():
    """Every GroupNorm (20 in ResNet-18) runs in bfloat16 under autocast; the model still trains."""
    model = _group_norm_resnet()
    expected = _of(model, nn.GroupNorm)
    with recording_replacements() as replaced:
        cf.apply_low_precision_groupnorm(model, precision="amp_bf16")
    assert len(replaced) == expected == 20
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert _first(model, nn.GroupNorm)(torch.randn(2, 64, 4, 4)).dtype == torch.bfloat16
        out = model(torch.randn(2, 3, 32, 32))
    out.float().sum().backward()


def test_low_precision_layernorm_on_a_timm_convnext_keeps_its_channels_first_norms():
    """ConvNeXt-atto with conv_mlp=False has both of timm's layer norms: LayerNorm2d (channels
    first: stem, downsampling, head) and LayerNorm (channels last, in the blocks); each becomes the
    low precision one of its layout and computes what it did outside autocast (before, LayerNorm2d
    became a channels-last norm and the model failed)."""
    from timm.layers import LayerNorm, LayerNorm2d

    from algorithms.low_precision_layernorm.low_precision_layernorm import LPLayerNorm, LPLayerNorm2d

    torch.manual_seed(0)
    model = timm.create_model("convnext_atto", pretrained=False, num_classes=10, conv_mlp=False).eval()
    reference = copy.deepcopy(model)
    channels_first, channels_last = _of(model, LayerNorm2d), _of(model, LayerNorm)
    assert channels_first > 0 and channels_last > 0
    with recording_replacements() as replaced:
        cf.apply_low_precision_layernorm(model, precision="amp_bf16")
    assert len(replaced) == channels_first + channels_last == _of(model, LPLayerNorm)
    assert _of(model, LPLayerNorm2d) == channels_first
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(model(x), reference(x))
    model.train()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert _first(model, LPLayerNorm2d)(torch.randn(2, 40, 4, 4)).dtype == torch.bfloat16
        out = model(x)
    out.float().sum().backward()


def test_low_precision_norms_leave_timms_norms_with_an_activation_alone():
    """timm's LayerNormAct and GroupNormAct add an activation: replacing them with a plain norm
    would drop it, so they are left as they are, with the warning that nothing was replaced."""
    from timm.layers import GroupNormAct, LayerNormAct

    for form, norm in (
        (cf.apply_low_precision_layernorm, LayerNormAct(8)),
        (cf.apply_low_precision_groupnorm, GroupNormAct(8, num_groups=2)),
    ):
        model = nn.Sequential(norm)
        with pytest.warns(NoModulesReplacedWarning):
            form(model, precision="amp_bf16")
        assert model[0] is norm


def _batches(n=2, size=32, batch=4):
    g = torch.Generator().manual_seed(0)
    return [
        (torch.randn(batch, 3, size, size, generator=g), torch.randint(0, 10, (batch,), generator=g)) for _ in range(n)
    ]


#: Algorithm class -> (its arguments, the model it runs on, the Trainer's precision, modules replaced).
TRAINER_RUNS = {
    "BlurPool": ({}, lambda: torchvision.models.resnet18(weights=None, num_classes=10), None, 3 + 1 + 3),
    "SqueezeExcite": ({}, lambda: torchvision.models.resnet18(weights=None, num_classes=10), None, 13),
    "Factorize": ({}, lambda: torchvision.models.resnet18(weights=None, num_classes=10), None, 3),
    "GhostBatchNorm": (
        {"ghost_batch_size": 2},
        lambda: torchvision.models.resnet18(weights=None, num_classes=10),
        None,
        20,
    ),
    "WeightStandardization": ({}, lambda: torchvision.models.resnet18(weights=None, num_classes=10), None, 20),
    "LowPrecisionGroupNorm": ({}, _group_norm_resnet, "amp_bf16", 20),
    "LowPrecisionLayerNorm": (
        {},
        lambda: timm.create_model("convnext_atto", pretrained=False, num_classes=10, conv_mlp=False),
        "amp_bf16",
        17,
    ),
}


@pytest.mark.parametrize("name", TRAINER_RUNS)
def test_in_the_trainer_each_method_acts_on_the_model(name):
    """Two batches of 32x32 images; the method log counts what the method replaced, and says it acted."""
    kwargs, build, precision, count = TRAINER_RUNS[name]
    algorithm = getattr(algorithms, name)(**kwargs)
    extra = {} if precision is None else {"precision": precision}
    trainer = Trainer(build(), _batches(), "2ba", seed=0, device="cpu", algorithms=[algorithm], **extra)
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoModulesReplacedWarning)
        trainer.fit()
    assert trainer.method_log.records[name]["activity"]["modules_replaced"] == count
    assert trainer.method_log.acted(name)
