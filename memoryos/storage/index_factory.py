"""The page index of a space, for the backend `MemoryConfig.vector_backend` selects.

One place knows each backend's files and how to open them, so the space code is the same for all: open
(snapshot + the sequence it covers, or a fresh index when the snapshot is missing or unusable), save to
`page_snapshot_path`, close. Backends are imported lazily, so `chromadb` (the `chroma` extra) is
imported only by spaces configured to use it.

Files inside a space directory:
- faiss: `pages.faiss` (the whole index, written atomically).
- chroma: `pages.chroma/` (Chroma's own directory, persisted on every write) and `pages.chroma.json`
  (the marker recording the store sequence the collection covers, written atomically).
"""

import logging
import shutil
from pathlib import Path
from typing import NamedTuple

from memoryos.config import MemoryConfig
from memoryos.storage.faiss_index import FaissIndex, IndexSnapshotError
from memoryos.storage.vector_index import VectorIndex

log = logging.getLogger(__name__)

FAISS_SNAPSHOT_FILE = "pages.faiss"
CHROMA_DIRECTORY = "pages.chroma"
CHROMA_MARKER_FILE = "pages.chroma.json"


class OpenedIndex(NamedTuple):
    """A page index ready for the store's replay of rows after `covered_seq`.

    `stale` is true when the snapshot was missing or unusable, so the caller rewrites it after replaying.
    """

    page_index: VectorIndex
    covered_seq: int
    stale: bool


def page_snapshot_path(config: MemoryConfig, directory: Path) -> Path:
    """The file `index.save(path, covered_seq)` writes for this backend."""
    if config.vector_backend == "chroma":
        return directory / CHROMA_MARKER_FILE
    return directory / FAISS_SNAPSHOT_FILE


def new_page_index(config: MemoryConfig, directory: Path, dim: int) -> VectorIndex:
    """An empty page index; for chroma, any collection already in the space directory is dropped."""
    if config.vector_backend == "chroma":
        from memoryos.storage.chroma_index import ChromaIndex

        return ChromaIndex.create(directory / CHROMA_DIRECTORY, dim)
    return FaissIndex(dim, ann_threshold=config.index_ann_threshold, gpu_policy=config.faiss_use_gpu)


def load_page_index(config: MemoryConfig, directory: Path, dim: int) -> tuple[VectorIndex, int]:
    """The saved page index and the store sequence it covers; IndexSnapshotError when missing or unusable."""
    path = page_snapshot_path(config, directory)
    if config.vector_backend == "chroma":
        from memoryos.storage.chroma_index import ChromaIndex

        return ChromaIndex.load(path, directory / CHROMA_DIRECTORY, dim)
    return FaissIndex.load(
        path, dim, ann_threshold=config.index_ann_threshold, gpu_policy=config.faiss_use_gpu
    )


def open_page_index(config: MemoryConfig, directory: Path, dim: int) -> OpenedIndex:
    """The saved page index when usable, else a fresh one covering nothing (the store replays it all)."""
    if page_snapshot_path(config, directory).exists():
        try:
            index, covered = load_page_index(config, directory, dim)
            return OpenedIndex(index, covered, stale=False)
        except IndexSnapshotError as error:
            log.warning(
                "page index snapshot unusable, rebuilding from the store",
                extra={"reason": str(error), "backend": config.vector_backend},
            )
    return OpenedIndex(new_page_index(config, directory, dim), 0, stale=True)


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
