"""ALiBi and Gated Linear Units on Hugging Face GPT-2, BERT and RoBERTa, checked against their definitions.

ALiBi (Press et al., 2022): head ``h`` of ``H`` adds ``-m_h (i - j)`` (causal, GPT-2) or
``-m_h |i - j|`` (bidirectional, BERT and RoBERTa, as Composer does) to the logit of query ``i``
on key ``j``, with ``m_h = 2 ** (-8 h / H)``, and the model has no position embedding. GLU
(Shazeer, 2020): BERT's feed-forward block becomes ``LayerNorm(dropout(down(act(gate(x)) * up(x))) + x)``.
Attention and blocks are computed here by hand from the modules' weights. Models are built from
small configs; nothing is downloaded.

Composer's Hugging Face tests of these methods (``tests/algorithms/test_alibi.py``'s ``TestAlibi``
on its tiny BERT and GPT-2 and ``test_registry``; ``tests/algorithms/test_gated_linear_units.py``'s
functional and algorithm tests on its tiny BERT) are re-expressed at the end, with these
differences:

- Composer's tiny models are downloaded with their tokenizers and batched by a
  ``DataCollatorForLanguageModeling``; here they are built from configs, and their batches of
  ``input_ids``, ``attention_mask`` and ``labels`` are drawn by hand (BERT's labels are -100 outside
  the 15 % of positions masked, as the collator's).
- Composer keeps the position embedding, its weight zeroed, frozen and enlarged to
  ``max_sequence_length`` rows (``check_position_embeddings``); here it is swapped for a module
  without parameters whose output is zero, and the original weight, no longer used, is frozen. The
  check is re-expressed as: no parameter of the model is a position embedding, and the positions
  passed change nothing.
- Composer's ``test_registry`` registers ``torch.nn.Linear`` with a policy that changes the layer
  in place; here the registry's policy returns a replacement, the form this library's surgery
  counts, and the registration is undone after the test.
- Composer's BERT GLU block (``BERTGatedFFOutput``) keeps the hidden width, applies dropout before
  ``down`` and starts a new ``LayerNorm``; here the width shrinks to keep the parameter count, the
  dropout stays after ``down`` where BERT has it, and BERT's ``LayerNorm`` is kept, so Composer's
  ``assert_is_glu_instance`` looks for this library's gated modules instead of its class.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch
import torch.nn.functional as F

transformers = pytest.importorskip(
    "transformers", reason="the Hugging Face surgery needs transformers ([transformers] extra)"
)

import algorithms.functional as cf  # noqa: E402
from algorithms import Alibi, GatedLinearUnits  # noqa: E402
from algorithms.alibi import registry as alibi_registry  # noqa: E402
from algorithms.core import Event, State, Trainer  # noqa: E402
from algorithms.core.time import Duration  # noqa: E402
from algorithms.gated_linear_units import registry as glu_registry  # noqa: E402
from algorithms.surgery import NoModulesReplacedWarning  # noqa: E402

VOCAB, WIDTH, HEADS, POSITIONS = 100, 32, 4, 32
IMPLEMENTATIONS = ("eager", "sdpa")

transformers.logging.set_verbosity_error()  # the tiny configs' token ids outside the tiny vocabulary


def gpt2(implementation="sdpa", seed=0):
    torch.manual_seed(seed)
    config = transformers.GPT2Config(
        n_layer=2,
        n_embd=WIDTH,
        n_head=HEADS,
        vocab_size=VOCAB,
        n_positions=POSITIONS,
        attn_implementation=implementation,
    )
    return transformers.GPT2LMHeadModel(config)


def bert(implementation="sdpa", seed=0):
    torch.manual_seed(seed)
    config = transformers.BertConfig(
        num_hidden_layers=2,
        hidden_size=WIDTH,
        num_attention_heads=HEADS,
        intermediate_size=64,
        vocab_size=VOCAB,
        max_position_embeddings=POSITIONS,
        attn_implementation=implementation,
    )
    return transformers.BertForMaskedLM(config)


def roberta(implementation="sdpa", seed=0):
    torch.manual_seed(seed)
    config = transformers.RobertaConfig(
        num_hidden_layers=2,
        hidden_size=WIDTH,
        num_attention_heads=HEADS,
        intermediate_size=64,
        vocab_size=VOCAB,
        max_position_embeddings=POSITIONS + 2,  # RoBERTa numbers positions from pad_token_id + 1 = 2
        attn_implementation=implementation,
    )
    return transformers.RobertaForMaskedLM(config)


BUILDERS = {"gpt2": gpt2, "bert": bert, "roberta": roberta}


def ids(batch=2, length=POSITIONS, seed=1):
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, (batch, length), generator=generator)  # 0..2: RoBERTa's special tokens


def slopes(heads=HEADS):
    """The paper's slopes for H a power of 2."""
    return torch.tensor([2.0 ** (-8 * h / heads) for h in range(1, heads + 1)])


