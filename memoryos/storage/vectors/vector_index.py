"""The `VectorIndex` protocol: one results contract for every vector backend (FAISS flat/ANN, ChromaDB).

Ids are the store's int64 row ids, stable across rebuilds. Scores are inner products of unit vectors
(cosine), higher is closer. An index is derived data: the canonical store holds every vector, and an
index snapshot records the last store sequence it covers so newer vectors are replayed on load.
"""

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import numpy as np

from memoryos.errors import StorageError
from memoryos.storage.atomic import atomic_write_bytes


class IndexSnapshotError(StorageError):
    """A snapshot is missing, truncated, corrupt or of another dimension: rebuild from the canonical store.

    Every backend's `load` raises it for anything but an intact snapshot, so a space needs one handler.
    """


class SearchResult:
    """Top-k hits for a batch of queries: `ids[q]` and `scores[q]` best first, -1 / -inf where fewer hits."""

    __slots__ = ("ids", "scores")

    def __init__(self, ids: np.ndarray, scores: np.ndarray) -> None:
        self.ids = ids
        self.scores = scores

    def hits(self, query: int = 0) -> list[tuple[int, float]]:
        """(id, score) pairs of one query, best first, padding dropped."""
        return [
            (int(i), float(s)) for i, s in zip(self.ids[query], self.scores[query], strict=True) if i >= 0
        ]


class IndexSnapshot:
    """An index snapshot taken in memory, to be written to a file later, possibly on another thread.

    Taking it needs the same write exclusivity as `add` (it reads the index); `write` touches only the
    snapshot, so the index may change meanwhile. `covered_seq` is the store sequence it covers.
    """

    __slots__ = ("_render", "covered_seq")

    def __init__(self, covered_seq: int, render: Callable[[], bytes]) -> None:
        self.covered_seq = covered_seq
        self._render = render

    def write(self, path: Path) -> None:
        """Replace `path` atomically (temp file, fsync, rename) with the snapshot's file contents."""
        atomic_write_bytes(path, self._render())


class VectorIndex(Protocol):
    @property
    def dim(self) -> int: ...

    def count(self) -> int:
        """Number of vectors held."""
        ...

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        """Add vectors (float32, (n, dim), unit rows) under int64 ids; an id already present is replaced."""
        ...

    def remove(self, ids: np.ndarray) -> int:
        """Remove ids; return how many were present."""
        ...

    def spread_sample(self, size: int) -> np.ndarray | None:
        """Up to `size` held vectors spread evenly over the ids in order (every nth from the lowest id, n
        the count over `size`), as `RecordStore.page_sample` picks them among a space's embedded pages;
        None where the backend cannot read its vectors back for less than the store would cost.

        Why: an index opened from its snapshot already holds every embedded page's vector, and reading
        the sample back from the store was the costliest part of opening a large space (a pass over every
        page's row, cold after a restart)."""
        ...

    def search(self, queries: np.ndarray, k: int, allowed_ids: np.ndarray | None = None) -> SearchResult:
        """Top-k by inner product for each query row; `allowed_ids` restricts results to those ids."""
        ...

    def snapshot(self, covered_seq: int, fingerprint: str = "") -> IndexSnapshot:
        """The index as it is now, recording the store sequence it covers and the embedding fingerprint
        of its vectors (a load expecting another fingerprint refuses it), for `IndexSnapshot.write`."""
        ...

    def save(self, path: Path, covered_seq: int, fingerprint: str = "") -> None:
        """`snapshot(covered_seq, fingerprint).write(path)`: written atomically before returning."""
        ...


def checked_vectors(array: np.ndarray, dim: int, name: str) -> np.ndarray:
    """Vectors as contiguous float32 of shape (n, dim), refusing integer, mis-shaped or non-finite input.

    The argument is named in the error, as the caller passed it: faiss would crash or silently cast.
    """
    array = np.asarray(array)
    if array.dtype.kind != "f":
        raise ValueError(f"{name}: expected floating-point vectors, got dtype {array.dtype}")
    if array.ndim != 2 or array.shape[1] != dim:
        raise ValueError(f"{name}: expected shape (n, {dim}), got {array.shape}")
    array = np.ascontiguousarray(array, dtype=np.float32)
    if not np.isfinite(array).all():
        raise ValueError(f"{name}: contains NaN or infinite values")
    return array


def checked_ids(array: np.ndarray, name: str) -> np.ndarray:
    """Ids as contiguous int64, refusing what no backend can store: -1 is the padding of search results."""
    array = np.asarray(array)
    if array.dtype.kind not in "iu" or array.ndim != 1:
        raise ValueError(f"{name}: expected a 1-d integer array, got {array.dtype} of shape {array.shape}")
    ids = np.ascontiguousarray(array, dtype=np.int64)
    if len(ids) and ids.min() < 0:
        raise ValueError(f"{name}: ids must be in [0, 2**63); -1 marks padding in results")
    return ids
