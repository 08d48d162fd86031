"""get_model builds every member of the model-family metadata by name, image and sequence models alike."""

from __future__ import annotations

import pytest
import torch

import algorithms.models.resnet as resnet
from algorithms.models import TransformerLM, get_model
from algorithms.models.names import model_input_sizes, model_names


def test_the_names_include_the_project_models_and_those_of_other_libraries():
    assert {"resnet20", "resnet20_gn", "transformer_tiny", "transformer_small"} <= set(model_names())
    assert {"torchvision_resnet18", "hf_gpt2_tiny"} <= set(model_names())


@pytest.mark.parametrize("name", model_names())
def test_every_family_member_is_built_by_name(name):
    try:
        model = get_model(name, 10)
    except ModuleNotFoundError as exc:  # a model of another library, which this environment lacks
        pytest.skip(f"{name} needs {exc.name}, which is not installed here: {exc}")
    assert isinstance(model, torch.nn.Module)


@pytest.mark.parametrize("name", ["transformer_tiny", "transformer_small"])
def test_a_transformer_takes_the_vocabulary_as_num_classes_and_its_input_size_in_positions(name):
    model = get_model(name, num_classes=50).eval()
    assert isinstance(model, TransformerLM) and model.vocab_size == 50
    assert model.max_seq_len == model_input_sizes()[name]
    with torch.no_grad():
        assert model(torch.randint(0, 50, (2, 16))).shape == (2, 16, 50)


def test_the_resnet_module_still_offers_get_model():
    assert isinstance(resnet.get_model("transformer_tiny", 7), TransformerLM)
    with pytest.raises(ValueError, match="transformer_tiny"):
        resnet.get_model("gpt5", 7)