def attention_layers(model):
    if hasattr(model, "transformer"):
        return [block.attn for block in model.transformer.h]
    encoder = (model.bert if hasattr(model, "bert") else model.roberta).encoder
    return [layer.attention.self for layer in encoder.layer]


def position_embedding_holder(model):
    if hasattr(model, "transformer"):
        return model.transformer, "wpe"
    return (model.bert if hasattr(model, "bert") else model.roberta).embeddings, "position_embeddings"


def by_hand(q, k, v, key_padding, causal):
    """Attention of ``(B, H, T, d)`` heads with ALiBi's bias; ``key_padding`` ``(B, T)`` True at a
    padded key."""
    length = q.shape[-2]
    i = torch.arange(length)[:, None]
    j = torch.arange(length)[None, :]
    distance = (i - j) if causal else (i - j).abs()
    logits = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) - slopes()[:, None, None] * distance
    if causal:
        logits = logits.masked_fill(j > i, float("-inf"))
    logits = logits.masked_fill(key_padding[:, None, None, :], float("-inf"))
    return torch.softmax(logits, dim=-1) @ v


def heads(x):
    return x.view(*x.shape[:2], HEADS, -1).transpose(1, 2)


def merged(x):
    return x.transpose(1, 2).reshape(x.shape[0], x.shape[2], -1)


def layer_input_and_output(model, layer, inputs):
    """The hidden states the first attention layer is given, and what it returns, in a forward of the model."""
    seen = {}

    def hook(module, args, kwargs, output):
        seen["x"] = args[0] if args else kwargs["hidden_states"]
        seen["y"] = output[0]

    handle = layer.register_forward_hook(hook, with_kwargs=True)
    try:
        with torch.no_grad():
            model(**inputs)
    finally:
        handle.remove()
    return seen["x"], seen["y"]


