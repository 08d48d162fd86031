"""pytest's collection of the package's doctests (``--doctest-modules`` over ``algorithms``): each
framework adapter imports its framework, an optional extra, so it is collected only where that
framework is installed (``nox -s tests`` installs both)."""

from __future__ import annotations

import importlib.util

collect_ignore = [
    f"algorithms/integrations/{adapter}.py"
    for adapter, framework in (("lightning", "lightning"), ("transformers", "transformers"))
    if importlib.util.find_spec(framework) is None
]
