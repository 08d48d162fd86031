"""Atomic, change-only file writes and the shared command line of the docs generators."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from algorithms.metadata import display_path

__all__ = ["generator_cli", "stale_outputs", "write_atomic", "write_if_changed"]

Content = str | bytes


def _as_bytes(content: Content) -> bytes:
    return content.encode("utf-8") if isinstance(content, str) else content


def write_atomic(path: Path, content: Content, *, force: bool = False) -> None:
    """Write ``content`` to ``path`` through a temporary file and a rename.

    A reader never sees a half-written file. An existing file is replaced only with ``force``;
    otherwise :class:`FileExistsError` is raised and the file is left as it was.
    """
    path = Path(path)
    if path.exists() and not force:
        raise FileExistsError(f"{path}: exists — pass --force to overwrite it")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        # mkstemp makes the file private (0600); give it the mode a plain open() would have
        os.chmod(tmp, path.stat().st_mode & 0o7777 if path.exists() else 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as handle:
            handle.write(_as_bytes(content))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_if_changed(path: Path, content: Content) -> bool:
    """Atomically write ``path`` only when its content differs; return whether it was written."""
    path = Path(path)
    data = _as_bytes(content)
    if path.exists() and path.read_bytes() == data:
        return False
    write_atomic(path, data, force=True)
    return True


def stale_outputs(outputs: Mapping[Path, Content]) -> list[Path]:
    """The paths whose content on disk differs from (or lacks) what ``outputs`` says."""
    return [p for p, c in outputs.items() if not Path(p).exists() or Path(p).read_bytes() != _as_bytes(c)]


def generator_cli(render: Callable[[], Mapping[Path, Content]], argv: Sequence[str] | None = None,
                  description: str | None = None, prog: str | None = None) -> int:
    """The command line every docs generator shares: write changed outputs, or ``--check``.

    ``render()`` returns every output path with its full content. With ``--check`` nothing is
    written; each stale file is named on its own line and the exit status is 1.
    """
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 and name every generated file that is stale")
    args = parser.parse_args(argv)
    try:
        outputs = render()
    except ValueError as exc:  # includes MetadataError: one line per problem already
        print(exc, file=sys.stderr)
        return 1
    if args.check:
        stale = stale_outputs(outputs)
        for path in stale:
            print(f"{display_path(path)}: stale — regenerate it with: python {prog or sys.argv[0]}",
                  file=sys.stderr)
        return 1 if stale else 0
    for path, content in outputs.items():
        print(f"{'updated' if write_if_changed(path, content) else 'unchanged'}: {display_path(path)}")
    return 0