# -- ALiBi


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_gpt2_attention_is_causal_attention_with_the_papers_bias(implementation):
    model = gpt2(implementation).eval()
    cf.apply_alibi(model, max_sequence_length=2 * POSITIONS)
    tokens = ids(length=12)
    padding = torch.zeros_like(tokens, dtype=torch.bool)
    padding[1, 9:] = True  # the second row's last three tokens are padding
    layer = model.transformer.h[0].attn
    x, y = layer_input_and_output(model, layer, {"input_ids": tokens, "attention_mask": (~padding).long()})
    # GPT-2's Conv1D: x @ weight + bias, weight (in, out)
    q, k, v = (x @ layer.c_attn.weight + layer.c_attn.bias).split(WIDTH, dim=2)
    expected = merged(by_hand(heads(q), heads(k), heads(v), padding, causal=True)) @ layer.c_proj.weight
    expected = expected + layer.c_proj.bias
    keep = ~padding  # a padded query's output is not defined by the paper
    torch.testing.assert_close(y[keep], expected[keep], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("name", ["bert", "roberta"])
def test_bert_and_roberta_attention_is_bidirectional_attention_with_the_symmetric_bias(name, implementation):
    model = BUILDERS[name](implementation).eval()
    cf.apply_alibi(model, max_sequence_length=2 * POSITIONS)
    tokens = ids(length=12)
    padding = torch.zeros_like(tokens, dtype=torch.bool)
    padding[0, 10:] = True
    tokens[0, 10:] = model.config.pad_token_id
    layer = attention_layers(model)[0]
    x, y = layer_input_and_output(model, layer, {"input_ids": tokens, "attention_mask": (~padding).long()})
    q, k, v = (heads(F.linear(x, p.weight, p.bias)) for p in (layer.query, layer.key, layer.value))
    expected = merged(by_hand(q, k, v, padding, causal=False))
    keep = ~padding
    torch.testing.assert_close(y[keep], expected[keep], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", BUILDERS)
def test_position_embeddings_no_longer_act_and_get_no_gradient(name):
    model = BUILDERS[name]().eval()
    holder, attribute = position_embedding_holder(model)
    original = getattr(holder, attribute).weight
    cf.apply_alibi(model, max_sequence_length=2 * POSITIONS)
    assert not any(p is original for p in model.parameters())
    tokens = ids(length=16)
    with torch.no_grad():
        default = model(input_ids=tokens).logits
        # Shifted, not shuffled: transformers reads positions that fall back as the starts of packed sequences.
        shifted = torch.arange(16)[None].expand(2, -1) + 7
        assert torch.equal(model(input_ids=tokens, position_ids=shifted).logits, default)
        original.mul_(-3.0).add_(1.0)  # changing the original weights changes nothing
        assert torch.equal(model(input_ids=tokens).logits, default)
    model.train()
    model(input_ids=tokens, labels=tokens).loss.backward()
    assert original.grad is None and not original.requires_grad


@pytest.mark.parametrize("name", BUILDERS)
def test_runs_forward_and_backward_at_twice_the_trained_length_and_refuses_longer(name):
    model = BUILDERS[name]()
    cf.apply_alibi(model, max_sequence_length=2 * POSITIONS)
    assert model.config.max_position_embeddings >= 2 * POSITIONS
    tokens = ids(length=2 * POSITIONS)
    loss = model(input_ids=tokens, attention_mask=torch.ones_like(tokens), labels=tokens).loss
    loss.backward()
    assert torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    longer = ids(length=2 * POSITIONS + 1)
    if name == "gpt2":
        with pytest.raises(
            ValueError, match=r"^input_ids: 65 positions, but ALiBi was applied with max_sequence_length=64"
        ):
            model(input_ids=longer)
    else:  # BERT's embeddings index their position buffers first, and fail there
        with pytest.raises(RuntimeError):
            model(input_ids=longer)


def test_gpt2_generation_with_a_cache_matches_the_full_forward():
    """The bias of a query decoded with the cache is that of its position among all the keys."""
    model = gpt2().eval()
    cf.apply_alibi(model, max_sequence_length=2 * POSITIONS)
    tokens = ids(batch=1, length=10)
    with torch.no_grad():
        full = model(input_ids=tokens).logits
        first = model(input_ids=tokens[:, :7], use_cache=True)
        rest = model(input_ids=tokens[:, 7:], cache=first.cache, use_cache=True).logits
    torch.testing.assert_close(rest, full[:, 7:], atol=1e-5, rtol=1e-5)


def test_another_attention_implementation_is_refused_with_a_clear_error():
    model = gpt2("eager")
    cf.apply_alibi(model, max_sequence_length=POSITIONS)
    model.config._attn_implementation = "flash_attention_2"  # as set_attn_implementation would leave it
    with pytest.raises(
        ValueError, match="attn_implementation='flash_attention_2': ALiBi adds its bias to the attention mask"
    ):
        model(input_ids=ids(length=8))


def test_the_optimizer_holds_the_models_parameters_and_the_old_position_weight_never_moves():
    model = gpt2()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.1)
    original = model.transformer.wpe.weight
    before = original.detach().clone()
    cf.apply_alibi(model, max_sequence_length=2 * POSITIONS, optimizers=optimizer)
    held = {id(p) for group in optimizer.param_groups for p in group["params"]}
    assert {id(p) for p in model.parameters()} <= held
    tokens = ids(length=2 * POSITIONS)
    model(input_ids=tokens, labels=tokens).loss.backward()
    optimizer.step()
    assert torch.equal(original, before)


# -- Gated Linear Units


@pytest.mark.parametrize("act_fn", [None, F.silu])
@pytest.mark.parametrize("name", ["bert", "roberta"])
def test_bert_feed_forward_is_the_gated_block_then_berts_residual_and_layer_norm(name, act_fn):
    model = BUILDERS[name]().eval()
    encoder = (model.bert if name == "bert" else model.roberta).encoder
    layer = encoder.layer[0]
    own_act = layer.intermediate.intermediate_act_fn
    before = sum(p.numel() for p in model.parameters())
    replaced = cf.apply_gated_linear_units(model, act_fn=act_fn)
    assert len(replaced) == 4  # an intermediate and an output per layer
    after = sum(p.numel() for p in model.parameters())
    assert abs(after - before) <= 2 * 3 * WIDTH  # the closest width: at most half a unit per layer off
    x = torch.randn(2, 5, WIDTH, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        y = layer.feed_forward_chunk(x)
    gated, output = layer.intermediate, layer.output
    act = own_act if act_fn is None else act_fn
    hidden = act(x @ gated.gate.weight.T) * (x @ gated.up.weight.T)
    z = hidden @ output.dense.weight.T + output.dense.bias + x
    mean, var = z.mean(-1, keepdim=True), z.var(-1, unbiased=False, keepdim=True)
    norm = output.LayerNorm
    expected = (z - mean) / torch.sqrt(var + norm.eps) * norm.weight + norm.bias
    torch.testing.assert_close(y, expected, atol=1e-5, rtol=1e-5)


def test_gated_block_starts_from_berts_own_weights():
    model = bert()
    layer = model.bert.encoder.layer[0]
    up, down = layer.intermediate.dense.weight.detach().clone(), layer.output.dense.weight.detach().clone()
    cf.apply_gated_linear_units(model)
    width = layer.intermediate.up.out_features
    assert width == round((2 * WIDTH * 64 + 64) / (3 * WIDTH))  # the same parameter count, or the closest
    assert torch.equal(layer.intermediate.up.weight, up[:width])
    assert torch.equal(layer.output.dense.weight, down[:, :width])


def test_glu_gives_the_optimizer_the_new_parameters_and_trains():
    model = bert()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    cf.apply_gated_linear_units(model, optimizer)
    held = [p for group in optimizer.param_groups for p in group["params"]]
    assert {id(p) for p in held} == {id(p) for p in model.parameters()}
    gate = model.bert.encoder.layer[0].intermediate.gate.weight
    before = gate.detach().clone()
    tokens = ids(length=16)
    model(input_ids=tokens, labels=tokens).loss.backward()
    optimizer.step()
    assert not torch.equal(gate, before)


# -- the registries


def tiny_llama():
    """A Hugging Face model without any class either method knows (rotary positions, a gated MLP)."""
    config = transformers.LlamaConfig(
        hidden_size=WIDTH, intermediate_size=64, num_hidden_layers=1, num_attention_heads=HEADS, vocab_size=VOCAB
    )
    return transformers.LlamaForCausalLM(config)


@pytest.mark.parametrize(
    ("apply", "registry", "known"),
    [
        (
            lambda model: cf.apply_alibi(model, max_sequence_length=64),
            "algorithms.alibi.registry",
            "PositionEmbedding, CausalSelfAttention, GPT2Model, GPT2Attention, BertEmbeddings, BertSelfAttention, "
            "RobertaEmbeddings, RobertaSelfAttention",
        ),
        (
            cf.apply_gated_linear_units,
            "algorithms.gated_linear_units.registry",
            "FeedForward, BertIntermediate, BertOutput, RobertaIntermediate, RobertaOutput",
        ),
    ],
    ids=["alibi", "glu"],
)
@pytest.mark.parametrize(
    "model", [lambda: torch.nn.Sequential(torch.nn.Linear(4, 4)), tiny_llama], ids=["seq", "llama"]
)
def test_a_model_without_known_classes_gets_one_warning_naming_them_and_register(apply, registry, known, model):
    model = model()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        assert apply(model) == {}
    assert len(records) == 1 and records[0].category is NoModulesReplacedWarning
    message = str(records[0].message)
    assert f"holds none of the module classes it knows ({known})" in message
    assert f"{registry}.register(YourModuleClass, policy)" in message
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())


def test_glu_on_gpt2_warns_gpt2_has_no_registered_feed_forward():
    with pytest.warns(NoModulesReplacedWarning, match="GPT2LMHeadModel holds none of the module classes"):
        cf.apply_gated_linear_units(gpt2())


class Mixer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.proj(x)


class Doubled(torch.nn.Module):
    def __init__(self, proj, seen):
        super().__init__()
        self.proj, self.seen = proj, seen

    def forward(self, x):
        return 2 * self.proj(x)


@pytest.fixture
def restored_registries(monkeypatch):
    """Registrations made in a test are undone after it."""
    for registry in (alibi_registry, glu_registry):
        monkeypatch.setattr(registry, "_policies", dict(registry._policies))


@pytest.mark.usefixtures("restored_registries")
def test_a_user_registered_class_is_converted_with_the_methods_options():
    calls = []

    def alibi_policy(module, index, max_sequence_length):
        calls.append(("alibi", index, max_sequence_length))
        return Doubled(module.proj, max_sequence_length)

    def glu_policy(module, index, act_fn, gated_layer_bias, non_gated_layer_bias):
        calls.append(("glu", index, gated_layer_bias))
        return Doubled(module.proj, None)

    alibi_registry.register(Mixer, alibi_policy)
    glu_registry.register(f"{Mixer.__module__}.Mixer", glu_policy)  # by import path
    model = torch.nn.Sequential(Mixer(), Mixer())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert sorted(cf.apply_alibi(model, max_sequence_length=128, optimizers=optimizer)) == ["0", "1"]
    assert calls == [("alibi", 0, 128), ("alibi", 1, 128)]
    x = torch.randn(3, 4)
    torch.testing.assert_close(model(x), 2 * model[1].proj(2 * model[0].proj(x)))
    model = torch.nn.Sequential(Mixer())
    assert list(cf.apply_gated_linear_units(model, gated_layer_bias=True)) == ["0"]
    assert calls[-1] == ("glu", 0, True)


# -- the Algorithm classes through the Trainer


def lm_batches(length=16, count=2, seed=0):
    generator = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(count):
        tokens = torch.randint(3, VOCAB, (2, length), generator=generator)
        batches.append({"input_ids": tokens, "attention_mask": torch.ones_like(tokens), "labels": tokens.clone()})
    return batches


@pytest.mark.parametrize("name", BUILDERS)
def test_alibi_acts_on_a_hugging_face_model_through_the_trainer(name):
    model = BUILDERS[name]()
    algorithm = Alibi(max_sequence_length=2 * POSITIONS, train_sequence_length_scaling=0.5)
    trainer = Trainer(
        model,
        lm_batches(),
        "2ba",
        loss_fn="model",
        input_key=None,
        target_key="labels",
        algorithms=[algorithm],
        seed=0,
        device="cpu",
    )
    trainer.fit()
    assert trainer.method_log.records["Alibi"]["activity"] == {"modules_replaced": 2, "batches_shortened": 2}
    assert all(type(layer).__name__.startswith("Alibi") for layer in attention_layers(trainer.state.model))


@pytest.mark.parametrize("name", ["bert", "roberta"])
def test_gated_linear_units_act_on_a_hugging_face_model_through_the_trainer(name):
    trainer = Trainer(
        BUILDERS[name](),
        lm_batches(),
        "2ba",
        loss_fn="model",
        input_key=None,
        target_key="labels",
        algorithms=[GatedLinearUnits()],
        seed=0,
        device="cpu",
    )
    trainer.fit()
    assert trainer.method_log.records["GatedLinearUnits"]["activity"] == {"modules_replaced": 4}


# -- Composer's tests, after a change of import (see the module docstring for the differences)


def configure_tiny_bert_hf_model():
    return bert()


def configure_tiny_gpt2_hf_model():
    return gpt2()


def _dummy_lm_dataloader(masked, sequence_length=4, size=4):
    generator = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(0, size, 2):
        tokens = torch.randint(3, VOCAB, (2, sequence_length), generator=generator)
        labels = tokens.clone()
        if masked:  # the MLM collator's labels: -100 outside the masked positions
            chosen = torch.rand(tokens.shape, generator=generator) < 0.15
            chosen[:, 0] = True
            labels[~chosen] = -100
        batches.append({"input_ids": tokens, "attention_mask": torch.ones_like(tokens), "labels": labels})
    return batches


def dummy_bert_lm_dataloader(sequence_length=4, size=4):
    return _dummy_lm_dataloader(True, sequence_length, size)


def dummy_gpt_lm_dataloader(sequence_length=4, size=4):
    return _dummy_lm_dataloader(False, sequence_length, size)


def _double_batch_sequence_length(batch):
    for k, v in batch.items():
        if v.ndim >= 2:
            batch[k] = torch.cat([v, v], dim=1)
    return batch


def check_position_embeddings(model, max_sequence_length):
    """Composer's check, re-expressed: no parameter is a position embedding, positions change nothing."""
    assert not [n for n, _ in model.named_parameters() if "wpe" in n or "position_embeddings" in n]
    half = max_sequence_length // 2
    tokens = ids(batch=1, length=half)
    training = model.training
    model.eval()  # no dropout
    with torch.no_grad():
        reference = model(input_ids=tokens).logits
        shifted = torch.arange(half)[None] + half  # positions half .. max_sequence_length - 1
        assert torch.equal(model(input_ids=tokens, position_ids=shifted).logits, reference)
    model.train(training)


def check_forward_backward(model, batch):
    model.zero_grad()
    output = model(**batch)
    output["loss"].backward()


def check_batch_reshaping(before, after, length):
    input_ids_after_shape = after["input_ids"].shape
    for k in before.keys():
        assert k in after, "No keys should be removed during sequence reshaping."
        assert after[k].shape == input_ids_after_shape, (
            "All tensors should have the same size after sequence reshaping."
        )
        b_numel = before[k].shape[0] * before[k].shape[1]
        a_numel = after[k].shape[0] * after[k].shape[1]
        assert a_numel >= b_numel - length, "Sequence reshaping should throw away at most curr_sequence_length tokens."
        assert torch.all(after[k][0] == before[k][0, : input_ids_after_shape[1]]), "no change of the token order"
    for k in after.keys():
        assert k in before, "No keys should be added during sequence reshaping."


def encountered_alibi_warning(records):
    return any("alibi" in str(r.message).lower() for r in records)


@pytest.mark.usefixtures("restored_registries")
def test_registry():
    """Composer's: registry additions are used by Alibi."""

    def zero_linear_weights(module, idx, max_sequence_length):
        assert isinstance(module, torch.nn.Linear)
        new = torch.nn.Linear(module.in_features, module.out_features)
        torch.nn.init.zeros_(new.weight)
        return new

    alibi_registry.register(torch.nn.Linear, zero_linear_weights)
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        cf.apply_alibi(
            model=torch.nn.Sequential(torch.nn.Linear(20, 10), torch.nn.Linear(10, 5)),
            max_sequence_length=64,
        )
    assert not encountered_alibi_warning(records), "No warnings should be generated after adding to the registry."


@pytest.mark.parametrize(
    ("model", "dataloader"),
    [
        (configure_tiny_bert_hf_model, dummy_bert_lm_dataloader),
        (configure_tiny_gpt2_hf_model, dummy_gpt_lm_dataloader),
    ],
)
class TestAlibi:
    def test_functional(self, model, dataloader):
        model = model()
        max_sequence_length = model.config.max_position_embeddings  # n_positions for GPT-2
        dataloader = dataloader(sequence_length=max_sequence_length)
        with warnings.catch_warnings(record=True) as records:
            warnings.simplefilter("always")
            cf.apply_alibi(model=model, max_sequence_length=max_sequence_length)
        assert not encountered_alibi_warning(records)
        check_position_embeddings(model, max_sequence_length)
        batch = next(iter(dataloader))
        assert batch["input_ids"].shape[1] == max_sequence_length
        check_forward_backward(model, batch)

        with warnings.catch_warnings(record=True) as records:
            warnings.simplefilter("always")
            cf.apply_alibi(model=model, max_sequence_length=2 * max_sequence_length)
        assert not encountered_alibi_warning(records)
        check_position_embeddings(model, 2 * max_sequence_length)
        batch = _double_batch_sequence_length(next(iter(dataloader)))
        assert batch["input_ids"].shape[1] == 2 * max_sequence_length
        check_forward_backward(model, batch)

    @pytest.mark.parametrize("train_sequence_length_scaling", [0.25, 1.0])
    def test_algorithm(self, model, dataloader, train_sequence_length_scaling):
        model = model()
        dataloader = dataloader()
        state = State(model=model, max_duration=Duration.parse("1ep"), seed=0)
        max_sequence_length = model.config.max_position_embeddings
        alibi = Alibi(
            max_sequence_length=max_sequence_length, train_sequence_length_scaling=train_sequence_length_scaling
        )
        with warnings.catch_warnings(record=True) as records:
            warnings.simplefilter("always")
            alibi.apply(Event.INIT, state, None)
        assert not encountered_alibi_warning(records)
        batch_before = next(iter(dataloader))
        state.batch = {k: v.clone() for k, v in batch_before.items()}
        alibi.apply(Event.AFTER_DATALOADER, state, None)
        check_batch_reshaping(batch_before, state.batch, int(train_sequence_length_scaling * max_sequence_length))
        check_forward_backward(state.model, state.batch)


def assert_is_glu_instance(model):
    from transformers.models.bert.modeling_bert import BertIntermediate, BertOutput

    from algorithms.gated_linear_units import GatedIntermediate, NarrowedOutput

    assert isinstance(model, (transformers.BertForMaskedLM, transformers.BertForSequenceClassification))
    for module in model.modules():
        assert not isinstance(module, (BertOutput, BertIntermediate)), "no BertOutput after surgery"
    assert any(isinstance(m, GatedIntermediate) for m in model.modules())
    assert any(isinstance(m, NarrowedOutput) for m in model.modules())


def test_gated_linear_units_functional():
    model = configure_tiny_bert_hf_model()
    state = State(model=model, max_duration=Duration.parse("1ep"), seed=0)
    cf.apply_gated_linear_units(state.model, state.optimizers)
    assert_is_glu_instance(state.model)


def test_gated_linear_units_algorithm():
    model = configure_tiny_bert_hf_model()
    state = State(model=model, max_duration=Duration.parse("1ep"), seed=0)
    assert isinstance(state.model, transformers.BertForMaskedLM)
    GatedLinearUnits().apply(Event.INIT, state, None)
    assert_is_glu_instance(state.model)


def test_alibi_refuses_to_cut_a_sequence_classifiers_batch_with_one_line():
    """Cutting each sequence into shorter rows cannot keep one label per sequence: the first batch
    is refused with one line saying what to use (the composability matrix's RoBERTa cell failed
    with a shape mismatch deep in the loss before)."""
    from algorithms import Alibi
    from algorithms.core import Trainer

    transformers = pytest.importorskip("transformers", reason="transformers is the [transformers] extra")
    config = transformers.RobertaConfig(
        num_hidden_layers=1,
        hidden_size=32,
        num_attention_heads=4,
        intermediate_size=64,
        vocab_size=100,
        max_position_embeddings=40,
        num_labels=3,
    )
    torch.manual_seed(0)
    model = transformers.RobertaForSequenceClassification(config)
    batch = {"input_ids": torch.randint(3, 100, (4, 16)), "labels": torch.tensor([0, 1, 2, 0])}
    trainer = Trainer(
        model,
        [batch],
        "1ba",
        loss_fn="model",
        input_key=None,
        target_key="labels",
        algorithms=[Alibi(max_sequence_length=64, train_sequence_length_scaling=0.5)],
    )
    with pytest.raises(
        ValueError,
        match=r"^Alibi\(train_sequence_length_scaling=0.5\): .*'labels' holds one value "
        r"per sequence, shape \(4,\).*use train_sequence_length_scaling=1.0$",
    ):
        trainer.fit()
