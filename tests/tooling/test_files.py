from __future__ import annotations

import os
from pathlib import Path

import pytest
from methods_tools.files import write_atomic, write_if_changed


def test_write_atomic_refuses_to_overwrite_without_force(tmp_path: Path):
    p = tmp_path / "a.txt"
    write_atomic(p, "one")
    with pytest.raises(FileExistsError, match="--force"):
        write_atomic(p, "two")
    assert p.read_text() == "one"
    write_atomic(p, "two", force=True)
    assert p.read_text() == "two"
    assert os.listdir(tmp_path) == ["a.txt"]  # no temporary left behind


def test_write_if_changed_keeps_mtime_when_equal(tmp_path: Path):
    p = tmp_path / "a.txt"
    assert write_if_changed(p, "x") is True
    os.utime(p, (1, 1))
    assert write_if_changed(p, "x") is False
    assert p.stat().st_mtime == 1


def test_written_files_are_readable_like_plain_files(tmp_path: Path):
    p = tmp_path / "page.md"
    write_atomic(p, "x")
    mask = os.umask(0)
    os.umask(mask)
    assert p.stat().st_mode & 0o777 == 0o666 & ~mask
    os.chmod(p, 0o640)
    write_if_changed(p, "y")
    assert p.stat().st_mode & 0o777 == 0o640
