"""Tombstones in Redis: the forgotten spaces, so that a Redis restored from before a forget (its AOF or RDB
put back) does not apply the user's old queued writes again, nor keep their held writes, dead letters,
bundles and ids.

The hash `<ns>:tombstones` maps a space's name (`tenant/user/assistant`: ids only, never memory text) to
when its newest forget was planned (`ForgetSpace.at`). The owner sets it when it applies a forget, beside
the data volume's tombstone (`memoryos/space/tombstones.py`); each side is restored on its own, so a
worker starting copies each side's tombstones to the other (`services/worker/tombstones.py`), and for every
tombstone Redis lacked — Redis came back from before that forget — drops here what Redis holds of the space
from before it. What is younger (a write accepted after the forget, planned later) is kept.
"""

import json
import math
from collections.abc import Callable
from typing import Any, cast

import redis

from memoryos.space.pool import SpaceKey
from services.queue import streams
from services.queue.bundle_transfer import purge_bundles
from services.queue.keys import Keys, space_key, space_name

SCAN = 1000
"""Stream entries or list records read per step."""

RECORD = """
local old = redis.call('HGET', KEYS[1], ARGV[1])
if not old or tonumber(old) < tonumber(ARGV[2]) then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
"""
"""Set the space's tombstone (KEYS[1], field ARGV[1]) to ARGV[2] unless it holds a newer one."""

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


def record(client: redis.Redis, keys: Keys, key: SpaceKey, forgotten_at: float) -> None:
    """Note in Redis that the space was forgotten at `forgotten_at` (a newer tombstone is kept)."""
    client.eval(RECORD, 1, keys.tombstones(), space_name(key), repr(forgotten_at))


def read_all(client: redis.Redis, keys: Keys) -> dict[SpaceKey, float]:
    """Every tombstone in Redis; a field that names no space or no time is left out."""
    found: dict[SpaceKey, float] = {}
    for name, value in cast(dict[bytes, bytes], client.hgetall(keys.tombstones())).items():
        try:
            found[space_key(name.decode())] = float(value)
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


def drop_before(
    client: redis.Redis, keys: Keys, shard: int, key: SpaceKey, forgotten_at: float, lives_on: bool
) -> int:
    """Drop what Redis holds of the space from before its forget: queued writes planned before
    `forgotten_at`, held writes and dead letters likewise, its bundles (all made before: workers are
    started after a restore), then its note and its place among the known spaces unless it `lives_on`
    (its directory holds data newer than the forget) or a newer write is queued. Returns how many writes,
    queued or held, and dead letters went."""
    name = space_name(key)
    stream = keys.writes(shard)
    dropped: list[bytes] = []
    start = "-"
    while True:
        entries = streams.entries(client, stream, after=start, count=SCAN)
        dropped += [
            entry_id
            for entry_id, fields in entries
            if fields.get(b"space") == name.encode() and planned_at(fields.get(b"op")) < forgotten_at
        ]
        if len(entries) < SCAN:
            break
        start = "(" + entries[-1][0].decode()
    if dropped:
        client.xdel(stream, *dropped)
    held = _drop_records(client, keys.held(name), lambda r: planned_at(r.get("op")) < forgotten_at)
    dead = _drop_records(
        client,
        keys.dead_letters(),
        lambda r: r.get("space") == name and planned_at(r.get("op")) < forgotten_at,
    )
    purge_bundles(client, keys, key)
    client.eval(
        FORGET_IDS,
        5,
        keys.last_writes(shard),
        keys.spaces(),
        stream,
        keys.held_spaces(shard),
        keys.held(name),
        name,
        "1" if lives_on else "0",
    )
    return len(dropped) + held + dead


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
