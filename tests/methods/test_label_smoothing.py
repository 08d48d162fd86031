"""Label smoothing: the functional form and the class, checked against the definition
``(1 - s) * onehot(y) + s / C``.

The first tests assert what Composer's own tests of ``smooth_labels`` and ``LabelSmoothing``
assert (``tests/algorithms/test_label_smoothing.py``): classification and segmentation logits,
class-index and integer one-hot targets, smoothing from 0 to 1, and the class restoring the
original target after the loss.
"""

from __future__ import annotations

import contextlib
import re

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from trainer_support import no_host_sync

import algorithms.functional as cf
from algorithms import LabelSmoothing
from algorithms.core import Algorithm, Event, State, Trainer
from algorithms.core.time import Duration

SMOOTHINGS = [0, 0.1, 0.5, 0.9, 1.0]


def reference(onehot: torch.Tensor, smoothing: float) -> torch.Tensor:
    """The definition, on a one-hot (or probability) target with the classes on dim 1."""
    return onehot.float() * (1 - smoothing) + smoothing / onehot.shape[1]


def _classification(n, c, seed=0):
    g = torch.Generator().manual_seed(seed)
    indices = torch.randint(0, c, (n,), generator=g)
    return F.softmax(torch.randn(n, c, generator=g), dim=1), indices, F.one_hot(indices, c)


def _segmentation(n, c, h, w, seed=0):
    g = torch.Generator().manual_seed(seed)
    indices = torch.randint(0, c, (n, h, w), generator=g)
    onehot = torch.movedim(F.one_hot(indices, c), -1, 1).contiguous()  # (N, C, H, W), int64
    return F.softmax(torch.randn(n, c, h, w, generator=g), dim=1), indices, onehot


TENSORS = {
    "binary": _classification(64, 2),
    "classification": _classification(64, 10),
    "segmentation-2": _segmentation(64, 2, 5, 5),
    "segmentation-10": _segmentation(64, 10, 5, 5),
}


def _state(outputs, target):
    state = State(model=torch.nn.Identity(), max_duration=Duration.parse("1ep"))
    state.batch, state.outputs = (torch.Tensor(), target), outputs
    return state


@pytest.mark.parametrize("smoothing", SMOOTHINGS)
@pytest.mark.parametrize("tensors", TENSORS.values(), ids=TENSORS.keys())
def test_indices_and_integer_one_hot_give_the_definition(tensors, smoothing):
    logits, indices, onehot = tensors
    expected = reference(onehot, smoothing)
    # assert_close also checks dtype (float32) and shape (the logits')
    torch.testing.assert_close(cf.smooth_labels(logits, onehot, smoothing), expected)
    torch.testing.assert_close(cf.smooth_labels(logits, indices, smoothing), expected)


@pytest.mark.parametrize("smoothing", SMOOTHINGS)
@pytest.mark.parametrize("target_type", ["onehot", "indices"])
@pytest.mark.parametrize("tensors", TENSORS.values(), ids=TENSORS.keys())
def test_the_class_smooths_before_the_loss_and_restores_after(tensors, target_type, smoothing):
    outputs, indices, onehot = tensors
    target = indices if target_type == "indices" else onehot
    algorithm = LabelSmoothing(smoothing=smoothing)
    state = _state(outputs, target)
    algorithm.apply(Event.BEFORE_LOSS, state, None)
    torch.testing.assert_close(state.batch[1], reference(onehot, smoothing))
    algorithm.apply(Event.AFTER_LOSS, state, None)
    torch.testing.assert_close(state.batch[1], target)


def test_the_class_runs_before_and_after_the_loss_only():
    algorithm = LabelSmoothing()
    state = _state(*TENSORS["binary"][:2])
    assert [e for e in Event if algorithm.match(e, state)] == [Event.BEFORE_LOSS, Event.AFTER_LOSS]


# -- target forms beyond Composer's tests -----------------------------------------------------


@pytest.mark.parametrize(
    "dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int32, torch.uint8, torch.bool]
)
def test_one_hot_or_probability_targets_in_any_dtype(dtype):
    logits, _, onehot = TENSORS["segmentation-10"]
    got = cf.smooth_labels(logits, onehot.to(dtype), 0.2)
    torch.testing.assert_close(got, reference(onehot, 0.2))


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64])
def test_class_indices_in_any_integer_dtype(dtype):
    logits, indices, onehot = TENSORS["segmentation-10"]
    torch.testing.assert_close(cf.smooth_labels(logits, indices.to(dtype), 0.2), reference(onehot, 0.2))


