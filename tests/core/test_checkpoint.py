"""Trainer checkpoints: a run saved after N batches and resumed in a fresh process for M more ends
with the parameters of the uninterrupted N + M batch run, bit for bit; bad checkpoints are
refused, naming the file, before anything changes; writes are atomic and never overwrite.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from algorithms import CutMix, LabelSmoothing
from algorithms.core import Trainer
from algorithms.core.checkpoint import CheckpointError, write_checkpoint

REPO = Path(__file__).resolve().parents[2]

# The run both halves build: a model with dropout (torch's global generator), SGD with momentum,
# a step schedule, CutMix (its own generator) and label smoothing, four batches an epoch.
SETUP = textwrap.dedent("""
    import torch
    from algorithms import CutMix, LabelSmoothing
    from algorithms.core import Trainer

    def build(duration, load_path=None, precision="fp32", parallel="single"):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 6, 3), torch.nn.ReLU(), torch.nn.Dropout(0.3),
                                    torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(6, 5))
        g = torch.Generator().manual_seed(1)
        data = [(torch.randn(8, 3, 8, 8, generator=g), torch.randint(0, 5, (8,), generator=g)) for _ in range(4)]
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
        return Trainer(model, data, duration, optimizer=optimizer, schedulers=[scheduler],
                       algorithms=[CutMix(alpha=1.0), LabelSmoothing(0.1)], seed=3, device="cpu",
                       precision=precision, parallel=parallel, load_path=load_path)
