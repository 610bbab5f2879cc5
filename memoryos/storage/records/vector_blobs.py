"""How vectors are kept in SQLite: half-precision blobs, and the same rounding for the in-memory index.

One module decides the stored precision, so the store, the space's index and its knowledge search agree
on it: a vector read back from a blob equals the one the index was given live.
"""

from collections.abc import Sequence

import numpy as np

STORED_DTYPE = np.float16
"""Vectors are stored at half precision: it halves the store (a 384-d vector is 768 bytes) and moves a
cosine by ~1e-3, far below what separates ranks. `at_stored_precision` applies the same rounding to
vectors going into the in-memory index, so a replayed index equals the one built live."""


STORED_MAX = float(np.finfo(STORED_DTYPE).max)
"""The largest magnitude a stored component can have (65504); a larger one would become infinite."""


def at_stored_precision(vectors: np.ndarray) -> np.ndarray:
    """`vectors` rounded as the store keeps them, as float32 for faiss.

    Raises ValueError for components beyond `STORED_MAX` rather than storing infinities (unit-length
    embeddings never come near it)."""
    vectors = np.asarray(vectors)
    if vectors.size and np.abs(vectors).max() > STORED_MAX:
        raise ValueError(f"vectors: values beyond the float16 range (±{STORED_MAX:g})")
    return vectors.astype(STORED_DTYPE).astype(np.float32)


def to_blob(vector: np.ndarray) -> bytes:
    return np.ascontiguousarray(vector, dtype=STORED_DTYPE).tobytes()


def from_blobs(blobs: Sequence[bytes], dim: int) -> np.ndarray:
    """Stack stored vectors into a (n, dim) float32 matrix."""
    if not blobs:
        return np.zeros((0, dim), dtype=np.float32)
    return np.frombuffer(b"".join(blobs), dtype=STORED_DTYPE).reshape(len(blobs), dim).astype(np.float32)