def test_probabilities_are_smoothed_by_the_same_formula():
    p = torch.tensor([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]])
    torch.testing.assert_close(cf.smooth_labels(torch.zeros(2, 3), p, 0.3), 0.7 * p + 0.1)


def test_token_targets_of_a_sequence_model():
    logits, y = torch.randn(2, 7, 5), torch.randint(0, 7, (2, 5))  # (N, C, L), (N, L)
    expected = reference(torch.movedim(F.one_hot(y, 7), -1, 1), 0.1)
    torch.testing.assert_close(cf.smooth_labels(logits, y, 0.1), expected)


def test_token_targets_of_a_language_model_with_the_classes_last():
    """Logits (N, T, C) and indices (N, T): each position's target is the definition over the C
    classes of the last dimension; an ignored position stays all zero."""
    logits, y = torch.randn(2, 5, 7), torch.randint(0, 7, (2, 5))
    y[1, 4] = -100
    smoothed = cf.smooth_labels(logits, y, 0.1)
    assert smoothed.shape == (2, 5, 7) and smoothed.is_contiguous()
    expected = reference(F.one_hot(y.clamp(min=0), 7).movedim(-1, 1), 0.1).movedim(1, -1) * (y >= 0).unsqueeze(-1)
    torch.testing.assert_close(smoothed, expected)


def _causal_lm_output(logits):
    transformers = pytest.importorskip("transformers", reason="transformers is not installed in the test venv")
    return transformers.modeling_outputs.CausalLMOutputWithPast(logits=logits)


@pytest.mark.parametrize(
    "wrap", [_causal_lm_output, lambda z: {"logits": z, "past_key_values": None}], ids=["hf-CausalLMOutput", "dict"]
)
def test_a_language_models_whole_output_is_read_for_its_logits(wrap):
    """A causal language model's output object (its ``.logits`` (N, T, V)) or a dict with
    ``"logits"``: the token targets (N, T) are smoothed over the V classes of the last dimension,
    as for the bare logits, and an ignored position stays all zero."""
    logits, y = torch.randn(2, 5, 7), torch.randint(0, 7, (2, 5))
    y[0, 0] = -100
    smoothed = cf.smooth_labels(wrap(logits), y, 0.2)
    expected = reference(F.one_hot(y.clamp(min=0), 7).movedim(-1, 1), 0.2).movedim(1, -1) * (y >= 0).unsqueeze(-1)
    torch.testing.assert_close(smoothed, expected)


def test_label_smoothing_smooths_against_a_hugging_face_models_logits():
    """``LabelSmoothing`` before the loss of a real ``transformers`` classifier: the target becomes
    the definition over the model's classes, and the labels come back after the loss."""
    transformers = pytest.importorskip("transformers", reason="transformers is not installed in the test venv")
    config = transformers.BertConfig(
        vocab_size=20, hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16, num_labels=4
    )
    torch.manual_seed(0)
    model = transformers.BertForSequenceClassification(config)
    batch = {"input_ids": torch.randint(0, 20, (3, 6)), "labels": torch.tensor([0, 3, 1])}
    state = State(model=model, max_duration=Duration.parse("1ep"), loss_fn=F.cross_entropy, seed=0)
    state.batch, state.outputs = batch, model(input_ids=batch["input_ids"])
    algo = LabelSmoothing(0.4, target_key="labels")
    algo.apply(Event.BEFORE_LOSS, state)
    torch.testing.assert_close(state.batch["labels"], reference(F.one_hot(batch["labels"], 4), 0.4).float())
    algo.apply(Event.AFTER_LOSS, state)
    assert state.batch["labels"] is batch["labels"]


def test_where_indices_fit_the_classes_on_dim_1_and_last_dim_1_is_taken_as_composer_takes_it():
    logits, y = torch.randn(2, 4, 4), torch.randint(0, 4, (2, 4))  # (N, C, L) and (N, T, C) both fit
    expected = reference(torch.movedim(F.one_hot(y, 4), -1, 1), 0.2)
    torch.testing.assert_close(cf.smooth_labels(logits, y, 0.2), expected)


