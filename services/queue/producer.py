"""The API's side of the queue: append planned ops to their shard's stream, say how deep the queue is,
and purge a forgotten user's writes that were never applied.

An append returns once Redis holds the entry: that is the acknowledgement the API gives. How durable that
is depends on Redis's own settings (AOF with `appendfsync`, `maxmemory-policy noeviction`): docs/service.md.
"""

from typing import cast

import redis

from memoryos.ops import AnyOp, op_to_json
from memoryos.space_pool import SpaceKey
from services.queue import streams
from services.queue.dead_letters import purge_dead_letters
from services.queue.keys import Keys, shard_of, space_key, space_name
from services.queue.settings import QueueSettings

PURGE_SCAN = 1000
"""Entries read per step when purging a space's writes from its shard's stream."""


class QueueFullError(Exception):
    """The shard's stream holds `queue_max_entries` unapplied writes: refuse (503 + Retry-After) rather
    than grow Redis's memory without bound."""

    def __init__(self, shard: int, depth: int) -> None:
        self.shard, self.depth = shard, depth
        super().__init__(f"write queue shard {shard} holds {depth} unapplied writes; retry later")


class WriteQueue:
    """Appends ops for spaces to the shard streams of one deployment."""

    def __init__(self, client: redis.Redis, settings: QueueSettings) -> None:
        self.client = client
        self.settings = settings
        self.keys = Keys(settings.redis_namespace)

    def shard(self, key: SpaceKey) -> int:
        return shard_of(key, self.settings.shard_count)

    def enqueue(self, key: SpaceKey, op: AnyOp) -> str:
        """Append `op` for the space; returns the stream entry id once Redis holds it."""
        shard = self.shard(key)
        stream = self.keys.writes(shard)
        depth = int(self.client.xlen(stream))
        if depth >= self.settings.queue_max_entries:
            raise QueueFullError(shard, depth)
        entry_id = streams.add(self.client, stream, {"space": space_name(key), "op": op_to_json(op)})
        self.client.sadd(self.keys.spaces(), space_name(key))
        return entry_id

    def depth(self) -> int:
        """Unapplied writes over every shard (entries are deleted once applied)."""
        pipe = self.client.pipeline(transaction=False)
        for shard in range(self.settings.shard_count):
            pipe.xlen(self.keys.writes(shard))
        return sum(int(n) for n in pipe.execute())

    def last_entry_id(self, key: SpaceKey) -> str:
        """The newest entry of the space's shard ("0-0": none): a read issued now must see up to it."""
        return streams.newest_id(self.client, self.keys.writes(self.shard(key)))

    def known_spaces(self) -> list[SpaceKey]:
        """Every space written to through the queue and not forgotten since."""
        return [
            space_key(name.decode()) for name in cast(set[bytes], self.client.smembers(self.keys.spaces()))
        ]

    def purge(self, key: SpaceKey) -> int:
        """Delete the space's entries still in its shard's stream, its writes held for a reindex and its
        dead letters (a forget: its text must not stay in Redis either); returns how many stream
        entries. Other spaces' are left alone."""
        purge_dead_letters(self.client, self.keys, key)
        shard = self.shard(key)
        stream = self.keys.writes(shard)
        name = space_name(key).encode()
        pipe = self.client.pipeline(transaction=True)
        pipe.srem(self.keys.spaces(), name)
        pipe.delete(self.keys.held(space_name(key)))
        pipe.srem(self.keys.held_spaces(shard), name)
        pipe.execute()
        purged, start = 0, "-"
        while True:
            entries = streams.entries(self.client, stream, after=start, count=PURGE_SCAN)
            mine = [entry_id for entry_id, fields in entries if fields.get(b"space") == name]
            if mine:
                purged += int(self.client.xdel(stream, *mine))
            if len(entries) < PURGE_SCAN:
                return purged
            start = "(" + entries[-1][0].decode()
