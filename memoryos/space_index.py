"""A space's page index kept in step with its store: opened from its snapshot plus the store's replay,
snapshotted off the write path, and closed with a final snapshot.

Snapshots are due every `index_snapshot_every_ops` adds or `index_snapshot_every_s` seconds (checked at
each add). Taking one only serializes the index in memory; the `SnapshotWriter`'s thread writes the file,
so an add never waits for a disk. `MemorySpace` owns one `SpacePageIndex` and calls it under the space's
lock: the index needs write exclusivity for `add`, snapshots and `close`.
"""

import logging
from collections.abc import Callable
from pathlib import Path

import numpy as np

from memoryos.config import MemoryConfig
from memoryos.storage.faiss_ivf import set_faiss_threads
from memoryos.storage.index_factory import (
    SNAPSHOT_MISSING,
    SnapshotWriter,
    close_page_index,
    finish_page_index_rebuild,
    open_page_index,
    page_snapshot_path,
)
from memoryos.storage.sqlite_store import SqliteStore
from memoryos.storage.vector_index import VectorIndex

log = logging.getLogger(__name__)

REPLAY_BATCH = 10000
"""Stored vectors read per step when replaying the store into the index at open (15 MB at 384-d)."""


class SpacePageIndex:
    """The page index of one open space, with its snapshot schedule."""

    def __init__(
        self,
        store: SqliteStore,
        config: MemoryConfig,
        directory: Path,
        dim: int,
        clock: Callable[[], float],
    ) -> None:
        """Open the index: its snapshot when usable, then every stored vector the snapshot does not cover."""
        set_faiss_threads(config.faiss_omp_threads)
        self._store = store
        self._config = config
        self._clock = clock
        self._path = page_snapshot_path(config, directory)
        self.index, stale = self._open(directory, dim)
        self._snapshots = SnapshotWriter(self._path)
        # A snapshot that was missing, unusable or behind the store is rewritten on the next snapshot or
        # close, so the next open does not rebuild (or replay) again.
        self._ops_since_snapshot = 1 if stale else 0
        self._last_snapshot_at = clock()

    def _open(self, directory: Path, dim: int) -> tuple[VectorIndex, bool]:
        """The index and whether the snapshot on disk is stale (missing, unusable or replayed onto).

        A rebuild is logged at WARNING with the number of vectors it replayed (a new space, with no
        snapshot and no vectors yet, is not a rebuild); a snapshot behind the store, at INFO.
        """
        opened = open_page_index(self._config, directory, dim)
        index, covered, stale = opened.page_index, opened.covered_seq, opened.stale
        fresh_because = opened.fresh_because
        replayed = 0
        while True:
            ids, vectors = self._store.page_vectors_after(covered, dim, REPLAY_BATCH)
            if len(ids) == 0:
                break
            index.add(ids, vectors)
            covered, replayed, stale = int(ids[-1]), replayed + len(ids), True
        fields = {"backend": self._config.vector_backend, "vectors": replayed}
        if fresh_because is not None and (replayed or fresh_because != SNAPSHOT_MISSING):
            log.warning(
                "page index rebuilt from the store (%s): %d vectors",
                fresh_because,
                replayed,
                extra={**fields, "reason": fresh_because},
            )
        elif replayed:
            log.info("page index snapshot behind the store: %d vectors replayed", replayed, extra=fields)
        return index, stale

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        """Make stored vectors searchable (at stored precision, as a replay would) and snapshot when due."""
        self.index.add(ids, vectors)
        self._ops_since_snapshot += 1
        self._maybe_snapshot()

    def _maybe_snapshot(self) -> None:
        """Take a snapshot when due and leave the file write to the background writer.

        Only the in-memory copy is made here, under the lock; writing (and fsyncing) a 1.5 GB file at 1M
        vectors would otherwise hold every write of the space for seconds.
        """
        due_by_ops = self._ops_since_snapshot >= self._config.index_snapshot_every_ops
        due_by_time = self._clock() - self._last_snapshot_at >= self._config.index_snapshot_every_s
        if due_by_ops or due_by_time:
            self._snapshots.submit(self.index.snapshot(self._store.indexed_through()))
            self._ops_since_snapshot = 0
            self._last_snapshot_at = self._clock()

    def snapshot(self) -> None:
        """Write a snapshot and return once it is on disk; a background write in flight finishes first,
        so an older snapshot never replaces this one."""
        self._snapshots.wait()
        self.index.save(self._path, self._store.indexed_through())
        self._ops_since_snapshot = 0
        self._last_snapshot_at = self._clock()

    def close(self) -> None:
        """Finish background work, write the final snapshot if anything changed since the last one, close.

        Waits for a background index build (so the next open need not build again: minutes at 1M
        vectors) and for a background snapshot write; a write that failed is retried here.
        """
        rebuilt = finish_page_index_rebuild(self.index)
        written = self._snapshots.wait()
        if self._ops_since_snapshot or rebuilt or not written:
            self.snapshot()
        close_page_index(self.index)

    def discard(self) -> None:
        """Close without a snapshot, for a space being deleted; no write lands in its directory after."""
        self._snapshots.wait()
        close_page_index(self.index)
