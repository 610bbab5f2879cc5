"""A full Redis: what still runs when Redis reaches `maxmemory` under `noeviction`, and the API's soft
limit below it that keeps it from getting there.

At `maxmemory`, Redis refuses every command flagged `denyoom` (SET, XADD, RPUSH, HSET, SADD, INCR, XGROUP
CREATE: anything that may grow memory) and, inside MULTI, every command at all: a transaction of XACK and
XDEL, which only free memory, is refused whole. The writes in the queue were acknowledged, so the workers
must go on applying, acknowledging and deleting them, or nothing ever frees Redis (docs/reliability.md,
"Redis full"). So the worker never uses MULTI, and:

- what frees memory or keeps it (XACK, XDEL, XREADGROUP, XCLAIM, PEXPIRE, DEL, SREM, HDEL, LTRIM, LPOP)
  runs in scripts without a shebang, which Redis judges command by command, so they run when full;
- what it needs that may grow memory by a small, bounded amount — its heartbeat and leases (one key per
  worker and per shard), a shard's consumer group, a forget's tombstone and count, and moving an entry
  from a stream to a list (held for a reindex, dead-lettered: the stream shrinks by what the list grows)
  — runs in scripts declared `ALLOW_OOM`, which Redis runs whatever its memory;
- what it does not need to drain (a note of a failing forget) fails soft: logged, written again later.

The API stops taking writes earlier, at a soft limit (`SoftLimit`): a fraction of `maxmemory`, read from
`INFO memory`, or an absolute size for a managed Redis whose `maxmemory` is hidden. The room above it is
for what must still pass: forgets (a user's right to be forgotten does not wait for the workers), owner
calls and their replies (transient, `ALLOW_OOM` too), and the worker's own keys.
"""

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, cast

import redis
from redis.exceptions import OutOfMemoryError

from services.queue.settings import QueueSettings

log = logging.getLogger(__name__)

ALLOW_OOM = "#!lua flags=allow-oom\n"
"""The first line of a script that runs even while Redis is over `maxmemory` (Redis 7). Only for writes of
bounded size that the queue needs to drain, or that free more than they take."""

SAMPLE_S = 0.1
"""How long one reading of Redis's memory serves an API process's writes: a burst of writes costs one
INFO a tenth of a second, and can pass the soft limit by at most what it writes in that time."""


class RedisFullError(OutOfMemoryError):
    """Redis holds more than the soft limit: the API refuses the write (503 `queue_full` with Retry-After,
    the same answer as Redis's own refusal at `maxmemory`) and queues nothing."""

    def __init__(self, used_bytes: int, limit_bytes: int) -> None:
        self.used_bytes, self.limit_bytes = used_bytes, limit_bytes
        super().__init__(
            f"the queue's Redis holds {used_bytes} bytes, over its soft limit of {limit_bytes}; retry later"
        )


def soft_limit_bytes(settings: QueueSettings, maxmemory: int) -> int | None:
    """Where the API stops taking writes: `queue_soft_limit_bytes` when set (a managed Redis that hides
    `maxmemory`), else `queue_soft_limit_fraction` of `maxmemory`; None when Redis has no bound."""
    if settings.queue_soft_limit_bytes is not None:
        return settings.queue_soft_limit_bytes
    if maxmemory <= 0:
        return None
    return int(maxmemory * settings.queue_soft_limit_fraction)


class SoftLimit:
    """The API's check of Redis's memory before a write, from a reading at most `SAMPLE_S` old. Shared by
    the threads that enqueue."""

    def __init__(
        self, client: redis.Redis, settings: QueueSettings, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._client = client
        self._settings = settings
        self._clock = clock
        self._lock = threading.Lock()
        self._read_at = -SAMPLE_S
        self._used = 0
        self._limit: int | None = None
        self._unreadable_logged = False

    def check(self) -> None:
        """`RedisFullError` when Redis's used memory is at or over the soft limit."""
        used, limit = self._reading()
        if limit is not None and used >= limit:
            raise RedisFullError(used, limit)

    def _reading(self) -> tuple[int, int | None]:
        with self._lock:
            if self._clock() - self._read_at >= SAMPLE_S:
                self._used, self._limit = self._read()
                self._read_at = self._clock()
            return self._used, self._limit

    def _read(self) -> tuple[int, int | None]:
        try:
            memory = cast(dict[str, Any], self._client.info("memory"))
        except redis.ResponseError as error:  # INFO renamed away: only Redis's own maxmemory refuses
            if not self._unreadable_logged:
                self._unreadable_logged = True
                log.warning(
                    "Redis refuses INFO memory; writes are refused only at its maxmemory",
                    extra={"error": type(error).__name__},
                )
            return 0, None
        return int(memory["used_memory"]), soft_limit_bytes(self._settings, int(memory.get("maxmemory", 0)))
