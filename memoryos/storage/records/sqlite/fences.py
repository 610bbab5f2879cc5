"""Fencing numbers on one host, for the SQLite store: files beside the spaces, under the data directory.

With SQLite every worker of a deployment is on one host (the store refuses a network file system), so
the numbers live in that host's data directory: `<data_dir>/.fences/next` counts up under an exclusive
`flock`, and `<data_dir>/.fences/<shard>` holds the number of the shard's current owner, replaced
atomically. A new owner draws a number and records it before it serves the shard; every write
transaction of a fenced space reads the shard's file while it holds SQLite's write lock, just before it
commits, and rolls back when the number is not its own (`SqliteStore.transaction`). Ids start with a
letter or digit, so `.fences` is never a tenant's directory.
"""

import contextlib
import fcntl
from pathlib import Path

from memoryos.storage.atomic import atomic_write_bytes

FENCE_DIR = ".fences"


def fence_path(data_dir: Path, shard: int) -> Path:
    return data_dir / FENCE_DIR / str(shard)


def take_shard(data_dir: Path, shard: int) -> int:
    """Draw the next number (one more than any drawn on this data directory) and record it as `shard`'s;
    returns it."""
    directory = data_dir / FENCE_DIR
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / "lock", "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        number = (_read(directory / "next") or 0) + 1
        atomic_write_bytes(directory / "next", str(number).encode())
        atomic_write_bytes(fence_path(data_dir, shard), str(number).encode())
    return number


def recorded(data_dir: Path, shard: int) -> int | None:
    """The number recorded for `shard` (None: none yet)."""
    return _read(fence_path(data_dir, shard))


def _read(path: Path) -> int | None:
    with contextlib.suppress(FileNotFoundError, ValueError):
        return int(path.read_bytes())
    return None
