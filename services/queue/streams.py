"""The few Redis Stream calls the queue makes, with the types the client returns for a connection that
does not decode responses (bytes), so the rest of the code is typed: redis-py types its replies loosely."""

from typing import Any, cast

import redis

Entry = tuple[bytes, dict[bytes, bytes]]
"""A stream entry: its id and its fields."""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def entries(
    client: redis.Redis, stream: str, after: str = "-", through: str = "+", count: int = 1000
) -> list[Entry]:
    """Entries from `after` (inclusive; "(" + id for exclusive) through `through`, oldest first."""
    return cast(list[Entry], client.xrange(stream, min=after, max=through, count=count))


def read_group(
    client: redis.Redis,
    group: str,
    consumer: str,
    streams: dict[str, str],
    count: int,
    block_ms: int | None = None,
) -> list[tuple[str, list[Entry]]]:
    """XREADGROUP: per stream, its entries (id "0": this consumer's pending ones; ">": new ones).
    Pending entries deleted meanwhile come back with no fields and are left out."""
    reply = client.xreadgroup(group, consumer, cast(Any, streams), count=count, block=block_ms)
    return [
        (_text(stream), [(entry_id, fields) for entry_id, fields in found if fields])
        for stream, found in cast(list[tuple[Any, list[Entry]]], reply or [])
    ]


def claim_all(client: redis.Redis, stream: str, group: str, consumer: str) -> int:
    """Move every pending entry of the group to `consumer` (a dead owner's, claimed under a new lease);
    returns how many. XPENDING + XCLAIM: redis-py's XAUTOCLAIM reply parsing fails on Redis 7.0."""
    claimed = 0
    while True:
        pending = cast(list[dict[str, Any]], client.xpending_range(stream, group, "-", "+", 1000))
        others = [p["message_id"] for p in pending if p["consumer"] != consumer.encode()]
        if not others:
            return claimed
        client.xclaim(stream, group, consumer, 0, others, justid=True)
        claimed += len(others)


FENCED_READ = """
local n = #KEYS / 2
local found = {}
for i = 1, n do
  local stream = KEYS[n + i]
  if redis.call('GET', KEYS[i]) == ARGV[2] then
    local reply = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', ARGV[3], 'STREAMS', stream, ARGV[4])
    if reply then
      found[#found + 1] = {stream, reply[1][2], ''}
    else
      local last = '0-0'
      for _, group in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
        for j = 1, #group, 2 do
          if group[j] == 'name' and group[j + 1] ~= ARGV[1] then break end
          if group[j] == 'last-delivered-id' then last = group[j + 1] end
        end
      end
      found[#found + 1] = {stream, {}, last}
    end
  end
end
return found
"""
"""Read new entries (`ARGV[4]` is ">") of each stream whose lease (`KEYS[i]`, the stream is
`KEYS[n + i]`) names the reader, in one atomic step: a read that reaches Redis late (sent while the
lease was held, delayed on the network past its expiry) delivers nothing to a former owner. For a stream
with nothing new, the group's last delivered id, to wait from."""


def read_new_fenced(
    client: redis.Redis,
    script: Any,
    group: str,
    consumer: str,
    leases: dict[str, str],
    count: int,
) -> tuple[list[tuple[str, list[Entry]]], dict[str, str]]:
    """New entries of the streams (`leases`: stream -> its lease key) whose lease names `consumer`, and
    for those with none, the id to wait after (`wait_for_new`). Streams not leased to it are left out."""
    streams = list(leases)
    reply = script(
        keys=[leases[s] for s in streams] + streams, args=[group, consumer, count, ">"], client=client
    )
    found: list[tuple[str, list[Entry]]] = []
    idle: dict[str, str] = {}
    for stream, raw, last in cast(list[tuple[Any, list[tuple[bytes, list[bytes]]], Any]], reply):
        if raw:
            entries = [(entry_id, dict(zip(flat[::2], flat[1::2], strict=True))) for entry_id, flat in raw]
            found.append((_text(stream), entries))
        else:
            idle[_text(stream)] = _text(last)
    return found, idle


def wait_for_new(client: redis.Redis, after: dict[str, str], block_ms: int) -> None:
    """Until an entry newer than `after` (stream -> id) is added to one of the streams, or `block_ms`:
    XREAD, which consumes nothing; the fenced read then takes it."""
    client.xread(cast(Any, after), count=1, block=block_ms)
