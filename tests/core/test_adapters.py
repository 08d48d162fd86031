"""Fine-tuning with LoRA through peft (Hu et al., 2021): a peft model's frozen base stays bit for bit,
its adapter alone trains, is optimized and is checkpointed, and a run resumed from that checkpoint
ends where the uninterrupted run ends. LoRA's definition checked here: ``W x + (alpha / r) B A x``
with ``B`` zero at the start, so an adapter on a ``d_in -> d_out`` layer holds ``r (d_in + d_out)``
parameters. Models are built from small configs; nothing is downloaded.

Also: a surgery method that would change the frozen base is refused (the rule of
:func:`algorithms.surgery.replace_module_classes`), one that replaces only modules without
parameters and a method that changes the loss run; the modes that cannot checkpoint an adapter are
refused, and so is a checkpoint of the other form.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

peft = pytest.importorskip(
    "peft", reason="LoRA through peft needs the [peft] extra (pip install 'methods-library[peft]')"
)
transformers = pytest.importorskip(
    "transformers", reason="the models fine-tuned here are Hugging Face's ([transformers])"
)

from algorithms import ActivationCheckpointing, GatedLinearUnits, GyroDropout, LabelSmoothing  # noqa: E402
from algorithms.core import Loop, State, Trainer  # noqa: E402
from algorithms.core.checkpoint import CheckpointError  # noqa: E402
from algorithms.core.distributed import destroy_process_group  # noqa: E402
from algorithms.core.time import Duration  # noqa: E402
from algorithms.functional import apply_alibi  # noqa: E402

transformers.logging.set_verbosity_error()  # the tiny configs' special token ids outside the tiny vocabulary
# peft 0.21.2 asks transformers 5.25 the name that transformers now deprecates
pytestmark = pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")

REPO = Path(__file__).resolve().parents[2]
VOCAB, WIDTH, LAYERS, LENGTH, RANK = 16, 32, 2, 8, 4

# A GPT-2 from a tiny config with LoRA on every layer's c_attn (the query, key and value projection,
# WIDTH -> 3 * WIDTH), and its data: each token is the one before it plus 1 (mod VOCAB), a rule the
# frozen random base does not know and the adapter can learn (the base's weights drawn with a spread
# of 0.2, not GPT-2's 0.02, so that the adapter's change reaches the logits within a few steps, as
# a trained model's larger weights let it). Dropout (GPT-2's, and LoRA's own) draws
# from torch's global generator, so resuming must put it back. Both processes of the fresh-process
# test run this code.
SETUP = textwrap.dedent(f"""
    import torch
    import transformers
    from peft import LoraConfig, get_peft_model
    from algorithms.core import Trainer

    VOCAB, WIDTH, LAYERS, LENGTH, RANK = {VOCAB}, {WIDTH}, {LAYERS}, {LENGTH}, {RANK}

    def gpt2(seed=0):
        torch.manual_seed(seed)  # the same base weights in every run, as a pretrained model's
        config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=LENGTH, n_embd=WIDTH, n_layer=LAYERS, n_head=2,
                                         initializer_range=0.2)
        return transformers.GPT2LMHeadModel(config)

    def lora_gpt2(lora_alpha=8, seed=0):
        lora = LoraConfig(r=RANK, lora_alpha=lora_alpha, lora_dropout=0.1, target_modules=["c_attn"],
                          fan_in_fan_out=True)  # GPT-2's c_attn is a Conv1D, its weight (d_in, d_out)
        return get_peft_model(gpt2(seed), lora)

    def counting_batches(n, seed=1):
        g = torch.Generator().manual_seed(seed)
        batches = []
        for _ in range(n):
            ids = (torch.randint(0, VOCAB, (8, 1), generator=g) + torch.arange(LENGTH)) % VOCAB
            batches.append({{"input_ids": ids, "labels": ids}})
        return batches

    def adam(params):
        return torch.optim.Adam(params, lr=3e-2)

    def build(model, duration, load_path=None, parallel="single", algorithms=()):
        return Trainer(model, counting_batches(4), duration, optimizer=adam, loss_fn="model", input_key=None,
                       target_key="labels", algorithms=algorithms, parallel=parallel, seed=3, device="cpu",
                       load_path=load_path)