def test_in_the_trainer_a_language_models_loss_is_against_the_smoothed_tokens():
    """The transformer's (N, T, V) logits and (N, T) token labels through lm_loss: the loss is
    (1 - s) * cross entropy + s * the mean over the vocabulary of -log p, averaged over tokens."""
    from algorithms.models import lm_loss, transformer_tiny

    g = torch.Generator().manual_seed(0)
    batches = [{"input_ids": torch.randint(0, 11, (2, 6), generator=g)} for _ in range(2)]
    for batch in batches:
        batch["labels"] = batch["input_ids"].roll(-1, dims=1)
    spy = _Spy(target_key="labels")
    keys = {"input_key": "input_ids", "target_key": "labels"}
    model = transformer_tiny(11)
    Trainer(
        model, batches, "2ba", algorithms=[spy, LabelSmoothing(0.3, target_key="labels")], loss_fn=lm_loss, **keys
    ).fit()
    for (out, loss, target_after), batch in zip(spy.seen, batches, strict=True):
        log_p = out.float().log_softmax(-1)
        nll = -log_p.gather(-1, batch["labels"].unsqueeze(-1)).squeeze(-1)
        expected = (0.7 * nll + 0.3 * -log_p.mean(-1)).mean()
        torch.testing.assert_close(loss, expected)
        assert target_after is batch["labels"]


