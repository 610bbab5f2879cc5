"""A fixed-size uniform sample of a space's page vectors, for calibrating retrieval scores."""

import numpy as np

from memoryos.storage.records.base import PageSample, RecordStore
from memoryos.storage.vectors.vector_index import VectorIndex

SCORE_SAMPLE_SIZE = 1024
"""Vectors kept: enough for a stable mean and spread of query scores, 1.5 MB at 384-d."""
FIRST_CAPACITY = 16
"""Rows allocated for a new space's sample; doubled as it fills, up to `SCORE_SAMPLE_SIZE`."""


def _capacity_for(rows: int) -> int:
    capacity = FIRST_CAPACITY
    while capacity < rows:
        capacity *= 2
    return min(capacity, SCORE_SAMPLE_SIZE)


class ScoreSample:
    """A uniform sample (reservoir) of at most `SCORE_SAMPLE_SIZE` page vectors, exact for small spaces.

    Retrieval z-scores dense similarities against the whole space; scoring this sample gives that
    distribution at a fixed cost whatever the space's size.

    The buffer grows with the rows rather than starting at its full 1.5 MB: zeroed memory is only free
    while the allocator maps it fresh, and in a process that has freed large blocks (embedding batches,
    evicted spaces) glibc hands out reused heap and clears every byte, so each open space held the whole
    buffer resident however few pages it had.
    """

    def __init__(self, dim: int) -> None:
        """An empty sample, filled by `start` once the space's page index is open: the index is given
        `offer` for the vectors it catches up on later, so the sample exists before it."""
        self._rng = np.random.default_rng(0)
        self._seen = 0
        self._buffer = np.zeros((0, dim), dtype=np.float32)
        self._filled = 0

    def start(self, store: RecordStore, index: VectorIndex) -> None:
        """The sample of the space's page vectors as it opens: taken from its page `index`, open and
        caught up with the store (it holds every embedded page's vector, as the snapshot or the store
        gave them), with the store's page count, or from the store where the index cannot give its
        vectors back; none read from a store this open created (`created`)."""
        dim = self._buffer.shape[1]
        if store.created:
            return
        held = index.spread_sample(SCORE_SAMPLE_SIZE)
        stored = (
            store.page_sample(SCORE_SAMPLE_SIZE, dim)
            if held is None
            else PageSample(store.page_total(), held)
        )
        self._seen = stored.pages
        initial = stored.vectors
        self._buffer = np.zeros((_capacity_for(len(initial)), dim), dtype=np.float32)
        self._buffer[: len(initial)] = initial
        self._filled = len(initial)

    @property
    def vectors(self) -> np.ndarray:
        return self._buffer[: self._filled]

    def offer(self, vectors: np.ndarray) -> None:
        for vector in vectors:
            self._seen += 1
            if self._filled < SCORE_SAMPLE_SIZE:
                if self._filled == len(self._buffer):
                    self._grow()
                self._buffer[self._filled] = vector
                self._filled += 1
            else:
                slot = int(self._rng.integers(0, self._seen))
                if slot < SCORE_SAMPLE_SIZE:
                    self._buffer[slot] = vector

    def _grow(self) -> None:
        grown = np.zeros((_capacity_for(self._filled + 1), self._buffer.shape[1]), dtype=np.float32)
        grown[: self._filled] = self._buffer[: self._filled]
        self._buffer = grown
