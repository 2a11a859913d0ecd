"""anatomy.atomic: a file is either the old one or the complete new one."""

import os
import stat

import pytest

from anatomy.atomic import atomic_write


def test_bytes_or_a_writer_land_whole(tmp_path):
    path = atomic_write(tmp_path / "sub" / "a.bin", b"first")
    assert path.read_bytes() == b"first"
    atomic_write(path, lambda f: f.write(b"second"))
    assert path.read_bytes() == b"second"
    assert sorted(p.name for p in path.parent.iterdir()) == ["a.bin"]
    mode = stat.S_IMODE(path.stat().st_mode)
    assert mode == 0o644 & ~_umask()                  # a normal file, not mkstemp's 0600


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = atomic_write(tmp_path / "a.bin", b"old")

    def dies(f):
        f.write(b"half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(path, dies)
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["a.bin"]


def test_before_replace_sees_the_old_file_and_can_stop_the_write(tmp_path):
    path = atomic_write(tmp_path / "a.bin", b"old")
    seen = []
    atomic_write(path, b"new", before_replace=lambda: seen.append(path.read_bytes()))
    assert seen == [b"old"] and path.read_bytes() == b"new"

    def refuse():
        raise RuntimeError("no")

    with pytest.raises(RuntimeError):
        atomic_write(path, b"newer", before_replace=refuse)
    assert path.read_bytes() == b"new" and len(list(tmp_path.iterdir())) == 1


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
