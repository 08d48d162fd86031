"""Measure each method's effects: a baseline and every method on its own, paired by seed.

Example (the committed CPU results; the closing lines print how long the sweep took):

    python tools/measure_methods.py

It trains the vision reference workload, a CIFAR ResNet-20 on scikit-learn's digits, once as a
baseline and once with each vision method (CutMix, MixUp, Label Smoothing, CutOut...) with its
metadata's suggested hyperparameters, for seeds 0 to 9: fp32, one process, SGD with momentum
0.9 and a one-cycle rate peaking at 0.1, 12 epochs of batch 64 over a fifth of the digits (359
images) at their native 8x8 pixels, tested on the other 1,438. Why: on all the training digits
the baseline reaches about 98 %, leaving no room for an effect to show; on a fifth it sits near
95 %, and the annealed rate and the larger test split bring the spread of a paired change to
about one point, so ten seeds give 95 % intervals of about +-1 point. A run trains in about 2 s
on two CPU cores; starting its process and loading the data take longer, and each run records
both (``wall_s``, ``eval_s``, ``job_s``). Short training is what it is: a method that
regularizes, which pays off over long schedules, can cost accuracy here.

Every seed runs its baseline and then each method, so the baseline and the methods take turns
and a change in the machine's load falls on both; a method and the baseline of the same seed
share their initial weights and data order. The summary gives, per method, the mean paired
change in quality with a 95 % t interval, the ratio of median throughputs (images, or tokens
trained, per second) and of peak memory with 95 % bootstrap intervals, and a verdict for each:
better or worse (the interval excludes no change and the estimate lies beyond the figure's margin
of practical equivalence), no practical difference (the estimate within that margin), or no
detectable difference at this scale; the quality changes' paired t-test p-values are adjusted
together by Holm's correction over the file's methods (tools/methods_tools/evidence.py).
Each run records what the method reported doing (``Trainer.method_log``); a method whose every
run did nothing is summarized as "did not act", never as an effect.

The language-model workload (``--workload nlp``) trains the methods of domain nlp the same way
on a causal transformer (transformer_tiny) over the Python standard library's own source, byte
by byte (stdlib_text): 100 AdamW steps (lr 0.003) of 32 windows of 128 bytes, then the mean
next-token cross entropy on 256 held-out windows through ``Trainer.eval`` (lower is better);
throughput counts the tokens actually trained. The file is
results/effects/nlp-<cpu|gpu>-<hardware>.json, and it records the Python version, whose sources
are the corpus:

    python tools/measure_methods.py --workload nlp --seeds 5

Two workloads measure the surgery and loss methods on the classes users train: ``--workload
torchvision`` trains torchvision's ResNet-18, unchanged, as the vision workload trains ResNet-20 but
on the digits upsampled to 32 px (BlurPool, CutMix, Factorize, Ghost BatchNorm, Label Smoothing,
MixUp, Squeeze-Excite, Stochastic Depth, Weight Standardization); it needs torchvision, which needs
torch 2.14.1 here, so it runs in the environment of ``nox -s models``. ``--workload gpt2`` trains a
Hugging Face GPT2LMHeadModel built from a config of transformer_tiny's size as the nlp workload
trains transformer_tiny (ALiBi, Gated Linear Units, Label Smoothing, Low Precision LayerNorm):

    .nox/models/bin/python tools/measure_methods.py --workload torchvision --seeds 6
    python tools/measure_methods.py --workload gpt2 --seeds 5

``--workload recipes`` measures Composer's published ResNet-50 recipes (``algorithms/recipes.py``:
Mild, Medium, Hot) on the torchvision workload, each recipe's whole stack as one method against the
baseline (with the changes ``algorithms.recipes.SMALL_SCALE`` makes to run it small); ``--only``
then names recipes. Its file is results/effects/recipes-<cpu|gpu>-<hardware>.json:

    .nox/models/bin/python tools/measure_methods.py --workload recipes --seeds 6

A method whose metadata names ``"workload": {"model": "resnet20_gn", "precision": "amp_bf16"}``
is measured on that reference model in that precision (a low-precision norm changes nothing in
fp32), against a baseline of that model and precision with the same seeds.

Each run is its own worker process, as in ``tools/compare_training.py``; a failure is recorded
with its reason and the rest go on. The output (default
``results/effects/vision-<cpu|gpu>-<hardware>.json``, validated against
``algorithms/effects.schema.json``; ``tools/check_effects.py`` checks it further) is written
after every run, and a rerun resumes it:

    python tools/measure_methods.py --only cutmix            # re-measure one method, beside a fresh baseline
    python tools/measure_methods.py --shard 0/4 --out a.json # jobs 0, 4, 8, ... (a job array)
    python tools/measure_methods.py --merge a.json b.json c.json d.json --out results/effects/x.json

When the rules of the summary change (its margins, its verdicts, a new schema version), recompute
the summaries of effects files from their runs, in place, without running anything; a second run
changes nothing:

    python tools/measure_methods.py --resummarize results/effects/*.json
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from methods_tools.measure import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main(doc=__doc__))
