"""`ChromaIndex`: the `VectorIndex` contract over a ChromaDB persistent collection in cosine space.

Selected by `MemoryConfig.vector_backend = "chroma"` for deployments that already run Chroma; FAISS stays
the default (faster to open, no per-space threads; docs/indexes.md compares them).

What a caller may rely on, and why it is built this way:
- Every `add` and `remove` is durable when it returns: `PersistentClient` commits each write to its own
  SQLite log before returning (the reference's Chroma variant persisted only at process exit). A SIGKILL
  right after a write loses nothing (tests/unit/test_vector_index_contract.py kills a child to prove it).
- Because Chroma persists itself, a "snapshot" is only a marker: `snapshot(covered_seq).write(path)`
  (or `save`) atomically writes a small JSON file recording the store sequence the collection covers. The collection is always
  at least as new as its marker, and re-adding a covered row is an idempotent upsert, so replaying
  `rows > covered_seq` on open is always correct.
- `load` raises `IndexSnapshotError` whenever the marker or the collection cannot be trusted (missing,
  corrupt, other dimension, fewer vectors than the marker recorded, an HNSW segment that cannot serve
  its own vectors), so the space rebuilds from the canonical store, as it does for FAISS.
- Scores are cosine similarities (`1 - distance`), the same contract as FAISS's inner product of unit rows.
- `allowed_ids` uses Chroma's native `ids=` query filter rather than a post-filter with over-fetch: an
  over-fetch factor that keeps a selective filter (a few ids among 100k) from returning too few hits
  would have to grow to the whole collection, while the native filter restricts the HNSW search itself
  (its recall: docs/indexes.md). Chroma fails a query whose filter names an absent id, so the allowed ids
  are first narrowed to the stored ones (one `get`).
- Searches are approximate (HNSW, Chroma's defaults: M=16, ef_search=100) at every size.

Each open index holds one Chroma `System` (a SQLite connection and about six threads); `close()`
releases it, so a worker holding many spaces must close idle ones (see `memoryos.space.pool`).
"""

import contextlib
import json
import logging
import shutil
from pathlib import Path
from typing import Any

import chromadb
import numpy as np
from chromadb.api.shared_system_client import SharedSystemClient
from chromadb.config import Settings
from chromadb.errors import NotFoundError

from memoryos.storage.vectors.vector_index import (
    IndexSnapshot,
    IndexSnapshotError,
    SearchResult,
    checked_ids,
    checked_vectors,
)

logger = logging.getLogger(__name__)

MARKER_FORMAT = "memoryos-chroma-marker"
MARKER_VERSION = 1
DEFAULT_COLLECTION = "pages"
DIM_METADATA_KEY = "memoryos_dim"
PROBE_VECTORS = 4
"""Stored vectors read back and searched for on load, from each end of the collection: a lost or corrupt
HNSW segment fails here, at open, instead of on the first user query."""
PROBE_MIN_SCORE = 0.999
"""A probe vector must find a hit this close to itself (its own row, or an identical duplicate)."""
HNSW_BYTES_PER_VECTOR = 200
"""Beyond the float32 vector: HNSW links (2·M int32 at level 0, M=16), label and bookkeeping maps."""
CLIENT_OVERHEAD_BYTES = 5 * 1024 * 1024
"""Resident cost of one open client: its System, SQLite connection and threads (docs/indexes.md)."""


def _client_settings() -> Settings:
    """Equal settings for every client: Chroma shares one System per path and refuses differing ones."""
    return Settings(anonymized_telemetry=False, allow_reset=False)


