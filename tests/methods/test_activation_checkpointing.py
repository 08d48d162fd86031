"""Activation checkpointing against its definition: a checkpointed block gives the loss, the
gradients and the running statistics of the block itself (bit for bit on the CPU: the
recomputation runs the same operations on the same inputs, with the same random state), autograd
keeps its inputs instead of what its layers save, and its forward runs a second time in the
backward pass.

The tests every method passes (it trains in the Trainer, its defaults agree) run from the
metadata registry; torchvision's and timm's blocks are in tests/models (nox -s models).
"""

from __future__ import annotations

import contextlib
import copy
import io
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from activation_checkpointing_fsdp import Losses
from torch import nn

import algorithms.functional as cf
from algorithms import ActivationCheckpointing, StochasticDepth
from algorithms.activation_checkpointing import CheckpointedBlock, checkpoint_block, registry
from algorithms.core import Trainer
from algorithms.models import lm_loss, resnet20, transformer_tiny
from algorithms.models.resnet import BasicBlock, Bottleneck, ResNet
from algorithms.models.transformer import TransformerBlock
from algorithms.stochastic_depth import StochasticResidual
from algorithms.surgery import NoModulesReplacedWarning

REPO = Path(__file__).resolve().parents[2]
transformers = pytest.importorskip("transformers", reason="transformers is not installed (the tests extra has it)")


# -- models and their losses -----------------------------------------------------------------


def _gpt2():
    config = transformers.GPT2Config(
        vocab_size=64, n_positions=32, n_embd=32, n_layer=2, n_head=2, bos_token_id=0, eos_token_id=0
    )
    return transformers.GPT2LMHeadModel(config)  # dropout 0.1 in the embeddings, attention and MLP


def _bert():
    config = transformers.BertConfig(
        vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=32,
    )  # fmt: skip
    return transformers.BertForMaskedLM(config)  # dropout 0.1


def _images(model):
    x = torch.randn(4, 3, 8, 8, generator=torch.Generator().manual_seed(1))
    y = torch.randint(0, 10, (4,), generator=torch.Generator().manual_seed(2))
    return lambda m: F.cross_entropy(m(x), y)


def _tokens(model):
    ids = torch.randint(0, 50, (4, 17), generator=torch.Generator().manual_seed(1))
    return lambda m: lm_loss(m(ids[:, :-1]), ids[:, 1:])


def _hf(model):
    ids = torch.randint(3, 64, (3, 12), generator=torch.Generator().manual_seed(1))
    return lambda m: m(input_ids=ids, labels=ids).loss


#: name -> (model builder, loss builder, the block class its blocks are).
MODELS = {
    "resnet20": (resnet20, _images, BasicBlock),
    "bottleneck resnet": (
        lambda: ResNet(Bottleneck, [2, 1], [4, 8], num_classes=10, stem="cifar"),
        _images,
        Bottleneck,
    ),
    "transformer_tiny": (lambda: transformer_tiny(50), _tokens, TransformerBlock),
    "gpt2": (_gpt2, _hf, None),
    "bert": (_bert, _hf, None),
}


def _block_class(name, model):
    cls = MODELS[name][2]
    if cls is None:  # the Hugging Face layer classes, from the model itself
        cls = type(model.transformer.h[0] if name == "gpt2" else model.bert.encoder.layer[0])
    return cls


def _build(name):
    torch.manual_seed(0)
    model = MODELS[name][0]().train()
    return model, MODELS[name][1](model)


def _step(model, loss_of, seed=0):
    """One forward and backward pass from torch's seed ``seed``: the loss, every gradient and the
    state dict afterwards (running statistics included)."""
    torch.manual_seed(seed)
    loss = loss_of(model)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return loss.detach(), grads, {k: v.clone() for k, v in model.state_dict().items()}


def _assert_same(a, b):
    loss_a, grads_a, state_a = a
    loss_b, grads_b, state_b = b
    assert torch.equal(loss_a, loss_b), (loss_a, loss_b)
    assert grads_a.keys() == grads_b.keys() and grads_a
    for k in grads_a:
        assert torch.equal(grads_a[k], grads_b[k]), k
    assert state_a.keys() == state_b.keys()
    for k in state_a:
        assert torch.equal(state_a[k], state_b[k]), k


