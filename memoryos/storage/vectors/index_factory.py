"""The page index of a space, for the backend `MemoryConfig.vector_backend` selects.

One place knows each backend's files and how to open them, so the space code is the same for all: open
(snapshot + the sequence it covers, or a fresh index when the snapshot is missing or unusable), write
snapshots to `page_snapshot_path` (in the background with `SnapshotWriter`), close. Backends are imported
lazily, when a space's index is first made or opened: `chromadb` (the `chroma` extra) only by spaces
configured to use it, faiss only by a process that opens a space (`_faiss_index_type` says why).

Files inside a space directory:
- faiss: `pages.faiss` (the whole index, written atomically).
- chroma: `pages.chroma/` (Chroma's own directory, persisted on every write) and `pages.chroma.json`
  (the marker recording the store sequence the collection covers, written atomically).
"""

import logging
import shutil
import threading
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from memoryos.config import MemoryConfig
from memoryos.storage.vectors.vector_index import IndexSnapshot, IndexSnapshotError, VectorIndex

if TYPE_CHECKING:
    from memoryos.storage.vectors.faiss_index import FaissIndex

log = logging.getLogger(__name__)

FAISS_SNAPSHOT_FILE = "pages.faiss"
CHROMA_DIRECTORY = "pages.chroma"
CHROMA_MARKER_FILE = "pages.chroma.json"
SNAPSHOT_MISSING = "snapshot missing"
"""`OpenedIndex.fresh_because` when there was no snapshot file at all."""


class OpenedIndex(NamedTuple):
    """A page index ready for the store's replay of rows after `covered_seq`.

    `fresh_because` says why the index starts empty (`SNAPSHOT_MISSING`, or why the snapshot was
    unusable), None when the snapshot loaded: the caller logs the rebuild once it knows how many vectors
    it replayed.
    """

    page_index: VectorIndex
    covered_seq: int
    fresh_because: str | None = None

    @property
    def stale(self) -> bool:
        """The snapshot was missing or unusable, so the caller rewrites it after replaying."""
        return self.fresh_because is not None


def _faiss_index_type() -> "type[FaissIndex]":
    """`FaissIndex`, imported on first use rather than with this module: the one place the engine loads
    faiss.

    This module comes with `import memoryos` (the facade -> `MemorySpace` -> `SpacePageIndex`), also in
    processes that never open a space: the API in Redis mode hands all index work to the workers, and its
    image's set (`requirements/api.txt`) has no faiss-cpu. Importing faiss when an index is made, loaded
    or waited on keeps it to the processes that own indexes (the embedded engine, the workers);
    tests/unit/test_deploy_files.py checks that the Redis-mode API imports none.
    """
    from memoryos.storage.vectors.faiss_index import FaissIndex

    return FaissIndex


def page_snapshot_path(config: MemoryConfig, directory: Path) -> Path:
    """The file `index.save(path, covered_seq)` writes for this backend."""
    if config.vector_backend == "chroma":
        return directory / CHROMA_MARKER_FILE
    return directory / FAISS_SNAPSHOT_FILE


def new_page_index(config: MemoryConfig, directory: Path, dim: int) -> VectorIndex:
    """An empty page index; for chroma, any collection already in the space directory is dropped."""
    if config.vector_backend == "chroma":
        from memoryos.storage.vectors.chroma_index import ChromaIndex

        return ChromaIndex.create(directory / CHROMA_DIRECTORY, dim)
    return _faiss_index_type()(
        dim,
        ann_threshold=config.index_ann_threshold,
        gpu_policy=config.faiss_use_gpu,
        omp_threads=config.faiss_omp_threads,
    )


