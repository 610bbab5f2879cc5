"""A space's page index kept in step with its store: opened from its snapshot plus the store's replay,
caught up with what other processes embedded, snapshotted off the write path, and closed with a final
snapshot.

Coverage is counted in vector sequences (`pages.vector_seq`: the order pages got their vectors, across
every process writing the space). The index always holds exactly the vectors of sequences up to
`covered_seq`, no gaps: it catches up from the store before each write applies (under the store's write
lock, so nothing can commit in between) and before reads, and a snapshot records only that coverage —
never what the store holds — so a process that closes last cannot claim pages it never indexed.

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
from memoryos.storage.records.base import RecordStore
from memoryos.storage.vectors.index_factory import (
    SNAPSHOT_MISSING,
    OpenedIndex,
    SnapshotWriter,
    close_page_index,
    finish_page_index_rebuild,
    new_page_index,
    open_page_index,
    page_snapshot_path,
)
from memoryos.storage.vectors.vector_index import VectorIndex

log = logging.getLogger(__name__)

SNAPSHOT_AHEAD = "snapshot ahead of the store"
"""Why a snapshot covering vector sequences the store never gave out is not loaded."""
REPLAY_BATCH = 10000
"""Stored vectors read per step when replaying the store into the index at open (15 MB at 384-d)."""


class SpacePageIndex:
    """The page index of one open space, with its snapshot schedule."""

    def __init__(
        self,
        store: RecordStore,
        config: MemoryConfig,
        directory: Path,
        dim: int,
        clock: Callable[[], float],
        fingerprint: str,
        on_caught_up: Callable[[np.ndarray], None] = lambda vectors: None,
    ) -> None:
        """Open the index: its snapshot when usable (and of the store's `fingerprint`: the embeddings it
        holds), then every stored vector the snapshot does not cover. A FAISS index sets the process's
        faiss thread count from `config` as it opens (`FaissIndex`'s `omp_threads`, from
        `index_factory.py`)."""
        self._store = store
        self._config = config
        self._clock = clock
        self._dim = dim
        self._fingerprint = fingerprint
        self._on_caught_up = on_caught_up
        self._path = page_snapshot_path(config, directory)
        self.covered_seq = 0
        self.withdrawn_seq = 0
        self.index, stale = self._open(directory, dim)
        self._snapshots = SnapshotWriter(self._path)
        # A snapshot that was missing, unusable or behind the store is rewritten on the next snapshot or
        # close, so the next open does not rebuild (or replay) again.
        self._ops_since_snapshot = 1 if stale else 0
        self._last_snapshot_at = clock()

    def _open(self, directory: Path, dim: int) -> tuple[VectorIndex, bool]:
        """The index and whether the snapshot on disk is stale (missing, unusable or replayed onto).

        A rebuild is logged at WARNING with the number of vectors it replayed (a new space, with no
        snapshot and no vectors yet, is not a rebuild); a snapshot behind the store, at INFO. A space
        this open created (`RecordStore.created`) gets a new index: nothing to read from disk or store.
        """
        if self._store.created:
            return new_page_index(self._config, directory, dim), True
        opened = open_page_index(self._config, directory, dim, self._fingerprint)
        if opened.fresh_because is None and opened.covered_seq > self._store.max_vector_seq():
            # It claims vectors the store never gave out: a store restored from an older backup, or a
            # snapshot cache shared by mistake. Trusting it would serve pages the store does not hold.
            close_page_index(opened.page_index)
            opened = OpenedIndex(new_page_index(self._config, directory, dim), 0, SNAPSHOT_AHEAD)
        index, stale, fresh_because = opened.page_index, opened.stale, opened.fresh_because
        self.covered_seq = opened.covered_seq
        replayed = self._replay(index)
        # A snapshot may predate any delete or edit: every withdrawal ever made is checked against it.
        replayed += self._drop_withdrawn(index)
        stale = stale or replayed > 0
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

    def _replay(self, index: VectorIndex, on_added: Callable[[np.ndarray], None] | None = None) -> int:
        """Add every stored vector embedded after `covered_seq` to `index`; returns how many."""
        replayed = 0
        while True:
            ids, vectors, last_seq = self._store.page_vectors_after(self.covered_seq, self._dim, REPLAY_BATCH)
            if len(ids) == 0:
                return replayed
            index.add(ids, vectors)
            if on_added is not None:
                on_added(vectors)
            self.covered_seq, replayed = last_seq, replayed + len(ids)

    def _drop_withdrawn(self, index: VectorIndex) -> int:
        """Remove from `index` the vectors withdrawn since `withdrawn_seq` (pages deleted or edited), then
        put back the current vector of any such page the index covers (an edited page embedded again):
        correct whichever order additions and withdrawals were seen in. Returns how many changed."""
        page_ids, self.withdrawn_seq = self._store.withdrawn_after(self.withdrawn_seq)
        if not page_ids:
            return 0
        ids = np.unique(np.array(page_ids, dtype=np.int64))
        index.remove(ids)
        back, vectors = self._store.vectors_if_covered(ids.tolist(), self.covered_seq, self._dim)
        if back:
            index.add(np.array(back, dtype=np.int64), vectors)
        return len(ids)

    def drop_withdrawn(self) -> None:
        """Apply this process's own deletes and edits to the index, inside their write transaction."""
        if self._drop_withdrawn(self.index):
            self._ops_since_snapshot += 1

    def catch_up(self) -> int:
        """Add the vectors other processes stored since this index last looked; returns how many.

        Called inside the write transaction before an op applies, and before reads; an index re-adding
        an id replaces its vector, so catching up is idempotent. The vectors go to `on_caught_up` too (the
        space's score sample)."""
        added = self._replay(self.index, self._on_caught_up) + self._drop_withdrawn(self.index)
        if added:
            self._ops_since_snapshot += 1
        return added

    def add(self, ids: np.ndarray, vectors: np.ndarray, through_seq: int) -> None:
        """Make vectors just stored searchable (at stored precision, as a replay would) and snapshot when
        due. `through_seq` is the vector sequence of the last of them: the caller caught up first, so
        the index now covers every sequence up to it."""
        self.index.add(ids, vectors)
        self.covered_seq = max(self.covered_seq, through_seq)
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
            self.snapshot_soon()

    def snapshot_soon(self) -> None:
        """Take a snapshot now and hand its file write to the background writer (a delete's scrub)."""
        self._snapshots.submit(self.index.snapshot(self.covered_seq, self._fingerprint))
        self._ops_since_snapshot = 0
        self._last_snapshot_at = self._clock()

    def snapshot(self) -> None:
        """Write a snapshot and return once it is on disk; a background write in flight finishes first,
        so an older snapshot never replaces this one."""
        self._snapshots.wait()
        self.index.save(self._path, self.covered_seq, self._fingerprint)
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