# -- the same training step, with its blocks' forward run twice ------------------------------


@pytest.mark.parametrize("name", list(MODELS))
def test_the_loss_gradients_and_running_statistics_are_the_models_own(name):
    model, loss_of = _build(name)
    block_class = _block_class(name, model)
    checkpointed = cf.apply_activation_checkpointing(copy.deepcopy(model))
    blocks = [m for m in checkpointed.modules() if isinstance(m, block_class)]
    assert blocks and all(isinstance(b, CheckpointedBlock) for b in blocks)
    _assert_same(_step(model, loss_of), _step(checkpointed, loss_of))


@pytest.mark.parametrize("name", ["transformer_tiny", "gpt2", "bert"])
def test_dropout_is_active_and_the_recomputation_drops_the_same_units(name):
    model, loss_of = _build(name)
    checkpointed = cf.apply_activation_checkpointing(copy.deepcopy(model))
    # Dropout acts: another seed gives another loss, so equal losses below are not dropout-free.
    assert not torch.equal(_step(copy.deepcopy(model), loss_of, seed=0)[0], _step(copy.deepcopy(model), loss_of, 1)[0])
    _assert_same(_step(model, loss_of, seed=3), _step(checkpointed, loss_of, seed=3))


def test_each_checkpointed_block_runs_its_forward_again_in_the_backward_pass():
    model, loss_of = _build("resnet20")
    checkpointed = cf.apply_activation_checkpointing(copy.deepcopy(model))
    calls = {"forward": 0, "backward": 0}
    phase = ["forward"]

    def count(module, args, output):
        calls[phase[0]] += 1

    for block in (*checkpointed.layer1, *checkpointed.layer2, *checkpointed.layer3):
        block.conv1.register_forward_hook(count)
    loss = loss_of(checkpointed)
    phase[0] = "backward"
    loss.backward()
    assert calls == {"forward": 9, "backward": 9}


def test_every_n_blocks_checkpoints_the_first_block_and_every_nth_after_it():
    model = cf.apply_activation_checkpointing(resnet20(), every_n_blocks=4)
    blocks = [*model.layer1, *model.layer2, *model.layer3]
    assert [isinstance(b, CheckpointedBlock) for b in blocks] == [i % 4 == 0 for i in range(9)]
    model, loss_of = _build("resnet20")
    checkpointed = cf.apply_activation_checkpointing(copy.deepcopy(model), every_n_blocks=2)
    _assert_same(_step(model, loss_of), _step(checkpointed, loss_of))


# -- memory: what autograd keeps for the backward pass -----------------------------------------


def _nbytes(t):
    return t.numel() * t.element_size()


def _saved_bytes(model, loss_of, blocks=()):
    """Bytes of the tensors autograd saves for the backward pass in the forward (the pack hook of
    ``torch.autograd.graph.saved_tensors_hooks`` sees each), those saved while one of ``blocks``
    runs, and those of the tensors given to ``blocks`` (their inputs)."""
    total, inside, given, depth = [0], [0], [0], [0]

    def pack(t):
        total[0] += _nbytes(t)
        inside[0] += _nbytes(t) if depth[0] else 0
        return t

    def enter(module, args, kwargs):
        depth[0] += 1
        given[0] += sum(_nbytes(a) for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor))

    def leave(module, args, output):
        depth[0] -= 1

    handles = [
        h
        for b in blocks
        for h in (b.register_forward_pre_hook(enter, with_kwargs=True), b.register_forward_hook(leave))
    ]
    torch.manual_seed(0)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss_of(model)
    for h in handles:
        h.remove()
    return total[0], inside[0], given[0]


@pytest.mark.parametrize("name", ["resnet20", "transformer_tiny", "gpt2"])
def test_autograd_keeps_the_blocks_inputs_instead_of_what_their_layers_save(name):
    model, loss_of = _build(name)
    block_class = _block_class(name, model)
    plain, inside, inputs = _saved_bytes(model, loss_of, [m for m in model.modules() if isinstance(m, block_class)])
    checkpointed, _, _ = _saved_bytes(cf.apply_activation_checkpointing(copy.deepcopy(model)), loss_of)
    assert inside > inputs > 0
    # What the layers inside the blocks save is not kept; at most each block's inputs are, for the
    # recomputation (torch keeps them through the same hooks).
    assert checkpointed <= plain - inside + inputs
    assert checkpointed < plain


