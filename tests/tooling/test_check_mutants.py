"""tools/check_mutants.py: which surviving mutants the equivalents file explains. A listed mutant
counts only with the change it makes today (an edit renumbers a function's mutants, so an old
entry may name another change), and every entry of the committed file is one the check reads."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from methods_tools.mutants import change_of, listed_changes, module_of, tally, unexplained

REPO_ROOT = Path(__file__).resolve().parents[2]
EQUIVALENTS = REPO_ROOT / "tests" / "mutation_equivalents.md"

DIFF = """--- algorithms/mixup/mixup.py
+++ algorithms/mixup/mixup.py
@@ -1,3 +1,3 @@
 def f(alpha):
-    z = sample(alpha) if alpha > 0 else 0.0
+    z = sample(alpha) if alpha > 0 else 1.0
     return z"""


def test_a_change_is_read_from_the_diff_as_the_file_writes_it():
    assert change_of(DIFF) == ("`z = sample(alpha) if alpha > 0 else 0.0` becomes "
                               "`z = sample(alpha) if alpha > 0 else 1.0`")
    removed_only = "--- a.py\n+++ a.py\n@@ -1,2 +1,1 @@\n def f():\n-    x = 1\n"
    assert change_of(removed_only) == "`x = 1` becomes (nothing)"
    with_backticks = "--- a.py\n+++ a.py\n@@ -1 +1 @@\n-    f(m=r\"`a`\")\n+    f(m=r\"`A`\")\n"
    assert change_of(with_backticks) == '`` f(m=r"`a`") `` becomes `` f(m=r"`A`") ``'


def test_entries_are_read_with_or_without_a_reason_and_other_lines_are_not():
    text = ("# Heading\n\nSome prose naming `a.b.x_f__mutmut_9`.\n"
            "- `a.b.x_f__mutmut_1`: `x = 1` becomes `x = 2`.\n"
            "- `a.bǁCǁm__mutmut_2`: `y = a` becomes `y = None`. The value is replaced before it is read.\n"
            '- `a.b.x_g__mutmut_3`: `` w(m="`a`") `` becomes `` w(m="`A`") ``. Matched case-insensitively.\n'
            "- `a.b.x_g__mutmut_4`: `z = 1` becomes (nothing).\n")
    assert listed_changes(text) == {"a.b.x_f__mutmut_1": "`x = 1` becomes `x = 2`",
                                    "a.bǁCǁm__mutmut_2": "`y = a` becomes `y = None`",
                                    "a.b.x_g__mutmut_3": '`` w(m="`a`") `` becomes `` w(m="`A`") ``',
                                    "a.b.x_g__mutmut_4": "`z = 1` becomes (nothing)"}


def test_a_survivor_is_explained_only_by_an_entry_with_its_change_today():
    listed = {"m.x_f__mutmut_1": "`a` becomes `b`", "m.x_f__mutmut_2": "`a` becomes `c`",
              "m.x_f__mutmut_5": "`a` becomes `e`"}
    today = {"m.x_f__mutmut_1": "`a` becomes `b`", "m.x_f__mutmut_2": "`a` becomes `d`",
             "m.x_f__mutmut_3": "`a` becomes `x`", "m.x_f__mutmut_4": "`a` becomes `y`"}
    statuses = [("m.x_f__mutmut_1", "survived"), ("m.x_f__mutmut_2", "survived"), ("m.x_f__mutmut_3", "no tests"),
                ("m.x_f__mutmut_4", "killed"), ("m.x_f__mutmut_5", "not checked"), ("m.x_f__mutmut_6", "timeout")]
    assert list(unexplained(statuses, listed, today.__getitem__)) == [
        ("m.x_f__mutmut_2", "survived", "listed as `a` becomes `c`, but the mutant now makes `a` becomes `d`"),
        ("m.x_f__mutmut_3", "no tests", "not listed"),
    ]


def test_mutants_are_counted_by_module_and_those_not_run_are_left_out():
    assert module_of("algorithms.cutout.cutout.x_keep_mask__mutmut_3") == "algorithms.cutout.cutout"
    assert module_of("algorithms._mixing.xǁMixingAlgorithmǁ__init____mutmut_1") == "algorithms._mixing"
    counts = tally([("a.b.x_f__mutmut_1", "killed"), ("a.b.xǁCǁg__mutmut_1", "survived"),
                    ("a.b.x_f__mutmut_2", "killed"), ("a.c.x_h__mutmut_1", "not checked"),
                    ("a.d.x_k__mutmut_1", "timeout")])
    assert counts == {"a.b": {"killed": 2, "survived": 1}, "a.d": {"timeout": 1}}


def test_every_entry_of_the_committed_file_is_read_once():
    text = EQUIVALENTS.read_text(encoding="utf-8")
    bullets = [line for line in text.splitlines() if line.startswith("- `")]
    names = [re.match(r"- `([^`]+)`", line)[1] for line in bullets]
    assert len(set(names)) == len(names), "a mutant is listed twice"
    read = listed_changes(text)
    assert [name for name in names if name not in read] == []


def test_an_unreadable_equivalents_file_is_one_line_and_status_1(tmp_path):
    missing = tmp_path / "nowhere.md"
    run = subprocess.run([sys.executable, str(REPO_ROOT / "tools" / "check_mutants.py"), str(missing)],
                         capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 1 and run.stdout == ""
    assert run.stderr.splitlines() == [f"{missing}: cannot read the equivalents file (No such file or directory); "
                                       "pass its path"]
