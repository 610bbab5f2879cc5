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