# -- state dicts, optimizers, copies ---------------------------------------------------------


def test_the_state_dict_and_parameter_names_are_the_models_own_and_load_either_way():
    plain = resnet20()
    checkpointed = cf.apply_activation_checkpointing(copy.deepcopy(plain))
    assert list(checkpointed.state_dict()) == list(plain.state_dict())
    assert [n for n, _ in checkpointed.named_parameters()] == [n for n, _ in plain.named_parameters()]
    assert [n for n, _ in checkpointed.named_modules()] == [n for n, _ in plain.named_modules()]
    fresh = resnet20()
    fresh.load_state_dict(checkpointed.state_dict())  # strict: every key, no other
    again = cf.apply_activation_checkpointing(resnet20())
    again.load_state_dict(plain.state_dict())
    for k, v in plain.state_dict().items():
        assert torch.equal(fresh.state_dict()[k], checkpointed.state_dict()[k]) and torch.equal(
            again.state_dict()[k], v
        )


def test_an_optimizer_built_before_keeps_training_the_same_tensors():
    model = resnet20()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    before = list(model.parameters())
    cf.apply_activation_checkpointing(model)
    assert all(a is b for a, b in zip(model.parameters(), before, strict=True))
    assert optimizer.param_groups[0]["params"] == before


def test_a_checkpointed_model_pickles_and_copies_as_itself():
    model, loss_of = _build("resnet20")
    checkpointed = cf.apply_activation_checkpointing(model)
    buffer = io.BytesIO()
    torch.save(checkpointed, buffer)
    buffer.seek(0)
    for copied in (torch.load(buffer, weights_only=False), copy.deepcopy(checkpointed)):
        assert type(copied.layer2[0]) is type(checkpointed.layer2[0])
        _assert_same(_step(copied, loss_of), _step(copy.deepcopy(checkpointed), loss_of))


def test_applied_again_it_checkpoints_no_block_twice():
    model = cf.apply_activation_checkpointing(resnet20())
    kinds = [type(m) for m in model.modules()]
    with pytest.warns(NoModulesReplacedWarning):
        cf.apply_activation_checkpointing(model)
    assert [type(m) for m in model.modules()] == kinds


def test_under_no_grad_the_block_runs_as_it_is():
    plain = resnet20().train()
    checkpointed = cf.apply_activation_checkpointing(copy.deepcopy(plain))
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        outputs = [m(x) for m in (plain, checkpointed)]
    assert torch.equal(*outputs)
    for k, v in plain.state_dict().items():  # running statistics updated once, as without it
        assert torch.equal(v, checkpointed.state_dict()[k]), k


# -- random state held by modules, and Stochastic Depth -----------------------------------------


def test_a_generator_a_module_holds_is_set_back_for_the_recomputation():
    """Stochastic Depth's blocks in a distributed run draw from a generator of their own."""
    torch.manual_seed(0)
    plain = cf.apply_stochastic_depth(resnet20(), "BasicBlock", drop_rate=0.5)
    checkpointed = cf.apply_activation_checkpointing(copy.deepcopy(plain))
    generators = {}
    for model in (plain, checkpointed):
        generators[id(model)] = torch.Generator().manual_seed(7)
        for m in model.modules():
            if isinstance(m, StochasticResidual):
                m.generator = generators[id(model)]
    assert all(isinstance(b, CheckpointedBlock) for b in checkpointed.layer1)
    loss_of = _images(plain)
    for seed in range(2):  # two steps: some blocks dropped, some kept, in both
        _assert_same(_step(plain, loss_of, seed), _step(checkpointed, loss_of, seed))
    assert torch.equal(generators[id(plain)].get_state(), generators[id(checkpointed)].get_state())


def _train(methods, model=None):
    losses = Losses()
    batches = [(torch.randn(4, 3, 8, 8, generator=torch.Generator().manual_seed(i)), torch.arange(4)) for i in range(2)]
    torch.manual_seed(0)
    trainer = Trainer(model or resnet20(), batches, "2ba", algorithms=[*methods, losses], seed=0, device="cpu")
    trainer.fit()
    return trainer, torch.stack(losses.losses)


