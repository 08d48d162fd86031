"""Check the committed effects files as a reader would be misled by them: python tools/check_effects.py [FILE ...].

Every effect carries its interval and a verdict that its interval, its estimate and the stated margin
of practical equivalence support; a quality change's p-value is the paired t-test of its interval,
and its Holm-adjusted p-value is Holm's correction over the file's methods; no method whose runs
recorded no activity is shown as an effect; each row names the commands that measured it; throughput
is in the workload's unit (images per second, or tokens trained per second for text)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # algorithms, from a checkout without installing

from methods_tools.evidence import check_effects_main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(check_effects_main(sys.argv[1:]))
