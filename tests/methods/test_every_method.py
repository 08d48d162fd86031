"""What every method must do, parametrized over the metadata registry.

A new method folder (``algorithms/<key>/`` with ``metadata.json`` of kind ``method``) is covered
here at once: nothing below names a method. What a method is given comes from its metadata
(``domains``) and from the parameter names of its functional form.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import pkgutil

import pytest
import torch

import algorithms
import algorithms.functional as cf
from algorithms.core import Algorithm, Event, Trainer
from algorithms.metadata import Kind, load_all_metadata

METHODS = [r for r in load_all_metadata().values() if r.kind == Kind.METHOD]
WITH_CLASS = [r for r in METHODS if r.class_name]
WITH_FUNCTIONAL = [r for r in METHODS if r.functional]
WITH_BOTH = [r for r in WITH_CLASS if r.functional]
NUM_CLASSES = 4


def _ids(records):
    return [r.key for r in records]


def _cls(record):
    return getattr(algorithms, record.class_name)


def _functional(record):
    return getattr(cf, record.functional)


# -- workloads: a small model and batches per domain ------------------------------------------


def _vision():
    """A small convolutional network holding the module classes vision methods change (a strided
    convolution 16 wide, batch norm, max pooling, group norm, dropout, a linear layer)."""
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, stride=2, padding=1, bias=False),
        torch.nn.BatchNorm2d(16),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.GroupNorm(4, 16),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Dropout(0.1),
        torch.nn.Linear(16, NUM_CLASSES),
    )
    return model, lambda g, bs: torch.randn(bs, 3, 8, 8, generator=g), {}


def _nlp(length=8, vocab=11):
    """The reference transformer on dict batches of token ids, labelled with the next token."""
    from algorithms.models import lm_loss, transformer_tiny

    def batch(g, bs):
        tokens = torch.randint(0, vocab, (bs, length + 1), generator=g)
        return {"input_ids": tokens[:, :-1], "labels": tokens[:, 1:]}

    return transformer_tiny(vocab), batch, {"input_key": "input_ids", "target_key": "labels", "loss_fn": lm_loss}


def _general():
    return torch.nn.Linear(5, NUM_CLASSES), lambda g, bs: torch.randn(bs, 5, generator=g), {}


# The first of a method's domains found here picks its workload; the order prefers images.
WORKLOADS = {"vision": _vision, "nlp": _nlp, "general": _general}


def _workload(record, n_batches=2, batch_size=6, seed=0):
    """``(model, batches, trainer keyword arguments)`` for the method's first domain that has a
    workload: tuple batches ``(input, class)`` or, for nlp, dict batches."""
    domain = next((d for d in WORKLOADS if d in record.domains), None)
    if domain is None:
        pytest.fail(
            f"{record.key}: no workload for domains {list(record.domains)} — add one to WORKLOADS in {__file__}"
        )
    torch.manual_seed(seed)
    model, make_input, options = WORKLOADS[domain]()
    g = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(n_batches):
        inputs = make_input(g, batch_size)
        batches.append(
            inputs if isinstance(inputs, dict) else (inputs, torch.randint(0, NUM_CLASSES, (batch_size,), generator=g))
        )
    return model, batches, options


def _tensors(batch):
    """A batch's tensors, of a tuple or a dict batch."""
    return list(batch.values()) if isinstance(batch, dict) else list(batch)


def _changes_the_model(record):
    """A surgery method: its functional form changes the model (and its optimizers) it is given, by
    its contract (the ``changed_model`` observable)."""
    return "changed_model" in record.observable


def _build(record):
    """The class with its defaults; a parameter without one (Stochastic Depth's target layer) gets
    its metadata's suggested value."""
    required = {
        name: record.hyperparameters[name].suggested
        for name, p in inspect.signature(_cls(record)).parameters.items()
        if p.default is inspect.Parameter.empty and name in record.hyperparameters
    }
    return _cls(record)(**required)


