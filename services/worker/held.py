"""Writes held until their space's reindex, rather than dead-lettered.

When a deployment changes its embedding model, a space still on the old model cannot be opened by the
new workers (`EmbeddingModelMismatchError`) until a reindex moves it; its writes would otherwise fail
`max_deliveries` times and go to the dead-letter list, and waiting in the stream would hold up every other
space of the shard. So the owner moves such a write from the shard's stream to the space's list
`<ns>:held:<space>`, in one transaction with its acknowledgement (a crash leaves it in one place, never
both, never neither), and adds the space to its shard's set `<ns>:held-spaces:<shard>`. While the space is
in that set, every later write of it goes behind the held ones, so they still apply in the order accepted.

The owner tries a held space again when its reindex finishes on this worker, when it takes the shard over
(a reindex may have finished under the previous owner, which died before releasing), and every `RETRY_S`
(a reindex run with the workers stopped, or workers rolled back to the space's model). The held writes
then apply oldest first, and the space leaves the set in the same step that empties its list. A forget
deletes the list: the API purges it with the stream's entries, and the owner again when it applies the
forget (a write parked between the two).

All of it runs while Redis is full (`services/queue/redis_full.py`): holding a write moves it from the
stream to a list (`_HOLD`, allowed at `maxmemory`), and releasing or forgetting only removes.
"""

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import cast

import redis

from memoryos.space.ops import op_from_json
from memoryos.space.pool import SpaceKey
from services.queue.keys import CONSUMER_GROUP, Keys, space_key, space_name
from services.queue.redis_full import ALLOW_OOM
from services.worker.runs import Delivered

log = logging.getLogger(__name__)

RETRY_S = 60.0
"""Every held space of the owned shards is tried again this often: a safety net, since a reindex on this
worker tries its space at once."""
TRIES_PER_ROUND = 16
TRY_ROUND_S = 0.5
"""Spaces tried on the chance they were reindexed (at a takeover, and each `RETRY_S`) are tried at most
`TRIES_PER_ROUND` every `TRY_ROUND_S`: a migration can hold thousands of spaces that still fail to open,
and the pace bounds the share of a core those tries take from the other spaces' writes (docs/service.md).
Spaces whose reindex just finished here go first, unpaced."""

_HOLD = (
    ALLOW_OOM
    + """
local n = tonumber(ARGV[3])
redis.call('RPUSH', KEYS[1], unpack(ARGV, 4, 3 + n))
redis.call('SADD', KEYS[2], ARGV[2])
redis.call('XACK', KEYS[3], ARGV[1], unpack(ARGV, 4 + n))
return redis.call('XDEL', KEYS[3], unpack(ARGV, 4 + n))
"""
)
"""Move n entries of a space (ARGV[2]) from the shard's stream KEYS[3] (group ARGV[1]; ids after the n
records) to its held list KEYS[1] (the n records from ARGV[4]), and the space into the shard's held set
KEYS[2]: one step, so a crash leaves each write in one place. It moves what the stream held, so it runs
while Redis is full."""

_FORGET = """
redis.call('DEL', KEYS[1])
redis.call('SREM', KEYS[2], ARGV[1])
"""
"""A forgotten space's held writes (KEYS[1]) go, and it leaves its shard's held set (KEYS[2]), in one step."""

_RELEASED = """
redis.call('LTRIM', KEYS[1], tonumber(ARGV[1]), -1)
if redis.call('LLEN', KEYS[1]) == 0 then
  redis.call('SREM', KEYS[2], ARGV[2])
  return 0
end
return 1
"""
"""Drop the oldest ARGV[1] held writes; the space leaves its shard's set when none is left, in the same
step (a crash between the two would otherwise leave a held space with nothing held, or the reverse)."""


class UnreadableHeldWrite(Exception):
    """The oldest held write of a space cannot be read back as an op: the consumer dead-letters it."""

    def __init__(self, space: str, record: bytes, error: Exception) -> None:
        try:
            parsed = json.loads(record)
        except ValueError:
            parsed = {}
        parsed = parsed if isinstance(parsed, dict) else {}
        self.entry_id = str(parsed.get("entry", "unknown")).encode()
        self.fields = {b"space": space.encode(), b"op": str(parsed.get("op", "")).encode()}
        super().__init__(f"malformed held write: {type(error).__name__}")


