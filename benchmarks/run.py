"""The benchmark suite (``nox -s bench``): every measured ratio beside its target, in one results file.

Each section is a module of this folder with ``run(quick=False) -> {"title", "rows", "details"}``;
a row is one measured figure (``value`` in ``unit``, its ``spread`` over the repeats, the
``target`` it is held to with ``compare``, and whether it ``met`` it). Sections time their subjects
side by side in one process, repeat, and report medians: these machines are shared and noisy, so
a ratio measured in one run says more than two times measured apart.

    python benchmarks/run.py                         # every section; writes results/bench/<machine>.json
    python benchmarks/run.py --only trainer_overhead --output /tmp/bench.json
    python benchmarks/run.py --quick --output -      # a smoke run: small sizes, the numbers mean nothing
    python benchmarks/run.py --peers                 # where torchvision, timm or Composer import (nox -s bench_peers)
    python benchmarks/run.py --page                  # the site's Performance tables, from results/bench/

The results file (schema ``algorithms/bench.schema.json``) names the machine, the software and the
load average it ran at; commit it. Exit status 1 when a target is missed (the file is written all
the same), 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# The site's measurements page holds the Performance tables, between these markers:
# <!-- generated: performance --> ... <!-- end generated: performance -->
PAGE = HERE.parent / "docs" / "source" / "measurements.md"
PAGE_REGION = "performance"
SECTIONS = ("batch_methods", "trainer_overhead", "import_time", "check_speed", "docs_scale", "effects_sweep")
PEERS_FOLDER = "peers"  # results/bench/peers/: --peers, run by nox -s bench_peers where the peers import
COMPARE = {"<": lambda value, target: value < target, "<=": lambda value, target: value <= target}


def _imports(module: str) -> bool:
    try:
        importlib.import_module(module)
    except Exception:  # absent or broken: the benchmark reports why
        return False
    return True


def load_section(name: str) -> Any:
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    return importlib.import_module(name)


def format_row(row: dict[str, Any]) -> str:
    unit = row["unit"]
    fmt = (lambda v: f"{v:.2f}x") if unit == "x" else (lambda v: f"{v:.2f} {unit}")
    lo, hi = row["spread"]
    verdict = "met" if row["met"] else "MISSED"
    return (
        f"  {row['what']:<70} {fmt(row['value']):>10}  [{fmt(lo)} .. {fmt(hi)}]  "
        f"target {row['compare']} {fmt(row['target'])}: {verdict}"
    )


def default_output(env: dict[str, Any], peers: bool = False) -> Path:
    """``results/bench/<cpu|gpu>-<hardware slug>.json``, named as the other results files are; with
    ``peers``, the same name in results/bench/peers/."""
    from methods_tools.compare import default_output_path
    from methods_tools.results import BENCH_DIR

    folder = BENCH_DIR / PEERS_FOLDER if peers else BENCH_DIR
    return folder / f"{default_output_path(env, BENCH_DIR).stem.removesuffix('-' + env['date'][:10])}.json"


def figure(value: float, unit: str) -> str:
    """A measured figure as the Performance tables show it: ``1.83x``, ``0.12 %``, ``0.21 s``, ``1``."""
    if unit == "pages":
        return f"{value:g}"
    return f"{value:.2f}x" if unit == "x" else f"{value:.2f} {unit}"


def committed_results() -> list[Path]:
    """The results files the Performance tables show: results/bench/*.json (``nox -s bench``), then
    results/bench/peers/*.json (``nox -s bench_peers``: the batch methods beside the peers)."""
    from methods_tools.results import BENCH_DIR

    return sorted(BENCH_DIR.glob("*.json")) + sorted((BENCH_DIR / PEERS_FOLDER).glob("*.json"))


def render_performance(paths: list[Path], root: Path) -> str:
    """The Performance region: a table per results file (validated), each named by its path from ``root``."""
    from methods_tools.docsgen import jinja_environment
    from methods_tools.results import load_bench

    documents = [
        {
            **load_bench(path),
            "path": path.relative_to(root).as_posix(),
            "session": "bench_peers" if path.parent.name == PEERS_FOLDER else "bench",
        }
        for path in paths
    ]
    env = jinja_environment(HERE)
    env.filters["figure"] = figure
    return env.get_template("performance.md.j2").render(documents=documents).strip("\n")


def update_page(page: Path = PAGE, results: list[Path] | None = None, root: Path | None = None) -> bool:
    """Rewrite the Performance region of ``page`` (default: the site's measurements page) from
    ``results`` (default: :func:`committed_results`), each file named by its path from ``root``
    (default: the repository); the rest of the file is kept byte for byte. Returns whether it changed."""
    from methods_tools.cards import Region, regions, replace_regions
    from methods_tools.files import write_if_changed

    results = committed_results() if results is None else results
    text = page.read_text(encoding="utf-8")
    if PAGE_REGION not in regions(text):
        raise SystemExit(
            f"{page}: no '<!-- generated: {PAGE_REGION} -->' region to rewrite — add the markers "
            "where the table belongs"
        )
    body = (
        render_performance(results, root or HERE.parent)
        if results
        else "No benchmark results are committed yet (run nox -s bench)."
    )
    return write_if_changed(page, replace_regions(text, {PAGE_REGION: Region(PAGE_REGION, 0, 0, body)}))


def run_suite(names: list[str], quick: bool, log=print) -> dict[str, Any]:
    from methods_tools.compare import environment

    env = environment()  # the load average as the run starts
    sections = {}
    for name in names:
        log(f"== {name}")
        start = time.perf_counter()
        section = load_section(name).run(quick=quick)
        section["seconds"] = round(time.perf_counter() - start, 1)
        for row in section["rows"]:  # the verdict is the comparison itself, decided here for every section
            row["met"] = COMPARE[row["compare"]](row["value"], row["target"])
        sections[name] = section
        log(f"{section['title']} ({section['seconds']} s)")
        for row in section["rows"]:
            log(format_row(row))
    end_env = environment()
    env["load_average_at_end"] = end_env["load_average"]
    rows = [row for section in sections.values() for row in section["rows"]]
    return {
        "$schema": "../../algorithms/bench.schema.json",
        "schema_version": 1,
        "environment": env,
        "quick": quick,
        "command": " ".join(["python", "benchmarks/run.py", *sys.argv[1:]]),
        "targets": {"met": sum(r["met"] for r in rows), "total": len(rows)},
        "sections": sections,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help=f"comma-separated sections, of: {', '.join(SECTIONS)}")
    parser.add_argument("--quick", action="store_true", help="small sizes and one repeat: checks the suite runs")
    parser.add_argument("--output", help="the results file (default results/bench/<machine>.json; - for stdout)")
    parser.add_argument("--force", action="store_true", help="overwrite the results file if it exists")
    parser.add_argument(
        "--peers",
        action="store_true",
        help="the batch methods only, where torchvision, timm or Composer import (nox -s bench_peers), "
        "into results/bench/peers/<machine>.json by default",
    )
    parser.add_argument(
        "--page",
        action="store_true",
        help="only rewrite the Performance tables of docs/source/measurements.md from the committed results files",
    )
    args = parser.parse_args(argv)
    if args.page:
        print(f"{PAGE}: {'rewritten' if update_page() else 'already current'}")
        return 0
    if args.peers:
        if args.only:
            parser.error("--peers runs the batch methods alone: leave out --only")
        modules = load_section("batch_methods").PEER_MODULES.values()
        if not any(_imports(module) for module in modules):
            parser.error(
                f"--peers: none of {', '.join(modules)} imports here; run it as nox -s bench_peers, which installs them"
            )
        names = ["batch_methods"]
    else:
        names = list(SECTIONS) if not args.only else [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in names if n not in SECTIONS]
    if unknown or not names:
        parser.error(
            f"--only {args.only!r}: unknown section(s) {', '.join(unknown) or '(none given)'}; "
            f"choose from {', '.join(SECTIONS)}"
        )
    from methods_tools.compare import environment
    from methods_tools.files import write_atomic
    from methods_tools.results import BENCH_SCHEMA_PATH, bench_problems

    output = (
        None
        if args.output == "-"
        else Path(args.output)
        if args.output
        else default_output(environment(), peers=args.peers)
    )
    if output is not None and output.exists() and not args.force:
        parser.error(f"{output}: exists; pass --force to overwrite it")
    document = run_suite(names, args.quick, log=lambda line: print(line, flush=True))
    if output is not None:  # the schema, relative to where the file is written
        document["$schema"] = Path(os.path.relpath(BENCH_SCHEMA_PATH, output.resolve().parent)).as_posix()
    problems = bench_problems(document)
    if problems:  # a section's bug: never write an invalid file
        raise SystemExit("\n".join(problems))
    text = json.dumps(document, indent=1) + "\n"
    if output is None:
        sys.stdout.write(text)
    else:
        write_atomic(output, text, force=args.force)
        print(f"wrote {output}; commit it, and refresh the Performance tables with: python benchmarks/run.py --page")
    met, total = document["targets"]["met"], document["targets"]["total"]
    print(f"{met} of {total} targets met" + ("" if met == total else " (the rows marked MISSED are not)"))
    return 0 if met == total else 1


if __name__ == "__main__":
    sys.exit(main())