def _functional_arguments(record):
    """The required arguments of the functional form, built from their names (a hyperparameter
    without a default takes its metadata's suggested value)."""
    g = torch.Generator().manual_seed(0)
    model, [batch], _ = _workload(record, n_batches=1)
    inputs, target = _tensors(batch)
    makers = {
        "input": lambda: inputs,
        "sample": lambda: inputs,  # Composer's name where the input may also be an (input, target) pair
        "img": lambda: inputs,  # Composer's name for the image (or batch) of an augmentation
        "target": lambda: target,
        "logits": lambda: torch.randn(len(target), NUM_CLASSES, generator=g),
        "scale_factor": lambda: 0.5,
        "model": lambda: model,
        "module": lambda: model,  # Composer's name for the model in apply_weight_standardization
        "loss_fun": lambda: torch.nn.functional.cross_entropy,
        "batch": lambda: batch,  # Sequence Length Warmup's dict batch
        "grads": lambda: [torch.randn(p.shape, generator=g) for p in model.parameters()],  # SAM's
        "curr_seq_len": lambda: 4,
        "ema_model": lambda: copy.deepcopy(model),  # the averaged copy EMA's and SWA's forms update
        "swa_model": lambda: copy.deepcopy(model),
        "num_averaged": lambda: 1,
        "optimizers": lambda: torch.optim.SGD(model.parameters(), lr=0.1),  # Layer Freezing's
        "current_duration": lambda: 0.75,
        "iters_per_epoch": lambda: 2,  # Gyro Dropout's schedule: the length of the training run
        "max_epoch": lambda: 1,
    }
    args = {}
    for name, param in inspect.signature(_functional(record)).parameters.items():
        if param.default is not inspect.Parameter.empty or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if name in makers:
            args[name] = makers[name]()
        elif name in record.hyperparameters:
            args[name] = record.hyperparameters[name].suggested
        else:
            pytest.fail(
                f"{record.functional}: no test input for parameter {name!r} — add it to "
                f"_functional_arguments in {__file__}"
            )
    return args


class _Losses(Algorithm):
    """Records the loss of every step, after every other algorithm has changed it."""

    def __init__(self):
        self.losses = []

    def match(self, event, state):
        return event is Event.BEFORE_BACKWARD

    def apply(self, event, state, logger=None):
        self.losses.append(state.loss.detach())


class _SeenBatches(Algorithm):
    """Records the batch the loss was computed on (before anything restores it)."""

    def __init__(self):
        self.batches = []

    def match(self, event, state):
        return event is Event.BEFORE_LOSS

    def apply(self, event, state, logger=None):
        self.batches.append([t.detach().clone() for t in _tensors(state.batch)])


# -- the shared tests --------------------------------------------------------------------------


@pytest.mark.parametrize("record", WITH_CLASS, ids=_ids(WITH_CLASS))
def test_constructs_with_its_defaults_and_trains_two_batches(record):
    algo = _build(record)
    assert isinstance(algo, Algorithm)
    model, batches, options = _workload(record)
    losses = _Losses()
    trainer = Trainer(model, batches, "2ba", algorithms=[algo, losses], seed=0, device="cpu", **options)
    trainer.fit()
    assert trainer.state.timestamp.batch == 2
    assert len(losses.losses) == 2 and all(torch.isfinite(loss) for loss in losses.losses)
    assert all(torch.isfinite(p).all() for p in trainer.state.model.parameters())
    assert any(algo.name in t.algorithms for t in trainer.engine.trace)  # it ran
    activity = trainer.method_log.records[algo.name]["activity"]
    assert list(activity) == list(algo.activity) and all(type(n) is int and n >= 0 for n in activity.values())


@pytest.mark.parametrize("record", WITH_CLASS, ids=_ids(WITH_CLASS))
def test_declares_what_it_counts_in_words_a_reader_understands(record):
    """Its counters, all 0 after a run, say it did not act (its ``acted`` decides)."""
    algo = _build(record)
    assert algo.activity and all(isinstance(name, str) and name.isidentifier() for name in algo.activity)
    assert all(isinstance(phrase, str) and phrase.strip() for phrase in algo.activity.values())
    assert not algo.acted(dict.fromkeys(algo.activity, 0))


def test_every_algorithm_class_of_the_package_declares_its_activity():
    """Not only the registry's classes: a helper class of the package (a figure's recorder) too."""
    for info in pkgutil.walk_packages(algorithms.__path__, "algorithms."):
        importlib.import_module(info.name)

    def subclasses(cls):
        for sub in cls.__subclasses__():
            yield sub
            yield from subclasses(sub)

    library = {
        cls for cls in subclasses(Algorithm) if cls.__module__.startswith("algorithms.") and not inspect.isabstract(cls)
    }
    assert len(library) > len(WITH_CLASS)
    assert [cls.__qualname__ for cls in library if not cls.activity] == []