class ChromaIndex:
    """A `VectorIndex` in a Chroma persistent directory; ids are the caller's int64 ids, stored as strings.

    Build it with `create` (empty) or `load` (existing); `close()` when done. Searches may run
    concurrently with each other; callers serialize writes against everything else (the space's lock).
    """

    def __init__(self, client: Any, collection: Any, directory: Path, dim: int) -> None:
        """Wrap an open client and collection; use `create` or `load` instead of calling this."""
        self._client = client
        self._collection = collection
        self._directory = directory
        self._dim = dim
        self._max_batch = int(client.get_max_batch_size())
        self._closed = False

    @classmethod
    def create(cls, directory: Path, dim: int, collection: str = DEFAULT_COLLECTION) -> "ChromaIndex":
        """An empty index in `directory`; a collection already there (stale or corrupt) is dropped first."""
        if dim <= 0:
            raise ValueError(f"dim: expected a positive dimension, got {dim}")
        directory = directory.resolve()
        client = None
        try:
            client = _open_client(directory)
            with contextlib.suppress(NotFoundError):
                client.delete_collection(collection)
        except Exception as error:  # an unreadable Chroma directory: start it over
            logger.warning("chroma directory unusable, recreating it", extra={"reason": str(error)})
            if client is not None:
                client.close()
            shutil.rmtree(directory, ignore_errors=True)
            client = _open_client(directory)
        created = client.create_collection(
            collection,
            metadata={"hnsw:space": "cosine", DIM_METADATA_KEY: dim},
            embedding_function=None,
        )
        return cls(client, created, directory, dim)

    @classmethod
    def load(
        cls,
        path: Path,
        directory: Path,
        dim: int,
        collection: str = DEFAULT_COLLECTION,
        expected_fingerprint: str | None = None,
    ) -> tuple["ChromaIndex", int]:
        """The index in `directory` and the store sequence its marker at `path` records as covered.

        Raises IndexSnapshotError when the marker is missing, corrupt or of another fingerprint (when one
        is expected: written before a reindex), or the collection is missing, of another dimension,
        holds fewer vectors than the marker recorded, or cannot find its own vectors.
        """
        marker = _read_marker(path)
        if marker["dim"] != dim:
            raise IndexSnapshotError(f"{path}: marker records {marker['dim']}-d vectors, expected {dim}-d")
        if expected_fingerprint is not None and marker.get("fingerprint") != expected_fingerprint:
            raise IndexSnapshotError(f"{path}: marker of other embeddings than the store's: before a reindex")
        if marker["collection"] != collection:
            raise IndexSnapshotError(f"{path}: marker is for collection {marker['collection']!r}")
        directory = directory.resolve()
        if not directory.is_dir():
            raise IndexSnapshotError(f"{directory}: chroma directory missing")
        client = None
        try:
            client = _open_client(directory)
            found = client.get_collection(collection, embedding_function=None)
            index = cls(client, found, directory, dim)
            index._check_usable(marker["count"])
        except IndexSnapshotError:
            if client is not None:
                client.close()
            raise
        except Exception as error:
            if client is not None:
                client.close()
            raise IndexSnapshotError(f"{directory}: chroma collection unusable: {error}") from error
        return index, marker["covered_seq"]

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def directory(self) -> Path:
        return self._directory

    def count(self) -> int:
        return int(self._collection.count())

    def resident_bytes(self) -> int:
        """Estimated memory this index holds once its HNSW segment is loaded."""
        return CLIENT_OVERHEAD_BYTES + self.count() * (self._dim * 4 + HNSW_BYTES_PER_VECTOR)

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        """Add or replace vectors (an upsert); within one batch the last row of a repeated id wins."""
        ids = checked_ids(ids, "ids")
        vectors = checked_vectors(vectors, self._dim, "vectors")
        if len(ids) != len(vectors):
            raise ValueError(f"ids: expected one id per vector ({len(vectors)}), got {len(ids)}")
        _, last_from_end = np.unique(ids[::-1], return_index=True)
        if len(last_from_end) < len(ids):
            keep = np.sort(len(ids) - 1 - last_from_end)
            ids, vectors = ids[keep], vectors[keep]
        for start in range(0, len(ids), self._max_batch):
            stop = start + self._max_batch
            self._collection.upsert(ids=_as_strings(ids[start:stop]), embeddings=vectors[start:stop])

    def remove(self, ids: np.ndarray) -> int:
        # Chroma's delete reports the ids it was given, present or not, so count the present ones.
        present = self._present(np.unique(checked_ids(ids, "ids")))
        for start in range(0, len(present), self._max_batch):
            self._collection.delete(ids=present[start : start + self._max_batch])
        return len(present)

    def spread_sample(self, size: int) -> None:
        """None: Chroma gives vectors back only through its client, which reads its own store; the record
        store's sample costs no more."""
        return None

    def search(self, queries: np.ndarray, k: int, allowed_ids: np.ndarray | None = None) -> SearchResult:
        """Top-k by cosine for each query row, best first; `allowed_ids` filters inside Chroma's search."""
        queries = checked_vectors(queries, self._dim, "queries")
        if k <= 0:
            raise ValueError(f"k: expected a positive number of hits, got {k}")
        allowed = None if allowed_ids is None else np.unique(checked_ids(allowed_ids, "allowed_ids"))
        ids = np.full((len(queries), k), -1, dtype=np.int64)
        scores = np.full((len(queries), k), -np.inf, dtype=np.float32)
        count = self.count()
        allowed_strings = None if allowed is None else self._present(allowed)
        if count == 0 or len(queries) == 0 or allowed_strings == []:
            return SearchResult(ids, scores)
        found = self._collection.query(
            query_embeddings=queries,
            n_results=min(k, count if allowed_strings is None else len(allowed_strings)),
            ids=allowed_strings,
            include=["distances"],
        )
        for row, (row_ids, row_distances) in enumerate(zip(found["ids"], found["distances"], strict=True)):
            hits = len(row_ids)
            ids[row, :hits] = np.array(row_ids, dtype=np.int64)
            scores[row, :hits] = 1.0 - np.asarray(row_distances, dtype=np.float32)
        return SearchResult(ids, scores)

    def _present(self, ids: np.ndarray) -> list[str]:
        """The string ids of those `ids` the collection holds (a query filter naming an absent id fails)."""
        present: list[str] = []
        for start in range(0, len(ids), self._max_batch):
            chunk = _as_strings(ids[start : start + self._max_batch])
            present.extend(self._collection.get(ids=chunk, include=[])["ids"])
        return present

    def snapshot(self, covered_seq: int, fingerprint: str = "") -> IndexSnapshot:
        """The marker recording that the collection covers store rows up to `covered_seq`.

        The vectors themselves were persisted by each write; only the marker is written, atomically. It
        may be written after later writes: the collection then covers more than it records, which the
        replay on open tolerates (re-adding a covered row is an idempotent upsert).
        """
        marker = {
            "format": MARKER_FORMAT,
            "version": MARKER_VERSION,
            "dim": self._dim,
            "covered_seq": int(covered_seq),
            "count": self.count(),
            "collection": self._collection.name,
            "fingerprint": fingerprint,
        }
        data = json.dumps(marker).encode()
        return IndexSnapshot(int(covered_seq), lambda: data)

    def save(self, path: Path, covered_seq: int, fingerprint: str = "") -> None:
        """Record durably, before returning, that the collection covers store rows up to `covered_seq`."""
        self.snapshot(covered_seq, fingerprint).write(path)

    def close(self) -> None:
        """Release the Chroma client (its SQLite connection and threads); closing twice is a no-op."""
        if not self._closed:
            self._closed = True
            self._client.close()

    def _check_usable(self, expected_count: int) -> None:
        """Raise IndexSnapshotError unless the collection holds what the marker promises and can search."""
        recorded_dim = (self._collection.metadata or {}).get(DIM_METADATA_KEY)
        if recorded_dim != self._dim:
            raise IndexSnapshotError(
                f"{self._directory}: collection holds {recorded_dim}-d vectors, expected {self._dim}-d"
            )
        count = self.count()
        if count < expected_count:
            raise IndexSnapshotError(
                f"{self._directory}: collection holds {count} vectors, its marker recorded {expected_count}"
            )
        if count == 0:
            return
        for offset in sorted({0, max(0, count - PROBE_VECTORS)}):
            probe = self._collection.get(limit=PROBE_VECTORS, offset=offset, include=["embeddings"])
            vectors = np.asarray(probe["embeddings"], dtype=np.float32)
            if vectors.ndim != 2 or vectors.shape[1] != self._dim:
                raise IndexSnapshotError(f"{self._directory}: stored vectors have shape {vectors.shape}")
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
            best = self.search(vectors / np.maximum(norms, 1e-12), 1).scores[:, 0]
            if not np.all(best >= PROBE_MIN_SCORE):
                raise IndexSnapshotError(f"{self._directory}: collection cannot find its own vectors")


