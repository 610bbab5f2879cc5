"""Export and import as rq jobs: the space's owner writes or reads the bundle, the job only asks it.

API, rq worker and space workers are separate containers, and only the workers mount the data volume;
Redis is what all of them reach. So a bundle job's bundle lives in Redis, as the synchronous routes'
does (`services/queue/bundle_transfer.py`, 4 MiB chunks under a random key), only longer:

- export: the owner exports the space and puts the bundle in Redis for `MEMORYOS_JOB_RESULT_TTL_S`
  (1 h), as long as the job's result; the job returns its transfer id and size, and the API streams it
  from Redis on download (`GET /v1/jobs/{id}/bundle`), as often as asked until it expires.
- import: the API (or `memoryos import --redis-url`) puts the upload in Redis for as long, then queues
  the job, which asks the owner to import it, the bundle kept through the job's retries and deleted once
  the job succeeds or fails for good.

`MEMORYOS_MAX_HELD_BUNDLES_MB` bounds the bundles Redis holds at once (`BundleRoomError` beyond it):
Redis also holds the acknowledged writes and refuses them when full (`noeviction`).
"""

from pathlib import Path
from typing import Any

import redis
from rq.job import Job

from memoryos.errors import MemoryOSError
from memoryos.space.pool import SpaceKey
from services.jobs.tasks import ask_owner, check_ids, enqueue_space_job, job_client, will_retry
from services.jobs.tracing import traced_job
from services.queue.bundle_transfer import discard, held_bytes, upload
from services.queue.keys import Keys, space_key
from services.queue.settings import QueueSettings
from services.spaces.calls import EXPORT_BUNDLE, IMPORT_BUNDLE

MIB = 1024 * 1024
ROOM_RETRY_AFTER_S = 60.0
"""Retry-After of a bundle job refused for room: held bundles expire or are deleted within the hour."""


class BundleRoomError(MemoryOSError):
    """Redis holds `MEMORYOS_MAX_HELD_BUNDLES_MB` of bundles already: no new bundle job until some go."""

    def __init__(self, held: int, limit: int) -> None:
        self.retry_after_s = ROOM_RETRY_AFTER_S
        super().__init__(
            f"Redis holds {held} bytes of bundles, the limit is {limit} (MEMORYOS_MAX_HELD_BUNDLES_MB): "
            "retry once earlier exports are downloaded or expire"
        )


@traced_job
def export_space_job(space: str) -> dict[str, Any]:
    """Ask the owner of `tenant/user/assistant` to export it into Redis; returns where the bundle waits
    (`transfer_id`) and its size. Retried as `ask_owner` says; a retry after a timeout exports again, and
    the earlier bundle, if any, expires unread."""
    settings = QueueSettings()
    args = {"max_bytes": settings.max_queued_bundle_mb * MIB, "ttl_s": settings.job_result_ttl_s}
    sent = ask_owner(space, EXPORT_BUNDLE, args, settings.bundle_timeout_s)
    return sent.model_dump(mode="json")


@traced_job
def import_space_job(space: str, transfer_id: str) -> dict[str, Any]:
    """Ask the owner of `tenant/user/assistant` to import the bundle of `transfer_id` into the (empty)
    space; returns its `ImportReport`, named by the space, not the owner's paths. The bundle stays in
    Redis while rq may retry; a retry after an owner that imported and then timed out is refused (the space
    is no longer empty), and the job's error says so."""
    settings = QueueSettings()
    key = space_key(space)
    try:
        report = ask_owner(
            space, IMPORT_BUNDLE, {"transfer_id": transfer_id, "keep": True}, settings.bundle_timeout_s
        )
    except Exception:
        if not will_retry():
            _discard(settings, transfer_id)
        raise
    _discard(settings, transfer_id)
    named = report.model_copy(update={"space": f"{key.user_id}/{key.assistant_id}", "source": "upload"})
    return named.model_dump(mode="json")


def _discard(settings: QueueSettings, transfer_id: str) -> None:
    client = job_client(settings)
    try:
        discard(client, Keys(settings.redis_namespace), transfer_id)
    finally:
        client.close()


def _timing(settings: QueueSettings) -> dict[str, Any]:
    return {"timeout_s": settings.bundle_timeout_s, "retries": settings.bundle_job_retries}


def _check_room(client: redis.Redis, settings: QueueSettings) -> None:
    held, limit = held_bytes(client, Keys(settings.redis_namespace)), settings.max_held_bundles_mb * MIB
    if held >= limit:
        raise BundleRoomError(held, limit)


def enqueue_export(client: redis.Redis, settings: QueueSettings, key: SpaceKey) -> Job:
    """Queue `export_space_job` for the space (`BundleRoomError` when Redis holds too many bundles)."""
    check_ids(key)
    _check_room(client, settings)
    return enqueue_space_job(client, settings, key, "export", export_space_job, **_timing(settings))


def enqueue_import(client: redis.Redis, settings: QueueSettings, key: SpaceKey, bundle: Path) -> Job:
    """Put the bundle file in Redis and queue `import_space_job` for it. Refused with nothing stored: a
    bundle over `MEMORYOS_MAX_QUEUED_BUNDLE_MB` (`InvalidInputError`), no room (`BundleRoomError`), ids
    that are not ids."""
    check_ids(key)
    _check_room(client, settings)
    keys = Keys(settings.redis_namespace)
    transfer_id = upload(
        client, keys, key, bundle, settings.max_queued_bundle_mb * MIB, settings.job_result_ttl_s
    )
    try:
        return enqueue_space_job(
            client, settings, key, "import", import_space_job, transfer_id, **_timing(settings)
        )
    except BaseException:
        discard(client, keys, transfer_id)
        raise
