"""`Backoff`: when a piece of work that keeps failing may be tried again.

An LLM that is down, rate-limited or answering garbage must not be called again on every write: each
failure in a row doubles the pause (from `first_s` up to `max_s`), and a success resets it. Each unit of
work that can fail alone (a space's STM overflow, one segment's analysis) has its own, so one poisoned
segment does not hold back the rest of its space.
"""

import time
from collections.abc import Callable


def delay_s(failures: int, first_s: float, max_s: float) -> float:
    """The pause after `failures` failures in a row (>= 1): `first_s` doubled per failure, at most `max_s`.
    The exponent is clamped so that a unit failing for days cannot overflow the float."""
    return min(max_s, first_s * 2.0 ** min(max(failures, 1) - 1, 64))


class Backoff:
    """The retry schedule of one unit of work."""

    def __init__(self, first_s: float, max_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._first_s = first_s
        self._max_s = max_s
        self._clock = clock
        self.failures = 0
        self.retry_at = 0.0

    def ready(self) -> bool:
        """May the work be tried now?"""
        return self._clock() >= self.retry_at

    def failed(self) -> None:
        self.failures += 1
        self.retry_at = self._clock() + delay_s(self.failures, self._first_s, self._max_s)

    def retry_now(self) -> None:
        """Make the work due at once (an explicit "consolidate now"); a new failure still pauses longer
        than the last one."""
        self.retry_at = 0.0

    def succeeded(self) -> None:
        self.failures = 0
        self.retry_at = 0.0

    def wait_s(self) -> float | None:
        """Seconds until the work may be tried again; None when it is not backing off."""
        return max(0.0, self.retry_at - self._clock()) if self.failures else None