@pytest.mark.parametrize("ignored", [-100, -1])
def test_ignored_positions_stay_all_zero_and_add_no_loss(ignored):
    """A negative index is an ignored position, as in Composer's one-hot conversion; its smoothed
    target stays zero (Composer's smooth_labels would give it s / C in every class), so the soft
    cross-entropy equals PyTorch's cross_entropy(label_smoothing=s, ignore_index=...) summed."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 3, 2, 5, generator=g)
    y = torch.randint(0, 3, (4, 2, 5), generator=g)
    y[0, :, :3] = ignored
    y[2] = ignored
    s = cf.smooth_labels(logits, y, 0.3)
    keep = (y >= 0).unsqueeze(1)
    expected = reference(torch.movedim(F.one_hot(y.clamp(min=0), 3), -1, 1), 0.3) * keep
    torch.testing.assert_close(s, expected)
    torch.testing.assert_close(
        F.cross_entropy(logits, s, reduction="sum"),
        F.cross_entropy(logits, y, label_smoothing=0.3, ignore_index=ignored, reduction="sum"),
    )


@pytest.mark.parametrize("num_classes", [1, 10, 1000, 1024, 1025, 3000])
@pytest.mark.parametrize("logits_dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("smoothing", [0.0, 0.1, 1 / 3, 1.0])
def test_class_indices_give_the_formula_bit_for_bit_whatever_the_number_of_classes(
    num_classes, logits_dtype, smoothing
):
    """Class indices (N,) are smoothed by looking up each class's row (up to 1024 classes) or by the
    formula itself; either way the values are the formula's in the target dtype, bit for bit, and
    ignored positions (negative) stay all zero."""
    g = torch.Generator().manual_seed(num_classes)
    y = torch.randint(0, num_classes, (37,), generator=g)
    dtype = torch.float64 if logits_dtype == torch.float64 else torch.float32
    logits = torch.zeros(37, num_classes, dtype=logits_dtype)
    formula = F.one_hot(y, num_classes).to(dtype) * (1 - smoothing) + smoothing / num_classes
    got = cf.smooth_labels(logits, y, smoothing)
    assert got.dtype == dtype and torch.equal(got, formula)
    y[::3] = -100
    got = cf.smooth_labels(logits, y, smoothing)
    assert torch.equal(got[1::3], formula[1::3]) and not got[::3].any()


@pytest.mark.parametrize(
    ("logits_dtype", "expected"),
    [
        (torch.float16, torch.float32),
        (torch.bfloat16, torch.float32),
        (torch.float32, torch.float32),
        (torch.float64, torch.float64),
    ],
)
def test_result_is_at_least_float32(logits_dtype, expected):
    s = cf.smooth_labels(torch.zeros(2, 3, dtype=logits_dtype), torch.tensor([0, 2]), 0.1)
    assert s.dtype == expected


def test_float64_logits_get_the_definition_in_float64():
    y = torch.tensor([0, 2, -100])
    s = cf.smooth_labels(torch.zeros(3, 3, dtype=torch.float64), y, 0.1)
    expected = torch.tensor(
        [[0.9 + 0.1 / 3, 0.1 / 3, 0.1 / 3], [0.1 / 3, 0.1 / 3, 0.9 + 0.1 / 3], [0, 0, 0]], dtype=torch.float64
    )
    torch.testing.assert_close(s, expected, rtol=0, atol=1e-15)


def test_neither_logits_nor_target_is_modified():
    logits, indices, onehot = TENSORS["segmentation-2"]
    copies = [t.clone() for t in (logits, indices, onehot)]
    cf.smooth_labels(logits, indices, 0.4)
    cf.smooth_labels(logits, onehot, 0.4)
    for t, c in zip((logits, indices, onehot), copies, strict=True):
        assert torch.equal(t, c)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: cf.smooth_labels(torch.randn(2, 3), torch.arange(2), smoothing=1.5),
            "smoothing=1.5: must be a number in [0, 1]",
        ),
        (
            lambda: cf.smooth_labels(torch.randn(2, 3), torch.arange(2), smoothing=True),
            "smoothing=True: must be a number in [0, 1]",
        ),
        (
            lambda: cf.smooth_labels(torch.randn(2, 3), torch.tensor([0, 3])),
            "target: class indices must be in [0, 3) (negative: ignored), found [3]",
        ),
        (
            lambda: cf.smooth_labels(torch.randn(2, 3), torch.tensor([0.0, 1.0])),
            "target: class indices must be an integer tensor, got torch.float32",
        ),
        (
            lambda: cf.smooth_labels(torch.randn(2, 3), torch.zeros(2, 4)),
            "target: shape (2, 4) fits logits of shape (2, 3) neither as class indices (2,) nor as class "
            "probabilities (2, 3)",
        ),
        (
            lambda: cf.smooth_labels(torch.randn(2, 3, 4), torch.zeros(2, 5, dtype=torch.long)),
            "target: shape (2, 5) fits logits of shape (2, 3, 4) neither as class indices (2, 4) nor as class "
            "probabilities (2, 3, 4)",
        ),
        (
            lambda: cf.smooth_labels(torch.randn(2, 3), torch.arange(3)),
            "input and target must have the same batch size: input shape (2, 3), target shape (3,)",
        ),
        (
            lambda: cf.smooth_labels(torch.randn(2, 3), torch.tensor(1)),
            "input and target must have the same batch size: input shape (2, 3), target shape ()",
        ),
        (
            lambda: cf.smooth_labels(torch.randn(2), torch.arange(2)),
            "logits: need classes on dim 1, (N, C, ...), got shape (2,)",
        ),
    ],
)
def test_bad_input_raises_value_error_naming_the_argument(call, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        call()


@pytest.mark.parametrize("smoothing", [-0.1, 2, float("nan"), "0.1", None])
def test_bad_smoothing_fails_at_construction(smoothing):
    with pytest.raises(ValueError, match=f"^smoothing={re.escape(repr(smoothing))}: must be a number in \\[0, 1\\]$"):
        LabelSmoothing(smoothing=smoothing)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 9),
    st.integers(2, 11),
    st.sampled_from([torch.float32, torch.bfloat16]),
    st.integers(0, 2**31 - 1),
    st.floats(0, 1),
)
def test_smoothed_rows_are_distributions(n, k, dtype, seed, smoothing):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, k, generator=g).to(dtype)
    y = torch.randint(0, k, (n,), generator=g)
    y0 = y.clone()
    s = cf.smooth_labels(logits, y, smoothing)
    assert torch.equal(y, y0)
    assert s.shape == (n, k)
    torch.testing.assert_close(s.sum(1), torch.ones(n))
    assert (s >= 0).all()
    if 1 - smoothing > 1e-3:  # the true class keeps the largest probability (float32 ties near 1)
        assert torch.equal(s.argmax(1), y)


# -- in the Trainer ---------------------------------------------------------------------------


class _Spy(Algorithm):
    """Keeps the outputs, the loss and the target the batch holds after the loss. Listed first, it
    runs last at AFTER_LOSS (last-in first-out), once the methods after it have unwound."""

    def __init__(self, target_key=1):
        self.seen, self.target_key = [], target_key

    def match(self, event, state):
        return event is Event.AFTER_LOSS

    def apply(self, event, state, logger=None):
        self.seen.append((state.outputs.detach(), state.loss.detach(), state.batch_get_item(self.target_key)))


def _image_batches(n=2, bs=6, k=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(bs, 3, 8, 8, generator=g), torch.randint(0, k, (bs,), generator=g)) for _ in range(n)]


def _classifier(k=4):
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(4, k)
    )


def test_in_the_trainer_the_loss_is_cross_entropy_against_the_smoothed_target():
    batches, spy = _image_batches(), _Spy()
    Trainer(_classifier(), batches, "2ba", algorithms=[spy, LabelSmoothing(0.3)], seed=0).fit()
    for (out, loss, target_after), (_, y) in zip(spy.seen, batches, strict=True):
        expected = -(reference(F.one_hot(y, 4), 0.3) * out.log_softmax(1)).sum(1).mean()
        torch.testing.assert_close(loss, expected)
        assert target_after is y  # the original labels are back for whatever runs after the loss


def test_in_the_trainer_segmentation_targets_are_smoothed_per_pixel():
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(2, 3, 6, 6, generator=g), torch.randint(0, 5, (2, 6, 6), generator=g))]
    spy = _Spy()
    Trainer(torch.nn.Conv2d(3, 5, 1), batches, "1ba", algorithms=[spy, LabelSmoothing(0.2)]).fit()
    ((out, loss, _),) = spy.seen
    torch.testing.assert_close(loss, F.cross_entropy(out, batches[0][1], label_smoothing=0.2))


@pytest.mark.cuda
def test_on_cuda_without_changing_device():
    dev = torch.device("cuda")
    y = torch.randint(0, 10, (8, 4, 4), device=dev)
    y[0] = -100
    s = cf.smooth_labels(torch.randn(8, 10, 4, 4, device=dev, dtype=torch.bfloat16), y)
    assert s.device == y.device and s.dtype == torch.float32
    torch.testing.assert_close(s.sum(1)[1:], torch.ones(7, 4, 4, device=dev))
    assert s[0].eq(0).all()


def test_the_class_puts_back_only_the_target_it_replaced():
    """After the loss the original target returns, once: an AFTER_LOSS without a BEFORE_LOSS
    before it (a fresh instance, or a second AFTER_LOSS) leaves the batch alone."""
    outputs, indices, _ = TENSORS["binary"]
    algorithm, state = LabelSmoothing(0.2), _state(outputs, indices)
    algorithm.apply(Event.AFTER_LOSS, state, None)
    assert state.batch[1] is indices
    algorithm.apply(Event.BEFORE_LOSS, state, None)
    algorithm.apply(Event.AFTER_LOSS, state, None)
    state.batch = (state.batch[0], "changed after the loss")
    algorithm.apply(Event.AFTER_LOSS, state, None)
    assert state.batch[1] == "changed after the loss"


def _check_the_functional_form_on(device: torch.device) -> None:
    """The form on the device (on CUDA under torch's sync debug mode "error", so that a host
    synchronisation raises) gives the CPU's result."""
    g = torch.Generator().manual_seed(0)
    logits, y = torch.randn(6, 5, generator=g), torch.randint(0, 5, (6,), generator=g)
    masks = torch.randint(0, 5, (6, 4, 4), generator=g)
    masks[0, 0] = -100
    with no_host_sync() if device.type == "cuda" else contextlib.nullcontext():
        smoothed = [
            cf.smooth_labels(logits.to(device), target.to(device), 0.2)
            for target in (y, masks[:, 0, 0], F.softmax(logits, dim=1))
        ]
        dense = cf.smooth_labels(torch.zeros(6, 5, 4, 4, device=device), masks.to(device), 0.2)
    for got, target in zip(smoothed, (y, masks[:, 0, 0], F.softmax(logits, dim=1)), strict=True):
        assert got.device.type == device.type
        torch.testing.assert_close(got.cpu(), cf.smooth_labels(logits, target, 0.2))
    torch.testing.assert_close(dense.cpu(), cf.smooth_labels(torch.zeros(6, 5, 4, 4), masks, 0.2))


def test_the_functional_form_checks_on_the_cpu():
    _check_the_functional_form_on(torch.device("cpu"))


@pytest.mark.cuda
def test_on_cuda_the_functional_form_makes_no_host_sync():
    _check_the_functional_form_on(torch.device("cuda"))


@pytest.mark.parametrize(("smoothing", "smoothed"), [(0.1, 2), (0.0, 0)])
def test_it_reports_the_batches_whose_targets_it_smoothed(smoothing, smoothed):
    trainer = Trainer(_classifier(), _image_batches(), "1ep", algorithms=[LabelSmoothing(smoothing)], seed=0)
    trainer.fit()
    assert trainer.method_log.records["LabelSmoothing"]["activity"] == {"batches_smoothed": smoothed}
    assert trainer.method_log.acted("LabelSmoothing") is (smoothed > 0)