""")


def _build(duration, load_path=None, precision="fp32", parallel="single"):
    namespace: dict = {}
    exec(SETUP, namespace)  # noqa: S102 - the same code the fresh process runs
    return namespace["build"](duration, load_path, precision, parallel)


def _resume_in_a_fresh_process(checkpoint: Path, duration: str, out: Path, precision="fp32", parallel="single"):
    script = SETUP + textwrap.dedent(f"""
        trainer = build({duration!r}, load_path={str(checkpoint)!r}, precision={precision!r}, parallel={parallel!r})
        trainer.fit()
        model = trainer.state.model
        model = model.module if isinstance(model, torch.nn.DataParallel) else model
        torch.save({{"params": model.state_dict(), "batch": trainer.state.timestamp.batch,
                    "epoch": trainer.state.timestamp.epoch,
                    "lr": trainer.state.optimizer.param_groups[0]["lr"]}}, {str(out)!r})
    """)
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # the same threads: the same sums
    assert proc.returncode == 0, proc.stderr[-3000:]
    return torch.load(out)


@pytest.mark.parametrize(
    ("first", "total"),
    [
        ("3ba", "6ba"),
        pytest.param("4ba", "2ep", marks=pytest.mark.slow),  # the fast suite's 5 minutes: two of four fast
        pytest.param("1ep", "3ep", marks=pytest.mark.slow),
        ("5ba", "7ba"),
    ],
    ids=["mid-epoch", "at-an-epoch-end", "in-epochs", "into-the-second-epoch"],
)
@pytest.mark.parametrize(
    ("precision", "parallel"),
    [
        ("fp32", "single"),
        # the fast suite's 5 minutes: the other modes' grids run with the slow tests (CI runs both)
        pytest.param("amp_fp16", "single", marks=pytest.mark.slow),
        pytest.param("fp32", "dp", marks=pytest.mark.slow),
    ],
)
def test_a_resumed_run_ends_where_the_uninterrupted_run_does(first, total, precision, parallel, tmp_path):
    uninterrupted = _build(total, precision=precision, parallel=parallel)
    uninterrupted.fit()
    expected = uninterrupted.state.model
    expected = expected.module if isinstance(expected, torch.nn.DataParallel) else expected

    interrupted = _build(first, precision=precision, parallel=parallel)
    interrupted.fit()
    checkpoint = interrupted.save_checkpoint(tmp_path / "run.ckpt")
    resumed = _resume_in_a_fresh_process(checkpoint, total, tmp_path / "out.pt", precision, parallel)

    assert resumed["batch"] == uninterrupted.state.timestamp.batch
    assert resumed["epoch"] == uninterrupted.state.timestamp.epoch
    assert resumed["lr"] == uninterrupted.state.optimizer.param_groups[0]["lr"]
    for name, value in expected.state_dict().items():
        assert torch.equal(resumed["params"][name], value), name
    # and the interruption mattered: the first half's parameters are not the end's
    assert not all(
        torch.equal(p, q)
        for p, q in zip(interrupted.state.model.parameters(), uninterrupted.state.model.parameters(), strict=True)
    )


@pytest.mark.parametrize(("first", "total"), [("3ba", "6ba"), ("5ba", "7ba")], ids=["mid-epoch", "second-epoch"])
@pytest.mark.parametrize("precision", ["fp32", "amp_fp16"])
def test_a_run_resumed_in_the_same_process_ends_where_the_uninterrupted_run_does(first, total, precision, tmp_path):
    """The resumption again, in this process, after torch's global generator has moved on: the
    checkpoint alone puts back the weights, optimizer, schedule, scaler, algorithms and generators
    (mutation testing attributes only what a test runs in its own process)."""
    uninterrupted = _build(total, precision=precision)
    uninterrupted.fit()
    interrupted = _build(first, precision=precision)
    interrupted.fit()
    path = interrupted.save_checkpoint(tmp_path / "run.ckpt")
    torch.randn(1000)  # the global generator moves on; the checkpoint's state must replace it
    resumed = _build(total, load_path=path, precision=precision)
    assert resumed.scaler.state_dict() == interrupted.scaler.state_dict()  # scale and growth tracker
    assert resumed.state.schedulers[0].last_epoch == interrupted.state.schedulers[0].last_epoch
    resumed.fit()
    assert resumed.state.timestamp == uninterrupted.state.timestamp
    assert resumed.state.optimizer.param_groups[0]["lr"] == uninterrupted.state.optimizer.param_groups[0]["lr"]
    assert _same(resumed.state.model.state_dict(), uninterrupted.state.model.state_dict())
    momentum = [t.state.optimizer.state_dict()["state"][0] for t in (resumed, uninterrupted)]
    assert _same(*momentum)


def test_the_checkpoint_holds_every_algorithms_state_and_the_generators(tmp_path):
    trainer = _build("3ba")
    trainer.fit()
    checkpoint = torch.load(trainer.save_checkpoint(tmp_path / "c.ckpt"), weights_only=True)
    assert [a["name"] for a in checkpoint["algorithms"]] == ["CutMix", "LabelSmoothing"]
    cutmix = trainer.engine.algorithms[0]
    assert torch.equal(checkpoint["algorithms"][0]["state"]["generator"], cutmix.generator(trainer.state).get_state())
    assert checkpoint["algorithms"][1]["state"] == {}  # label smoothing draws nothing
    assert checkpoint["timestamp"] == {"epoch": 0, "batch": 3, "sample": 24, "batch_in_epoch": 3, "token": 0}
    assert torch.equal(checkpoint["rng"]["torch"], torch.get_rng_state())


def test_an_existing_file_is_not_overwritten_and_no_temporary_file_is_left(tmp_path):
    trainer = _build("1ba")
    trainer.fit()
    path = tmp_path / "c.ckpt"
    path.write_bytes(b"keep")
    with pytest.raises(CheckpointError, match=r"c\.ckpt: exists — pass overwrite=True to replace it"):
        trainer.save_checkpoint(path)
    assert path.read_bytes() == b"keep"
    trainer.save_checkpoint(path, overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.ckpt"]


def _model_copy(trainer):
    return {k: v.clone() for k, v in trainer.state.model.state_dict().items()}


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda p, good: p.write_bytes(good.read_bytes()[: len(good.read_bytes()) // 2]),
            r"not a readable checkpoint \(.*\) — it may be truncated or another program's file",
        ),
        (
            lambda p, good: torch.save({"weights": torch.zeros(2)}, p),
            r"not a Methods Library checkpoint \(no format 'methods-library-checkpoint'\) — use one written by "
            r"Trainer\.save_checkpoint$",
        ),
        (lambda p, good: p.write_text("hello"), r"not a readable checkpoint"),
        (lambda p, good: None, r"no such checkpoint file — check load_path"),
    ],
)
def test_a_bad_checkpoint_is_refused_naming_the_file_and_changes_nothing(make, message, tmp_path):
    good = tmp_path / "good.ckpt"
    first = _build("2ba")
    first.fit()
    first.save_checkpoint(good)
    bad = tmp_path / "bad.ckpt"
    make(bad, good)
    with pytest.raises(CheckpointError, match=rf"^{tmp_path}/bad\.ckpt: {message}"):
        _build("4ba", load_path=bad)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            dict(algorithms=[CutMix(alpha=1.0)]),
            r"saved with algorithms \[CutMix, LabelSmoothing\], this Trainer has \[CutMix\]",
        ),
        (
            dict(algorithms=[LabelSmoothing(0.1), CutMix(alpha=1.0)]),
            r": saved with algorithms \[CutMix, LabelSmoothing\], this Trainer has \[LabelSmoothing, CutMix\] — resume "
            r"with the same algorithms in the same order$",
        ),
        (dict(schedulers=[]), r"saved with 1 scheduler\(s\), this Trainer has 0"),
        (
            dict(model=torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(192, 5))),
            r"the model's parameters differ",
        ),
        (
            dict(precision="amp_fp16"),
            r": saved with precision=.fp32., this Trainer has precision=.amp_fp16. — resume in ",
        ),
    ],
)
def test_a_checkpoint_of_another_setup_is_refused_before_anything_changes(change, message, tmp_path):
    first = _build("2ba")
    first.fit()
    path = first.save_checkpoint(tmp_path / "c.ckpt")
    torch.manual_seed(0)
    model = change.get("model") or torch.nn.Sequential(
        torch.nn.Conv2d(3, 6, 3),
        torch.nn.ReLU(),
        torch.nn.Dropout(0.3),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(6, 5),
    )
    before = {k: v.clone() for k, v in model.state_dict().items()}
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    schedulers = change.get("schedulers", [torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)])
    algorithms = change.get("algorithms", [CutMix(alpha=1.0), LabelSmoothing(0.1)])
    with pytest.raises(CheckpointError, match=message):
        Trainer(
            model,
            [],
            "4ba",
            optimizer=optimizer,
            schedulers=schedulers,
            algorithms=algorithms,
            seed=3,
            device="cpu",
            precision=change.get("precision", "fp32"),
            parallel=change.get("parallel", "single"),
            load_path=path,
        )
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


# -- the weight-averaging methods: their averages resume with the run ----------------------------

# A run with batch norm and dropout and an averaging method, two epochs of four batches. The first
# half dies right after saving a checkpoint at a batch's end (as a crash would), so SWA's end of
# training (which loads its mean) does not run there; both halves hold the same algorithms.
AVERAGING_SETUP = textwrap.dedent("""
    import torch
    from algorithms import EMA, SWA
    from algorithms.core import Algorithm, Event, Trainer

    class Interrupted(Exception):
        pass

    class SaveAndDie(Algorithm):
        def __init__(self, batch, path):
            self.batch, self.path, self.trainer = batch, path, None

        def match(self, event, state):
            return event is Event.BATCH_END and state.timestamp.batch == self.batch

        def apply(self, event, state, logger=None):
            self.trainer.save_checkpoint(self.path)
            raise Interrupted

    def build(method, duration, save_at=None, path=None, load_path=None):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 6, 3), torch.nn.BatchNorm2d(6), torch.nn.ReLU(),
                                    torch.nn.Dropout(0.3), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                    torch.nn.Linear(6, 5))
        g = torch.Generator().manual_seed(1)
        data = [(torch.randn(8, 3, 8, 8, generator=g), torch.randint(0, 5, (8,), generator=g)) for _ in range(4)]
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        algo = (EMA(half_life="2ba") if method == "ema" else
                SWA(swa_start="2ba", swa_end="7ba", update_interval="1ba", schedule_swa_lr=True, swa_lr=0.02,
                    anneal_steps=3, bn_dataloader=data))
        saver = SaveAndDie(save_at, path)
        trainer = Trainer(model, data, duration, optimizer=optimizer, algorithms=[algo, saver], seed=3, device="cpu",
                          load_path=load_path)
        saver.trainer = trainer
        return trainer

    def outcome(trainer):
        algo = trainer.engine.algorithms[0]
        out = {"params": trainer.state.model.state_dict(), "lr": trainer.state.optimizer.param_groups[0]["lr"]}
        if isinstance(algo, EMA):
            out["average"] = algo.ema_model.state_dict()
        else:
            out["average"] = {"num_averaged": torch.tensor(algo.num_averaged)}
        return out
