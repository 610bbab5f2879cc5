"""The embedding engine's batches and health verdicts, as pure decisions: padded tokens within one length
bucket, the oldest first; stalled only when texts wait or failures go on with no success."""

import bisect
from collections import deque

import pytest

from memoryos.embedding.engine.batching import length_bucket, padded_tokens, take_batch
from memoryos.embedding.engine.health import engine_verdict


def test_a_bucket_holds_lengths_within_one_and_a_half_times_each_other() -> None:
    """For every length `low` under 2,000: no length up to 4 x `low` in its bucket exceeds 1.5 x `low`.
    Each length is bucketed once (bucketing every pair took seconds), in ascending lists per bucket."""
    lengths_in: dict[int, list[int]] = {}
    for n in range(1, 4 * 2000):
        lengths_in.setdefault(length_bucket(n), []).append(n)
    for low in range(1, 2000):
        same = lengths_in[length_bucket(low)]
        longest = same[bisect.bisect_left(same, 4 * low) - 1]  # of those below 4 x low: low at least
        assert longest <= 1.5 * low
    assert length_bucket(76) != length_bucket(256)  # a page and a window-long text never share a batch


def test_a_batch_is_counted_padded_and_keeps_to_the_oldest_texts_bucket() -> None:
    queue = deque([40, 3, 41, 200, 44, 42, 47, 43, 45])
    batch = take_batch(queue, int, max_texts=100, max_padded_tokens=200)
    # 40, 41, 44, 42 in arrival order: 4 x 44 = 176; a fifth would pad to 47, 43 or 45 (> 200)
    assert batch == [44, 42, 41, 40] and padded_tokens(batch) == 176
    assert list(queue) == [3, 200, 47, 43, 45]  # other buckets wait for their turn, in arrival order


def test_the_padded_budget_binds_and_one_text_always_fits() -> None:
    queue = deque([40, 41, 42, 43, 44, 45, 46])
    batch = take_batch(queue, int, max_texts=100, max_padded_tokens=130)
    assert padded_tokens(batch) <= 130 and batch == [42, 41, 40]
    assert take_batch(deque([500, 3]), int, max_texts=100, max_padded_tokens=10) == [500]


def test_a_batch_keeps_the_text_bound_and_arrival_order_within_its_bucket() -> None:
    queue = deque([10, 11, 3, 12, 13, 14])
    assert take_batch(queue, int, max_texts=2, max_padded_tokens=10_000) == [11, 10]
    assert take_batch(queue, int, max_texts=2, max_padded_tokens=10_000) == [3]
    assert take_batch(queue, int, max_texts=2, max_padded_tokens=10_000) == [13, 12]


@pytest.mark.parametrize(
    ("waiting", "oldest_s", "since_success_s", "failing_for_s", "verdict"),
    [
        (0, 0.0, None, None, "idle"),
        (0, 0.0, 3600.0, None, "idle"),
        (5, 1.0, 3600.0, None, "ok"),  # idle for an hour, a text just arrived
        (5, 60.0, 1.0, None, "ok"),  # a long queue, batches succeeding
        (5, 60.0, 60.0, None, "stalled"),  # wedged inside a batch
        (5, 60.0, None, None, "stalled"),  # never succeeded
        (0, 0.0, 3600.0, 60.0, "stalled"),  # every request answered at once, with an error
        (0, 0.0, 3600.0, 1.0, "ok"),  # failing, not for long yet
    ],
)
def test_the_verdict(
    waiting: int, oldest_s: float, since_success_s: float | None, failing_for_s: float | None, verdict: str
) -> None:
    assert engine_verdict(waiting, oldest_s, since_success_s, failing_for_s, stall_after_s=30.0) == verdict
