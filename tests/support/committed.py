"""What a space's store holds as committed, read on a connection of its own (read-only): what is on
disk, beside any thread of the process that holds the space's lock or its connection."""

import contextlib
import sqlite3
from typing import Any

from memoryos import Memoryos
from memoryos.space.layout import STORE_FILE


def committed_rows(memory: Memoryos, query: str) -> list[tuple[Any, ...]]:
    """The rows of `query` over the space's committed store."""
    store = memory.space.directory / STORE_FILE
    with contextlib.closing(sqlite3.connect(f"file:{store}?mode=ro", uri=True)) as db:
        return [tuple(row) for row in db.execute(query)]
