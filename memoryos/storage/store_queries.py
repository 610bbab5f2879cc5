"""The connection `SqliteStore` runs on, and the helpers its query families share.

`SqliteStore` (`sqlite_store.py`) opens the connection and owns the schema; its queries are grouped by
what they read and write — pages (`page_queries.py`), chains and segments (`segment_queries.py`), facts
and the profile (`knowledge_queries.py`) — each a class over this one.
"""

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from memoryos.storage.vector_blobs import from_blobs


class StoreQueries:
    """One space's SQLite connection and the query helpers every table's queries use."""

    _db: sqlite3.Connection

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """All writes inside commit together or not at all (BEGIN IMMEDIATE: one writer at a time)."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _one(self, sql: str, params: Sequence[Any] = ()) -> Any:
        row = self._db.execute(sql, params).fetchone()
        return None if row is None else row[0]

    def _vectors_by_id(self, table: str, key: str, ids: Sequence[int], dim: int) -> np.ndarray:
        if not ids:
            return np.zeros((0, dim), dtype=np.float32)
        marks = ",".join("?" * len(ids))
        rows = dict(
            self._db.execute(f"SELECT {key}, vector FROM {table} WHERE {key} IN ({marks})", ids).fetchall()
        )
        return from_blobs([rows[i] for i in ids], dim)
