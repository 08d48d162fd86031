"""``MethodsTrainer``: the methods inside the Hugging Face ``transformers.Trainer``, held to its contract.

- With the same seed, initial weights, optimizer and batches in the same order, real Hugging Face
  training steps end at the project's ``Trainer``'s weights and EMA average (ALiBi's surgery, label
  smoothing and EMA on a BERT classifier; CutMix or MixUp, label smoothing and EMA on images in a
  dict batch), with the same methods' activity and counters.
- ``trainer.evaluate()`` runs on EMA's average, and the training weights are back afterwards.
- A run resumed from a Hugging Face checkpoint (``resume_from_checkpoint``) ends where the
  uninterrupted run ends: the methods' state is saved in the checkpoint folder and put back.
- What cannot work is refused with one line, before anything is done.

Models are built from small configs with dropout off, so the comparison does not rest on the two
trainers drawing from torch's generator in the same order between the seed and the first batch (with
BERT's dropout of 0.1 they end equal too, as transformers 5.25 draws); nothing is downloaded.
"""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip(
    "transformers", reason="the Hugging Face Trainer adapter needs transformers ([transformers] extra)"
)
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from torch.utils.data import DataLoader, Dataset, SequentialSampler  # noqa: E402
from transformers import TrainingArguments, default_data_collator  # noqa: E402

from algorithms import EMA, SAM, Alibi, CutMix, LabelSmoothing, MixUp, SqueezeExcite  # noqa: E402
from algorithms.core import Trainer  # noqa: E402
from algorithms.integrations.transformers import METHODS_STATE_NAME, MethodsTrainer  # noqa: E402

transformers.logging.set_verbosity_error()
ROOT = Path(__file__).resolve().parents[2]
BATCH, LENGTH, CLASSES = 4, 12, 3
# The two trainers run the same operations in the same order on the CPU; measured: equal bit for bit.
TOLERANCE = {"rtol": 0.0, "atol": 0.0}


class _Examples(Dataset):
    """A list of dicts as a map-style data set (the Hugging Face Trainer collates them)."""

    def __init__(self, rows):
        self.rows = rows

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return self.rows[i]


def _sentences(n=16):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 100, (n, LENGTH), generator=g)
    labels = torch.randint(0, CLASSES, (n,), generator=g)
    mask = torch.ones(n, LENGTH, dtype=torch.long)
    return _Examples([{"input_ids": ids[i], "attention_mask": mask[i], "labels": labels[i]} for i in range(n)])


def _images(n=16):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 3, 8, 8, generator=g)
    y = torch.randint(0, CLASSES, (n,), generator=g)
    return _Examples([{"pixel_values": x[i], "labels": y[i]} for i in range(n)])


def _bert():
    torch.manual_seed(3)
    config = transformers.BertConfig(
        num_hidden_layers=2,
        hidden_size=32,
        num_attention_heads=4,
        intermediate_size=64,
        vocab_size=100,
        max_position_embeddings=LENGTH,
        num_labels=CLASSES,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        attn_implementation="eager",
    )
    return transformers.BertForSequenceClassification(config)


