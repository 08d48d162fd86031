"""Activation checkpointing of torchvision's and timm's ResNet blocks (built without weights, so
nothing downloads), against its definition: every block of the library's own classes is
checkpointed, the training step's loss, gradients and running statistics are the model's own
(bit for bit: the recomputation runs the same operations from the same inputs and random state;
timm's drop path draws at random inside the blocks), autograd keeps the blocks' inputs instead of
what their layers save, and the state dict loads into the model without it.
"""

from __future__ import annotations

import copy

import pytest

torchvision = pytest.importorskip("torchvision", reason="torchvision is not installed: run nox -s models")
timm = pytest.importorskip("timm", reason="timm is not installed: run nox -s models")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from timm.models import resnet as timm_resnet  # noqa: E402
from torchvision.models import resnet as tv_resnet  # noqa: E402

import algorithms.functional as cf  # noqa: E402
from algorithms import ActivationCheckpointing  # noqa: E402
from algorithms.activation_checkpointing import CheckpointedBlock, registry  # noqa: E402
from algorithms.core import Trainer  # noqa: E402

#: name -> (builder, the library's block class): each library's ResNet class with one block per
#: stage (the full networks repeat the same blocks).
MODELS = {
    "torchvision BasicBlock": (
        lambda: tv_resnet.ResNet(tv_resnet.BasicBlock, [1, 1, 1, 1], num_classes=10),
        tv_resnet.BasicBlock,
    ),
    "torchvision Bottleneck": (
        lambda: tv_resnet.ResNet(tv_resnet.Bottleneck, [1, 1, 1, 1], num_classes=10),
        tv_resnet.Bottleneck,
    ),
    "timm BasicBlock (drop path)": (
        lambda: timm_resnet.ResNet(timm_resnet.BasicBlock, [1, 1, 1, 1], num_classes=10, drop_path_rate=0.3),
        timm_resnet.BasicBlock,
    ),
    "timm Bottleneck": (
        lambda: timm_resnet.ResNet(timm_resnet.Bottleneck, [1, 1, 1, 1], num_classes=10),
        timm_resnet.Bottleneck,
    ),
}


def _build(name):
    torch.manual_seed(0)
    model = MODELS[name][0]().train()
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    y = torch.tensor([3, 7])
    return model, lambda m: F.cross_entropy(m(x), y)


def _step(model, loss_of, seed=0):
    torch.manual_seed(seed)
    loss = loss_of(model)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    return loss.detach(), grads, {k: v.clone() for k, v in model.state_dict().items()}


def test_the_registry_names_torchvisions_and_timms_block_classes():
    paths = {p for p in registry.known() if p.startswith(("torchvision.", "timm."))}
    assert paths == {f"{cls.__module__}.{cls.__qualname__}" for cls in (*[m[1] for m in MODELS.values()],)}


@pytest.mark.parametrize("name", list(MODELS))
def test_every_block_is_checkpointed_and_the_step_is_the_models_own(name):
    model, loss_of = _build(name)
    block_class = MODELS[name][1]
    blocks = sum(isinstance(m, block_class) for m in model.modules())
    checkpointed = cf.apply_activation_checkpointing(copy.deepcopy(model))
    assert blocks > 0 and sum(isinstance(m, CheckpointedBlock) for m in checkpointed.modules()) == blocks
    assert all(isinstance(m, CheckpointedBlock) for m in checkpointed.modules() if isinstance(m, block_class))
    (loss_a, grads_a, state_a), (loss_b, grads_b, state_b) = _step(model, loss_of), _step(checkpointed, loss_of)
    assert torch.equal(loss_a, loss_b)
    assert grads_a.keys() == grads_b.keys() and all(torch.equal(grads_a[k], grads_b[k]) for k in grads_a)
    assert state_a.keys() == state_b.keys() and all(torch.equal(state_a[k], state_b[k]) for k in state_a)
    fresh = MODELS[name][0]()
    fresh.load_state_dict(checkpointed.state_dict())  # strict: the same keys as the model without it


def _saved_bytes(model, loss_of, blocks=()):
    """Bytes autograd saves for the backward pass (``saved_tensors_hooks``' pack hook), those saved
    while one of ``blocks`` runs, and those of the blocks' inputs."""
    total, inside, given, depth = [0], [0], [0], [0]

    def size(t):
        return t.numel() * t.element_size()

    def pack(t):
        total[0] += size(t)
        inside[0] += size(t) if depth[0] else 0
        return t

    def enter(module, args):
        depth[0] += 1
        given[0] += sum(size(a) for a in args if isinstance(a, torch.Tensor))

    def leave(module, args, output):
        depth[0] -= 1

    handles = [h for b in blocks for h in (b.register_forward_pre_hook(enter), b.register_forward_hook(leave))]
    torch.manual_seed(0)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss_of(model)
    for h in handles:
        h.remove()
    return total[0], inside[0], given[0]


@pytest.mark.parametrize("name", ["torchvision BasicBlock", "timm Bottleneck"])
def test_autograd_keeps_the_blocks_inputs_instead_of_what_their_layers_save(name):
    model, loss_of = _build(name)
    blocks = [m for m in model.modules() if isinstance(m, MODELS[name][1])]
    plain, inside, inputs = _saved_bytes(model, loss_of, blocks)
    checkpointed, _, _ = _saved_bytes(cf.apply_activation_checkpointing(copy.deepcopy(model)), loss_of)
    assert inside > inputs > 0
    assert checkpointed <= plain - inside + inputs < plain


def test_the_algorithm_checkpoints_a_torchvision_resnet_in_the_trainer():
    torch.manual_seed(0)
    batches = [(torch.randn(2, 3, 16, 16), torch.tensor([1, 2]))]
    trainer = Trainer(
        torchvision.models.resnet18(weights=None, num_classes=10),
        batches,
        "1ba",
        algorithms=[ActivationCheckpointing()],
        seed=0,
        device="cpu",
    )
    trainer.fit()
    assert trainer.method_log.records["ActivationCheckpointing"]["activity"] == {"blocks_checkpointed": 8}
    assert type(trainer.state.model.layer4[1]).__name__ == "CheckpointedBasicBlock"
