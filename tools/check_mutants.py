"""Check a mutmut run against the listed equivalent mutants (run where mutmut ran; nox -s mutants does):
python tools/check_mutants.py tests/mutation_equivalents.md."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # methods_tools, from a checkout without installing

from methods_tools.mutants import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