""")
_namespace: dict = {}
exec(SETUP, _namespace)  # noqa: S102 - the same code the fresh process runs
gpt2, lora_gpt2 = _namespace["gpt2"], _namespace["lora_gpt2"]
counting_batches, build = _namespace["counting_batches"], _namespace["build"]


def _base(model) -> dict[str, torch.Tensor]:
    """Every parameter but the adapter's: the frozen base's weights."""
    return {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" not in n}


def _lora(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _world(monkeypatch) -> None:
    """torchrun's environment for a world of this one process (MASTER_PORT=0: the store picks a free port)."""
    env = dict(MASTER_ADDR="127.0.0.1", MASTER_PORT="0", RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")
    for name, value in env.items():
        monkeypatch.setenv(name, value)


def test_lora_fine_tunes_the_adapter_alone_and_checkpoints_only_its_tensors(tmp_path):
    model = lora_gpt2()
    base, lora = _base(model), _lora(model)
    assert lora and all(torch.equal(p, torch.zeros_like(p)) for n, p in lora.items() if "lora_B" in n)  # B = 0
    trainer = build(model, "12ba")
    held = [p for group in trainer.state.optimizer.param_groups for p in group["params"]]
    assert sorted(id(p) for p in held) == sorted(id(p) for n, p in model.named_parameters() if "lora_" in n)
    evaluation = counting_batches(2, seed=9)
    before = trainer.eval(evaluation)["loss"]
    trainer.fit()
    after = trainer.eval(evaluation)["loss"]

    assert _same(_base(model), base)  # the frozen base, bit for bit
    changed = _lora(model)
    assert all(not torch.equal(changed[n], lora[n]) for n in lora)  # every lora_A and lora_B trained
    assert after < 0.85 * before, (before, after)  # the adapter learned some of the rule (0.64 to 0.73 over seeds)
    # each adapted layer computes W x + b + (alpha / r) B A x (GPT-2's Conv1D holds W as d_in x d_out)
    layer = model.base_model.model.transformer.h[0].attn.c_attn.eval()  # eval: LoRA's dropout off
    a, b = layer.lora_A["default"].weight, layer.lora_B["default"].weight
    assert a.shape == (RANK, WIDTH) and b.shape == (3 * WIDTH, RANK)
    x = torch.randn(3, WIDTH)
    expected = x @ layer.base_layer.weight + layer.base_layer.bias + (8 / RANK) * (x @ a.T @ b.T)
    torch.testing.assert_close(layer(x), expected)

    saved = torch.load(trainer.save_checkpoint(tmp_path / "lora.ckpt"), weights_only=True)
    assert saved["model_form"] == "peft_adapter" and saved["adapter_config"]["r"] == RANK
    # LoRA on a d_in -> d_out layer: A is r x d_in and B is d_out x r, r (d_in + d_out) numbers a layer
    d_in, d_out = WIDTH, 3 * WIDTH
    assert len(saved["model"]) == 2 * LAYERS  # lora_A and lora_B of each adapted c_attn, nothing else
    assert sum(t.numel() for t in saved["model"].values()) == LAYERS * RANK * (d_in + d_out)  # 1024
    assert sum(t.numel() * t.element_size() for t in saved["model"].values()) == LAYERS * RANK * (d_in + d_out) * 4
    assert all("lora_" in name for name in saved["model"])
    # Adam's two moments, for the adapter's parameters alone
    moments = [s[k] for s in saved["optimizers"][0]["state"].values() for k in ("exp_avg", "exp_avg_sq")]
    assert sum(t.numel() for t in moments) == 2 * LAYERS * RANK * (d_in + d_out)


def test_a_resumed_lora_run_ends_where_the_uninterrupted_run_does(tmp_path):
    """Saved mid-epoch (3 of an epoch's 4 batches), resumed into the next epoch."""
    uninterrupted = build(lora_gpt2(), "6ba")
    uninterrupted.fit()
    interrupted = build(lora_gpt2(), "3ba")
    interrupted.fit()
    path = interrupted.save_checkpoint(tmp_path / "run.ckpt")
    torch.randn(1000)  # the global generator moves on: the checkpoint's must replace it (dropout draws from it)
    resumed = build(lora_gpt2(), "6ba", load_path=path)  # a fresh base, the same pretrained weights
    resumed.fit()
    assert resumed.state.timestamp == uninterrupted.state.timestamp
    assert _same(resumed.state.model.state_dict(), uninterrupted.state.model.state_dict())
    moments = [t.state.optimizer.state_dict()["state"] for t in (resumed, uninterrupted)]
    assert all(_same(a, b) for a, b in zip(moments[0].values(), moments[1].values(), strict=True))
    assert not _same(_lora(interrupted.state.model), _lora(uninterrupted.state.model))  # the rest trained


def test_a_lora_run_under_ddp_checkpoints_the_adapter_and_resumes_bit_for_bit(tmp_path, monkeypatch):
    """A one-process torchrun world: DDP's checkpoint (rank 0's shared state and every rank's
    generators) holds the adapter alone, and resumes."""
    _world(monkeypatch)
    try:
        with build(lora_gpt2(), "6ba", parallel="ddp") as uninterrupted:
            assert isinstance(uninterrupted.state.model, torch.nn.parallel.DistributedDataParallel)
            uninterrupted.fit()
            expected = uninterrupted.state.model.module.state_dict()
        with build(lora_gpt2(), "3ba", parallel="ddp") as interrupted:
            interrupted.fit()
            path = interrupted.save_checkpoint(tmp_path / "ddp.ckpt")
        saved = torch.load(path, weights_only=True)
        assert saved["model_form"] == "peft_adapter" and all("lora_" in name for name in saved["model"])
        with build(lora_gpt2(), "6ba", load_path=path, parallel="ddp") as resumed:
            resumed.fit()
            assert _same(resumed.state.model.module.state_dict(), expected)
    finally:
        destroy_process_group()


@pytest.mark.slow
def test_a_lora_run_resumed_in_a_fresh_process_ends_where_the_uninterrupted_run_does(tmp_path):
    uninterrupted = build(lora_gpt2(), "6ba")
    uninterrupted.fit()
    interrupted = build(lora_gpt2(), "3ba")
    interrupted.fit()
    path = interrupted.save_checkpoint(tmp_path / "run.ckpt")
    out = tmp_path / "out.pt"
    script = SETUP + textwrap.dedent(f"""
        transformers.logging.set_verbosity_error()
        trainer = build(lora_gpt2(), "6ba", load_path={str(path)!r})
        trainer.fit()
        torch.save(trainer.state.model.state_dict(), {str(out)!r})
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _same(torch.load(out, weights_only=True), uninterrupted.state.model.state_dict())


def test_a_checkpoint_of_the_other_form_or_another_adapter_is_refused_before_anything_changes(tmp_path):
    peft_run = build(lora_gpt2(), "2ba")
    peft_run.fit()
    adapter = peft_run.save_checkpoint(tmp_path / "adapter.ckpt")
    whole_run = build(gpt2(), "2ba")  # the same GPT-2, without peft
    whole_run.fit()
    whole = whole_run.save_checkpoint(tmp_path / "whole.ckpt")

    cases = [
        (
            gpt2(),
            adapter,
            "holds a peft adapter's weights only (model_form 'peft_adapter'), this model is not a peft model — "
            "resume with the base model wrapped as it was saved, peft.get_peft_model(model, the same config)",
        ),
        (
            lora_gpt2(),
            whole,
            "holds a whole model's weights (model_form 'full'), this model is a peft model, whose checkpoints "
            "hold its adapter alone — resume with the model as it was saved, without get_peft_model",
        ),
        (
            lora_gpt2(lora_alpha=16),  # the same tensors' shapes, another scale alpha / r
            adapter,
            "saved with a peft adapter whose lora_alpha is 8, this model's is 16 — resume with the same adapter "
            "configuration",
        ),
    ]
    for model, path, message in cases:
        trainer = build(model, "4ba")
        before = {k: v.clone() for k, v in trainer.state.model.state_dict().items()}
        with pytest.raises(CheckpointError) as refused:
            trainer.load_checkpoint(path)
        assert str(refused.value) == f"{path}: {message}"
        assert _same(trainer.state.model.state_dict(), before) and trainer.state.timestamp.batch == 0


def test_state_load_state_dict_refuses_the_other_form_in_one_line():
    """A loop of one's own saves and loads ``loop.state.state_dict()``: the same refusal, as a ValueError."""
    saved = Loop(lora_gpt2(), max_duration="1ba", loss_fn="model", input_key=None).state.state_dict()
    plain = gpt2()
    state = State(model=plain, max_duration=Duration.parse("1ba"))
    before = {k: v.clone() for k, v in plain.state_dict().items()}
    with pytest.raises(ValueError, match=r"^State.load_state_dict: the state holds a peft adapter's weights only"):
        state.load_state_dict(saved)
    assert _same(plain.state_dict(), before)


@pytest.mark.parametrize("parallel", ["fsdp", "deepspeed"])
def test_a_peft_model_is_refused_where_the_checkpoint_would_hold_the_whole_model(parallel):
    with pytest.raises(ValueError) as refused:
        build(lora_gpt2(), "1ba", parallel=parallel)
    assert str(refused.value) == (
        f"a peft model under parallel={parallel!r}: this mode checkpoints the whole model in a form of its own, not "
        "the adapter the Trainer saves for a peft model — use parallel='ddp' (each rank then keeps gradients and "
        "optimizer state for the adapter alone) or 'single'"
    )


def test_a_peft_model_with_two_adapters_is_refused():
    model = lora_gpt2()
    model.add_adapter("other", peft.LoraConfig(r=2, target_modules=["c_attn"], fan_in_fan_out=True))
    with pytest.raises(
        ValueError, match=r"^a peft model with adapters \['default', 'other'\]: its checkpoint holds one"
    ):
        build(model, "1ba")


def test_a_loop_of_ones_own_builds_its_optimizer_over_the_adapter_alone():
    model = lora_gpt2()
    given = []

    def sgd(params):
        given.extend(params)
        return torch.optim.SGD(given, lr=0.1)

    loop = Loop(model, max_duration="2ba", optimizer=sgd, loss_fn="model", input_key=None, target_key="labels", seed=0)
    base = _base(model)
    for batch in counting_batches(2):
        loop.train_step(batch)
    assert [id(p) for p in given] == [id(p) for n, p in model.named_parameters() if "lora_" in n]
    assert _same(_base(model), base)


def test_models_without_frozen_parameters_give_the_optimizer_every_parameter_in_order():
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    trainer = Trainer(model, [(torch.randn(2, 3), torch.tensor([0, 1]))], "1ba", device="cpu")
    assert trainer.state.optimizer.param_groups[0]["params"] == list(model.parameters())


# -- surgery on a peft model -----------------------------------------------------------------------


def _lora_bert(seed=0):
    """BERT for two-class sequence classification from a tiny config, LoRA on its query and value."""
    torch.manual_seed(seed)
    config = transformers.BertConfig(
        vocab_size=VOCAB,
        hidden_size=WIDTH,
        num_hidden_layers=LAYERS,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=LENGTH,
        num_labels=2,
    )
    base = transformers.BertForSequenceClassification(config)
    return peft.get_peft_model(base, peft.LoraConfig(r=RANK, lora_alpha=8, target_modules=["query", "value"]))


def _classification_batches(n=2):
    g = torch.Generator().manual_seed(5)
    return [
        {
            "input_ids": torch.randint(0, VOCAB, (4, LENGTH), generator=g),
            "labels": torch.randint(0, 2, (4,), generator=g),
        }
        for _ in range(n)
    ]


def _classify(model, algorithms):
    return Trainer(
        model,
        _classification_batches(),
        "2ba",
        algorithms=algorithms,
        input_key="input_ids",
        target_key="labels",
        optimizer=lambda params: torch.optim.SGD(params, lr=0.1),
        seed=0,
        device="cpu",
    )


def test_a_surgery_method_that_would_change_the_frozen_base_is_refused_naming_it():
    model = _lora_bert()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError) as refused:
        _classify(model, [GatedLinearUnits()])
    first = "base_model.model.bert.encoder.layer.0.intermediate"
    assert str(refused.value) == (
        f"apply_gated_linear_units: {first} (BertIntermediate) holds frozen parameters ({first}.dense.weight has "
        "requires_grad=False), a part of the model that does not train and that surgery would change — run "
        "apply_gated_linear_units on the model before freezing it (before peft.get_peft_model), or leave it out"
    )
    assert _same(model.state_dict(), before)  # nothing replaced

    gpt2 = lora_gpt2()
    classes = [type(m) for m in gpt2.modules()]
    with pytest.raises(ValueError, match=r"^apply_alibi: base_model\.model\.transformer \(GPT2Model\) holds frozen"):
        apply_alibi(gpt2, max_sequence_length=4 * LENGTH)
    assert [type(m) for m in gpt2.modules()] == classes


@pytest.mark.parametrize(
    "method",
    [
        lambda: LabelSmoothing(0.1, target_key="labels"),  # changes the target, not the model
        lambda: GyroDropout(p=0.5, sigma=4, tau=2),  # replaces dropout layers, which hold no parameters
    ],
    ids=["LabelSmoothing", "GyroDropout"],
)
def test_a_method_that_leaves_the_base_alone_fine_tunes_a_peft_model(method):
    model = _lora_bert()
    base, lora = _base(model), _lora(model)
    trainer = _classify(model, [method()])
    trainer.fit()
    assert trainer.method_log.acted(trainer.engine.algorithms[0].name)
    assert _same(_base(model), base)
    assert not _same(_lora(model), lora)


def test_activation_checkpointing_runs_on_the_frozen_base_and_changes_nothing_but_memory(tmp_path):
    """Its checkpointed blocks hold the block's own parameters and compute the same function (the
    surgery helper lets such a policy through on frozen modules): the adapter trains as without
    it, and the checkpoint holds the same tensors."""
    plain = build(lora_gpt2(), "3ba")
    plain.fit()
    checkpointed = build(lora_gpt2(), "3ba", algorithms=[ActivationCheckpointing()])
    assert [type(m).__name__ for m in checkpointed.state.model.base_model.model.transformer.h] == [
        "CheckpointedGPT2Block"
    ] * LAYERS
    checkpointed.fit()
    assert checkpointed.method_log.acted("ActivationCheckpointing")
    assert _same(_base(checkpointed.state.model), _base(plain.state.model))  # the same frozen base
    for name, value in _lora(plain.state.model).items():
        torch.testing.assert_close(_lora(checkpointed.state.model)[name], value)
    saved = [
        torch.load(t.save_checkpoint(tmp_path / f"{i}.ckpt"), weights_only=True)
        for i, t in enumerate((plain, checkpointed))
    ]
    assert saved[0]["model"].keys() == saved[1]["model"].keys()
