"""Bundles between the API and a space's owner, through Redis: the API holds no data volume and the
worker no HTTP connection, so an export or import bundle crosses as one Redis string, written and read
in chunks (never whole in memory), under a random key that expires.

Redis holds it only while it crosses: the reader deletes it, and the TTL bounds what a crashed transfer
leaves. `MEMORYOS_MAX_QUEUED_BUNDLE_MB` bounds its size (a bundle holds a whole space: beyond that,
export and import run where the data volume is mounted, `memoryos export` / `import`).
"""

import re
from pathlib import Path
from typing import cast

import redis

from memoryos.errors import InvalidInputError
from memoryos.ids import new_id
from services.queue.keys import Keys

TRANSFER_ID = re.compile(r"[0-9a-f]{32}")
CHUNK_BYTES = 4 * 1024 * 1024
TRANSFER_TTL_S = 600
"""How long a bundle may wait in Redis for its reader (the owner's or the API's next step)."""


def upload(client: redis.Redis, keys: Keys, path: Path, max_bytes: int) -> str:
    """Put the file at `path` in Redis; returns its transfer id. `InvalidInputError` (field `bundle`)
    over `max_bytes`, with nothing stored."""
    size = path.stat().st_size
    if size > max_bytes:
        raise InvalidInputError(
            "bundle", f"{size} bytes: over the {max_bytes} bytes a bundle may cross the queue with"
        )
    transfer_id = new_id()
    key = keys.bundle(transfer_id)
    with path.open("rb") as file:
        client.set(key, b"", ex=TRANSFER_TTL_S)
        while chunk := file.read(CHUNK_BYTES):
            client.append(key, chunk)
    client.expire(key, TRANSFER_TTL_S)
    return transfer_id


def download(client: redis.Redis, keys: Keys, transfer_id: str, path: Path) -> int:
    """Write the bundle of `transfer_id` to `path` and delete it from Redis; returns its size.
    `InvalidInputError` for an id that is not one `upload` makes, or a bundle gone (expired, taken)."""
    if not TRANSFER_ID.fullmatch(transfer_id):
        raise InvalidInputError("transfer_id", "not a bundle transfer id")
    key = keys.bundle(transfer_id)
    size = int(client.strlen(key))
    if not client.exists(key):
        raise InvalidInputError("bundle", "the bundle expired before it was read; send it again")
    with path.open("wb") as file:
        for start in range(0, size, CHUNK_BYTES):
            file.write(cast(bytes, client.getrange(key, start, min(size, start + CHUNK_BYTES) - 1)))
    client.delete(key)
    return size
