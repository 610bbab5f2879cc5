"""Which worker owns which shard: leases in Redis, renewed while the worker lives, released on drain.

In service mode the lease, not a file lock, is what keeps one writer per space (file locks are unreliable
on network volumes). Each worker announces itself with a heartbeat key; it aims to own
ceil(shards / live workers) shards, takes free shards up to that, and gives back what it holds beyond it
(after draining them), so a worker that joins gets work and a dead worker's shards are taken within the
lease's TTL.

Every call here runs while Redis is full (`services/queue/redis_full.py`): a worker that cannot heartbeat,
renew or take a lease cannot drain the queue that filled it. Renewing and releasing only extend or delete
a key; the heartbeat and a new lease write one small key each, by scripts that Redis runs at `maxmemory`.
"""

import math
import time
from typing import cast

import redis

from services.queue.keys import Keys
from services.queue.redis_full import ALLOW_OOM
from services.queue.settings import QueueSettings

_HEARTBEAT = ALLOW_OOM + "return redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])"
_ACQUIRE = ALLOW_OOM + "return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])"
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


class ShardLeases:
    """The leases one worker holds. Not thread-safe: the worker's main loop owns it."""

    def __init__(self, client: redis.Redis, settings: QueueSettings, worker_id: str) -> None:
        self.client = client
        self.settings = settings
        self.worker_id = worker_id
        self.keys = Keys(settings.redis_namespace)
        self.ttl_ms = int(settings.lease_ttl_s * 1000)
        self.owned: set[int] = set()
        self._heartbeat = client.register_script(_HEARTBEAT)
        self._acquire = client.register_script(_ACQUIRE)
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)

    def heartbeat(self) -> None:
        self._heartbeat(keys=[self.keys.worker(self.worker_id)], args=[str(time.time()), self.ttl_ms])

    def live_workers(self) -> int:
        return max(1, sum(1 for _ in self.client.scan_iter(self.keys.workers_pattern(), count=1000)))

    def target(self) -> int:
        """How many shards this worker should own now."""
        return math.ceil(self.settings.shard_count / self.live_workers())

    def renew(self) -> set[int]:
        """Extend every lease held; returns the shards lost (expired and taken: stop working on them).
        One round trip for all of them: the worker trusts a renewal from when it was sent, so a round
        that takes long (a call per shard, in sequence, on a slow link) would shorten the trust it buys."""
        shards = sorted(self.owned)
        pipe = self.client.pipeline(transaction=False)
        for shard in shards:
            self._renew(keys=[self.keys.lease(shard)], args=[self.worker_id, self.ttl_ms], client=pipe)
        lost = {shard for shard, renewed in zip(shards, pipe.execute(), strict=True) if not renewed}
        self.owned -= lost
        return lost

    def acquire(self, limit: int) -> set[int]:
        """Take free shards until `limit` are owned; returns the new ones (their writes to take over)."""
        gained: set[int] = set()
        for shard in range(self.settings.shard_count):
            if len(self.owned) >= limit:
                break
            if shard in self.owned:
                continue
            if self._acquire(keys=[self.keys.lease(shard)], args=[self.worker_id, self.ttl_ms]):
                self.owned.add(shard)
                gained.add(shard)
        return gained

    def surplus(self) -> list[int]:
        """Shards held beyond the target, to drain and give back (highest first: deterministic)."""
        extra = len(self.owned) - self.target()
        return sorted(self.owned, reverse=True)[: max(0, extra)]

    def release(self, shard: int) -> None:
        self._release(keys=[self.keys.lease(shard)], args=[self.worker_id])
        self.owned.discard(shard)

    def release_all(self) -> None:
        for shard in list(self.owned):
            self.release(shard)
        self.client.delete(self.keys.worker(self.worker_id))

    def owner(self, shard: int) -> str | None:
        value = cast(bytes | None, self.client.get(self.keys.lease(shard)))
        return None if value is None else value.decode()
