"""The functional form of every method: pure functions of tensors.

``import algorithms.functional as cf``; signatures of the forms Composer also has match
``composer.functional``, so switching is a change of import.

Like the classes in :mod:`algorithms`, the forms are resolved from the metadata: each method's
``metadata.json`` names its ``functional``, found in the method's own folder on first use. The
target utilities (:mod:`algorithms.targets`) are exported beside them.
"""

from __future__ import annotations

from functools import cache

from . import lazy_module

# Helpers every method may use, exported beside the methods' own forms.
_SHARED = {"interpolate_targets": "targets"}


@cache
def _exports() -> dict[str, str]:
    """Function name -> the module under ``algorithms`` that defines it."""
    from .metadata import discover_metadata_files, validate_files

    records, _ = validate_files(discover_metadata_files())
    return {**_SHARED, **{r.functional: r.key for r in records.values() if r.functional}}


__getattr__, __dir__ = lazy_module(__name__, _exports)