@pytest.mark.parametrize("record", WITH_CLASS, ids=_ids(WITH_CLASS))
def test_training_leaves_the_callers_batches_unchanged(record):
    model, batches, options = _workload(record)
    before = copy.deepcopy(batches)
    Trainer(model, batches, "2ba", algorithms=[_build(record)], seed=0, device="cpu", **options).fit()
    for batch, original in zip(batches, before, strict=True):
        for t, t0 in zip(_tensors(batch), _tensors(original), strict=True):
            assert torch.equal(t, t0)


@pytest.mark.parametrize("record", WITH_FUNCTIONAL, ids=_ids(WITH_FUNCTIONAL))
def test_the_functional_form_leaves_its_arguments_unchanged(record):
    """Except, for a surgery method, the model (and optimizers) it exists to change, and the
    averaged copy a weight-averaging form updates by its contract (``ema_model``, ``swa_model``)."""
    args = _functional_arguments(record)
    before = {k: _snapshot(v) for k, v in args.items()}
    _functional(record)(**args)
    changed = {"ema_model", "swa_model"}
    if _changes_the_model(record):
        changed |= {"model", "module", "optimizers"}
    for name, value in args.items():
        if name in changed:
            continue
        assert _equal_state(_snapshot(value), before[name]), f"{record.functional} changed its argument {name!r}"


def _snapshot(value):
    """What an argument holds: a tensor's values, a module's parameters and buffers (and its
    train/eval mode), anything else as it is."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, torch.nn.Module):
        return {"training": value.training, **{k: v.detach().clone() for k, v in value.state_dict().items()}}
    return value


@pytest.mark.parametrize("record", WITH_BOTH, ids=_ids(WITH_BOTH))
def test_functional_defaults_equal_the_class_defaults(record):
    functional = inspect.signature(_functional(record)).parameters
    constructor = inspect.signature(_cls(record)).parameters
    # A class default of None is derived from the class's other arguments (EMA's smoothing from
    # its half_life, as Composer's), so the form's default is not compared with it.
    shared = {n for n in functional.keys() & constructor.keys() if constructor[n].default is not None}
    assert {n: functional[n].default for n in shared} == {n: constructor[n].default for n in shared}


def test_a_refused_parallel_mode_is_a_known_mode_with_a_one_line_reason():
    """``unsupported_parallel`` maps Trainer parallel modes to a reason of one line that says what to
    do instead; EMA and SWA, which copy the whole model, refuse FSDP and ZeRO stage 3."""
    from algorithms.core.options import REFUSAL_MODES

    for record in WITH_CLASS:
        refused = _cls(record).unsupported_parallel
        assert set(refused) <= set(REFUSAL_MODES), record.key
        assert all(isinstance(r, str) and r.strip() and "\n" not in r for r in refused.values()), record.key
    for cls in (algorithms.EMA, algorithms.SWA):
        assert set(cls.unsupported_parallel) == {"fsdp", "deepspeed:3"}  # both shard the parameters
        assert "ddp" in cls.unsupported_parallel["fsdp"].lower()
        with pytest.raises(TypeError):
            cls.unsupported_parallel["ddp"] = "x"  # read-only, shared by every instance
    assert dict(Algorithm.unsupported_parallel) == {}


def _namespace():
    return {name: getattr(algorithms, name) for name in algorithms.__all__}


@pytest.mark.parametrize("record", WITH_CLASS, ids=_ids(WITH_CLASS))
def test_the_repr_is_a_call_that_builds_an_equal_algorithm(record):
    """With its defaults, with its metadata's suggested values, and with a manual seed:
    ``eval(repr(algo))`` in the package's namespace builds an algorithm with the same repr and
    hyperparameters."""
    suggested = {name: spec.suggested for name, spec in record.hyperparameters.items()}
    for algo in (_build(record), _cls(record)(**suggested), _build(record).manual_seed(5)):
        text = repr(algo)
        try:
            again = eval(text, _namespace())
        except Exception as exc:  # noqa: BLE001 - the message names the repr that is not a valid call
            pytest.fail(f"{record.key}: eval({text!r}) raised {type(exc).__name__}: {exc}")
        assert repr(again) == text and again.hyperparameters() == algo.hyperparameters()


@pytest.mark.skipif(
    not hasattr(Algorithm, "state_dict"),
    reason="Algorithm.state_dict()/load_state_dict() do not exist yet (algorithms/core/algorithm.py)",
)
@pytest.mark.parametrize("record", WITH_CLASS, ids=_ids(WITH_CLASS))
def test_state_dict_round_trip_resumes_the_same_draws(record):
    """A copy restored from ``state_dict()`` has the same state and goes on exactly as the
    original does: the batches the loss sees after resuming are the same."""
    model, batches, options = _workload(record, n_batches=3)
    original = _build(record)
    Trainer(copy.deepcopy(model), batches[:1], "1ba", algorithms=[original], seed=0, device="cpu", **options).fit()
    restored = _build(record)
    restored.load_state_dict(copy.deepcopy(original.state_dict()))
    assert _equal_state(restored.state_dict(), original.state_dict())

    saved = copy.deepcopy(original.state_dict())

    def resume(algo):  # the state loaded after INIT, where the Trainer starts every algorithm afresh
        seen = _SeenBatches()
        trainer = Trainer(
            copy.deepcopy(model), batches[1:], "2ba", algorithms=[algo, seen], seed=1, device="cpu", **options
        )
        algo.load_state_dict(copy.deepcopy(saved))
        trainer.fit()
        return seen.batches

    for a, b in zip(resume(original), resume(restored), strict=True):
        assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def _equal_state(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal_state(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_equal_state, a, b))
    return a == b


def test_the_registry_has_methods():
    """Guards the parametrization above against an empty registry (which would pass silently)."""
    assert WITH_CLASS and WITH_FUNCTIONAL and WITH_BOTH


# -- a reused instance starts each run afresh ---------------------------------------------------


def _same(a, b) -> bool:
    if isinstance(a, torch.nn.Module) or isinstance(b, torch.nn.Module):
        return a is b
    try:
        return _equal_state(a, b)
    except RuntimeError:  # an object whose == is not a bool
        return a is b


def _run(algo, record, seed):
    """Train 2 batches of the method's workload with ``algo`` and the Trainer's ``seed``: the batches
    the loss saw, the losses, the final weights and the algorithm's state."""
    model, batches, options = _workload(record)
    seen, losses = _SeenBatches(), _Losses()
    trainer = Trainer(model, batches, "2ba", algorithms=[algo, seen, losses], seed=seed, device="cpu", **options)
    trainer.fit()
    model = trainer.state.model
    weights = [t.detach().clone() for t in [*model.parameters(), *model.buffers()]]
    return seen.batches, losses.losses, weights, copy.deepcopy(algo.state_dict())


