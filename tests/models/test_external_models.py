"""The reference models built from other libraries' classes (algorithms.models.external): each is
that library's own model, of the size its metadata states, and without the library the builder
fails with one line that names the extra to install."""

from __future__ import annotations

import importlib

import pytest
import torch

import algorithms.models.external as external
from algorithms.models import get_model


def test_torchvision_resnet18_is_torchvisions_own_model():
    torchvision = pytest.importorskip("torchvision", reason="torchvision is not installed: run nox -s models")
    model = get_model("torchvision_resnet18", 7)
    reference = torchvision.models.resnet18(weights=None, num_classes=7)
    assert type(model) is torchvision.models.ResNet
    assert {k: v.shape for k, v in model.state_dict().items()} == {
        k: v.shape for k, v in reference.state_dict().items()
    }
    assert {type(m) for m in model.modules()} == {type(m) for m in reference.modules()}
    with torch.no_grad():
        assert model.eval()(torch.rand(2, 3, 32, 32)).shape == (2, 7)


def test_hf_gpt2_tiny_is_a_gpt2_lm_head_model_of_the_stated_size():
    transformers = pytest.importorskip("transformers", reason="transformers is not installed: nox -s tests has it")
    model = get_model("hf_gpt2_tiny", 256)
    assert type(model) is transformers.GPT2LMHeadModel
    config = model.config
    assert (config.vocab_size, config.n_positions, config.n_embd, config.n_layer, config.n_head) == (256, 128, 64, 2, 4)
    assert config.bos_token_id == config.eos_token_id == 255  # inside the vocabulary
    # By hand, at width 64 and 256 tokens: the token and position embeddings, two blocks (two layer
    # norms, the qkv and output projections, the two feed-forward layers, each with its bias), the
    # final layer norm; the head is the token embedding's weight (tied), so it adds nothing.
    block = 2 * (2 * 64) + (64 * 192 + 192) + (64 * 64 + 64) + (64 * 256 + 256) + (256 * 64 + 64)
    assert sum(p.numel() for p in model.parameters()) == 256 * 64 + 128 * 64 + 2 * block + 2 * 64 == 124_672
    assert model.lm_head.weight is model.transformer.wte.weight
    with torch.no_grad():
        assert model.eval()(torch.randint(0, 256, (2, 16))).logits.shape == (2, 16, 256)


@pytest.mark.parametrize(
    ("builder", "module", "extra"),
    [(external.torchvision_resnet18, "torchvision", "vision"), (external.hf_gpt2_tiny, "transformers", "transformers")],
)
def test_without_its_library_a_builder_names_the_extra_to_install(monkeypatch, builder, module, extra):
    real = importlib.import_module

    def missing(name, *args):
        if name.split(".")[0] == module:
            raise ModuleNotFoundError(f"No module named {module!r}", name=module)
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", missing)
    with pytest.raises(ModuleNotFoundError, match=rf"pip install 'methods-library\[{extra}\]'") as caught:
        builder(10)
    assert caught.value.name == module  # so that a card's example that needs it is skipped, naming it


def test_the_torchvision_resnet_cards_code_runs_where_torchvision_is():
    """The card's example, which the card-code test of nox -s tests skips (torchvision needs torch
    2.14.1), runs here: Stochastic Depth wraps torchvision's blocks and the model still runs."""
    pytest.importorskip("torchvision", reason="torchvision is not installed: run nox -s models")
    from methods_tools import cards

    from algorithms.metadata import PACKAGE_ROOT

    card = PACKAGE_ROOT.parent / "docs" / "source" / "model_cards" / "torchvision_resnet.md"
    blocks = [b for b in cards.code_blocks(card.read_text("utf-8")) if b.language in cards.PYTHON_LANGS]
    assert len(blocks) == 1
    code = blocks[0].code
    cut = code.index("# The same by name")  # stop before it builds a fresh model, to look at the converted one
    namespace: dict = {}
    exec(compile(code[:cut], f"{card.name}:{blocks[0].line}", "exec"), namespace)  # noqa: S102
    kinds = [type(m).__name__ for m in namespace["model"].modules()]
    assert kinds.count("StochasticTorchvisionBasicBlock") == 8 and "BasicBlock" not in kinds  # 4 stages of 2
    exec(compile(code, f"{card.name}:{blocks[0].line}", "exec"), {})  # noqa: S102  the whole example runs
