"""Fair shares of the write capacity while the service is loaded: a space writing far more than the others
is refused first.

The API's lag bound (`max_write_lag_s`) refuses every write once embedding (or, with Redis, applying)
falls behind, whoever caused it. A well-behaved client waits out its `Retry-After` while a flat-out one
is back at once, so alone that bound lets one user take most of the writes and slow every other user's
reads behind its pages (docs/reliability.md, "Reads under load"). So under pressure — from half of the
bound, and for `OVERLOADED_S` after the bound refused a write (the lag swings past the bound and back
between two samples, so the half-way mark alone is seldom seen) —
a space whose writes in the last `WINDOW_S` exceed `SLACK` times the mean of the spaces writing in that
window is refused with the same 429 and `Retry-After`; the others go on. Without pressure nothing is
refused here: a single busy user on an idle service gets all of it.

The shares are per API process: behind several replicas each judges the writes it received, which is the
same judgement when a load balancer spreads a user's writes evenly.
"""

import collections
import threading
import time
from collections.abc import Callable

from memoryos.space.pool import SpaceKey
from services.spaces.protocol import BackpressureError

WINDOW_S = 1.0
"""How far back a space's writes count: long enough to hold a few writes of a steady client, short enough
that a space refused for a burst is admitted again within a second of slowing down."""
OVERLOADED_S = 5.0
"""How long after the lag bound refused a write the service counts as under pressure: the lag falls back
below the bound within a sample or two of refusing, and a writer retrying flat out is then first back in."""
SLACK = 2.0
"""A space may write this many times the mean share before it is refused under pressure: writers differ
(a chat in full flow against one that pauses), and only the one far past the others should wait."""


class WriteShares:
    """Who wrote in the last `WINDOW_S`, and whether a space is past its share. Thread-safe."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._recent: collections.deque[tuple[float, SpaceKey]] = collections.deque()
        self._counts: collections.Counter[SpaceKey] = collections.Counter()
        self._overloaded_until = float("-inf")

    def overloaded(self) -> None:
        """The global bound refused a write: the next `OVERLOADED_S` count as pressure."""
        with self._lock:
            self._overloaded_until = self._clock() + OVERLOADED_S

    def admit(self, key: SpaceKey, under_pressure: bool) -> bool:
        """Count a write of `key` and say True, or say False (count nothing) when the service is under
        pressure (`under_pressure`, or the bound refused a write in the last `OVERLOADED_S`) and the space
        already wrote more than `SLACK` times the mean of the spaces writing."""
        now = self._clock()
        with self._lock:
            self._forget_before(now - WINDOW_S)
            if (under_pressure or now < self._overloaded_until) and self._counts:
                mean = len(self._recent) / len(self._counts)
                if self._counts[key] + 1 > SLACK * max(1.0, mean):
                    return False
            self._recent.append((now, key))
            self._counts[key] += 1
            return True

    def refuse_past_share(self, key: SpaceKey, under_pressure: bool, retry_after_s: float) -> None:
        """`admit`, raising the API's 429 (`BackpressureError`) for a write it refuses."""
        if not self.admit(key, under_pressure):
            raise BackpressureError(
                "this memory space is writing more than its share while the service is loaded; retry later",
                retry_after_s,
            )

    def admit_write(
        self,
        key: SpaceKey,
        refuse_over_bound: Callable[[], None],
        under_pressure: bool,
        retry_after_s: float,
    ) -> None:
        """A write's admission, the same in every mode: the global bound first (`refuse_over_bound` raises
        its 429, which starts `OVERLOADED_S` of pressure), then the space's share."""
        try:
            refuse_over_bound()
        except BackpressureError:
            self.overloaded()
            raise
        self.refuse_past_share(key, under_pressure, retry_after_s)

    def _forget_before(self, cutoff: float) -> None:
        while self._recent and self._recent[0][0] < cutoff:
            _, key = self._recent.popleft()
            self._counts[key] -= 1
            if not self._counts[key]:
                del self._counts[key]
