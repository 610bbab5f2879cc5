"""The API's side of the queue: append planned ops to their shard's stream, say how deep the queue is,
and purge a forgotten user's writes that were never applied.

An append returns once Redis holds the entry: that is the acknowledgement the API gives. How durable that
is depends on Redis's own settings (AOF with `appendfsync`, `maxmemory-policy noeviction`): docs/service.md.
"""

from typing import cast

import redis
from opentelemetry.trace import Span, SpanKind

from memoryos.errors import WriteIdConflictError
from memoryos.space.ops import AddTurns, AnyOp, ForgetSpace, op_to_json
from memoryos.space.pool import SpaceKey
from memoryos.space.writes import caller_content_id
from memoryos.tracing import current_carrier, tracing_enabled
from memoryos.tracing.attributes import MESSAGING_MESSAGE_ID
from memoryos.tracing.spans import operation_span
from services.queue import streams
from services.queue.bundle_transfer import purge_bundles
from services.queue.dead_letters import purge_dead_letters
from services.queue.keys import Keys, shard_of, space_key, space_name
from services.queue.redis_full import ALLOW_OOM, SoftLimit
from services.queue.settings import QueueSettings
from services.queue.tracing import operation_of, stream_attributes, write_attributes

PURGE_SCAN = 1000
"""Entries read per step when purging a space's writes from its shard's stream."""


ENQUEUE = """
local depth = redis.call('XLEN', KEYS[1])
if depth >= tonumber(ARGV[3]) then
  return depth
end
if ARGV[4] ~= '' then
  local ttl = tonumber(ARGV[6])
  local now = tonumber(redis.call('TIME')[1])
  local old = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now - ttl, 'LIMIT', 0, 100)
  if #old > 0 then
    redis.call('HDEL', KEYS[4], unpack(old))
    redis.call('ZREM', KEYS[5], unpack(old))
  end
  local known = redis.call('HGET', KEYS[4], ARGV[4])
  if known and known ~= ARGV[5] then
    return {known}
  end
  if not known then
    redis.call('HSET', KEYS[4], ARGV[4], ARGV[5])
    redis.call('ZADD', KEYS[5], now, ARGV[4])
  end
  redis.call('EXPIRE', KEYS[4], ttl)
  redis.call('EXPIRE', KEYS[5], ttl)
end
local id
if ARGV[7] ~= '' then
  id = redis.call('XADD', KEYS[1], '*', 'space', ARGV[1], 'op', ARGV[2], 'trace', ARGV[7])
else
  id = redis.call('XADD', KEYS[1], '*', 'space', ARGV[1], 'op', ARGV[2])
end
redis.call('HSET', KEYS[2], ARGV[1], id)
redis.call('SADD', KEYS[3], ARGV[1])
return id
"""
"""Append a write to its shard's stream (KEYS[1]) unless it holds ARGV[3] entries already (then its
depth), note it as the space's newest write (KEYS[2], shard hash: space -> entry id) and the space as known
(KEYS[3]), in one step: one command for Redis to persist (one fsync with `appendfsync always`, where the
three commands cost two), and a read never sees a write without its note or the reverse.

A write under a caller's write id (ARGV[4], else '') is first checked against the content id that id was
accepted with (KEYS[4], hash; KEYS[5], the ids by first acceptance): another one answers that content id
alone (a table) and appends nothing; the same one (a retry) is appended again, and the worker's op log
stores it once. A new id is remembered ARGV[6] seconds: each step drops up to 100 ids older than that (more
than it adds), and both keys expire that long after the space's latest such write.

A traced write carries its enqueue span's context in a field of its own, `trace` (ARGV[7], '' for none:
tracing off, no field), beside the op and outside its content id (`services/queue/tracing.py`).

A forget runs it as `ALLOW_OOM`: it is accepted even when Redis is full (`redis_full.py`)."""

PURGE_NOTES = """
redis.call('SREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('DEL', KEYS[3], KEYS[4], KEYS[5])
redis.call('SREM', KEYS[6], ARGV[1])
"""
"""A forgotten space (ARGV[1]) leaves the known spaces (KEYS[1]) and its shard's notes of newest writes
(KEYS[2]) and held spaces (KEYS[6]); its held writes and write ids' digests (KEYS[3..5]) go. One step, and
no command of it grows memory, so it runs while Redis is full (a MULTI would be refused whole)."""


class QueueFullError(Exception):
    """The shard's stream holds `queue_max_entries` unapplied writes: refuse (503 + Retry-After) rather
    than grow Redis's memory without bound."""

    def __init__(self, shard: int, depth: int) -> None:
        self.shard, self.depth = shard, depth
        super().__init__(f"write queue shard {shard} holds {depth} unapplied writes; retry later")


def _caller_write(op: AnyOp) -> tuple[str, str]:
    """(write id, content id) of a write under a caller-chosen write id, the pair the queue remembers;
    ("", "") for any other op (a server-chosen write id is unique: nothing to remember)."""
    if isinstance(op, AddTurns) and (content_id := caller_content_id(op)):
        return op.write_id, content_id
    return "", ""


