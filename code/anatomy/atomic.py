"""Files that are never half written: write a temporary file beside the target, then rename.

A rename within one folder is atomic, so a reader (or a resumed run) sees either the old file
or the complete new one, even if the writer is killed mid-write or the disk fills up. Used
for the data cache, checkpoints and the reference-run record.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fsync_dir(folder: Path) -> None:
    # Makes the rename itself durable; not every platform lets a folder be opened.
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path: str | os.PathLike, write: bytes | Callable[[BinaryIO], None],
                 before_replace: Callable[[], None] | None = None) -> Path:
    """Put ``write`` (bytes, or a function writing to a binary file) at ``path`` atomically.

    The bytes are flushed to disk before the rename; ``before_replace`` runs just before it
    (checkpoints use it to keep the old file under another name). On any error the temporary
    file is removed and ``path`` is left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            if isinstance(write, bytes):
                f.write(write)
            else:
                write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644 & ~_umask())     # mkstemp makes 0600; give it a normal file's mode
        if before_replace is not None:
            before_replace()
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)
    return path
