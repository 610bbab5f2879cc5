"""The dead-letter list: writes the owner could never apply (malformed, refused by the engine, or failing
`max_deliveries` times), kept aside in `<ns>:dead` so their shard moves on. The worker appends
(`services/worker/consumer.py`); the API lists a tenant's (`GET /v1/dead-letters`) and a forget removes a
space's, since each holds the write's text."""

import json
from typing import Any, cast

import redis
from pydantic import BaseModel, Field

from memoryos.space.pool import SpaceKey
from services.queue.keys import Keys, space_key, space_name

SCAN = 1000
"""Records read per step when listing or purging."""


class DeadLetter(BaseModel):
    """One write that was not applied, as its tenant sees it (never its text)."""

    entry: str = Field(description="Its stream entry id: when Redis accepted it.")
    user_id: str
    assistant_id: str
    kind: str | None = Field(description="The op's kind (add_turns, forget_space, ...), if it was readable.")
    write_id: str | None = Field(description="The write id the client sent or got, for add_turns.")
    error: str = Field(description="Why it could not be applied.")


def _records(client: redis.Redis, keys: Keys) -> list[tuple[bytes, dict[str, Any]]]:
    """Every record, raw and parsed (unparseable ones left out), oldest first."""
    found: list[tuple[bytes, dict[str, Any]]] = []
    start = 0
    while True:
        chunk = cast(list[bytes], client.lrange(keys.dead_letters(), start, start + SCAN - 1))
        for raw in chunk:
            try:
                record = json.loads(raw)
            except ValueError:
                continue
            if isinstance(record, dict):
                found.append((raw, record))
        if len(chunk) < SCAN:
            return found
        start += SCAN


def _space_of(record: dict[str, Any]) -> SpaceKey | None:
    try:
        return space_key(str(record.get("space", "")))
    except ValueError:
        return None


def _as_letter(record: dict[str, Any], key: SpaceKey) -> DeadLetter:
    try:
        op = json.loads(record.get("op") or "null")
    except ValueError:
        op = None
    op = op if isinstance(op, dict) else {}
    return DeadLetter(
        entry=str(record.get("entry", "")),
        user_id=key.user_id,
        assistant_id=key.assistant_id,
        kind=op.get("kind") if isinstance(op.get("kind"), str) else None,
        write_id=op.get("write_id") if isinstance(op.get("write_id"), str) else None,
        error=str(record.get("error", "")),
    )


def list_dead_letters(
    client: redis.Redis, keys: Keys, tenant: str, user_id: str | None = None, limit: int = 100
) -> list[DeadLetter]:
    """The tenant's dead letters (one user's, for a key bound to one), oldest first, at most `limit`."""
    letters = []
    for _, record in _records(client, keys):
        key = _space_of(record)
        if key is None or key.tenant != tenant or (user_id is not None and key.user_id != user_id):
            continue
        letters.append(_as_letter(record, key))
        if len(letters) >= limit:
            break
    return letters


def purge_dead_letters(client: redis.Redis, keys: Keys, key: SpaceKey) -> int:
    """Remove the space's dead letters (a forget: their text must not stay in Redis); returns how many."""
    name = space_name(key)
    mine = [raw for raw, record in _records(client, keys) if record.get("space") == name]
    for raw in mine:
        client.lrem(keys.dead_letters(), 0, raw.decode())  # JSON written ASCII-only: same bytes
    return len(mine)
