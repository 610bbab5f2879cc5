"""A bounded, thread-safe LRU of text -> embedding, so repeated texts skip the model.

Agents re-send the same texts (retrieval queries, the profile, unchanged summaries); an embedding is a pure
function of (model, is_query, text), so one cache per embedder is exact. Queries and documents are keyed
apart because some models prompt queries (Qwen3-Embedding).
"""

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence

import numpy as np


class EmbeddingCache:
    """Least-recently-used map from (is_query, text) to a vector, holding at most `max_entries`.

    `max_entries == 0` disables it: `get` always misses and `put` stores nothing. Stored vectors are private
    read-only copies, so a caller mutating its array (or the batch it came from) cannot corrupt the cache,
    and one cached row does not keep its whole batch alive.
    """

    def __init__(self, max_entries: int) -> None:
        if max_entries < 0:
            raise ValueError(f"embedding_cache_size: must be >= 0, got {max_entries}")
        self._max_entries = max_entries
        self._entries: OrderedDict[tuple[bool, str], np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def get(self, is_query: bool, text: str) -> np.ndarray | None:
        """The cached vector (read-only) and mark it recently used, or None on a miss."""
        key = (is_query, text)
        with self._lock:
            vector = self._entries.get(key)
            if vector is not None:
                self._entries.move_to_end(key)
            return vector

    def discard(self, texts: Sequence[str] | None) -> None:
        """Drop these texts, as queries and as documents (None: everything)."""
        with self._lock:
            if texts is None:
                self._entries.clear()
                return
            for text in texts:
                self._entries.pop((False, text), None)
                self._entries.pop((True, text), None)

    def put(self, is_query: bool, text: str, vector: np.ndarray) -> None:
        """Store a copy of `vector`, evicting the least recently used entries beyond capacity."""
        if self._max_entries == 0:
            return
        stored = vector.copy()
        stored.setflags(write=False)
        key = (is_query, text)
        with self._lock:
            self._entries[key] = stored
            self._entries.move_to_end(key)
            while len(self._entries) > self._max_entries:
                self._entries.popitem(last=False)

    def rows(
        self, texts: Sequence[str], is_query: bool, encode: Callable[[list[str]], np.ndarray]
    ) -> np.ndarray:
        """The vectors of `texts` (a non-empty sequence), stacked: cached ones from here, the others from
        one `encode` call with each missing text once, stored for next time."""
        cached = [self.get(is_query, text) for text in texts]
        missing = list(dict.fromkeys(text for text, row in zip(texts, cached, strict=True) if row is None))
        encoded: dict[str, np.ndarray] = {}
        if missing:
            encoded = dict(zip(missing, encode(missing), strict=True))
            for text, vector in encoded.items():
                self.put(is_query, text, vector)
        return np.stack(
            [encoded[text] if row is None else row for text, row in zip(texts, cached, strict=True)]
        )
