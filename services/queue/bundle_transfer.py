"""Bundles between the API and a space's owner, through Redis: the API holds no data volume and the
worker no HTTP connection, so an export or import bundle crosses as one Redis string, written and read
in chunks (never whole in memory), under a random key that expires.

Redis holds it only while it crosses: the reader deletes it, and the TTL bounds what a crashed transfer
leaves. `MEMORYOS_MAX_QUEUED_BUNDLE_MB` bounds its size (a bundle holds a whole space: beyond that,
export and import run where the data volume is mounted, `memoryos export` / `import`). A bundle job's
bundle (`services/jobs/bundles.py`) stays longer: an export's until it is downloaded, for as long as the
job's result (`MEMORYOS_JOB_RESULT_TTL_S`), an import's upload until its job ends.
"""

import re
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import redis

from memoryos.errors import InvalidInputError
from memoryos.ids import new_id
from memoryos.space.pool import SpaceKey
from services.queue.keys import Keys, space_name

TRANSFER_ID = re.compile(r"[0-9a-f]{32}")
CHUNK_BYTES = 4 * 1024 * 1024
TRANSFER_TTL_S = 600
"""How long a bundle may wait in Redis for its reader (the owner's or the API's next step)."""


def upload(
    client: redis.Redis, keys: Keys, space: SpaceKey, path: Path, max_bytes: int, ttl_s: int = TRANSFER_TTL_S
) -> str:
    """Put the file at `path`, a bundle of `space`, in Redis for `ttl_s`; returns its transfer id.
    `InvalidInputError` (field `bundle`) over `max_bytes`, with nothing stored. The id is noted under the
    space before any byte is written, so a forget of the space finds the bundle (`purge_bundles`)."""
    size = path.stat().st_size
    if size > max_bytes:
        raise InvalidInputError(
            "bundle", f"{size} bytes: over the {max_bytes} bytes a bundle may cross the queue with"
        )
    transfer_id = new_id()
    key = keys.bundle(transfer_id)
    noted = keys.space_bundles(space_name(space))
    pipe = client.pipeline(transaction=True)
    pipe.sadd(noted, transfer_id)
    pipe.expire(noted, ttl_s, nx=True)  # a new note lives as long as its longest-lived bundle
    pipe.expire(noted, ttl_s, gt=True)
    pipe.set(key, b"", ex=ttl_s)
    pipe.execute()
    with path.open("rb") as file:
        while chunk := file.read(CHUNK_BYTES):
            client.append(key, chunk)
    client.expire(key, ttl_s)
    return transfer_id


def download(client: redis.Redis, keys: Keys, transfer_id: str, path: Path, *, keep: bool = False) -> int:
    """Write the bundle of `transfer_id` to `path` and delete it from Redis (`keep`: leave it, for its
    job to delete once it will not retry); returns its size. `InvalidInputError` for an id that is not
    one `upload` makes, or a bundle gone (expired, taken)."""
    with path.open("wb") as file:
        for chunk in chunks(client, keys, transfer_id):
            file.write(chunk)
    if not keep:
        discard(client, keys, transfer_id)
    return path.stat().st_size


def stored_size(client: redis.Redis, keys: Keys, transfer_id: str) -> int:
    """The size of the bundle of `transfer_id`; `InvalidInputError` for an id that is not one `upload`
    makes (checked before it reaches a key), or a bundle gone."""
    if not TRANSFER_ID.fullmatch(transfer_id):
        raise InvalidInputError("transfer_id", "not a bundle transfer id")
    key = keys.bundle(transfer_id)
    size = int(client.strlen(key))
    if not client.exists(key):
        raise InvalidInputError("bundle", "the bundle expired before it was read; send it again")
    return size


def chunks(client: redis.Redis, keys: Keys, transfer_id: str) -> Iterator[bytes]:
    """The bundle of `transfer_id` in `CHUNK_BYTES` pieces, read as they are consumed (never whole);
    checked at once, as `stored_size` does."""
    size = stored_size(client, keys, transfer_id)
    return _pieces(client, keys.bundle(transfer_id), size)


def _pieces(client: redis.Redis, key: str, size: int) -> Iterator[bytes]:
    """The pieces; `InvalidInputError` when one comes back short: the bundle was deleted while it was read
    (a forget purges its space's bundles), and a truncated bundle must never pass for a whole one."""
    for start in range(0, size, CHUNK_BYTES):
        end = min(size, start + CHUNK_BYTES)
        piece = cast(bytes, client.getrange(key, start, end - 1))
        if len(piece) != end - start:
            raise InvalidInputError(
                "bundle", "the bundle was deleted while it was read; nothing was exported"
            )
        yield piece


def discard(client: redis.Redis, keys: Keys, transfer_id: str) -> None:
    """Delete the bundle of `transfer_id` (nothing if it is gone already)."""
    if TRANSFER_ID.fullmatch(transfer_id):
        client.delete(keys.bundle(transfer_id))


def purge_bundles(client: redis.Redis, keys: Keys, space: SpaceKey) -> int:
    """Delete every bundle of `space` still in Redis (a forget: a bundle holds the space's text, and an
    import's would bring it back); returns how many were there. A pipeline, not a transaction: Redis
    refuses a MULTI whole when full, and a forget must go through then (`redis_full.py`); the note goes
    last, so a forget cut short finds what is left."""
    noted = keys.space_bundles(space_name(space))
    transfer_ids = [tid.decode() for tid in cast(set[bytes], client.smembers(noted))]
    pipe = client.pipeline(transaction=False)
    for transfer_id in transfer_ids:
        if TRANSFER_ID.fullmatch(transfer_id):
            pipe.delete(keys.bundle(transfer_id))
    pipe.delete(noted)
    return sum(int(n) for n in pipe.execute()[:-1])


def held_bytes(client: redis.Redis, keys: Keys) -> int:
    """Bytes of every bundle Redis holds now (crossing, or kept for a job): what new bundle jobs are
    admitted against (`MEMORYOS_MAX_HELD_BUNDLES_MB`). A SCAN of the namespace's bundle keys: bundle
    jobs are rare, and their keys few."""
    pipe = client.pipeline(transaction=False)
    for key in client.scan_iter(match=keys.bundle("*"), count=1000):
        pipe.strlen(key)
    return sum(int(size) for size in pipe.execute())
