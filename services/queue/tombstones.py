"""Tombstones in Redis: the forgotten spaces, so that a Redis restored from before a forget (its AOF or RDB
put back) does not apply the user's old queued writes again, nor keep their held writes, dead letters,
bundles and ids.

The hash `<ns>:tombstones` maps the digest of a space's key (`memoryos.space.tombstones.digest`, the same
as the data volume's tombstone) to when its newest forget was planned (`ForgetSpace.at`): no id and no
memory text, so the hash leaves none of a forgotten user in Redis or its AOF (the limit: anyone who
already knows a user's ids can compute the digest and confirm the forget; nothing lists who was
forgotten). The owner sets it when it applies a forget, beside the data volume's tombstone
(`memoryos/space/tombstones.py`); each side is restored on its own, so a worker starting copies each
side's tombstones to the other (`services/worker/tombstones.py`), and for the tombstones Redis lacked —
Redis came back from before those forgets — drops here what Redis holds of those spaces from before
them. A digest names no key, so that pass reads the space names Redis holds (stream entries, dead
letters, the known spaces, the notes of a newest write, the spaces with held writes) and hashes each
distinct name once. What is younger (a write accepted after the forget, planned later) is kept.
"""

import json
import math
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any, cast

import redis

from memoryos.space import tombstones as volume
from memoryos.space.pool import SpaceKey
from services.queue import streams
from services.queue.bundle_transfer import purge_bundles
from services.queue.keys import Keys, shard_of, space_key, space_name
from services.queue.redis_full import ALLOW_OOM

SCAN = 1000
"""Stream entries or list records read per step."""

RECORD = (
    ALLOW_OOM
    + """
local old = redis.call('HGET', KEYS[1], ARGV[1])
if not old or tonumber(old) < tonumber(ARGV[2]) then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
"""
)
"""Set the space's tombstone (KEYS[1], field ARGV[1]) to ARGV[2] unless it holds a newer one; even while
Redis is full (a few bytes a forget): a forget applied must leave its tombstone."""

DROP_WRITE_IDS = """
redis.call('HDEL', KEYS[1], unpack(ARGV))
redis.call('ZREM', KEYS[2], unpack(ARGV))
"""
"""Forget the write ids ARGV in a space's hash of digests (KEYS[1]) and its ids by time (KEYS[2]) in one
step that runs while Redis is full (a MULTI would be refused whole)."""

FORGET_IDS = """
if redis.call('EXISTS', KEYS[5]) == 0 then
  redis.call('SREM', KEYS[4], ARGV[1])
end
if ARGV[2] == '1' then
  return 0
end
local id = redis.call('HGET', KEYS[1], ARGV[1])
if id and #redis.call('XRANGE', KEYS[3], id, id) == 0 then
  redis.call('HDEL', KEYS[1], ARGV[1])
  id = false
end
if not id then
  redis.call('SREM', KEYS[2], ARGV[1])
end
return 1
"""
"""After a restored space's old entries went: the space leaves its shard's held set (KEYS[4]) when its held
list (KEYS[5]) is empty; and unless it lives on with newer data (ARGV[2] '1'), its note of a newest write
(KEYS[1]) goes when that write is no longer in the stream (KEYS[3]; a write accepted since the restore
stays noted), and with no note it leaves the known spaces (KEYS[2]). One step: the API may enqueue
meanwhile."""


def record(client: redis.Redis, keys: Keys, space_digest: str, forgotten_at: float) -> None:
    """Note in Redis that the space of `space_digest` (`volume.digest`) was forgotten at `forgotten_at`
    (a newer tombstone is kept)."""
    client.eval(RECORD, 1, keys.tombstones(), space_digest, repr(forgotten_at))


def read_all(client: redis.Redis, keys: Keys) -> volume.Tombstones:
    """Every tombstone in Redis; a field that is no digest, or a value that is no time, is left out."""
    found: volume.Tombstones = {}
    for field, value in cast(dict[bytes, bytes], client.hgetall(keys.tombstones())).items():
        space_digest = field.decode(errors="replace")
        if not volume.is_digest(space_digest):
            continue
        try:
            found[space_digest] = float(value)
        except ValueError:
            continue
    return found


def planned_at(op_json: object) -> float:
    """When a queued op was planned (its `at`); -inf for one that cannot be read: nothing in it can show
    it is newer than a forget."""
    try:
        at = json.loads(cast(Any, op_json))["at"]
        return float(at) if isinstance(at, int | float) and math.isfinite(at) else -math.inf
    except (ValueError, TypeError, KeyError):
        return -math.inf