class HeldWrites:
    """The held spaces of the shards one worker owns, and their lists in Redis. The consumer's thread
    parks and releases; `ask_release` may be called from any thread (the read thread, after a reindex)."""

    def __init__(self, client: redis.Redis, keys: Keys, clock: Callable[[], float] = time.monotonic) -> None:
        self._client = client
        self._keys = keys
        self._clock = clock
        self._held: dict[int, set[SpaceKey]] = {}
        self._reindexed: dict[SpaceKey, int] = {}  # spaces to try now, with their shard
        self._maybe: dict[SpaceKey, int] = {}  # spaces to try, paced
        self._asked: set[SpaceKey] = set()
        self._asked_lock = threading.Lock()
        self._swept_at = clock()
        self._paced_at = self._swept_at - TRY_ROUND_S
        self._hold = client.register_script(_HOLD)
        self._forget = client.register_script(_FORGET)
        self._released = client.register_script(_RELEASED)

    def take_over(self, shard: int) -> None:
        """Load the shard's held spaces (a previous owner's) and try each soon: its reindex may be done."""
        names = cast(set[bytes], self._client.smembers(self._keys.held_spaces(shard)))
        self._held[shard] = {space_key(name.decode()) for name in names}
        for key in self._held[shard]:
            self._maybe[key] = shard

    def holds(self, shard: int, key: SpaceKey) -> bool:
        return key in self._held.get(shard, ())

    def count(self) -> int:
        """Held spaces over the shards loaded (a metric, read from the scrape thread)."""
        return sum(len(spaces) for spaces in list(self._held.values()))

    def hold(self, shard: int, stream: str, entries: list[Delivered]) -> None:
        """Move the entries (one space's, in order) from the stream to the space's held list."""
        key = entries[0].space
        records = [
            json.dumps({"entry": e.entry_id.decode(), "op": e.fields[b"op"].decode()}) for e in entries
        ]
        self._hold(
            keys=[self._keys.held(space_name(key)), self._keys.held_spaces(shard), stream],
            args=[CONSUMER_GROUP, space_name(key), len(entries), *records, *[e.entry_id for e in entries]],
        )
        held = self._held.setdefault(shard, set())
        if key not in held:
            log.info("a space's writes are held until its reindex", extra={"shard": shard})
        held.add(key)

    def ask_release(self, key: SpaceKey) -> None:
        """Try the space at the next poll (its reindex finished); nothing if it holds no write."""
        with self._asked_lock:
            self._asked.add(key)

    def due(self, shards: list[int]) -> list[tuple[int, SpaceKey]]:
        """The held spaces of `shards` to try now: those asked for, then (paced) the others due; the rest
        stay due."""
        with self._asked_lock:
            asked, self._asked = self._asked, set()
        for shard in shards:
            for key in asked & self._held.get(shard, set()):
                self._reindexed[key] = shard
                self._maybe.pop(key, None)
        now = self._clock()
        if now - self._swept_at >= RETRY_S:
            self._swept_at = now
            for shard in shards:
                for key in self._held.get(shard, ()):
                    self._maybe.setdefault(key, shard)
        picked = _take(self._reindexed, set(shards), len(self._reindexed))
        if self._maybe and now - self._paced_at >= TRY_ROUND_S:
            self._paced_at = now
            picked += _take(self._maybe, set(shards), TRIES_PER_ROUND)
        return picked

    def oldest(self, key: SpaceKey, count: int) -> list[Delivered]:
        """The space's oldest held writes, as delivered entries again, up to the first that cannot be read
        back; `UnreadableHeldWrite` when the oldest cannot (an op of a newer version, parked by a newer
        worker before a rollback)."""
        name = space_name(key)
        raw = cast(list[bytes], self._client.lrange(self._keys.held(name), 0, count - 1))
        held: list[Delivered] = []
        for position, record in enumerate(raw):
            try:
                parsed = json.loads(record)
                fields = {b"space": name.encode(), b"op": str(parsed["op"]).encode()}
                held.append(
                    Delivered(str(parsed["entry"]).encode(), fields, key, op_from_json(fields[b"op"]))
                )
            except (KeyError, TypeError, ValueError) as error:
                if position == 0:
                    raise UnreadableHeldWrite(name, record, error) from None
                break
        return held

    def released(self, shard: int, key: SpaceKey, count: int) -> bool:
        """Drop the `count` oldest held writes (applied); True, and the space no longer held, when none is
        left."""
        name = space_name(key)
        left = self._released(keys=[self._keys.held(name), self._keys.held_spaces(shard)], args=[count, name])
        if left:
            return False
        self._held.get(shard, set()).discard(key)
        log.info("a space's held writes are applied", extra={"shard": shard})
        return True

    def forget(self, shard: int, key: SpaceKey) -> None:
        """The space was forgotten: its held writes go too (their text must not stay in Redis)."""
        name = space_name(key)
        self._forget(keys=[self._keys.held(name), self._keys.held_spaces(shard)], args=[name])
        self._held.get(shard, set()).discard(key)
        self._reindexed.pop(key, None)
        self._maybe.pop(key, None)


def _take(due: dict[SpaceKey, int], shards: set[int], most: int) -> list[tuple[int, SpaceKey]]:
    """Up to `most` of the due spaces of `shards`, oldest first, no longer due."""
    picked = [(shard, key) for key, shard in due.items() if shard in shards][:most]
    for _, key in picked:
        del due[key]
    return picked
