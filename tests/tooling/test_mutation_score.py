"""tools/mutation_score.py: a mutmut run's score by module and overall, and each survivor's change
read from mutmut's diff; a report, not a gate."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from methods_tools.mutants import change_of, module_of, score, tally

REPO_ROOT = Path(__file__).resolve().parents[2]

DIFF = """--- algorithms/mixup/mixup.py
+++ algorithms/mixup/mixup.py
@@ -1,3 +1,3 @@
 def f(alpha):
-    z = sample(alpha) if alpha > 0 else 0.0
+    z = sample(alpha) if alpha > 0 else 1.0
     return z"""


def test_a_change_is_read_from_the_diff_as_the_file_writes_it():
    assert change_of(DIFF) == (
        "`z = sample(alpha) if alpha > 0 else 0.0` becomes `z = sample(alpha) if alpha > 0 else 1.0`"
    )
    removed_only = "--- a.py\n+++ a.py\n@@ -1,2 +1,1 @@\n def f():\n-    x = 1\n"
    assert change_of(removed_only) == "`x = 1` becomes (nothing)"
    with_backticks = '--- a.py\n+++ a.py\n@@ -1 +1 @@\n-    f(m=r"`a`")\n+    f(m=r"`A`")\n'
    assert change_of(with_backticks) == '`` f(m=r"`a`") `` becomes `` f(m=r"`A`") ``'


def test_mutants_are_counted_by_module_and_those_not_run_are_left_out():
    assert module_of("algorithms.cutout.cutout.x_keep_mask__mutmut_3") == "algorithms.cutout.cutout"
    assert module_of("algorithms._mixing.xǁMixingAlgorithmǁ__init____mutmut_1") == "algorithms._mixing"
    counts = tally(
        [
            ("a.b.x_f__mutmut_1", "killed"),
            ("a.b.xǁCǁg__mutmut_1", "survived"),
            ("a.b.x_f__mutmut_2", "killed"),
            ("a.c.x_h__mutmut_1", "not checked"),
            ("a.d.x_k__mutmut_1", "timeout"),
        ]
    )
    assert counts == {"a.b": {"killed": 2, "survived": 1}, "a.d": {"timeout": 1}}


def test_the_score_counts_killed_and_timed_out_mutants_of_those_run():
    statuses = [
        ("a.x_f__mutmut_1", "killed"),
        ("a.x_f__mutmut_2", "survived"),
        ("a.x_f__mutmut_3", "timeout"),
        ("a.x_f__mutmut_4", "no tests"),
        ("a.x_f__mutmut_5", "not checked"),
    ]
    assert score(statuses) == (2, 4)
    assert score([]) == (0, 0)


def test_the_report_runs_without_a_ledger_and_exits_0_outside_a_mutmut_run(tmp_path):
    out = subprocess.run(
        [sys.executable, str(REPO_ROOT / "tools" / "mutation_score.py")], cwd=tmp_path, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert "no mutant was run in this folder" in out.stdout
    assert not (REPO_ROOT / "tests" / "mutation_equivalents.md").exists()  # no ledger is kept
