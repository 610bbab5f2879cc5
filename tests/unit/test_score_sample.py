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


def rows(count: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((count, DIM)).astype(np.float32)


def test_a_new_spaces_sample_allocates_for_its_rows_not_the_full_reservoir() -> None:
    stored = StoredVectors(rows(3))
    ScoreSample(stored, DIM)  # type: ignore[arg-type]  # numpy's own first-use allocations, outside the count
    tracemalloc.start()
    try:
        sample = ScoreSample(stored, DIM)  # type: ignore[arg-type]
        allocated, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    full = SCORE_SAMPLE_SIZE * DIM * 4
    assert allocated < full / 20, f"{allocated} bytes for 3 rows (the full reservoir is {full})"
    assert len(sample.vectors) == 3


def test_rows_offered_past_each_growth_are_kept_in_order_until_the_reservoir_is_full() -> None:
    sample = ScoreSample(StoredVectors(rows(5)), DIM)  # type: ignore[arg-type]
    offered = rows(200, seed=1)
    sample.offer(offered)
    np.testing.assert_array_equal(sample.vectors, np.vstack([rows(5), offered]))
    sample.offer(rows(SCORE_SAMPLE_SIZE, seed=2))
    assert len(sample.vectors) == SCORE_SAMPLE_SIZE


def test_a_space_reopened_with_more_rows_than_the_reservoir_samples_a_full_one() -> None:
    sample = ScoreSample(StoredVectors(rows(SCORE_SAMPLE_SIZE + 50)), DIM)  # type: ignore[arg-type]
    assert len(sample.vectors) == SCORE_SAMPLE_SIZE
    sample.offer(rows(10, seed=3))
    assert len(sample.vectors) == SCORE_SAMPLE_SIZE
