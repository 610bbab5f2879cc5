"""What opening a space's store costs, new and existing (`memoryos/storage/records/sqlite/store.py`).

A worker opens a store for each new user's first write and reopens stores all day as its pool evicts
and reads come back. Per open, `--opens` stores each, in a fresh directory on the data disk (`--dir`,
default the system's temporary directory):

- new store, copied: the engine's path (a copy of an empty store placed whole);
- new store, created by SQLite: the same made from an empty file, as before the copy (the schema's
  statements, the switch to WAL, their commit);
- existing store: reopening one of those just made (only read);
- whole space, new and existing: `MemorySpace` (store, vector index, score sample) with a fixed dimension,
  so no model is loaded.

    python -m bench.engine.store_open [--opens 200] [--dir DIR] [--out FILE]
"""

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.output import emit
from memoryos.config import MemoryConfig
from memoryos.space.memory_space import MemorySpace
from memoryos.storage.records.sqlite.store import SqliteStore


def timed(opens: int, open_one: Callable[[int], Any]) -> dict[str, float]:
    """p50 and mean milliseconds of `open_one(i)` (which opens and returns something to close)."""
    took: list[float] = []
    for i in range(opens):
        started = time.perf_counter()
        opened = open_one(i)
        took.append(time.perf_counter() - started)
        opened.close()
    return {
        "p50_ms": round(statistics.median(took) * 1000, 2),
        "mean_ms": round(statistics.mean(took) * 1000, 2),
    }


def measure(root: Path, opens: int) -> dict[str, dict[str, float]]:
    def store(kind: str, i: int, by_sqlite: bool = False) -> SqliteStore:
        path = root / kind / str(i) / "memory.sqlite"
        path.parent.mkdir(parents=True, exist_ok=True)
        if by_sqlite and not path.exists():
            path.touch()  # an empty file: SQLite creates the schema in it
        return SqliteStore(path)

    config = MemoryConfig(data_dir=root / "spaces", faiss_use_gpu="never")

    def space(i: int) -> MemorySpace:
        return MemorySpace(root / "spaces" / str(i), config, "bench-model", lambda: 384)

    SqliteStore(root / "warm.sqlite").close()  # the process's empty store is made once, not timed
    return {
        "new_store_copied": timed(opens, lambda i: store("copied", i)),
        "new_store_created_by_sqlite": timed(opens, lambda i: store("sqlite", i, by_sqlite=True)),
        "existing_store": timed(opens, lambda i: store("copied", i)),
        "new_space": timed(opens, space),
        "existing_space": timed(opens, space),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--opens", type=int, default=200)
    parser.add_argument("--dir", type=Path, default=None, help="where the stores are made (the data disk)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as scratch:
        emit({"opens": args.opens, "per_open": measure(Path(scratch), args.opens)}, args.out)


if __name__ == "__main__":
    main()
