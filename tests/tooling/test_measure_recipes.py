"""The effects harness and the composability matrix take a recipe (algorithms.recipes): a sweep of the
recipes workload measures each recipe's whole stack as one method against the baseline, its worker
builds that stack and reports every member's activity (acted only when every member did); the
matrix runs each stack together and decides each member's effects against the stack without it."""

from __future__ import annotations

import pytest
from methods_tools import compare_worker, matrix, measure
from methods_tools.results import discover_composability, load_composability

from algorithms.recipes import RECIPES, small_scale_hparams

ENV = {
    "hardware": "Test CPU, 2 cores (CPU only)",
    "device_type": "cpu",
    "device_name": "Test CPU",
    "device_count": 1,
    "cpu_model": "Test CPU",
    "cpu_count": 2,
    "torch": "2.0.0",
    "cuda": None,
    "python": "3.11.0",
    "platform": "Linux",
    "date": "2026-01-02T03:04:05Z",
    "load_average": [1.0, 1.0, 1.0],
}


def _options(**changes) -> measure.MeasureOptions:
    return measure.WORKLOADS["recipes"].options(
        "recipes", (0, 1, 2), command="python tools/measure_methods.py", **changes
    )


def fake_run(job, options, env, progress):
    """A run whose accuracy falls by 2 points per recipe member (so each recipe's change is known)."""
    method = job.method != measure.BASELINE
    members = len(job.hparams) if method else 0
    return {
        "method": job.method,
        "model": job.model,
        "precision": job.precision,
        "seed": job.seed,
        "hparams": dict(job.hparams),
        "status": "ok",
        "reason": None,
        "date": env["date"],
        "load_average": [1.0, 1.0, 1.0],
        "command": options.command,
        "wall_s": 10.0 + members + job.seed / 10,
        "eval_s": 1.0,
        "job_s": 15.0,
        "samples": 1000,
        "tokens": None,
        "throughput": 1000 / (10.0 + members + job.seed / 10),
        "peak_memory_bytes": 1000 + job.seed,
        "memory_kind": "cpu_peak_rss",
        "accuracy": 0.9 + job.seed / 1000 - 0.02 * members + (0.001 * job.seed if method else 0),
        "loss": 0.5,
        "activity": {"EMA.averaging_updates": 3} if method else None,
        "acted": True if method else None,
    }


def test_the_recipes_workload_measures_each_recipes_stack_as_one_method(tmp_path):
    options = _options()
    assert options.method_hparams() == {key: small_scale_hparams(r) for key, r in RECIPES.items()}
    assert options.method_workloads() == {}
    out = tmp_path / "recipes.json"
    document = measure.run_measurement(options, out, runner=fake_run, env=ENV)
    # per seed, the baseline and then each recipe, interleaved
    assert [r["method"] for r in document["runs"][:4]] == ["baseline", "mild", "medium", "hot"]
    hot = next(e for e in document["summary"] if e["method"] == "hot")
    assert hot["hparams"] == small_scale_hparams(RECIPES["hot"])
    # the change the fake runs were given: 2 points per member, plus 0.1 point per seed
    assert hot["quality"]["change"] == pytest.approx(-0.02 * 10 + 0.001, abs=1e-9)
    assert hot["quality"]["verdict"] == "worse" and hot["quality"]["holm_family"] == 3
    assert measure.load_effects(out) == document  # written through the tool, valid by the schema


def test_a_recipe_job_runs_the_worker_with_the_recipes_stack():
    options = _options()
    job = measure.Job("medium", 0, small_scale_hparams(RECIPES["medium"]))
    settings = measure.compare_options(job, options)
    assert settings.algorithm == "recipe:medium" and settings.model == "torchvision_resnet18"
    assert measure.compare_options(measure.Job(measure.BASELINE, 0), options).algorithm is None
    stack = compare_worker.run_algorithms(settings.algorithm, small_scale_hparams(RECIPES["medium"]))
    assert [type(a).__name__ for a in stack] == [type(a).__name__ for a in RECIPES["medium"].algorithms()]
    assert stack[2].half_life == "10ba"  # EMA, as run small


def test_only_names_recipes_and_refuses_a_method(capsys, tmp_path):
    args = measure._parser(measure.__doc__).parse_args(
        ["--workload", "recipes", "--only", "cutmix", "--out", str(tmp_path / "x.json")]
    )
    problems, _ = measure.check_args(args)
    assert "--only: 'cutmix' is not a recipe — use one of mild, medium, hot" in problems


class _Log:
    """A method log of three algorithms, the second of which did nothing."""

    records = {
        "BlurPool": {"activity": {"modules_replaced": 7}},
        "SAM": {"activity": {"sam_steps": 0}},
        "EMA": {"activity": {"averaging_updates": 4}},
    }

    def acted(self, label):
        return any(n > 0 for n in self.records[label]["activity"].values())


def test_a_stack_acted_only_when_every_member_acted():
    stack = [type(name, (), {})() for name in ("BlurPool", "SAM", "EMA")]  # labelled by class name
    activity, acted = compare_worker.stack_activity(_Log(), stack)
    assert activity == {"BlurPool.modules_replaced": 7, "SAM.sam_steps": 0, "EMA.averaging_updates": 4}
    assert acted is False
    # one method alone keeps its counters' own names
    assert compare_worker.stack_activity(_Log(), stack[:1]) == ({"modules_replaced": 7}, True)


def test_the_matrix_plans_one_cell_per_recipe_outside_the_methods_plan():
    cells = matrix.recipe_cells()
    assert [c.recipe for c in cells] == list(RECIPES)
    assert all(c.kind == "recipe" and c.precision == "fp32" and c.parallel == "single" for c in cells)
    assert cells[0].methods == tuple(m.key for m in RECIPES["mild"].members)
    assert matrix.Cell.from_dict(cells[2].as_dict()) == cells[2]
    assert not [c for c in matrix.plan_cells() if c.kind == "recipe"]  # the methods' plan is unchanged
    assert len([c for c in matrix.plan_cells(kinds=matrix.CELL_KINDS) if c.kind == "recipe"]) == 3


@pytest.mark.slow
def test_a_recipe_cell_runs_its_stack_and_sees_every_members_effect():
    """Mild's stack on the matrix's workload: each member's effect decided against the stack less it."""
    [entry] = matrix.run_cells(matrix.recipe_cells()[:1], matrix.Settings())
    assert entry["outcome"] == "runs", matrix.describe(entry)
    assert entry["recipe"] == "mild" and entry["missing"] == []
    assert {"progressive_resizing.smaller_inputs", "ema.changed_weights", "blurpool.changed_model"} <= set(
        entry["seen"]
    )
    assert "ema.average" in entry["checks"]
    committed = load_composability(next(iter(discover_composability())))
    document = matrix.build_document(committed["environment"], matrix.Settings(), ["test"], 1.0, [entry])
    assert document["cells"][0]["recipe"] == "mild"


def test_a_member_whose_effect_does_not_show_fails_the_recipe_cell():
    cell = matrix.recipe_cells()[1]  # Medium
    run = matrix.CellRun(seen=[], batches=[])
    records = {k: r for k, r in matrix._method_records().items()}
    entry = matrix.decide(cell, run, records, references={})
    assert entry["outcome"] == "fails" and "sam.changed_weights" in entry["missing"]
