"""The connection `SqliteStore` runs on, and the helpers its query families share.

`SqliteStore` (`store.py`) opens the connection and owns the schema; its queries are grouped by
what they read and write — pages (`page_queries.py`), chains and segments (`segment_queries.py`), facts
and the profile (`knowledge_queries.py`) — each a class over this one.
"""

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from memoryos.errors import StorageError, StoreBusyError
from memoryos.storage.records.base import OpKey
from memoryos.storage.records.vector_blobs import from_blobs

_DISK_FAILURES = frozenset({sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR})
"""Primary result codes of a disk that is full or failing, as opposed to a bug or a busy database."""

IDS_PER_STATEMENT = 900
"""Ids bound in one `IN (...)`: under the 999 host parameters older SQLite builds allow, with room left for
a statement's other parameters."""


def id_chunks(ids: Sequence[int], size: int = IDS_PER_STATEMENT) -> Iterator[tuple[list[int], str]]:
    """`ids` in slices one statement can bind, each with its `?,?,...` placeholders."""
    for start in range(0, len(ids), size):
        chunk = list(ids[start : start + size])
        yield chunk, ",".join("?" * len(chunk))


class StoreQueries:
    """One space's SQLite connection and the query helpers every table's queries use."""

    _db: sqlite3.Connection
    _busy_timeout_ms: int
    _fence: Callable[[], None] | None
    _committed_data_version: int | None = None

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def transaction(
        self, wait_for_writers: bool = True, ops: Sequence[OpKey] = (), pages: Sequence[int] = ()
    ) -> Iterator[None]:
        """All writes inside commit together or not at all (BEGIN IMMEDIATE: one writer at a time).

        `ops` and `pages` (the op log keys and the pages a database store reads with its BEGIN) ask
        nothing here: a read costs no round trip in process.

        Another connection's write transaction is waited for up to the store's busy timeout; without
        `wait_for_writers`, not at all: `StoreBusyError` at once, nothing begun (a caller that must not
        block, the scheduler's loop, hands the work to a thread that may).

        A full disk or a failing one (SQLite's FULL and IOERR, at any statement or at COMMIT) raises
        `StorageError` with nothing of the transaction stored, and leaves the connection usable: once
        there is room again the next write succeeds. SQLite may have rolled back on its own by then.

        A fenced store (a service worker's) checks its shard's fencing number just before COMMIT, with
        the write lock held: `FencedOutError` and nothing stored when another worker owns the shard now."""
        try:
            self._begin(wait_for_writers)
            try:
                yield
                if self._fence is not None:
                    self._fence()
                # Read before COMMIT, with the write lock held: this connection's own commit leaves it as
                # it is, and no other can commit in between (`committed_data_version`).
                self._committed_data_version = int(self._one("PRAGMA data_version"))
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
        except sqlite3.DatabaseError as error:
            if getattr(error, "sqlite_errorcode", 0) & 0xFF not in _DISK_FAILURES:
                raise
            raise StorageError(f"the memory store could not be written: {error}") from error

    def _begin(self, wait_for_writers: bool) -> None:
        if wait_for_writers:
            self._db.execute("BEGIN IMMEDIATE")
            return
        self._db.execute("PRAGMA busy_timeout = 0")  # for BEGIN alone: the usual wait is back after it
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as error:
            if getattr(error, "sqlite_errorcode", 0) & 0xFF != sqlite3.SQLITE_BUSY:
                raise
            raise StoreBusyError("another connection is writing this memory store") from error
        finally:
            self._db.execute(f"PRAGMA busy_timeout = {self._busy_timeout_ms}")

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