def load_page_index(
    config: MemoryConfig, directory: Path, dim: int, fingerprint: str | None = None
) -> tuple[VectorIndex, int]:
    """The saved page index and the store sequence it covers; IndexSnapshotError when missing, unusable,
    or written for other embeddings than `fingerprint` (before a reindex)."""
    path = page_snapshot_path(config, directory)
    if config.vector_backend == "chroma":
        from memoryos.storage.vectors.chroma_index import ChromaIndex

        return ChromaIndex.load(path, directory / CHROMA_DIRECTORY, dim, expected_fingerprint=fingerprint)
    return _faiss_index_type().load(
        path,
        dim,
        ann_threshold=config.index_ann_threshold,
        gpu_policy=config.faiss_use_gpu,
        expected_fingerprint=fingerprint,
        omp_threads=config.faiss_omp_threads,
    )


def open_page_index(
    config: MemoryConfig, directory: Path, dim: int, fingerprint: str | None = None
) -> OpenedIndex:
    """The saved page index when usable, else a fresh one covering nothing (the store replays it all).

    Logs nothing: whether a fresh index is worth a warning depends on what the store replays into it
    (a new space has no snapshot and nothing to rebuild), so the caller logs with that count.
    """
    if not page_snapshot_path(config, directory).exists():
        return OpenedIndex(new_page_index(config, directory, dim), 0, fresh_because=SNAPSHOT_MISSING)
    try:
        index, covered = load_page_index(config, directory, dim, fingerprint)
        return OpenedIndex(index, covered)
    except IndexSnapshotError as error:
        fresh = new_page_index(config, directory, dim)
        return OpenedIndex(fresh, 0, fresh_because=f"snapshot unusable: {error}")


def finish_page_index_rebuild(index: VectorIndex) -> bool:
    """Wait for a FAISS background build (or recalibration) and install it; needs write exclusivity.

    Returns whether one was in flight, so the caller knows its last snapshot predates the installed
    index. Chroma never rebuilds.
    """
    if not isinstance(index, _faiss_index_type()) or index.stats()["background"] is None:
        return False
    index.wait_for_rebuild()
    return True


class SnapshotWriter:
    """Writes a space's page index snapshots on a background thread: one at a time, the newest wins.

    `submit` takes a snapshot made under the space's lock and returns at once. A snapshot still waiting
    when a newer one is submitted is dropped (the newer one covers more), so the file only moves forward.
    The thread lives only while there is something to write, so an idle space holds none. A failed write
    is logged and leaves the previous file in place (the write is atomic); `wait` reports it.
    """

    def __init__(self, path: Path) -> None:
        self._path = path
        self._changed = threading.Condition()
        self._waiting: IndexSnapshot | None = None
        self._writing = False  # a thread is draining `_waiting`
        self._last_failed = False

    def submit(self, snapshot: IndexSnapshot) -> None:
        with self._changed:
            self._waiting = snapshot
            if not self._writing:
                self._writing = True
                threading.Thread(target=self._drain, name=f"snapshot {self._path}", daemon=True).start()

    def wait(self) -> bool:
        """Block until every submitted snapshot is written or failed; True when the newest was written."""
        with self._changed:
            while self._writing:
                self._changed.wait()
            return not self._last_failed

    def _drain(self) -> None:
        while True:
            with self._changed:
                snapshot, self._waiting = self._waiting, None
                if snapshot is None:
                    self._writing = False
                    self._changed.notify_all()
                    return
            try:
                snapshot.write(self._path)
                failed = False
            except Exception:
                log.exception("page index snapshot not written", extra={"covered_seq": snapshot.covered_seq})
                failed = True
            with self._changed:
                self._last_failed = failed


def close_page_index(index: VectorIndex) -> None:
    """Release what a backend holds open (Chroma's client and threads); a no-op for FAISS. Idempotent."""
    close = getattr(index, "close", None)
    if callable(close):
        close()


def remove_page_index_files(directory: Path) -> None:
    """Delete every backend's page index files in a space directory, so the next open rebuilds the index.

    For `memoryos reindex` (the stored vectors changed under unchanged ids, so no snapshot may be trusted)
    and for switching backends. The index must be closed first.
    """
    (directory / FAISS_SNAPSHOT_FILE).unlink(missing_ok=True)
    (directory / CHROMA_MARKER_FILE).unlink(missing_ok=True)
    shutil.rmtree(directory / CHROMA_DIRECTORY, ignore_errors=True)
