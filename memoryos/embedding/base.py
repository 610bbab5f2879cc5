"""The `Embedder` protocol every embedding backend implements."""

from collections.abc import Sequence
from typing import Protocol

import numpy as np


class Embedder(Protocol):
    """Turns texts into L2-normalized float32 vectors.

    `name` and `dim` are recorded in each memory space: vectors of different models are never mixed.
    Queries and documents may be encoded differently (Qwen3-Embedding prompts queries), hence `is_query`.
    """

    @property
    def name(self) -> str: ...

    @property
    def dim(self) -> int: ...

    def encode(self, texts: Sequence[str], *, is_query: bool = False) -> np.ndarray:
        """Return an array of shape (len(texts), dim), dtype float32, each row of unit length."""
        ...

    def forget_texts(self, texts: Sequence[str] | None) -> None:
        """Drop these texts (None: every text) from any cache the embedder keeps: a deleted memory or a
        forgotten user must not stay in process memory either."""
        ...


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """The protocol's rows from a backend's raw vectors: float32, L2-normalized; an all-zero row stays
    zero rather than becoming NaN."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, np.finfo(np.float32).tiny)


def estimate_tokens(text: str) -> int:
    """Characters / 4 + 2: about one token per 4 characters of English for WordPiece and BPE tokenizers,
    plus the two special tokens. Cheap (no tokenizer on a batching thread) and only a budget; the model
    truncates at its own window whatever the estimate says."""
    return len(text) // 4 + 2