def test_in_the_trainer_it_checkpoints_the_blocks_it_counts_and_trains_as_without_it():
    trainer, losses = _train([ActivationCheckpointing()])
    assert trainer.method_log.records["ActivationCheckpointing"]["activity"] == {"blocks_checkpointed": 9}
    assert sum(isinstance(m, CheckpointedBlock) for m in trainer.state.model.modules()) == 9
    baseline, baseline_losses = _train([])
    assert torch.equal(losses, baseline_losses)
    for (n, p), (m, q) in zip(
        trainer.state.model.named_parameters(), baseline.state.model.named_parameters(), strict=True
    ):
        assert n == m and torch.equal(p, q), n
    fresh = resnet20()
    fresh.load_state_dict(trainer.state.model.state_dict())  # the trained weights load without it
    trainer, _ = _train([ActivationCheckpointing(every_n_blocks=3)])
    assert trainer.method_log.records["ActivationCheckpointing"]["activity"] == {"blocks_checkpointed": 3}


def test_stochastic_depth_runs_first_so_its_blocks_are_checkpointed_in_either_order():
    alone, alone_losses = _train([StochasticDepth("BasicBlock", drop_rate=0.5)])
    for order in ("before", "after"):
        methods = [StochasticDepth("BasicBlock", drop_rate=0.5), ActivationCheckpointing()]
        trainer, losses = _train(methods if order == "after" else methods[::-1])
        blocks = [m for m in trainer.state.model.modules() if isinstance(m, BasicBlock)]
        assert len(blocks) == 9 and all(
            isinstance(b, StochasticResidual) and isinstance(b, CheckpointedBlock) for b in blocks
        )
        assert trainer.method_log.records["ActivationCheckpointing"]["activity"] == {"blocks_checkpointed": 9}
        assert torch.equal(losses, alone_losses)  # the same blocks dropped: the draws are recomputed alike


# -- Hugging Face caches ---------------------------------------------------------------------


def test_a_hugging_face_layer_gets_no_cache_to_write_twice_and_refuses_a_filled_one():
    model, _ = _build("gpt2")
    checkpointed = cf.apply_activation_checkpointing(copy.deepcopy(model))
    ids = torch.randint(3, 64, (2, 6), generator=torch.Generator().manual_seed(0))
    out = checkpointed(input_ids=ids, labels=ids, use_cache=True)
    out.loss.backward()
    assert out.past_key_values is None or out.past_key_values.get_seq_length() == 0  # not written, nor twice
    with torch.no_grad():  # nothing is checkpointed without gradients: generation keeps its cache
        cache = checkpointed(input_ids=ids, use_cache=True).past_key_values
    assert cache.get_seq_length() == 6
    with pytest.raises(
        ValueError, match=r"^cache: a checkpointed CheckpointedGPT2Block cannot read a cache that holds 6 positions"
    ) as caught:
        checkpointed(input_ids=ids[:, :1], cache=cache, use_cache=True)
    assert "\n" not in str(caught.value)


# -- what it does not change, and what it refuses ---------------------------------------------