""")


_AVERAGING: dict = {}


def _averaging(name):
    if not _AVERAGING:
        exec(AVERAGING_SETUP, _AVERAGING)  # noqa: S102 - the same code the fresh process runs
    return _AVERAGING[name]


def _resume_averaging_in_a_fresh_process(method, checkpoint, total, out):
    script = AVERAGING_SETUP + textwrap.dedent(f"""
        trainer = build({method!r}, {total!r}, load_path={str(checkpoint)!r})
        trainer.fit()
        torch.save(outcome(trainer), {str(out)!r})
    """)
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return torch.load(out)


def _same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("method", ["ema", "swa"])
@pytest.mark.parametrize(
    ("first", "total"),
    [pytest.param(3, "8ba", marks=pytest.mark.slow), (5, "8ba")],  # one of them fast (the suite's 5 minutes)
    ids=["first-epoch", "second-epoch"],
)
def test_an_averaging_method_resumes_its_average_bit_for_bit(method, first, total, tmp_path):
    build, outcome = _averaging("build"), _averaging("outcome")
    uninterrupted = build(method, total)
    uninterrupted.fit()
    expected = outcome(uninterrupted)
    checkpoint = tmp_path / "run.ckpt"
    with pytest.raises(_averaging("Interrupted")):
        build(method, total, save_at=first, path=checkpoint).fit()
    resumed = _resume_averaging_in_a_fresh_process(method, checkpoint, total, tmp_path / "out.pt")
    assert _same(resumed["params"], expected["params"])
    assert _same(resumed["average"], expected["average"])
    assert resumed["lr"] == expected["lr"]
    if method == "swa":
        assert int(expected["average"]["num_averaged"]) == 6  # batches 2 to 7, loaded at 7
        assert expected["lr"] == pytest.approx(0.02)  # annealed by SWALR
    # and the algorithm's state is what carries it: without it the resumed run ends elsewhere
    saved = torch.load(checkpoint, weights_only=True)
    saved["algorithms"][0]["state"] = {}
    stripped = tmp_path / "stripped.ckpt"
    torch.save(saved, stripped)
    forgetful = _resume_averaging_in_a_fresh_process(method, stripped, total, tmp_path / "forgetful.pt")
    assert not _same(forgetful["average"], expected["average"])
    if method == "swa":  # the mean it loads is another
        assert not _same(forgetful["params"], expected["params"])
    else:  # EMA never touches the training weights
        assert _same(forgetful["params"], expected["params"])


# -- every refusal, whole: one line naming the file, what is wrong and what to do ----------------


class _Marker:
    """An object the weights-only unpickler does not know: a file holding one could run code."""


def _edited(checkpoint: dict, edit: str) -> dict:
    """The saved checkpoint of a fp32 run of SETUP, changed as ``edit`` says."""
    if edit == "version":
        checkpoint["version"] = 99
    elif edit == "missing":
        del checkpoint["schedulers"], checkpoint["rng"]
    elif edit == "algorithm-state":
        checkpoint["algorithms"][0]["state"].update(extra=1, more=2)
    elif edit == "optimizers":
        checkpoint["optimizers"] = []
    elif edit == "model":
        checkpoint["model"].update({name: torch.zeros(1) for name in ("d", "c", "b", "a")})
    elif edit == "model-lacking":
        for name in list(checkpoint["model"])[:4]:
            del checkpoint["model"][name]
    elif edit == "scaler":
        checkpoint["scaler"] = torch.amp.GradScaler("cpu").state_dict()
    elif edit == "code":
        checkpoint["extra"] = _Marker()
    return checkpoint


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            "version",
            "checkpoint version 99, this library reads version 2 — write the checkpoint again with this "
            "version's Trainer.save_checkpoint",
        ),
        ("missing", "incomplete checkpoint, missing schedulers, rng — write it again"),
        (
            "algorithm-state",
            "CutMix's saved state has key(s) extra, more that this CutMix does not keep — resume with "
            "the same version of the method",
        ),
        ("optimizers", "saved with 0 optimizer(s), this Trainer has 1 — resume with the same optimizers"),
        (
            "model",
            "the model's parameters differ (in the file only: ['a', 'b', 'c']; in this model only: none) — "
            "resume the same model",
        ),
        (
            "model-lacking",
            "the model's parameters differ (in the file only: none; in this model only: ['0.bias', "
            "'0.weight', '5.bias']) — resume the same model",
        ),
        (
            "scaler",
            "saved with a GradScaler, this Trainer's precision 'fp32' does not use one — resume in the same precision",
        ),
        (
            "code",
            "not a readable checkpoint (UnpicklingError: Weights only load failed. [torch's words, plain text]) "
            "— it may be truncated or another program's file; use one written by Trainer.save_checkpoint",
        ),
    ],
)
def test_every_refusal_is_the_whole_line_and_changes_nothing(edit, message, tmp_path):
    first = _build("2ba")
    first.fit()
    good = first.save_checkpoint(tmp_path / "good.ckpt")
    bad = tmp_path / "bad.ckpt"
    torch.save(_edited(torch.load(good, weights_only=True), edit), bad)
    trainer = _build("4ba")
    before = _model_copy(trainer)
    with pytest.raises(CheckpointError) as refused:
        trainer.load_checkpoint(bad)
    got = str(refused.value)
    if "[torch's words, plain text]" in message:  # torch words its refusal itself; it is quoted without escapes
        head, tail = f"{bad}: {message}".split(" [torch's words, plain text]")
        assert got.startswith(head) and got.endswith(tail) and "\x1b" not in got and "\n" not in got, got
        assert "two options, do those steps only if you trust the source of the checkpoint." in got, got
    else:
        assert got == f"{bad}: {message}"
    assert _same(trainer.state.model.state_dict(), before) and trainer.state.timestamp.batch == 0


def test_a_read_error_without_a_message_is_named_by_its_type(tmp_path, monkeypatch):
    path = tmp_path / "c.ckpt"
    path.write_bytes(b"x")

    def fails(*args, **kwargs):
        raise RuntimeError("  ")

    monkeypatch.setattr(torch, "load", fails)
    with pytest.raises(CheckpointError) as refused:
        _build("1ba", load_path=path)
    assert str(refused.value) == (
        f"{path}: not a readable checkpoint (RuntimeError: RuntimeError) — it may be "
        "truncated or another program's file; use one written by Trainer.save_checkpoint"
    )


def test_save_checkpoint_refuses_to_overwrite_by_default_and_writes_beside_the_target(tmp_path, monkeypatch):
    """The functional form keeps an existing file unless told; a new file may sit in folders that do
    not exist yet; the file is written under a hidden temporary name in the target's own folder
    (so the final rename stays on one file system and is atomic); a failed write leaves nothing and
    raises what failed."""
    trainer = _build("1ba")
    trainer.fit()
    existing = tmp_path / "c.ckpt"
    existing.write_bytes(b"keep")
    with pytest.raises(CheckpointError, match=r"c\.ckpt: exists — pass overwrite=True to replace it"):
        write_checkpoint(existing, trainer.state.state_dict())
    assert existing.read_bytes() == b"keep"

    renames = []
    real_replace = os.replace
    monkeypatch.setattr(
        os, "replace", lambda src, dst: (renames.append((Path(src), Path(dst))), real_replace(src, dst))
    )
    nested = tmp_path / "runs" / "a" / "run.ckpt"
    assert trainer.save_checkpoint(nested) == nested and nested.is_file()
    [(src, dst)] = renames
    assert dst == nested and src.parent == nested.parent
    assert src.name.startswith(".run.ckpt.") and src.name.endswith(".tmp")

    def broken(obj, handle):
        handle.write(b"half")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken)
    with pytest.raises(OSError, match="disk full"):
        trainer.save_checkpoint(tmp_path / "new.ckpt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.ckpt", "runs"]
    assert sorted(p.name for p in nested.parent.iterdir()) == ["run.ckpt"]


# -- the run's setup: precision, processes and parallel mode are checked before anything loads ---


@pytest.mark.parametrize(
    ("precision", "saved_as"), [("bf16", "fp32"), ("amp_bf16", "fp32"), ("fp32", "amp_bf16")], ids=str
)
def test_a_checkpoint_of_another_precision_is_refused_before_weights_optimizer_or_generators_change(
    precision, saved_as, tmp_path
):
    first = _build("2ba", precision=saved_as)
    first.fit()
    path = first.save_checkpoint(tmp_path / "c.ckpt")
    trainer = _build("4ba", precision=precision)
    trainer.fit()  # an optimizer with momentum, a scheduler that stepped, a CutMix generator that drew
    weights = _model_copy(trainer)
    optimizer = trainer.state.optimizer.state_dict()
    momentum = {k: v["momentum_buffer"].clone() for k, v in optimizer["state"].items()}
    lr, timestamp = trainer.state.optimizer.param_groups[0]["lr"], dataclasses.replace(trainer.state.timestamp)
    cutmix = trainer.engine.algorithms[0].generator(trainer.state).get_state()
    global_rng = torch.get_rng_state()
    with pytest.raises(CheckpointError) as refused:
        trainer.load_checkpoint(path)
    assert str(refused.value) == (
        f"{path}: saved with precision={saved_as!r}, this Trainer has precision={precision!r} — resume in the "
        "same precision"
    )
    assert _same(trainer.state.model.state_dict(), weights)
    now = trainer.state.optimizer.state_dict()["state"]
    assert now.keys() == momentum.keys() and all(torch.equal(now[k]["momentum_buffer"], momentum[k]) for k in now)
    assert trainer.state.optimizer.param_groups[0]["lr"] == lr and trainer.state.timestamp == timestamp
    assert torch.equal(trainer.engine.algorithms[0].generator(trainer.state).get_state(), cutmix)
    assert torch.equal(torch.get_rng_state(), global_rng) and trainer.state.pending_rng is None


def test_a_checkpoint_of_another_parallel_mode_is_refused_naming_both(tmp_path):
    first = _build("2ba")
    first.fit()
    path = first.save_checkpoint(tmp_path / "c.ckpt")
    trainer = _build("4ba", parallel="dp")
    before = _model_copy(trainer)
    with pytest.raises(CheckpointError) as refused:
        trainer.load_checkpoint(path)
    assert str(refused.value) == (
        f"{path}: saved with parallel='single', this Trainer has parallel='dp' — resume in the same parallel mode"
    )
    assert _same(trainer.state.model.module.state_dict(), {k.removeprefix("module."): v for k, v in before.items()})


def test_a_checkpoint_of_the_previous_format_is_refused_asking_to_write_it_again(tmp_path):
    first = _build("2ba")
    first.fit()
    saved = torch.load(first.save_checkpoint(tmp_path / "c.ckpt"), weights_only=True)
    old = {key: value for key, value in saved.items() if key != "setup"}  # version 1 had no setup
    old["version"] = 1
    torch.save(old, tmp_path / "old.ckpt")
    with pytest.raises(CheckpointError) as refused:
        _build("4ba", load_path=tmp_path / "old.ckpt")
    assert str(refused.value) == (
        f"{tmp_path / 'old.ckpt'}: checkpoint version 1, this library reads version 2 — write the checkpoint "
        "again with this version's Trainer.save_checkpoint"
    )


def test_an_optimizer_with_other_parameter_groups_is_refused_before_the_weights_change(tmp_path):
    first = _build("2ba")
    first.fit()
    path = first.save_checkpoint(tmp_path / "c.ckpt")
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 6, 3), torch.nn.ReLU(), torch.nn.Dropout(0.3), torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(), torch.nn.Linear(6, 5),
    )  # fmt: skip
    before = {k: v.clone() for k, v in model.state_dict().items()}
    groups = [{"params": model[0].parameters()}, {"params": model[5].parameters(), "lr": 0.01}]
    optimizer = torch.optim.SGD(groups, lr=0.1, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    with pytest.raises(CheckpointError) as refused:
        Trainer(
            model,
            [],
            "4ba",
            optimizer=optimizer,
            schedulers=[scheduler],
            algorithms=[CutMix(alpha=1.0), LabelSmoothing(0.1)],
            seed=3,
            device="cpu",
            load_path=path,
        )
    assert str(refused.value) == (
        f"{path}: optimizer 0 was saved with 1 parameter group(s), this Trainer's has 2 — resume with the same "
        "optimizers"
    )
    assert _same(model.state_dict(), before)
