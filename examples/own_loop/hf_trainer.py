"""Label smoothing, ALiBi and EMA in the Hugging Face Trainer, on a small GPT-2 (a few seconds on a CPU).

    python examples/own_loop/hf_trainer.py [OUTPUT_DIR]

``MethodsTrainer`` is ``transformers.Trainer`` with ``algorithms=``: ALiBi replaces GPT-2's position
embedding and attention when the trainer is built (before its optimizer exists), label smoothing
smooths the next-token targets of every batch, and EMA keeps an average of the weights, which
``trainer.evaluate()`` evaluates and ``trainer.evaluating()`` saves as a Hugging Face model. Each
checkpoint folder also holds the methods' state, so ``resume_from_checkpoint`` goes on with EMA's
average and the methods' generators as they were. The model is built from a config and the data is
made up: nothing is downloaded. Needs ``pip install 'methods-library[transformers]'``.
"""

from __future__ import annotations

import os
import sys
import tempfile

import torch
import transformers
from transformers import GPT2Config, GPT2LMHeadModel, TrainingArguments

from algorithms import EMA, Alibi, LabelSmoothing
from algorithms.integrations.transformers import MethodsTrainer
from algorithms.models import lm_loss

VOCAB, LENGTH = 64, 32


def sequences(n: int, seed: int) -> list[dict[str, torch.Tensor]]:
    """Counting sequences (each token the previous plus a step of 1 to 3, mod VOCAB), with the next
    token as each position's label (``lm_loss`` expects labels shifted; the last one ignored)."""
    g = torch.Generator().manual_seed(seed)
    start = torch.randint(0, VOCAB, (n, 1), generator=g)
    step = torch.randint(1, 4, (n, 1), generator=g)
    ids = (start + step * torch.arange(LENGTH + 1)) % VOCAB
    labels = ids[:, 1:].clone()
    labels[:, -1] = -100
    return [{"input_ids": ids[i, :LENGTH], "labels": labels[i]} for i in range(n)]


def main(output_dir: str) -> None:
    transformers.logging.set_verbosity_error()
    args = TrainingArguments(
        output_dir=output_dir,
        max_steps=8,
        per_device_train_batch_size=8,
        per_device_eval_batch_size=16,
        learning_rate=3e-3,
        eval_strategy="steps",
        eval_steps=4,  # evaluated on EMA's average during training too
        save_strategy="steps",
        save_steps=4,
        logging_strategy="no",
        report_to=[],
        use_cpu=True,
        dataloader_num_workers=0,
        seed=0,
        disable_tqdm=True,
    )

    def trainer() -> MethodsTrainer:
        torch.manual_seed(0)
        model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=VOCAB, n_positions=LENGTH))
        return MethodsTrainer(
            model,
            args,
            train_dataset=sequences(64, seed=1),
            eval_dataset=sequences(32, seed=2),
            algorithms=[
                # Trains on halves of each sequence and evaluates on whole ones: ALiBi's extrapolation.
                Alibi(max_sequence_length=4 * LENGTH, train_sequence_length_scaling=0.5),
                LabelSmoothing(0.1, target_key="labels"),
                EMA(half_life="2ba"),
            ],
            loss_fn=lm_loss,
        )

    first = trainer()
    first.train()
    print("what the methods did:", first.method_log.summary())
    print("eval on EMA's average:", round(first.evaluate()["eval_loss"], 4))

    # A new trainer, as after a restart, goes on from the step-4 checkpoint with the methods' state.
    resumed = trainer()
    resumed.train(resume_from_checkpoint=os.path.join(output_dir, "checkpoint-4"))
    print("resumed from step 4, eval on EMA's average:", round(resumed.evaluate()["eval_loss"], 4))

    with resumed.evaluating():  # EMA's average is the model's inside the block
        resumed.save_model(os.path.join(output_dir, "ema"))
    print("EMA's average saved to", os.path.join(output_dir, "ema"))


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])
    else:
        with tempfile.TemporaryDirectory() as folder:
            main(folder)