def test_a_model_without_a_known_block_warns_once_and_is_unchanged():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 2))
    before = copy.deepcopy(model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cf.apply_activation_checkpointing(model) is model
    assert [type(w.message) for w in caught] == [NoModulesReplacedWarning]
    message = str(caught[0].message)
    assert message.startswith("apply_activation_checkpointing: Sequential holds none of the module classes it knows")
    assert "algorithms.activation_checkpointing.registry.register" in message
    assert [type(m) for m in model.modules()] == [type(m) for m in before.modules()]
    assert all(
        torch.equal(a, b) for a, b in zip(model.state_dict().values(), before.state_dict().values(), strict=True)
    )


@pytest.mark.parametrize(
    ("every_n_blocks", "message"),
    [
        (0, "every_n_blocks=0: must be an integer in [1, inf)"),
        (1.5, "every_n_blocks=1.5: must be an integer in [1, inf)"),
        (True, "every_n_blocks=True: must be an integer in [1, inf)"),
        ("2", "every_n_blocks='2': must be an integer in [1, inf)"),
    ],
)
def test_bad_every_n_blocks_is_one_line_in_both_forms_and_changes_nothing(every_n_blocks, message):
    model = resnet20()
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        cf.apply_activation_checkpointing(model, every_n_blocks=every_n_blocks)
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        ActivationCheckpointing(every_n_blocks=every_n_blocks)
    assert not any(isinstance(m, CheckpointedBlock) for m in model.modules())


def test_a_model_that_is_not_a_module_is_one_line():
    with pytest.raises(TypeError, match=r"^model: must be a torch.nn.Module, got list$"):
        cf.apply_activation_checkpointing([resnet20()])


def test_a_block_class_of_your_own_registers_with_checkpoint_block():
    class Own(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(4, 4)
            self.drop = nn.Dropout(0.5)

        def forward(self, x):
            return x + self.drop(torch.tanh(self.linear(x)))

    torch.manual_seed(0)
    model = nn.Sequential(Own(), Own(), nn.Linear(4, 1))
    with pytest.warns(NoModulesReplacedWarning):
        cf.apply_activation_checkpointing(copy.deepcopy(model))
    registry.register(Own, checkpoint_block)
    try:
        checkpointed = cf.apply_activation_checkpointing(copy.deepcopy(model))
    finally:
        registry.unregister(Own)
    assert [type(m).__name__ for m in checkpointed[:2]] == ["CheckpointedOwn", "CheckpointedOwn"]
    x = torch.randn(5, 4)
    _assert_same(_step(model, lambda m: m(x).sum()), _step(checkpointed, lambda m: m(x).sum()))


def test_the_registry_names_classes_that_exist():
    """Each Hugging Face path is where the installed transformers defines the class (torchvision's
    and timm's are checked in tests/models, where those libraries are installed)."""
    import importlib

    paths = [p for p in registry.known() if p.startswith("transformers.")]
    assert len(paths) == 3
    for path in paths:
        module, _, name = path.rpartition(".")
        assert isinstance(getattr(importlib.import_module(module), name), type), path


# -- FSDP2 -------------------------------------------------------------------------------------


@contextlib.contextmanager
def _one_rank():
    import torch.distributed as dist

    if not dist.is_available() or dist.is_initialized():
        pytest.skip("needs torch.distributed and no process group already")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        from algorithms.core.distributed import destroy_process_group

        destroy_process_group()


def test_fully_shard_after_it_trains_as_without_it_and_a_sharded_model_is_refused():
    """The Trainer's FSDP sharding (algorithms.core.distributed.wrap_model: fully_shard on every
    Conv2d and Linear, then the model) of a checkpointed model, on one rank: the layers inside a
    checkpointed block are gathered again for the recomputation."""
    from algorithms.core.distributed import wrap_model

    with _one_rank():
        plain, loss_of = _build("transformer_tiny")
        checkpointed = cf.apply_activation_checkpointing(copy.deepcopy(plain))
        results = [_step(wrap_model(m, "fsdp", torch.device("cpu")), loss_of, seed=3) for m in (plain, checkpointed)]
        _assert_same(*results)
        with pytest.raises(ValueError, match=r"^model: is already sharded with fully_shard; apply activation"):
            cf.apply_activation_checkpointing(plain)


@pytest.mark.slow
def test_two_ranks_under_fsdp_train_as_without_it(tmp_path):
    """parallel='fsdp' with two processes (torchrun, gloo): the reference ResNet blocks and the
    reference transformer (dropout on) end at the same weights with and without it."""
    out = tmp_path / "runs.pt"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "1",
    }
    script = Path(__file__).with_name("activation_checkpointing_fsdp.py")
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script), str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = torch.load(out, weights_only=False)
    for name in ("vision", "nlp"):
        plain, checkpointed = runs[name, False], runs[name, True]
        assert checkpointed["activity"] == {"blocks_checkpointed": 2}
        assert any(kind.startswith("Checkpointed") for kind in checkpointed["kinds"])
        assert torch.equal(plain["losses"], checkpointed["losses"])
        assert plain["params"].keys() == checkpointed["params"].keys()
        for k, v in plain["params"].items():
            assert torch.equal(v, checkpointed["params"][k]), (name, k)
