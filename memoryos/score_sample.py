"""A fixed-size uniform sample of a space's page vectors, for calibrating retrieval scores."""

import numpy as np

from memoryos.storage.sqlite_store import SqliteStore

SCORE_SAMPLE_SIZE = 1024
"""Vectors kept: enough for a stable mean and spread of query scores, 1.5 MB at 384-d."""


class ScoreSample:
    """A uniform sample (reservoir) of at most `SCORE_SAMPLE_SIZE` page vectors, exact for small spaces.

    Retrieval z-scores dense similarities against the whole space; scoring this sample gives that
    distribution at a fixed cost whatever the space's size.
    """

    def __init__(self, store: SqliteStore, dim: int) -> None:
        self._rng = np.random.default_rng(0)
        self._seen = sum(store.count_pages().values())
        initial = store.sample_page_vectors(SCORE_SAMPLE_SIZE, dim)
        self._buffer = np.zeros((SCORE_SAMPLE_SIZE, dim), dtype=np.float32)
        self._buffer[: len(initial)] = initial
        self._filled = len(initial)

    @property
    def vectors(self) -> np.ndarray:
        return self._buffer[: self._filled]

    def offer(self, vectors: np.ndarray) -> None:
        for vector in vectors:
            self._seen += 1
            if self._filled < SCORE_SAMPLE_SIZE:
                self._buffer[self._filled] = vector
                self._filled += 1
            else:
                slot = int(self._rng.integers(0, self._seen))
                if slot < SCORE_SAMPLE_SIZE:
                    self._buffer[slot] = vector
