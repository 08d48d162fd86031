"""Composer's own tests, brought into this suite: the cases that differ on purpose, in one place.

The modules of this folder re-express Composer's tests of each method (``tests/algorithms`` in
mosaicml/composer): the same cases and the same assertions, the imports changed to this library,
Composer-only machinery replaced by the smallest local stand-in. Two tables say what does not run
as Composer wrote it:

- :data:`DIFFERENCES`: a case this library fails on purpose. The key is the case's pytest node id
  relative to this folder (``test_cutout.py::test_name[params]``, or ``test_cutout.py::test_name``
  for every parametrization); the value is the method's key and the sentence of its card that
  documents the difference. ``tests/conftest.py`` marks the case ``xfail(strict=True)`` with that
  sentence, so a difference that goes away fails the suite, and ``test_differences.py`` checks that
  the card says it.
- :data:`EXCLUDED`: a Composer test not brought here, by Composer's file and test name, with the
  reason (Composer-only machinery with no counterpart here, a GPU-only case, a removed feature).
"""

from __future__ import annotations

#: Why a case on one of Composer's Hugging Face models is not brought here.
HF_BERT = "a tiny Hugging Face BERT: needs `transformers`, which this project does not install"
#: Why a test of Composer's ``set_rank`` is not brought here.
NO_SET_RANK = (
    "tests `set_rank`, which refits a factorized module to activations; this library does not provide it "
    "(the factorize card says so)"
)

DIFFERENCES: dict[str, tuple[str, str]] = {
    # node id: (method key, the card sentence that documents the difference)
    # -- data and augmentation methods
    "test_composer_cutmix.py::test_cutmix_algorithm": (
        "cutmix",
        "The class runs at `Event.AFTER_DATALOADER` (Composer's at `BEFORE_FORWARD`)",
    ),
    "test_composer_mixup.py::test_mixup_algorithm": (
        "mixup",
        "The class runs at `Event.AFTER_DATALOADER` (Composer's at `BEFORE_FORWARD`)",
    ),
    **{
        f"test_composer_colout.py::{case}": (
            "colout",
            "Composer's `ColOut(batch=False)` adds a per-sample transform to a torchvision dataset instead; "
            "here `batch=False` is refused with an error.",
        )
        for case in (
            "test_match_correct[0-fit_start-False]",
            "test_match_correct[0.15-fit_start-False]",
            "test_match_incorrect[0-after_dataloader-False]",
            "test_match_incorrect[0.15-after_dataloader-False]",
            "test_apply_sample",
        )
    },
    # -- model and optimizer methods
    "test_composer_alibi.py::test_functional": (
        "alibi",
        "Composer keeps the position embedding module, its weight zeroed, frozen and enlarged to "
        "`max_sequence_length` rows; here the module goes, and its parameter leaves the optimizers.",
    ),
    **{
        f"test_composer_torch_export.py::{case}": (
            "blurpool",
            "`BlurConv2d` and `BlurMaxPool2d` are not written for TorchScript, which torch deprecates in favour "
            "of `torch.compile` and `torch.export`; Composer's layers can be compiled with `torch.jit.script`.",
        )
        for case in ("test_surgery_torchscript_train[BlurPool]", "test_surgery_torchscript_eval[BlurPool]")
    },
    **{
        f"test_composer_factorize.py::{case}": (
            "factorize",
            "`factorize_convs=False` with `factorize_linears=False` is an error, and a model with nothing "
            "to factorize warns with `algorithms.surgery.NoModulesReplacedWarning`.",
        )
        for case in (
            "test_factorize_surgery[False-False-SimpleConvModel-model_params0]",
            "test_factorize_surgery[False-False-SimpleTransformerClassifier-model_params1]",
            "test_forward_shape[False-False-SimpleConvModel-model_params0-batch0]",
            "test_algorithm_logging[False-False-SimpleConvModel-model_params0]",
            "test_algorithm_logging[False-False-SimpleTransformerClassifier-model_params1]",
        )
    },
    **{
        f"test_composer_factorize.py::{case}": (
            "factorize",
            "The modules `FactorizedConv2d` and `FactorizedLinear` accept any latent size up to full rank; "
            "the rule that a replacement must save multiply-adds lives in `apply_factorization`, which is "
            "what decides (Composer's modules refuse latent sizes that save nothing).",
        )
        for case in (
            "test_factorized_conv_init_throws_if_latent_too_big",
            "test_factorized_linear_init_throws_if_latent_too_big",
        )
    },
    "test_composer_gradient_clipping.py::test_gradient_clipping_algorithm": (
        "gradient_clipping",
        "A `clipping_threshold` that is not a number above zero, or an unknown `clipping_type`, is a "
        "`ValueError` naming the argument, raised by the constructor.",
    ),
    "test_composer_gradient_clipping.py::test_get_clipped_gradients_1D_with_zeros[weights0-grad0-expected0]": (
        "gradient_clipping",
        "AGC floors each unit's weight norm at `1e-3`, as the paper does, so a unit whose weights are zero "
        "(a bias at initialisation) still gets a small gradient; Composer's AGC gives it none.",
    ),
    "test_composer_sam.py::test_param_groups_id_matching": (
        "sam",
        "It wraps the optimizer at `Event.FIT_START`, once the Trainer has built it; Composer wraps at `Event.INIT`.",
    ),
    "test_composer_torch_export.py::test_surgery_torchscript_eval[StochasticDepth]": (
        "stochastic_depth",
        "The stochastic blocks are not written for TorchScript, which torch deprecates in favour of "
        "`torch.compile` and `torch.export`; Composer's can be compiled with `torch.jit.script` for evaluation.",
    ),
}

