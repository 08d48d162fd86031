"""Atomic, change-only file writes (the generated pages, the scaffold, the results files)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["Content", "write_atomic", "write_if_changed"]

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