def _open_client(directory: Path) -> Any:
    directory.mkdir(parents=True, exist_ok=True)
    try:
        return chromadb.PersistentClient(path=str(directory), settings=_client_settings())
    except Exception:
        _discard_failed_system(str(directory))
        raise


def _discard_failed_system(identifier: str) -> None:
    """Forget a Chroma System that failed to start, so the next client for the path starts a new one.

    Chroma 1.5 caches the System per path before starting it and keeps it when `start()` raises (an
    unreadable chroma.sqlite3), so every later client in the process would get the broken one and fail
    with AttributeError. Only a System no client holds is dropped; the lookup is defensive because these
    are Chroma internals.
    """
    shared = SharedSystemClient
    lock = getattr(shared, "_refcount_lock", None)
    systems = getattr(shared, "_identifier_to_system", None)
    refcounts = getattr(shared, "_identifier_to_refcount", None)
    if lock is None or not isinstance(systems, dict) or not isinstance(refcounts, dict):
        return
    with lock:
        if refcounts.get(identifier, 0) <= 0:
            systems.pop(identifier, None)


def _read_marker(path: Path) -> dict[str, Any]:
    try:
        marker = json.loads(path.read_bytes())
    except OSError as error:
        raise IndexSnapshotError(f"{path}: cannot read chroma marker: {error}") from error
    except ValueError as error:
        raise IndexSnapshotError(f"{path}: corrupt chroma marker: {error}") from error
    if not isinstance(marker, dict) or (marker.get("format"), marker.get("version")) != (
        MARKER_FORMAT,
        MARKER_VERSION,
    ):
        raise IndexSnapshotError(f"{path}: not a version-{MARKER_VERSION} MemoryOS chroma marker")
    for field, kind in (("dim", int), ("covered_seq", int), ("count", int), ("collection", str)):
        if not isinstance(marker.get(field), kind) or isinstance(marker.get(field), bool):
            raise IndexSnapshotError(f"{path}: chroma marker field {field!r} missing or invalid")
    return marker


def _as_strings(ids: np.ndarray) -> list[str]:
    return [str(i) for i in ids.tolist()]
