"""Measure each method's effects: a baseline and every method on its own, over several seeds.

Example (the committed CPU results: 23 minutes on two CPU cores shared with other jobs, at a
load average of 3 to 11; its fastest run trained in 12 s, so on idle cores the sweep fits
in 10 minutes):

    python tools/measure_methods.py

It trains the vision reference workload, a CIFAR ResNet-20 on scikit-learn's digits, once as
a baseline and once with each vision method (CutMix, MixUp, Label Smoothing, CutOut...) with its
metadata's suggested hyperparameters, for seeds 0, 1 and 2: fp32, one process, SGD (lr 0.05,
momentum 0.9), 4 epochs of batch 64 over the 1,438 training images at 16x16 pixels, tested on
the 359 held-out ones. Why these sizes: the digits are 8x8 images, so 16 pixels already hold
every detail twice over while leaving room for a CutOut hole or a CutMix box; an epoch at 16 px
takes about 7 s on two CPU cores at load 3 (at 32 px, 24 s), so 4 epochs x 15 runs, each with a few
seconds to start its process, fit the 10 minutes; and 4 epochs put the baseline well above the
10 % accuracy of chance (the cards state how far). Short training is what it is: a method
that regularizes, which pays off over long schedules, can cost accuracy here.

The language-model workload (``--workload nlp``) trains the methods of domain nlp the same way
on a causal transformer (transformer_tiny) over the Python standard library's own source, byte
by byte (stdlib_text): 150 AdamW steps (lr 0.003) of 32 windows of 128 bytes, then the mean
next-token cross entropy on 256 held-out windows (lower is better); throughput is in tokens per
second. A run took 18 to 50 s on two shared CPU cores (tools/methods_tools/measure.py says
more); the file is results/effects/nlp-<cpu|gpu>-<hardware>.json, and it records the Python
version, whose sources are the corpus:

    python tools/measure_methods.py --workload nlp

A method whose metadata names ``"workload": {"model": "resnet20_gn"}`` is measured on that
reference model, against a baseline of that model with the same seeds.

Each run is its own worker process, as in ``tools/compare_training.py``; a failure is recorded
with its reason and the rest go on. The output (default
``results/effects/vision-<cpu|gpu>-<hardware>.json``, validated against
``algorithms/effects.schema.json``) is written after every run, and a rerun resumes it:

    python tools/measure_methods.py --only cutmix            # re-measure one method
    python tools/measure_methods.py --shard 0/4 --out a.json # jobs 0, 4, 8, ... (a job array)
    python tools/measure_methods.py --merge a.json b.json c.json d.json --out results/effects/x.json
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from methods_tools.measure import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main(doc=__doc__))