class _Forgotten:
    """The tombstones Redis lacked, matched against the space names Redis holds: each distinct name is
    hashed once, however many entries carry it."""

    def __init__(self, tombstones: volume.Tombstones) -> None:
        self.tombstones = tombstones
        self._digests: dict[str, str | None] = {}
        self.found: dict[str, str] = {}
        """The names of tombstoned spaces seen in Redis -> their digests."""
        self.dropped: Counter[str] = Counter()
        """The same names -> how many of their queued writes and dead letters went."""

    def at(self, name: str) -> float | None:
        """When the space `name` was forgotten, or None when it has no tombstone here."""
        if name not in self._digests:
            try:
                self._digests[name] = volume.digest(space_key(name))
            except ValueError:  # not three ids: no space's name
                self._digests[name] = None
        space_digest = self._digests[name]
        forgotten_at = None if space_digest is None else self.tombstones.get(space_digest)
        if space_digest is not None and forgotten_at is not None:
            self.found[name] = space_digest
        return forgotten_at

    def old(self, name: object, op_json: object) -> bool:
        """Whether an entry of the space `name` (bytes in a stream, a string in a JSON record) holding
        `op_json` was planned before the space's forget; counted as dropped when it was."""
        if isinstance(name, bytes):
            name = name.decode(errors="replace")
        if not isinstance(name, str):
            return False
        forgotten_at = self.at(name)
        if forgotten_at is None or planned_at(op_json) >= forgotten_at:
            return False
        self.dropped[name] += 1
        return True

    def seen(self, names: Iterable[bytes]) -> None:
        """Note which of `names` (members of a set, fields of a hash) are tombstoned spaces."""
        for name in names:
            self.at(name.decode(errors="replace"))


def drop_before(
    client: redis.Redis,
    keys: Keys,
    shard_count: int,
    tombstones: volume.Tombstones,
    lives_on: Callable[[SpaceKey], bool],
) -> dict[str, int]:
    """Drop what Redis holds of the spaces of `tombstones` from before their forgets: queued writes
    planned before the forget (every shard's stream is read once: a digest does not say which shard),
    held writes and dead letters likewise, their bundles (all made before: workers are started after a
    restore), then each one's note and its place among the known spaces unless it `lives_on` (its
    directory holds data newer than the forget) or a newer write is queued. Returns, for each of these
    spaces Redis held anything of, its digest -> how many writes, queued or held, and dead letters went."""
    if not tombstones:
        return {}
    forgotten = _Forgotten(tombstones)
    for shard in range(shard_count):
        _drop_entries(client, keys.writes(shard), forgotten)
        forgotten.seen(cast(list[bytes], client.hkeys(keys.last_writes(shard))))
        forgotten.seen(client.sscan_iter(keys.held_spaces(shard), count=SCAN))
    forgotten.seen(client.sscan_iter(keys.spaces(), count=SCAN))
    _drop_records(
        client, keys.dead_letters(), lambda record: forgotten.old(record.get("space"), record.get("op"))
    )
    dropped: dict[str, int] = {}
    for name, space_digest in forgotten.found.items():
        key = space_key(name)
        at = tombstones[space_digest]
        held = _drop_space(client, keys, shard_of(key, shard_count), key, at, lives_on(key))
        dropped[space_digest] = forgotten.dropped[name] + held
    return dropped


def _drop_entries(client: redis.Redis, stream: str, forgotten: _Forgotten) -> None:
    """Delete the entries of `stream` that `forgotten` finds planned before their space's forget."""
    old: list[bytes] = []
    start = "-"
    while True:
        entries = streams.entries(client, stream, after=start, count=SCAN)
        old += [
            entry_id for entry_id, fields in entries if forgotten.old(fields.get(b"space"), fields.get(b"op"))
        ]
        if len(entries) < SCAN:
            break
        start = "(" + entries[-1][0].decode()
    if old:
        client.xdel(stream, *old)


def _drop_space(
    client: redis.Redis, keys: Keys, shard: int, key: SpaceKey, forgotten_at: float, lives_on: bool
) -> int:
    """The rest of one tombstoned space Redis holds, its stream entries and dead letters gone: its held
    writes from before the forget (returns how many), its bundles, its old write ids, and its note and
    place among the known spaces (`FORGET_IDS`)."""
    name = space_name(key)
    held = _drop_records(client, keys.held(name), lambda record: planned_at(record.get("op")) < forgotten_at)
    purge_bundles(client, keys, key)
    _drop_write_digests(client, keys, name, forgotten_at)
    client.eval(
        FORGET_IDS,
        5,
        keys.last_writes(shard),
        keys.spaces(),
        keys.writes(shard),
        keys.held_spaces(shard),
        keys.held(name),
        name,
        "1" if lives_on else "0",
    )
    return held


def _drop_write_digests(client: redis.Redis, keys: Keys, name: str, forgotten_at: float) -> None:
    """Forget the write ids first accepted before the forget (their content digests), keeping those of a
    space written again since: a reused id is judged against the new writes only, as after the forget."""
    times = keys.write_digest_times(name)
    old = cast(list[bytes], client.zrangebyscore(times, "-inf", f"({forgotten_at!r}"))
    for start in range(0, len(old), SCAN):  # Lua's unpack takes a few thousand values at most
        client.eval(DROP_WRITE_IDS, 2, keys.write_digests(name), times, *old[start : start + SCAN])


def _drop_records(client: redis.Redis, list_key: str, old: Callable[[dict[str, Any]], bool]) -> int:
    """Remove the JSON records of the list `list_key` that are `old`; returns how many."""
    found: list[bytes] = []
    start = 0
    while True:
        chunk = cast(list[bytes], client.lrange(list_key, start, start + SCAN - 1))
        for raw in chunk:
            try:
                parsed = json.loads(raw)
            except ValueError:
                continue
            if isinstance(parsed, dict) and old(parsed):
                found.append(raw)
        if len(chunk) < SCAN:
            break
        start += SCAN
    for raw in found:
        client.lrem(list_key, 0, raw.decode())  # JSON written ASCII-only: the same bytes
    return len(found)