class _ImageNet(torch.nn.Module):
    """A vision model as the Hugging Face Trainer calls one: ``model(pixel_values=...)``."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.head = torch.nn.Linear(8, CLASSES)

    def forward(self, pixel_values):
        return self.head(self.conv(pixel_values).relu().mean((2, 3)))


def _image_net():
    torch.manual_seed(4)
    return _ImageNet()


def _sgd(model):
    return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


class _InOrder(MethodsTrainer):
    """The batches in the data set's order, as the project's Trainer gets them from its loader."""

    def _get_train_sampler(self, train_dataset=None):
        return SequentialSampler(train_dataset if train_dataset is not None else self.train_dataset)


def _args(tmp_path, steps, **options):
    settings = dict(
        output_dir=str(tmp_path),
        max_steps=steps,
        per_device_train_batch_size=BATCH,
        per_device_eval_batch_size=BATCH,
        learning_rate=0.1,
        max_grad_norm=1.0,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        logging_strategy="no",
        dataloader_num_workers=0,
        seed=0,
        disable_tqdm=True,
    )
    return TrainingArguments(**{**settings, **options})


def _hf_run(tmp_path, model, data, methods, steps, train=True, input_key=None, **options):
    optimizer = _sgd(model)
    constant = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    trainer = _InOrder(
        model,
        _args(tmp_path, steps, **options),
        train_dataset=data,
        eval_dataset=data,
        algorithms=methods,
        optimizers=(optimizer, constant),
        input_key=input_key,
    )
    if train:
        trainer.train()
    return trainer


def _project_run(model, data, methods, steps, input_key=None):
    loader = DataLoader(data, batch_size=BATCH, collate_fn=default_data_collator)
    trainer = Trainer(
        model,
        loader,
        f"{steps}ba",
        optimizer=_sgd(model),
        algorithms=methods,
        seed=0,
        device="cpu",
        grad_clip_norm=1.0,
        input_key=input_key,
        target_key="labels",
    )
    trainer.fit()
    return trainer


def _assert_same_run(hf, project):
    for (name, a), (_, b) in zip(
        hf.loop.model.state_dict().items(), project.state.model.state_dict().items(), strict=True
    ):
        torch.testing.assert_close(a, b, **TOLERANCE, msg=name)
    ema_hf, ema_project = (
        next(a for a in run.state.algorithms if isinstance(a, EMA)).state_dict()["ema_weights"]
        for run in (hf.loop, project)
    )
    for key in ema_project:
        torch.testing.assert_close(ema_hf[key], ema_project[key], **TOLERANCE, msg=key)
    assert "did not act" not in hf.method_log.summary()
    assert hf.method_log.summary() == project.method_log.summary()
    assert hf.loop.timestamp == project.state.timestamp


def _language_methods():
    return [Alibi(max_sequence_length=64, train_sequence_length_scaling=1.0), LabelSmoothing(0.1, "labels"), EMA("2ba")]


def test_hugging_face_steps_end_at_the_project_trainers_weights_with_alibi_label_smoothing_and_ema(tmp_path):
    """6 steps over 4 batches an epoch: an epoch's end is crossed. ALiBi's surgery runs at INIT,
    before the optimizer passed to the Hugging Face Trainer is used (its groups follow the model)."""
    hf = _hf_run(tmp_path, _bert(), _sentences(), _language_methods(), steps=6)
    project = _project_run(_bert(), _sentences(), _language_methods(), steps=6)
    assert type(hf.model.bert.encoder.layer[0].attention.self).__name__ == "AlibiBertSelfAttention"
    assert hf.loop.timestamp.epoch == 1 and hf.loop.timestamp.batch == 6
    _assert_same_run(hf, project)


@pytest.mark.parametrize("mixing", [CutMix, MixUp])
def test_mixing_a_dict_batchs_images_ends_at_the_project_trainers_weights(tmp_path, mixing):
    def methods():
        return [
            mixing(alpha=1.0, input_key="pixel_values", target_key="labels"),
            LabelSmoothing(0.1, "labels"),
            EMA("1ba"),
        ]

    hf = _hf_run(tmp_path, _image_net(), _images(), methods(), steps=5, input_key="pixel_values")
    project = _project_run(_image_net(), _images(), methods(), steps=5, input_key="pixel_values")
    assert "did not act" not in hf.method_log.summary()
    _assert_same_run(hf, project)


def test_evaluate_runs_on_emas_average_and_puts_the_training_weights_back(tmp_path):
    hf = _hf_run(tmp_path, _image_net(), _images(), [EMA("1ba")], steps=3)
    training = {k: v.clone() for k, v in hf.model.state_dict().items()}
    average = next(iter(hf.loop.state.algorithms)).state_dict()["ema_weights"]
    metrics = hf.evaluate()
    for key, value in hf.model.state_dict().items():
        torch.testing.assert_close(value, training[key], rtol=0, atol=0, msg=key)  # back exactly
    by_hand = _image_net()
    by_hand.load_state_dict(average)
    batch = default_data_collator([_images()[i] for i in range(16)])
    with torch.no_grad():
        expected = torch.nn.functional.cross_entropy(by_hand(batch["pixel_values"]), batch["labels"])
    assert metrics["eval_loss"] == pytest.approx(float(expected), rel=1e-5)
    with torch.no_grad():
        on_training_weights = float(hf.compute_loss(hf.model, batch))
    assert metrics["eval_loss"] != pytest.approx(on_training_weights, rel=1e-5)  # the test tells them apart


def test_evaluating_during_training_changes_nothing_the_training_does(tmp_path):
    """``eval_strategy="steps"``: EMA's average goes in for each evaluation and out again."""
    plain = _hf_run(tmp_path / "plain", _image_net(), _images(), [EMA("1ba")], steps=4)
    evaluated = _hf_run(
        tmp_path / "evaluated", _image_net(), _images(), [EMA("1ba")], steps=4, eval_strategy="steps", eval_steps=1
    )
    assert "evaluations_averaged=4" in evaluated.method_log.summary()
    for a, b in zip(plain.model.parameters(), evaluated.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("optimizer", ["passed", "the Trainer's"])
def test_surgery_runs_before_the_optimizer_so_it_trains_the_new_modules(tmp_path, optimizer):
    model = _image_net()
    options = {"optimizers": (_sgd(model), None)} if optimizer == "passed" else {}
    trainer = MethodsTrainer(
        model,
        _args(tmp_path, 1, optim="sgd"),
        train_dataset=_images(),
        algorithms=[SqueezeExcite(latent_channels=4, min_channels=3)],
        input_key="pixel_values",
        **options,
    )
    added = [m for m in trainer.model.modules() if type(m).__name__ == "SqueezeExcite2d"]
    assert added and trainer.model is trainer.loop.model
    trainer.train()
    held = {id(p) for group in trainer.optimizer.param_groups for p in group["params"]}
    assert {id(p) for p in trainer.model.parameters()} == held


def test_a_run_resumed_from_a_hugging_face_checkpoint_ends_where_the_whole_run_ends(tmp_path):
    def methods():
        return [CutMix(alpha=1.0, input_key="pixel_values", target_key="labels"), EMA("2ba")]

    whole = _hf_run(tmp_path / "whole", _image_net(), _images(), methods(), steps=6)
    _hf_run(tmp_path / "first", _image_net(), _images(), methods(), steps=6, save_strategy="steps", save_steps=3)
    checkpoint = tmp_path / "first" / "checkpoint-3"
    assert (checkpoint / METHODS_STATE_NAME.format(rank=0)).is_file()
    resumed = _hf_run(tmp_path / "first", _image_net(), _images(), methods(), steps=6, train=False)
    resumed.train(resume_from_checkpoint=str(checkpoint))
    for (name, a), (_, b) in zip(whole.model.state_dict().items(), resumed.model.state_dict().items(), strict=True):
        torch.testing.assert_close(a, b, **TOLERANCE, msg=name)
    assert whole.loop.timestamp == resumed.loop.timestamp
    ema = [run.loop.state.algorithms[-1].state_dict()["ema_weights"] for run in (whole, resumed)]
    for key in ema[0]:
        torch.testing.assert_close(ema[0][key], ema[1][key], **TOLERANCE, msg=key)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"args": {"gradient_accumulation_steps": 2}}, "gradient_accumulation_steps=2: MethodsTrainer runs"),
        ({"methods": [SAM(rho=0.05)]}, "SAM under MethodsTrainer"),
        ({"args": {"label_smoothing_factor": 0.1}}, "label_smoothing_factor=0.1: the loss is loss_fn's"),
        ({"trainer": {"compute_loss_func": lambda *a, **k: 0}}, "compute_loss_func: the loss is"),
        ({"trainer": {"model_init": _image_net}}, "model_init: the Trainer would build a new model"),
        ({"methods": [LabelSmoothing(0.1, "labels")], "trainer": {"loss_fn": "model"}}, "LabelSmoothing with loss_fn"),
    ],
)
def test_what_cannot_work_is_refused_in_one_line_before_anything_is_done(tmp_path, change, message):
    model = _image_net()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match=message) as raised:
        MethodsTrainer(
            model,
            _args(tmp_path, 1, **change.get("args", {})),
            train_dataset=_images(),
            algorithms=change.get("methods", []),
            **change.get("trainer", {}),
        )
    assert "\n" not in str(raised.value)
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key])


