"""The mutation score of a mutmut run, by module and overall, and each surviving mutant with its change
(run where mutmut ran; nox -s mutants does): python tools/mutation_score.py."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # methods_tools, from a checkout without installing

from methods_tools.mutants import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
