"""The text -> vector LRU in front of the embedding model."""

import threading

import numpy as np
import pytest

from memoryos.embedding.cache import EmbeddingCache


def vec(value: float) -> np.ndarray:
    return np.full(3, value, dtype=np.float32)


def test_hit_returns_stored_vector_and_miss_returns_none():
    cache = EmbeddingCache(2)
    cache.put(False, "a", vec(1))
    np.testing.assert_array_equal(cache.get(False, "a"), vec(1))
    assert cache.get(False, "b") is None


def test_query_and_document_are_keyed_apart():
    cache = EmbeddingCache(4)
    cache.put(True, "a", vec(1))
    assert cache.get(False, "a") is None
    cache.put(False, "a", vec(2))
    np.testing.assert_array_equal(cache.get(True, "a"), vec(1))
    np.testing.assert_array_equal(cache.get(False, "a"), vec(2))


def test_evicts_least_recently_used():
    cache = EmbeddingCache(2)
    cache.put(False, "a", vec(1))
    cache.put(False, "b", vec(2))
    cache.get(False, "a")  # "b" is now the least recently used
    cache.put(False, "c", vec(3))
    assert len(cache) == 2
    assert cache.get(False, "b") is None
    assert cache.get(False, "a") is not None
    assert cache.get(False, "c") is not None


def test_put_existing_key_refreshes_value_and_recency():
    cache = EmbeddingCache(2)
    cache.put(False, "a", vec(1))
    cache.put(False, "b", vec(2))
    cache.put(False, "a", vec(9))
    cache.put(False, "c", vec(3))
    assert cache.get(False, "b") is None
    np.testing.assert_array_equal(cache.get(False, "a"), vec(9))


def test_size_zero_disables():
    cache = EmbeddingCache(0)
    cache.put(False, "a", vec(1))
    assert cache.get(False, "a") is None
    assert len(cache) == 0


def test_negative_size_is_rejected():
    with pytest.raises(ValueError, match="embedding_cache_size"):
        EmbeddingCache(-1)


def test_stored_vector_is_isolated_from_callers():
    cache = EmbeddingCache(2)
    batch = np.stack([vec(1), vec(2)])
    cache.put(False, "a", batch[0])
    batch[0] = 0.0  # the caller reuses its array
    stored = cache.get(False, "a")
    assert stored is not None
    np.testing.assert_array_equal(stored, vec(1))
    with pytest.raises(ValueError):
        stored[0] = 5.0


def test_concurrent_use_keeps_capacity():
    cache = EmbeddingCache(50)

    def worker(offset: int) -> None:
        for i in range(500):
            cache.put(False, f"{offset}-{i}", vec(i))
            cache.get(False, f"{offset}-{i // 2}")

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(cache) == 50
