"""`ScoreSample`: a reservoir of page vectors whose memory grows with the rows it holds."""

import tracemalloc

import numpy as np

from memoryos.space.score_sample import SCORE_SAMPLE_SIZE, ScoreSample
from memoryos.storage.records.base import PageSample

DIM = 384


class StoredVectors:
    """What the sample reads of a store when a space opens: whether the open created it, and its sample."""

    created = False

    def __init__(self, vectors: np.ndarray) -> None:
        self._vectors = vectors

    def page_sample(self, size: int, dim: int) -> PageSample:
        return PageSample(len(self._vectors), self._vectors[:size])


class NoVectorsBack:
    """A page index that cannot give its vectors back (as Chroma): the sample is read from the store."""

    def spread_sample(self, size: int) -> None:
        return None


class HeldVectors:
    """A page index holding vectors, which it gives back as its sample."""

    def __init__(self, vectors: np.ndarray) -> None:
        self._vectors = vectors

    def spread_sample(self, size: int) -> np.ndarray:
        return self._vectors[:size]


def started(store: object, index: object) -> ScoreSample:
    sample = ScoreSample(DIM)
    sample.start(store, index)  # type: ignore[arg-type]
    return sample


def rows(count: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((count, DIM)).astype(np.float32)


def test_a_new_spaces_sample_allocates_for_its_rows_not_the_full_reservoir() -> None:
    stored = StoredVectors(rows(3))
    started(stored, NoVectorsBack())  # numpy's own first-use allocations, outside the count
    tracemalloc.start()
    try:
        sample = started(stored, NoVectorsBack())
        allocated, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    full = SCORE_SAMPLE_SIZE * DIM * 4
    assert allocated < full / 20, f"{allocated} bytes for 3 rows (the full reservoir is {full})"
    assert len(sample.vectors) == 3


def test_rows_offered_past_each_growth_are_kept_in_order_until_the_reservoir_is_full() -> None:
    sample = started(StoredVectors(rows(5)), NoVectorsBack())
    offered = rows(200, seed=1)
    sample.offer(offered)
    np.testing.assert_array_equal(sample.vectors, np.vstack([rows(5), offered]))
    sample.offer(rows(SCORE_SAMPLE_SIZE, seed=2))
    assert len(sample.vectors) == SCORE_SAMPLE_SIZE


def test_a_space_reopened_with_more_rows_than_the_reservoir_samples_a_full_one() -> None:
    sample = started(StoredVectors(rows(SCORE_SAMPLE_SIZE + 50)), NoVectorsBack())
    assert len(sample.vectors) == SCORE_SAMPLE_SIZE
    sample.offer(rows(10, seed=3))
    assert len(sample.vectors) == SCORE_SAMPLE_SIZE


class CountOnly:
    """A store whose vectors must not be read: only its page count."""

    created = False

    def page_sample(self, size: int, dim: int) -> PageSample:
        raise AssertionError("the sample was read from the store although the index holds it")

    def page_total(self) -> int:
        return 9


def test_the_sample_comes_from_the_page_index_with_the_stores_page_count() -> None:
    """An index that gives its vectors back is the sample's source (the store is asked only its count of
    pages, which includes those still waiting for a vector): no pass over the store's rows."""
    sample = started(CountOnly(), HeldVectors(rows(7)))
    np.testing.assert_array_equal(sample.vectors, rows(7))
    sample.offer(rows(100, seed=4))
    np.testing.assert_array_equal(sample.vectors, np.vstack([rows(7), rows(100, seed=4)]))
