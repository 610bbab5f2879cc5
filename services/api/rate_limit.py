"""Requests per second per API key: one token bucket per key, refilled continuously.

A bucket holds up to `burst` tokens and gains `rate_per_s` per second; a request takes one. When none is
left the request is refused with 429 and the seconds until a token is back (`Retry-After`). Buckets idle
long enough to be full again are dropped, so the table stays as small as the set of active keys.
"""

import math
import threading
import time
from collections.abc import Callable


class RateLimiter:
    """Thread-safe token buckets keyed by an opaque key id (never the key itself)."""

    def __init__(self, rate_per_s: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        """`rate_per_s` 0 disables the limit."""
        self._rate = rate_per_s
        self._burst = float(burst)
        self._clock = clock
        self._lock = threading.Lock()
        self._buckets: dict[str, tuple[float, float]] = {}  # key id -> (tokens, at)
        self._swept_at = clock()

    def retry_after_s(self, key_id: str) -> int | None:
        """Take one token for `key_id`: None if it had one, else whole seconds until it will (>= 1)."""
        if self._rate <= 0:
            return None
        now = self._clock()
        with self._lock:
            tokens, at = self._buckets.get(key_id, (self._burst, now))
            tokens = min(self._burst, tokens + (now - at) * self._rate)
            if tokens >= 1.0:
                self._buckets[key_id] = (tokens - 1.0, now)
                self._sweep(now)
                return None
            self._buckets[key_id] = (tokens, now)
            return max(1, math.ceil((1.0 - tokens) / self._rate))

    def _sweep(self, now: float) -> None:
        """Drop buckets full again (idle for burst / rate seconds); at most once per that period."""
        full_after_s = self._burst / self._rate
        if now - self._swept_at < full_after_s:
            return
        self._swept_at = now
        self._buckets = {k: v for k, v in self._buckets.items() if now - v[1] < full_after_s}
