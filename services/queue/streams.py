"""The few Redis Stream calls the queue makes, with the types the client returns for a connection that
does not decode responses (bytes), so the rest of the code is typed: redis-py types its replies loosely."""

from typing import Any, cast

import redis

Entry = tuple[bytes, dict[bytes, bytes]]
"""A stream entry: its id and its fields."""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def add(client: redis.Redis, stream: str, fields: dict[str, str]) -> str:
    return _text(client.xadd(stream, cast(Any, fields)))


def entries(
    client: redis.Redis, stream: str, after: str = "-", through: str = "+", count: int = 1000
) -> list[Entry]:
    """Entries from `after` (inclusive; "(" + id for exclusive) through `through`, oldest first."""
    return cast(list[Entry], client.xrange(stream, min=after, max=through, count=count))


def newest_id(client: redis.Redis, stream: str) -> str:
    newest = cast(list[Entry], client.xrevrange(stream, count=1))
    return newest[0][0].decode() if newest else "0-0"


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
