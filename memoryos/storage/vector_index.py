"""The `VectorIndex` protocol: one results contract for every vector backend (FAISS flat/ANN, ChromaDB).

Ids are the store's int64 row ids, stable across rebuilds. Scores are inner products of unit vectors
(cosine), higher is closer. An index is derived data: the canonical store holds every vector, and an
index snapshot records the last store sequence it covers so newer vectors are replayed on load.
"""

from pathlib import Path
from typing import Protocol

import numpy as np


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

    def search(self, queries: np.ndarray, k: int, allowed_ids: np.ndarray | None = None) -> SearchResult:
        """Top-k by inner product for each query row; `allowed_ids` restricts results to those ids."""
        ...

    def save(self, path: Path, covered_seq: int) -> None:
        """Write a snapshot atomically (temp file, fsync, rename) recording the store sequence it covers."""
        ...


def checked_ids(array: np.ndarray, name: str) -> np.ndarray:
    """Ids as contiguous int64, refusing what no backend can store: -1 is the padding of search results."""
    array = np.asarray(array)
    if array.dtype.kind not in "iu" or array.ndim != 1:
        raise ValueError(f"{name}: expected a 1-d integer array, got {array.dtype} of shape {array.shape}")
    ids = np.ascontiguousarray(array, dtype=np.int64)
    if len(ids) and ids.min() < 0:
        raise ValueError(f"{name}: ids must be in [0, 2**63); -1 marks padding in results")
    return ids