EXCLUDED: dict[str, str] = {
    # "tests/algorithms/test_x.py::test_name": "why it is not brought here",
    # -- model and optimizer methods
    "tests/algorithms/test_alibi.py::test_registry": (
        "Composer's registry of attention-surgery policies (`policy_registry`) has no counterpart: ALiBi "
        "here matches its reference transformer's modules only, as its card says"
    ),
    "tests/algorithms/test_alibi.py::TestAlibi[configure_tiny_bert_hf_model-dummy_bert_lm_dataloader]": (
        "a tiny Hugging Face BERT: needs `transformers`, not installed here, and this library has no "
        "bidirectional reference model for ALiBi to match (its GPT-2 case runs on `transformer_tiny`)"
    ),
    "tests/algorithms/test_ema.py::test_ema[configure_tiny_bert_hf_model]": HF_BERT,
    "tests/algorithms/test_ema.py::test_ema_algorithm[configure_tiny_bert_hf_model]": HF_BERT,
    "tests/algorithms/test_factorize_algorithm.py::*[configure_tiny_bert_hf_model]": HF_BERT,
    "tests/algorithms/test_factorize_core.py": (
        "tests `factorize_matrix` and `factorize_conv2d`, the least-squares refits to activations behind "
        "Composer's `set_rank`, which this library does not provide (its card says so): factorized modules "
        "start from the truncated SVD of the original weights instead"
    ),
    "tests/algorithms/test_factorized_modules.py::test_update_factorized_conv2d_twice": NO_SET_RANK,
    "tests/algorithms/test_factorized_modules.py::test_update_factorized_linear_twice": NO_SET_RANK,
    "tests/algorithms/test_factorized_modules.py::"
    "test_factorized_conv2d_set_rank_throws_if_latent_too_big": NO_SET_RANK,
    "tests/algorithms/test_factorized_modules.py::"
    "test_factorized_linear_set_rank_throws_if_latent_too_big": NO_SET_RANK,
    "tests/algorithms/test_gradient_clipping.py::*[hf_model_with_grads]": HF_BERT,
    "tests/algorithms/test_gradient_clipping.py::test_gradient_clipping_algorithm_with_fsdp_enabled_does_not_error": (
        "FSDP on two CUDA processes (`world_size(2)`, `pytest.mark.gpu`); this library's FSDP clipping is "
        "tested in tests/methods/test_gradient_clipping.py"
    ),
    "tests/algorithms/test_layer_freezing.py::*[configure_tiny_bert_hf_model]": HF_BERT,
    "tests/algorithms/test_low_precision_layernorm.py::"
    "*[configure_tiny_bert_hf_model-dummy_bert_lm_dataloader]": HF_BERT,
    "tests/algorithms/test_sam.py::TestSAMParamGroups[world_size=2]": (
        "FSDP (`NO_SHARD`) on two CUDA processes; the one-process case runs here"
    ),
    # -- the tests Composer runs on every algorithm
    "tests/algorithms/test_algorithm_resumption.py::test_algorithm_resumption[world_size=2]": (
        "two processes for each of the 27 algorithms: a torchrun launch each, minutes in all; the two-rank "
        "resume of DDP, FSDP and DeepSpeed is tested bit for bit in tests/core/test_distributed.py, with CutMix "
        "and dropout drawing per rank"
    ),
    "tests/algorithms/test_required_on_load.py::test_autoload": (
        "Composer's checkpoints add the `required_on_load` algorithms they were made with to a Trainer that "
        "lacks them (and take `load_weights_only`, `load_exclude_algorithms`); this library's checkpoints are "
        "refused unless made with the same algorithms, so there is nothing to autoload"
    ),
    "tests/algorithms/test_torchscript.py": (
        "removed from Composer in 2022; its cases live on in test_torch_export.py, brought here"
    ),
    "tests/algorithms/test_blurpool_algorithm.py": (
        "removed from Composer in 2022; its cases live on in test_blurpool.py, brought here"
    ),
    "tests/algorithms/test_factorized_conv.py": (
        "removed from Composer; its cases live on in test_factorized_modules.py, brought here"
    ),
}