def _assert_same_run(got, want, key):
    for name, a, b in zip(("batches", "losses", "weights", "state_dict"), got, want, strict=True):
        assert _same(a, b), f"{key}: the reused instance's {name} differ from a fresh instance's"


@pytest.mark.parametrize("record", WITH_CLASS, ids=_ids(WITH_CLASS))
def test_reset_forgets_what_a_run_left_as_a_fresh_instance_holds(record):
    algo = _build(record)
    _run(algo, record, seed=0)
    algo.reset()
    fresh = _build(record)
    assert _equal_state(algo.state_dict(), fresh.state_dict()), record.key
    mine, theirs = vars(algo), vars(fresh)
    differ = [k for k in theirs if not _same(mine.get(k), theirs[k])]
    left = [k for k in mine if k not in theirs and k != "_instance" and not _same(mine[k], getattr(fresh, k, None))]
    assert differ == [] and left == [], f"{record.key}: reset() left {differ + left}"
    assert algo.hyperparameters() == fresh.hyperparameters()


@pytest.mark.parametrize("record", WITH_CLASS, ids=_ids(WITH_CLASS))
def test_the_trainer_starts_a_reused_instance_afresh(record):
    """A seed sweep that builds its list once: the second Trainer (another seed) with the used instance
    trains exactly as with a fresh one, since the Engine calls ``reset()`` at ``Event.INIT`` (CutMix
    drew what it drew before, EMA and SWA went on averaging the first run's weights)."""
    reused = _build(record)
    _run(reused, record, seed=0)
    _assert_same_run(_run(reused, record, seed=1), _run(_build(record), record, seed=1), record.key)


@pytest.mark.parametrize("name", ["CutOut", "CutMix", "MixUp"])
def test_reset_keeps_a_manual_seed_and_the_next_run_draws_its_stream_again(name):
    record = next(r for r in WITH_CLASS if r.class_name == name)
    algo = _build(record).manual_seed(7)
    first = _run(algo, record, seed=0)
    algo.reset()
    assert algo.hyperparameters()["seed"] == 7 and repr(algo).endswith(".manual_seed(7)")
    again = _run(algo, record, seed=3)  # the Trainer's seed does not matter after manual_seed
    assert _same(again[0], first[0])
