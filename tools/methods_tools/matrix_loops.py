"""The composability matrix's two adapter sections (``nox -s matrix``, ``--kinds loops,models``).

- ``loops``: every method the matrix runs alone (``kind: method``) trains the matrix's workload of
  its domain (:data:`methods_tools.matrix.WORKLOADS`, the same seeds, batches and suggested
  hyperparameters; the precision of the method's measured ``workload`` where its metadata names
  one, as the low precision norms do) in each training loop a user can put it in (:data:`LOOPS`):
  the project's ``Trainer``, a :class:`~algorithms.core.Loop` of one's own, the Hugging Face
  ``transformers.Trainer`` through :class:`~algorithms.integrations.transformers.MethodsTrainer`
  (the same batches as per-example dicts: ``pixel_values`` or ``input_ids``, and ``labels``) and
  Lightning through :class:`~algorithms.integrations.lightning.MethodsCallback` and a
  :class:`~algorithms.integrations.lightning.MethodsModule`; then evaluates once.
- ``models``: the language-model methods (domain ``nlp``: surgery, loss, schedule, weights) on
  Hugging Face models built from small configs (:data:`MODELS`: GPT-2, BERT, RoBERTa), through the
  project's ``Trainer`` on dict batches (``input_key=None``: ``model(**batch)``, ``target_key=
  "labels"``); the CNN surgery methods' torchvision and timm models are tested by ``nox -s models``
  (``tests/models``), outside this matrix's environment, and recorded as not run with that reason.

Each cell's outcome (:func:`settle`): ``acted`` (it ran and the method log says the method did
something), ``inactive`` (it ran and the method did nothing: the method's own warning, if it gave
one, says why), ``refused`` (a ValueError or TypeError before the first batch: the adapter's or the
method's one-line reason; or one the library raises itself during training, at a batch it refuses),
``failed`` (any other error: its first line) or
``not_run`` (the loop or the model is not installed or not in this environment: why).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import logging
import os
import tempfile
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "LOOPS",
    "MODELS",
    "MODEL_OUTCOMES",
    "SECTIONS",
    "TESTED_ELSEWHERE",
    "LoopCell",
    "ModelCell",
    "plan_loop_cells",
    "plan_model_cells",
    "run_loop_cell",
    "run_model_cell",
    "run_section",
    "settle",
]

SECTIONS = ("loops", "models")

#: The training loops, by the key a cell names them with, and how the page and the cards name them.
LOOPS: Mapping[str, str] = {
    "trainer": "Trainer",
    "loop": "own Loop",
    "hf_trainer": "HF Trainer",
    "lightning": "Lightning",
}
#: What each loop needs installed beyond torch, by loop key (module, the extra that installs it).
LOOP_NEEDS: Mapping[str, tuple[str, str]] = {
    "hf_trainer": ("transformers", "transformers"),
    "lightning": ("lightning", "lightning"),
}
#: The Hugging Face models of the ``models`` section, by key: how the page names them.
MODELS: Mapping[str, str] = {
    "gpt2": "GPT-2 (causal LM)",
    "bert": "BERT (masked LM)",
    "roberta": "RoBERTa (sequence classification)",
}
#: The key of the torchvision and timm models' column, and why its cells are not run here.
TORCHVISION_TIMM = "torchvision_timm"
TESTED_ELSEWHERE = "torchvision and timm models: run by nox -s models (tests/models), outside this matrix's environment"
#: The CNN surgery methods ``tests/models`` runs on torchvision's and timm's models.
VISION_MODEL_METHODS = (
    "activation_checkpointing",
    "blurpool",
    "factorize",
    "ghost_batchnorm",
    "low_precision_groupnorm",
    "low_precision_layernorm",
    "squeeze_excite",
    "stochastic_depth",
    "weight_standardization",
)
MODEL_OUTCOMES = ("acted", "inactive", "refused", "failed", "not_run")
#: Errors that refuse a combination when raised before the first batch.
REFUSALS = (ValueError, TypeError)
#: The Hugging Face models' sequences: length, vocabulary, batch's classes (RoBERTa's head).
HF_LENGTH, HF_VOCAB, HF_CLASSES = 16, 100, 3

Progress = Callable[[str], None]


@dataclass(frozen=True)
class LoopCell:
    loop: str
    method: str

    @property
    def label(self) -> str:
        return f"loops {self.method} in {LOOPS.get(self.loop, self.loop)}"


@dataclass(frozen=True)
class ModelCell:
    model: str
    method: str

    @property
    def label(self) -> str:
        return f"models {self.method} on {MODELS.get(self.model, self.model)}"


# --------------------------------------------------------------------------------------------- plan


def plan_loop_cells(records: Mapping[str, Any]) -> list[LoopCell]:
    """Every ``kind: method`` record in every loop, by method then loop."""
    return [LoopCell(loop, key) for key, r in sorted(records.items()) if r.kind == "method" for loop in LOOPS]


def plan_model_cells(records: Mapping[str, Any]) -> list[ModelCell]:
    """Every ``nlp`` method on every Hugging Face model, and each CNN surgery method's torchvision
    and timm cell (not run here), by method."""
    cells = []
    for key, r in sorted(records.items()):
        if r.kind != "method":
            continue
        if "nlp" in r.domains:
            cells += [ModelCell(model, key) for model in MODELS]
        if key in VISION_MODEL_METHODS:
            cells.append(ModelCell(TORCHVISION_TIMM, key))
    return cells


# --------------------------------------------------------------------------------------------- outcome


def _error_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _first_batch_probe(started: list[bool]) -> Any:
    """An algorithm that notes the first ``BATCH_START``: what is raised before it is up front."""
    from algorithms.core import Algorithm, Event

    class FirstBatch(Algorithm):
        def match(self, event: Any, state: Any) -> bool:
            return event is Event.BATCH_START and not started

        def apply(self, event: Any, state: Any, logger: Any = None) -> None:
            started.append(True)

    return FirstBatch()


def _raised_by_library(exc: BaseException) -> bool:
    """Whether the innermost frame of ``exc``'s traceback is in the ``algorithms`` package: a
    refusal the library words itself (SeqLengthWarmup's, at a batch it cannot cut), not an error
    that reached torch or another library."""
    import algorithms

    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    root = os.path.dirname(os.path.abspath(algorithms.__file__))
    return tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(root + os.sep)


def _about(caught: Any, name: str) -> bool:
    """Whether a caught warning speaks of the method ``name``, or is the library's own (surgery
    that replaced nothing)."""
    return name in str(caught.message) or type(caught.message).__module__.startswith("algorithms")


def settle(run: Callable[[Any], Any], name: str) -> dict[str, Any]:
    """Run ``run(probe)``, which trains with ``probe`` (an algorithm) listed first and returns the
    run's :class:`~algorithms.core.MethodLog`; the cell's ``outcome``, ``activity`` (the method
    ``name``'s counters), ``detail`` and ``wall_s`` (:mod:`this module's outcomes <methods_tools.matrix_loops>`)."""
    started: list[bool] = []
    start = time.perf_counter()
    activity: dict[str, int] = {}
    detail = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            log = run(_first_batch_probe(started))
        except Exception as exc:  # recorded: the outcome says whether it was a refusal
            refused = isinstance(exc, REFUSALS) and (not started or _raised_by_library(exc))
            outcome = "refused" if refused else "failed"
            detail = _error_line(exc)
        else:
            if name not in log.records:
                outcome, detail = "failed", f"the method log holds no record of {name}"
            else:
                activity = dict(log.records[name]["activity"])
                outcome = "acted" if log.acted(name) else "inactive"
                if outcome == "inactive":
                    said = [str(w.message).strip().splitlines()[0] for w in caught if _about(w, name)]
                    detail = said[0] if said else "the method log shows no activity"
    return {"outcome": outcome, "activity": activity, "detail": detail, "wall_s": round(time.perf_counter() - start, 3)}


def _not_run(detail: str) -> dict[str, Any]:
    return {"outcome": "not_run", "activity": {}, "detail": detail, "wall_s": 0.0}


def _missing(module: str, extra: str) -> str | None:
    """Why a loop cannot run here, or None where ``module`` is installed."""
    if importlib.util.find_spec(module) is None:
        return f"{module} is not installed in this environment (pip install 'methods-library[{extra}]')"
    return None


def method_precision(record: Any) -> str:
    """The precision a method is measured in (its metadata's ``workload``), else ``fp32``."""
    return (record.raw.get("workload") or {}).get("precision") or "fp32"


# --------------------------------------------------------------------------------------------- loops


def _sgd(params: Any) -> Any:
    import torch

    return torch.optim.SGD(params, lr=0.05, momentum=0.9)


def _loss_fn(workload: Any) -> Any:
    import torch.nn.functional as F

    return workload.loss_fn if workload.loss_fn is not None else F.cross_entropy


def _methods(key: str, records: Mapping[str, Any], workload: Any) -> list[Any]:
    from .matrix import Cell, _build_methods

    return _build_methods(Cell("solo", (key,)), records, workload)


def _run_trainer(workload: Any, methods: Sequence[Any], settings: Any, precision: str, probe: Any) -> Any:
    from algorithms.core import Trainer

    from .matrix import _Loader

    with Trainer(
        workload.model,
        _Loader(workload.batches, settings.batch_size),
        f"{settings.steps}ba",
        optimizer=_sgd,
        algorithms=[probe, *methods],
        precision=precision,
        seed=settings.seed,
        input_key=workload.input_key,
        target_key=workload.target_key,
        loss_fn=_loss_fn(workload),
    ) as trainer:
        trainer.fit()
        trainer.eval(workload.batches[:1])
    return trainer.method_log


def _run_loop(workload: Any, methods: Sequence[Any], settings: Any, precision: str, probe: Any) -> Any:
    import torch

    from algorithms.core import Loop

    loader = workload.batches
    loop = Loop(
        workload.model,
        [probe, *methods],
        max_duration=f"{settings.epochs}ep",
        optimizer=_sgd,
        loss_fn=_loss_fn(workload),
        train_dataloader=loader,
        precision=precision,
        seed=settings.seed,
        input_key=workload.input_key,
        target_key=workload.target_key,
    )
    for _ in range(settings.epochs):
        for batch in loader:
            loop.train_step(batch)
        loop.epoch_end()
    loop.end()
    with loop.evaluating() as model, torch.no_grad():
        loop.call(model, loader[0])
    return loop.method_log


def _as_dicts(workload: Any) -> Any:
    """The workload with dict batches, as a Hugging Face data set's rows are collated: images as
    ``pixel_values`` (the model called on them), the target as ``labels``."""
    from dataclasses import replace

    if isinstance(workload.batches[0], Mapping):
        return workload
    batches = [{"pixel_values": x, "labels": y} for x, y in workload.batches]
    return replace(workload, batches=batches, input_key="pixel_values", target_key="labels")


def _run_hf_trainer(workload: Any, methods: Sequence[Any], settings: Any, precision: str, probe: Any) -> Any:
    import transformers
    from torch.utils.data import Dataset, SequentialSampler

    from algorithms.integrations.transformers import MethodsTrainer

    transformers.logging.set_verbosity_error()

    class Rows(Dataset):
        def __init__(self, rows: list[dict[str, Any]]):
            self.rows = rows

        def __len__(self) -> int:
            return len(self.rows)

        def __getitem__(self, i: int) -> dict[str, Any]:
            return self.rows[i]

    class InOrder(MethodsTrainer):  # the batches in the loader's order, as the other loops see them
        def _get_train_sampler(self, train_dataset: Any = None) -> Any:
            return SequentialSampler(train_dataset if train_dataset is not None else self.train_dataset)

    rows = [{k: v[i] for k, v in b.items()} for b in workload.batches for i in range(len(b[workload.target_key]))]
    with tempfile.TemporaryDirectory(prefix="matrix-hf-") as tmp:
        args = transformers.TrainingArguments(
            output_dir=tmp,
            max_steps=settings.steps,
            per_device_train_batch_size=settings.batch_size,
            per_device_eval_batch_size=settings.batch_size,
            optim="sgd",
            learning_rate=0.05,
            lr_scheduler_type="constant",
            max_grad_norm=0.0,
            bf16=precision == "amp_bf16",
            fp16=precision == "amp_fp16",
            report_to=[],
            use_cpu=True,
            save_strategy="no",
            logging_strategy="no",
            dataloader_num_workers=0,
            seed=settings.seed,
            disable_tqdm=True,
        )
        trainer = InOrder(
            workload.model,
            args,
            algorithms=[probe, *methods],
            loss_fn=_loss_fn(workload),
            input_key=workload.input_key,
            target_key=workload.target_key,
            train_dataset=Rows(rows),
            eval_dataset=Rows(rows[: settings.batch_size]),
            data_collator=transformers.default_data_collator,
        )
        trainer.train()
        trainer.evaluate()
    return trainer.method_log


#: Lightning's precision for the project's precision modes (the loop inside stays fp32).
LIGHTNING_PRECISION = {"fp32": "32-true", "amp_bf16": "bf16-mixed", "amp_fp16": "16-mixed", "bf16": "bf16-true"}


def _run_lightning(workload: Any, methods: Sequence[Any], settings: Any, precision: str, probe: Any) -> Any:
    import lightning as L
    import torch
    from torch.utils.data import DataLoader

    from algorithms.core.outputs import model_logits
    from algorithms.core.state import batch_get_item
    from algorithms.integrations.lightning import MethodsCallback, MethodsModule

    for name in ("lightning.pytorch", "lightning.fabric", "lightning"):
        logging.getLogger(name).setLevel(logging.ERROR)
    loss_fn, input_key, target_key = _loss_fn(workload), workload.input_key, workload.target_key

    class Net(MethodsModule):
        def __init__(self, net: torch.nn.Module):
            super().__init__()
            self.net = net

        def forward(self, x: Any) -> Any:
            return self.net(x)

        def validation_step(self, batch: Any, idx: int) -> Any:
            logits = model_logits(self(batch_get_item(batch, input_key)))
            return loss_fn(logits.float(), batch_get_item(batch, target_key))

        def configure_optimizers(self) -> Any:
            return _sgd(self.parameters())

    def loader(batches: list[Any]) -> DataLoader:
        return DataLoader(batches, batch_size=None, collate_fn=lambda b: b)  # each item a whole batch

    callback = MethodsCallback(
        [probe, *methods], loss_fn=loss_fn, input_key=input_key, target_key=target_key, seed=settings.seed
    )
    with tempfile.TemporaryDirectory(prefix="matrix-lightning-") as tmp:
        trainer = L.Trainer(
            max_steps=settings.steps,
            accelerator="cpu",
            devices=1,
            precision=LIGHTNING_PRECISION.get(precision, "32-true"),
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            num_sanity_val_steps=0,
            default_root_dir=tmp,
            callbacks=[callback],
        )
        module = Net(workload.model)
        trainer.fit(module, train_dataloaders=loader(workload.batches))
        trainer.validate(module, dataloaders=loader(workload.batches[:1]), verbose=False)
    return callback.method_log


RUNNERS: Mapping[str, Callable[..., Any]] = {
    "trainer": _run_trainer,
    "loop": _run_loop,
    "hf_trainer": _run_hf_trainer,
    "lightning": _run_lightning,
}


def run_loop_cell(cell: LoopCell, settings: Any, records: Mapping[str, Any]) -> dict[str, Any]:
    """The ``loops`` entry of ``cell``: its method on its domain's matrix workload in its loop."""
    from .matrix import WORKLOADS, Cell, _workload_domain

    record = records[cell.method]
    domain = _workload_domain(Cell("solo", (cell.method,)), records)
    precision = method_precision(record)
    head = {"loop": cell.loop, "method": cell.method, "workload": domain or "none", "precision": precision}
    if domain is None:
        return {**head, **_not_run(f"no matrix workload for its domains {', '.join(record.domains)}")}
    need = LOOP_NEEDS.get(cell.loop)
    why = _missing(*need) if need else None
    if why is not None:
        return {**head, **_not_run(why)}

    def run(probe: Any) -> Any:
        workload = WORKLOADS[domain](settings, 0)
        if cell.loop == "hf_trainer":
            workload = _as_dicts(workload)
        methods = _methods(cell.method, records, workload)
        return RUNNERS[cell.loop](workload, methods, settings, precision, probe)

    return {**head, **settle(run, record.class_name)}


# --------------------------------------------------------------------------------------------- models


def _causal_lm_loss(logits: Any, labels: Any) -> Any:
    """Next-token cross entropy where the labels are the inputs (GPT-2's convention): position
    ``t``'s logits against label ``t + 1``; labels as indices or as distributions (label smoothing's)."""
    from algorithms.models import lm_loss

    return lm_loss(logits[:, :-1], labels[:, 1:])


def hf_model(name: str, seed: int = 0) -> Any:
    """A small Hugging Face model of :data:`MODELS` from its config, without weights (nothing
    downloads): 2 layers, width 32, 4 heads."""
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    torch.manual_seed(seed)
    common = {"vocab_size": HF_VOCAB, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4}
    if name == "gpt2":
        config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=HF_VOCAB, n_positions=64)
        return transformers.GPT2LMHeadModel(config)
    if name == "bert":
        config = transformers.BertConfig(**common, intermediate_size=64, max_position_embeddings=64)
        return transformers.BertForMaskedLM(config)
    if name == "roberta":
        config = transformers.RobertaConfig(
            **common, intermediate_size=64, max_position_embeddings=64 + 2, num_labels=HF_CLASSES
        )
        return transformers.RobertaForSequenceClassification(config)
    raise ValueError(f"model {name!r}: use one of {', '.join(MODELS)}")


def hf_workload(name: str, settings: Any) -> Any:
    """:func:`hf_model` and seeded dict batches ``{"input_ids", "attention_mask", "labels"}``, and
    its loss: GPT-2's labels are its inputs (:func:`_causal_lm_loss`); BERT's are the tokens at 15 %
    of the positions, replaced by a mask token in the input, and -100 elsewhere
    (:func:`algorithms.models.lm_loss`); RoBERTa's a class per sequence (cross entropy)."""
    import torch
    import torch.nn.functional as F

    from algorithms.models import lm_loss

    from .matrix import Workload

    g = torch.Generator().manual_seed(settings.seed)
    batches = []
    for _ in range(settings.steps // settings.epochs):
        ids = torch.randint(4, HF_VOCAB, (settings.batch_size, HF_LENGTH), generator=g)
        batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        if name == "gpt2":
            batch["labels"] = ids.clone()
        elif name == "bert":
            masked = torch.rand(ids.shape, generator=g) < 0.15
            masked[:, 0] = True  # every sequence has a masked position, however it is shortened
            batch["labels"] = torch.where(masked, ids, torch.full_like(ids, -100))
            batch["input_ids"] = torch.where(masked, torch.full_like(ids, 3), ids)
        else:
            batch["labels"] = torch.randint(0, HF_CLASSES, (settings.batch_size,), generator=g)
        batches.append(batch)
    loss = {"gpt2": _causal_lm_loss, "bert": lm_loss, "roberta": F.cross_entropy}[name]
    return Workload(hf_model(name, settings.seed), batches, input_key=None, target_key="labels", loss_fn=loss)


def run_model_cell(cell: ModelCell, settings: Any, records: Mapping[str, Any]) -> dict[str, Any]:
    """The ``models`` entry of ``cell``: its method on a Hugging Face model in the project's Trainer."""
    record = records[cell.method]
    precision = method_precision(record)
    head = {"model": cell.model, "method": cell.method, "precision": precision}
    if cell.model == TORCHVISION_TIMM:
        return {**head, **_not_run(TESTED_ELSEWHERE)}
    why = _missing("transformers", "transformers")
    if why is not None:
        return {**head, **_not_run(why)}

    def run(probe: Any) -> Any:
        workload = hf_workload(cell.model, settings)
        return _run_trainer(workload, _methods(cell.method, records, workload), settings, precision, probe)

    return {**head, **settle(run, record.class_name)}


# --------------------------------------------------------------------------------------------- sections


def section_versions() -> dict[str, str | None]:
    """The versions the sections ran with (None: not installed)."""
    import importlib.metadata

    versions: dict[str, str | None] = {}
    for name in ("torch", "transformers", "lightning"):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def run_section(
    name: str,
    settings: Any,
    records: Mapping[str, Any],
    progress: Progress = lambda line: None,
    only: Sequence[str] = (),
) -> dict[str, Any]:
    """One section of the results file: ``{"versions", "wall_s", "cells"}``, each cell run in turn
    (``only``: just the cells of these method keys)."""
    start = time.perf_counter()
    plan: Sequence[Any]
    if name == "loops":
        plan, runner = plan_loop_cells(records), run_loop_cell
    elif name == "models":
        plan, runner = plan_model_cells(records), run_model_cell
    else:
        raise ValueError(f"section {name!r}: use one of {', '.join(SECTIONS)}")
    if only:
        plan = [cell for cell in plan if cell.method in only]
    cells = []
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    for i, cell in enumerate(plan, start=1):
        with contextlib.redirect_stdout(io.StringIO()):  # Lightning's and transformers' banners
            entry = runner(cell, settings, records)
        cells.append(entry)
        tail = f" ({entry['detail']})" if entry["detail"] else ""
        progress(f"[{i}/{len(plan)}] {cell.label}: {entry['outcome']}{tail} ({entry['wall_s']:.1f} s)")
    return {"versions": section_versions(), "wall_s": round(time.perf_counter() - start, 1), "cells": cells}