class WriteQueue:
    """Appends ops for spaces to the shard streams of one deployment."""

    def __init__(self, client: redis.Redis, settings: QueueSettings) -> None:
        self.client = client
        self.settings = settings
        self.keys = Keys(settings.redis_namespace)
        self._enqueue = client.register_script(ENQUEUE)
        self._enqueue_forget = client.register_script(ALLOW_OOM + ENQUEUE)
        self._purge_notes = client.register_script(PURGE_NOTES)
        self.soft_limit = SoftLimit(client, settings)

    def shard(self, key: SpaceKey) -> int:
        return shard_of(key, self.settings.shard_count)

    def enqueue(self, key: SpaceKey, op: AnyOp) -> str:
        """Append `op` for the space; returns the stream entry id once Redis holds it.
        `WriteIdConflictError` (nothing appended) for a write whose caller-chosen id was accepted with
        other content in the last `write_digest_ttl_s`. Any op but a forget is refused with
        `RedisFullError` (nothing appended) while Redis is over its soft limit (`redis_full.py`).

        Traced, it is a PRODUCER span (`enqueue <operation>`, a child of the request's) whose context the
        entry carries to the worker, where the write's apply span is its child; a refusal ends it in error."""
        if not tracing_enabled():
            return self._append(key, op, None)
        shard, operation = self.shard(key), operation_of(op)
        with operation_span(
            f"enqueue {operation}",
            operation,
            (key.tenant, key.user_id, key.assistant_id),
            {
                **stream_attributes(self.keys.writes(shard), shard, "send"),
                **write_attributes(op),
            },
            kind=SpanKind.PRODUCER,
        ) as span:
            return self._append(key, op, span)

    def _append(self, key: SpaceKey, op: AnyOp, span: Span | None) -> str:
        """`enqueue`'s work, inside its span when traced: the entry carries the span's context."""
        if not isinstance(op, ForgetSpace):
            self.soft_limit.check()
        added = self.enqueue_on(self.client, key, op, trace=current_carrier() if span is not None else None)
        if isinstance(added, int):
            raise QueueFullError(self.shard(key), added)
        if isinstance(added, list):
            raise WriteIdConflictError(_caller_write(op)[0])
        entry_id = cast(bytes, added).decode()
        if span is not None:
            span.set_attribute(MESSAGING_MESSAGE_ID, entry_id)
        return entry_id

    def enqueue_on(
        self,
        client: "redis.Redis | redis.client.Pipeline",
        key: SpaceKey,
        op: AnyOp,
        trace: str | None = None,
    ) -> object:
        """Run the append script for `op` on `client`: this queue's connection (its reply: an entry id,
        a depth, or a conflict) or a pipeline, for a bulk loader that queues many writes in one round trip
        and reads the replies from its `execute()` — the same script the API runs, so a loader's writes are
        exactly the API's. `trace`: the context the entry carries (`current_carrier()`), None for none."""
        shard, space = self.shard(key), space_name(key)
        write_id, content_id = _caller_write(op)
        script = self._enqueue_forget if isinstance(op, ForgetSpace) else self._enqueue
        return script(
            keys=[
                self.keys.writes(shard),
                self.keys.last_writes(shard),
                self.keys.spaces(),
                self.keys.write_digests(space),
                self.keys.write_digest_times(space),
            ],
            args=[
                space,
                op_to_json(op),
                self.settings.queue_max_entries,
                write_id,
                content_id,
                self.settings.write_digest_ttl_s,
                trace or "",
            ],
            client=client,
        )

    def depth(self) -> int:
        """Unapplied writes over every shard (entries are deleted once applied)."""
        pipe = self.client.pipeline(transaction=False)
        for shard in range(self.settings.shard_count):
            pipe.xlen(self.keys.writes(shard))
        return sum(int(n) for n in pipe.execute())

    def last_write_id(self, key: SpaceKey) -> str:
        """The entry id of the space's newest accepted write ("0-0": none since its last forget): a read
        issued now must see up to it."""
        found = self.client.hget(self.keys.last_writes(self.shard(key)), space_name(key))
        return cast(bytes, found).decode() if found is not None else "0-0"

    def known_spaces(self) -> list[SpaceKey]:
        """Every space written to through the queue and not forgotten since."""
        return [
            space_key(name.decode()) for name in cast(set[bytes], self.client.smembers(self.keys.spaces()))
        ]

    def purge(self, key: SpaceKey) -> int:
        """Delete the space's entries still in its shard's stream, its writes held for a reindex, its
        write ids' digests, its dead letters and its bundles (a forget: its text and its ids must not stay
        in Redis either); returns how many stream entries. Other spaces' are left alone. Nothing of it
        grows memory: it runs while Redis is full, as the forget after it is queued."""
        purge_dead_letters(self.client, self.keys, key)
        purge_bundles(self.client, self.keys, key)
        shard = self.shard(key)
        stream = self.keys.writes(shard)
        name = space_name(key)
        self._purge_notes(
            keys=[
                self.keys.spaces(),
                self.keys.last_writes(shard),
                self.keys.held(name),
                self.keys.write_digests(name),
                self.keys.write_digest_times(name),
                self.keys.held_spaces(shard),
            ],
            args=[name],
        )
        purged, start = 0, "-"
        while True:
            entries = streams.entries(self.client, stream, after=start, count=PURGE_SCAN)
            mine = [entry_id for entry_id, fields in entries if fields.get(b"space") == name.encode()]
            if mine:
                purged += int(self.client.xdel(stream, *mine))
            if len(entries) < PURGE_SCAN:
                return purged
            start = "(" + entries[-1][0].decode()
