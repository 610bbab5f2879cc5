"""Entries leaving a shard's stream, told to the worker's read threads as they leave.

A read waits until its space's writes have left the stream (`owner_calls.py`, `_wait_applied`). Polling
Redis for that from every read thread would make each lookup a trip through redis-py under the interpreter
lock that the applying thread needs, so the waiting reads would slow the applying they wait for
(docs/reliability.md, Reads under load). The consumer says when entries of a shard left its stream
(acknowledged, dead-lettered or set aside for a reindex), and a waiting read looks again then. It still
looks every `UNTOLD_S` on its own: a shard taken over by another worker is applied there, and nobody
tells this process.
"""

import threading
from collections import Counter

UNTOLD_S = 0.2
"""How often a waiting read looks in Redis without being told: the longest a read waits past writes that
left the stream unseen here (the shard's new owner applied them; this worker's read answers 503 then)."""


class StreamProgress:
    """A count per shard of the times entries left its stream, and a wait for it to move."""

    def __init__(self) -> None:
        self._moved = threading.Condition()
        self._counts: Counter[int] = Counter()

    def seen(self, shard: int) -> int:
        """The shard's count now: taken before looking in Redis, so a change after the look is not missed."""
        with self._moved:
            return self._counts[shard]

    def left(self, shard: int) -> None:
        """Entries of the shard left its stream: wake the reads waiting on it."""
        with self._moved:
            self._counts[shard] += 1
            self._moved.notify_all()

    def wait(self, shard: int, seen: int, timeout_s: float) -> None:
        """Until the shard's count moves past `seen`, or `timeout_s`."""
        with self._moved:
            self._moved.wait_for(lambda: self._counts[shard] != seen, min(timeout_s, UNTOLD_S))
