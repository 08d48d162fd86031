"""Scale benchmark of the docs build: is build time linear in the number of method cards?

Generates N synthetic methods (valid ``metadata.json`` plus a one-page MyST card each) into a
temporary tree and builds their site with the real ``docs/source/conf.py`` (``-c``), the real
generators (``methods_tools.pages.GENERATORS``, run by the extension), theme and extensions,
pointed at the synthetic metadata with ``-D methods_metadata_root=...``. Each size is built
``--repeats`` times from scratch (only the training chart, which does not depend on the card
count, is drawn once per tree and then reused), sizes interleaved so that machine noise hits
them alike; the report gives medians and the ratio of the largest size to the smallest (the
bound is <= 6x for 300 against 30 cards).

``--variant`` adds configurations for a side-by-side comparison: ``furo-full-nav`` lists every card
in every sidebar (through the site's own sidebar renderer), ``furo-default`` leaves furo's
sidebar as furo makes it (the whole toctree resolved and rendered into every page).

    python benchmarks/docs_scale.py --sizes 30 300 --repeats 3 --output artifacts/docs_scale.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DOCS_SOURCE = REPO_ROOT / "docs" / "source"
VARIANTS = {
    "bounded-nav": [],  # the site's configuration
    "furo-full-nav": ["-D", "methods_nav_card_limit=1000000"],  # every card in every sidebar, our renderer
    "furo-default": ["-D", "methods_nav_card_limit=-1"],  # furo's own full toctree in every page
}
DOMAINS = ["vision", "nlp", "speech", "tabular", "general"]
TAGS = ["speedup", "regularization", "augmentation", "curriculum", "optimization", "memory"]


def synthetic_metadata(i: int) -> tuple[str, dict]:
    key = f"method_{i:04d}"
    entry = {
        "name": f"Synthetic Method {i:04d}",
        "kind": "best_practice" if i % 10 == 9 else "method",
        "class_name": None if i % 10 == 9 else f"Synthetic{i:04d}",
        "functional": None if i % 10 == 9 else f"synthetic_{i:04d}",
        "tldr": f"Synthetic method number {i} for the docs scale benchmark.",
        "attribution": "Benchmark et al., 2026",
        "link": "https://example.invalid/paper",
        "domains": [DOMAINS[i % len(DOMAINS)]],
        "tags": [TAGS[i % len(TAGS)], TAGS[(i + 1) % len(TAGS)]],
        "summary": "A paragraph of summary text.",
        "use": "Anywhere.",
        "math_equivalent": i % 2 == 0,
        "hyperparameters": {"alpha": {"suggested": 1.0, "range": [0, None]}},
        "plumbing": [],
    }
    if entry["kind"] == "best_practice":
        entry["trainer_option"] = {"precision": "amp_bf16"}
    return key, {key: entry}


def synthetic_card(i: int) -> str:
    return f"""# Synthetic Method {i:04d}

## TL;DR

Synthetic method number {i}, with inline math $\\lambda \\sim \\mathrm{{Beta}}(\\alpha, \\alpha)$.

## High-level Summary

$$
\\tilde{{x}} = \\lambda x_i + (1 - \\lambda) x_j
$$

## Suggested Hyperparameters

| Hyperparameter | Default | Suggested | Range |
|---|---|---|---|
| `alpha` | `1.0` | `1.0` | `(0, inf)` |
"""


def make_site(root: Path, n: int) -> tuple[Path, Path]:
    """Write N synthetic methods and cards under ``root``; return (metadata root, source dir)."""
    meta, src = root / "metadata", root / "source"
    for i in range(n):
        key, data = synthetic_metadata(i)
        path = (meta / "core" / f"{key}.metadata.json" if data[key]["kind"] == "best_practice"
                else meta / key / "metadata.json")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=2), encoding="utf-8")
        (src / "method_cards").mkdir(parents=True, exist_ok=True)
        (src / "method_cards" / f"{key}.md").write_text(synthetic_card(i), encoding="utf-8")
    for name in ("index.rst", "writing_cards.md"):
        shutil.copy(DOCS_SOURCE / name, src / name)
    shutil.copytree(DOCS_SOURCE / "templates", src / "templates")
    return meta, src


def build_seconds(meta: Path, src: Path, out: Path, variant: str) -> float:
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-W", "--keep-going", "-E",
           "-c", str(DOCS_SOURCE), "-D", f"methods_metadata_root={meta}", *VARIANTS[variant],
           str(src), str(out)]
    start = time.perf_counter()
    result = subprocess.run(cmd, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"build of {src} failed:\n{result.stderr[-4000:]}")
    return elapsed


def hardware() -> dict:
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "logical_cpus": os.cpu_count(), "platform": platform.platform(),
            "python": platform.python_version()}


def run(sizes: list[int], repeats: int, variants: list[str]) -> dict:
    times: dict[str, dict[int, list[float]]] = {v: {n: [] for n in sizes} for v in variants}
    with tempfile.TemporaryDirectory(prefix="docs-scale-") as tmp:
        sites = {n: make_site(Path(tmp) / f"n{n}", n) for n in sizes}
        for rep in range(repeats):
            for variant in variants:
                for n in sizes:
                    meta, src = sites[n]
                    seconds = build_seconds(meta, src, Path(tmp) / f"out-{variant}-{n}", variant)
                    times[variant][n].append(seconds)
                    print(f"rep {rep + 1}/{repeats} {variant:14s} {n:5d} cards: {seconds:7.2f} s", flush=True)
    small, large = min(sizes), max(sizes)
    summary = {}
    for variant in variants:
        medians = {n: statistics.median(times[variant][n]) for n in sizes}
        summary[variant] = {"seconds": {str(n): times[variant][n] for n in sizes},
                            "median_seconds": {str(n): medians[n] for n in sizes},
                            f"ratio_{large}_over_{small}": medians[large] / medians[small]}
    return {"benchmark": "docs_scale", "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "hardware": hardware(), "sizes": sizes, "repeats": repeats, "variants": summary}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[30, 300])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--variant", choices=sorted(VARIANTS), action="append",
                        help="repeatable; default: bounded-nav only")
    parser.add_argument("--output", type=Path, help="write the results as JSON here")
    args = parser.parse_args(argv)
    if any(n < 1 for n in args.sizes) or args.repeats < 1:
        parser.error("sizes and repeats must be positive")
    results = run(sorted(set(args.sizes)), args.repeats, args.variant or ["bounded-nav"])
    small, large = min(args.sizes), max(args.sizes)
    for variant, summary in results["variants"].items():
        medians = ", ".join(f"{n}: {s:.2f} s" for n, s in summary["median_seconds"].items())
        print(f"{variant}: medians {medians}; {large}/{small} = {summary[f'ratio_{large}_over_{small}']:.2f}x")
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
        print(f"results: {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