def test_resuming_from_a_checkpoint_without_the_methods_state_is_refused(tmp_path):
    (tmp_path / "checkpoint-1").mkdir()
    trainer = _hf_run(tmp_path, _image_net(), _images(), [EMA("1ba")], steps=1, train=False)
    with pytest.raises(ValueError, match="it was not written by MethodsTrainer"):
        trainer.train(resume_from_checkpoint=str(tmp_path / "checkpoint-1"))


@pytest.mark.slow  # about 10 s: two trainings of a GPT-2, an evaluation and a resume
def test_the_hf_trainer_example_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["hf_trainer.py", str(tmp_path)])
    runpy.run_path(str(ROOT / "examples" / "own_loop" / "hf_trainer.py"), run_name="__main__")
    assert (tmp_path / "ema" / "config.json").is_file()


def test_a_model_called_on_batch_input_key_keeps_that_column(tmp_path):
    """``remove_unused_columns`` keeps the model's arguments; with ``input_key`` the model is called on
    ``batch[input_key]``, whose name need not be an argument's (an ``nn.Sequential``'s is ``input``)."""
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.LazyLinear(CLASSES))
    model(torch.zeros(1, 3, 8, 8))  # the lazy layer's shape, before the optimizer is built
    trainer = _hf_run(
        tmp_path,
        model,
        _images(),
        [CutMix(alpha=1.0, input_key="pixel_values", target_key="labels")],
        2,
        input_key="pixel_values",
    )
    assert trainer.method_log.records["CutMix"]["activity"] == {"batches_mixed": 2}
