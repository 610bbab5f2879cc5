"""Atomic file replacement for derived files (index snapshots): a reader sees the old file or the new one.

A crash at any instant must never leave a torn snapshot that a later load trusts, and must never lose the
previous good one; ARCHITECTURE §4 requires temp file, fsync, rename.
"""

import contextlib
import os
import tempfile
from pathlib import Path


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Replace `path` with `data` so that after a crash it holds either its old content or all of `data`.

    The temp file lives in the same directory because `os.replace` is atomic only within one filesystem.
    Its data is fsynced before the rename and the directory after it, so the rename itself is durable
    once this returns. On failure the temp file is removed and `path` is left as it was.
    """
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as tmp:
            tmp.write(data)
            tmp.flush()
            os.fsync(tmp.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise
    _fsync_directory(path.parent)


def _fsync_directory(directory: Path) -> None:
    """Persist a rename: on POSIX the directory entry is durable only once the directory is fsynced."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
