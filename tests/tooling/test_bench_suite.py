"""The benchmark runner (``nox -s bench``) and the training loop's cost benchmark; no timing is asserted."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest
from methods_tools.results import bench_problems, load_bench

from algorithms.metadata import PACKAGE_ROOT

BENCHMARKS = PACKAGE_ROOT.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import batch_methods  # noqa: E402
import run as bench_run  # noqa: E402
import trainer_overhead  # noqa: E402


def _row(what, value, target, compare="<", met=None):
    return {
        "what": what,
        "value": value,
        "unit": "x",
        "spread": [value, value],
        "target": target,
        "compare": compare,
        "met": met if met is not None else True,
    }


@pytest.fixture
def fake_sections(monkeypatch):
    """Two sections whose rows claim 'met' whatever their values say, as a buggy section might."""
    modules = {
        "alpha": types.SimpleNamespace(
            run=lambda quick: {
                "title": "Alpha",
                "details": {"quick": quick},
                "rows": [_row("a below", 1.5, 2.0, met=False), _row("a above", 2.5, 2.0, met=True)],
            }
        ),
        "beta": types.SimpleNamespace(
            run=lambda quick: {"title": "Beta", "details": {}, "rows": [_row("b at the bound", 6.0, 6.0, "<=")]}
        ),
    }
    monkeypatch.setattr(bench_run, "SECTIONS", tuple(modules))
    monkeypatch.setattr(bench_run, "load_section", modules.__getitem__)
    return modules


def test_the_runner_decides_every_verdict_by_the_comparison_and_writes_a_valid_file(fake_sections, tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert bench_run.main(["--output", str(out)]) == 1  # one target missed
    document = load_bench(out)
    rows = {r["what"]: r for s in document["sections"].values() for r in s["rows"]}
    assert [rows[w]["met"] for w in ("a below", "a above", "b at the bound")] == [True, False, True]
    assert document["targets"] == {"met": 2, "total": 3}
    assert document["sections"]["alpha"]["details"] == {"quick": False}
    assert document["environment"]["hardware"] and document["environment"]["load_average_at_end"] is not None
    printed = capsys.readouterr().out
    assert "a above" in printed and "target < 2.00x: MISSED" in printed and "2 of 3 targets met" in printed


def test_the_runner_runs_only_the_sections_asked_for_and_exits_0_when_all_are_met(fake_sections, tmp_path):
    out = tmp_path / "bench.json"
    assert bench_run.main(["--only", "beta", "--quick", "--output", str(out)]) == 0
    document = json.loads(out.read_text())
    assert list(document["sections"]) == ["beta"] and document["quick"] is True


def test_an_existing_results_file_is_kept_without_force_and_bad_sections_are_refused(fake_sections, tmp_path, capsys):
    out = tmp_path / "bench.json"
    out.write_text("keep me")
    with pytest.raises(SystemExit) as exit_info:
        bench_run.main(["--output", str(out)])
    assert exit_info.value.code == 2 and out.read_text() == "keep me"
    assert "exists; pass --force" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        bench_run.main(["--only", "alpha,gamma", "--output", str(tmp_path / "other.json")])
    assert exit_info.value.code == 2 and "unknown section(s) gamma" in capsys.readouterr().err
    assert not (tmp_path / "other.json").exists()
    assert bench_run.main(["--output", str(out), "--force"]) == 1 and load_bench(out)


def test_a_section_that_breaks_the_schema_writes_nothing(monkeypatch, tmp_path):
    broken = types.SimpleNamespace(
        run=lambda quick: {
            "title": "Broken",
            "details": {},
            "rows": [{**_row("no unit", 1.0, 2.0), "unit": "furlongs"}],
        }
    )
    monkeypatch.setattr(bench_run, "SECTIONS", ("broken",))
    monkeypatch.setattr(bench_run, "load_section", lambda name: broken)
    with pytest.raises(SystemExit, match="unit"):
        bench_run.main(["--output", str(tmp_path / "bench.json")])
    assert not (tmp_path / "bench.json").exists()


def test_the_trainer_overhead_rows_compare_the_trainer_with_the_plain_loop():
    section = trainer_overhead.run(quick=True)
    assert [r["target"] for r in section["rows"]] == [2.0, 3.0] and all(r["unit"] == "%" for r in section["rows"])
    document = {
        "schema_version": 1,
        "environment": {},
        "quick": True,
        "command": "x",
        "targets": {"met": 0, "total": 0},
        "sections": {"s": section},
    }
    assert not [line for line in bench_problems(document) if "/sections" in line]  # a valid section
    per_round = section["details"]["seconds_per_batch"]["resnet20"]
    assert set(per_round) == {"plain", "trainer", "trainer + 28 idle algorithms"}
    for row, name in zip(section["rows"], ("trainer", "trainer + 28 idle algorithms"), strict=True):
        ratios = [100 * (t / p - 1) for t, p in zip(per_round[name], per_round["plain"], strict=True)]
        assert row["spread"] == pytest.approx([min(ratios), max(ratios)])
        assert min(ratios) <= row["value"] <= max(ratios)


def test_the_three_loops_take_the_same_steps():
    """The plain loop and the Trainer do the same work: from the same weights over the same batches
    they end at the same weights, and the idle algorithms never run."""
    import copy

    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    batches = trainer_overhead._batches((4, 8), 2, 3)
    copies = [copy.deepcopy(model) for _ in range(3)]
    trainer_overhead._plain(copies[0], batches)()
    trainer_overhead._trainer(copies[1], batches, 0)()
    trainer_overhead._trainer(copies[2], batches, trainer_overhead.IDLE_ALGORITHMS)()  # Idle.apply would raise
    for a, b, c in zip(*(m.parameters() for m in copies), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
        torch.testing.assert_close(a, c, rtol=0, atol=0)
    assert not torch.equal(next(model.parameters()), next(copies[0].parameters()))


def test_the_bench_session_writes_where_the_other_results_files_live():
    env = {"device_name": "AMD EPYC 7B13", "device_type": "cpu", "date": "2026-12-05T01:00:00Z"}
    assert bench_run.default_output(env) == PACKAGE_ROOT.parent / "results" / "bench" / "cpu-amd-epyc-7b13.json"
    assert Path(bench_run.__file__).parent == BENCHMARKS


def test_the_sites_performance_tables_are_the_committed_results_rendered(tmp_path):
    """The measurements page's Performance tables are generated from results/bench/
    (python benchmarks/run.py --page): a copy of the page is already current, so the committed one
    has not drifted."""
    assert bench_run.PAGE == PACKAGE_ROOT.parent / "docs" / "source" / "measurements.md"
    copy = tmp_path / "measurements.md"
    copy.write_text(bench_run.PAGE.read_text(encoding="utf-8"), encoding="utf-8")
    assert not bench_run.update_page(copy, bench_run.committed_results(), root=PACKAGE_ROOT.parent), (
        "docs/source/measurements.md: run python benchmarks/run.py --page"
    )


def test_the_performance_table_shows_every_row_beside_its_target_and_keeps_the_rest(fake_sections, tmp_path):
    results = tmp_path / "results" / "bench" / "cpu-test.json"
    results.parent.mkdir(parents=True)
    assert bench_run.main(["--output", str(results)]) == 1
    page = tmp_path / "measurements.md"
    page.write_text(
        "# Title\n\nbefore\n\n<!-- generated: performance -->\nold\n<!-- end generated: performance -->\n"
        "\nafter | with a pipe\n"
    )
    assert bench_run.update_page(page, [results], root=tmp_path) and not bench_run.update_page(
        page, [results], root=tmp_path
    )
    text = page.read_text()
    assert text.startswith("# Title\n\nbefore\n\n<!-- generated: performance -->\n")
    assert text.endswith("<!-- end generated: performance -->\n\nafter | with a pipe\n") and "old" not in text
    assert "| a below | 1.50x | 1.50x to 1.50x | < 2.00x | met |" in text
    assert "| a above | 2.50x | 2.50x to 2.50x | < 2.00x | **missed** |" in text
    assert "| b at the bound | 6.00x | 6.00x to 6.00x | <= 6.00x | met |" in text
    assert "in `results/bench/cpu-test.json`: 2 of 3 targets met" in text  # named from the repository
    page.write_text("no markers\n")
    with pytest.raises(SystemExit, match="no '<!-- generated: performance -->' region"):
        bench_run.update_page(page, [results], root=tmp_path)
    assert page.read_text() == "no markers\n"


def test_the_performance_tables_show_the_batch_methods_parts_beside_their_floors_escaped(monkeypatch, tmp_path):
    parts = {
        "256x3x32x32": [
            {"what": "box copy", "of": "cutmix_batch", "floor": "clone", "value": 0.9, "spread": [0.85, 1.25]}
        ]
    }
    section = types.SimpleNamespace(
        run=lambda quick: {
            "title": "Batch",
            "rows": [_row("cutmix_batch / floor (clone), 256x3x32x32", 2.2, 2.0, met=False)],
            "details": {
                "parts": parts,
                "part_calls": {
                    "box copy": {"call": "out[:, :, box].copy_(x[:, :, box]) <b>", "about": "the box <i>alone</i>"}
                },
            },
        }
    )
    monkeypatch.setattr(bench_run, "SECTIONS", ("batch_methods",))
    monkeypatch.setattr(bench_run, "load_section", {"batch_methods": section}.__getitem__)
    results = tmp_path / "results" / "bench" / "cpu-test.json"
    results.parent.mkdir(parents=True)
    bench_run.main(["--output", str(results)])
    page = tmp_path / "measurements.md"
    page.write_text("<!-- generated: performance -->\n<!-- end generated: performance -->\n")
    bench_run.update_page(page, [results], root=tmp_path)
    text = page.read_text()
    assert (
        "| box copy: `out[:, :, box].copy_(x[:, :, box]) <b>`, the box \\<i\\>alone\\</i\\> | cutmix\\_batch | "
        "256x3x32x32 | 0.90x | 0.85x to 1.25x |"
    ) in text
    assert "Where CutMix, MixUp and label smoothing spend their time: the passes of torch's ops they run" in text


# --------------------------------------------------------------------------------------------- --peers


@pytest.fixture
def peers_section(monkeypatch):
    """batch_methods as a fake section, and a peer that imports."""
    section = types.SimpleNamespace(
        run=lambda quick: {"title": "Batch", "details": {}, "rows": [_row("ours / peer", 0.5, 1.0)]},
        PEER_MODULES=batch_methods.PEER_MODULES,
    )
    monkeypatch.setattr(bench_run, "load_section", {"batch_methods": section}.__getitem__)
    monkeypatch.setattr(bench_run, "_imports", lambda module: module == "timm.data.mixup")
    return section


def test_peers_runs_the_batch_methods_alone_into_the_peers_folder(peers_section, tmp_path, monkeypatch):
    env = {"device_name": "AMD EPYC 7B13", "device_type": "cpu", "date": "2026-12-05T01:00:00Z"}
    assert bench_run.default_output(env, peers=True) == (
        PACKAGE_ROOT.parent / "results" / "bench" / "peers" / "cpu-amd-epyc-7b13.json"
    )
    out = tmp_path / "results" / "bench" / "peers" / "cpu-test.json"
    assert bench_run.main(["--peers", "--output", str(out)]) == 0
    document = load_bench(out)
    assert list(document["sections"]) == ["batch_methods"]
    # the schema is named relative to the file, as an editor resolves it
    assert (out.parent / document["$schema"]).resolve() == (PACKAGE_ROOT / "bench.schema.json").resolve()


def test_peers_refuses_where_no_peer_imports_and_beside_only(peers_section, tmp_path, monkeypatch, capsys):
    out = tmp_path / "peers.json"
    with pytest.raises(SystemExit) as exit_info:
        bench_run.main(["--peers", "--only", "docs_scale", "--output", str(out)])
    assert (
        exit_info.value.code == 2
        and "--peers runs the batch methods alone: leave out --only" in capsys.readouterr().err
    )
    monkeypatch.setattr(bench_run, "_imports", lambda module: False)
    with pytest.raises(SystemExit) as exit_info:
        bench_run.main(["--peers", "--output", str(out)])
    err = capsys.readouterr().err
    assert (
        exit_info.value.code == 2
        and "none of torchvision.transforms.v2, timm.data.mixup, composer.functional "
        "imports here; run it as nox -s bench_peers"
        in err
    )
    assert not out.exists()


def test_the_performance_tables_name_the_session_of_each_results_file(peers_section, tmp_path):
    results = tmp_path / "results" / "bench"
    peers = results / "peers" / "cpu-test.json"
    assert bench_run.main(["--peers", "--output", str(peers)]) == 0
    plain = results / "cpu-test.json"
    plain.write_text(peers.read_text().replace('"../../../algorithms/', '"../../algorithms/'))
    page = tmp_path / "measurements.md"
    page.write_text("<!-- generated: performance -->\n<!-- end generated: performance -->\n")
    assert bench_run.update_page(page, [plain, peers], root=tmp_path)
    text = page.read_text()
    # each table names the command that measured it, and the session that runs the whole suite
    command = json.loads(plain.read_text())["command"].replace("_", "\\_")
    assert f"Measured by `{command}` (`nox -s bench` runs the whole suite) on" in text
    assert "in `results/bench/cpu-test.json`:" in text
    assert (
        "(`nox -s bench_peers` runs the whole suite) on" in text and "in `results/bench/peers/cpu-test.json`:" in text
    )
    assert "| ours / peer | 0.50x | 0.50x to 0.50x | < 1.00x | met |" in text
