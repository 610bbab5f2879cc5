"""The maintenance jobs. Each reads its Redis and queue settings from the environment (`MEMORYOS_*`), as
any rq job runs in its own worker process."""

import time
from typing import Any

import redis
from rq import Queue, Retry
from rq.job import Job, get_current_job

from memoryos.errors import InvalidInputError
from memoryos.ops import ExpireDue
from memoryos.space_pool import SpaceKey
from memoryos.validation import validate_id
from services.queue.calls import REINDEX
from services.queue.connection import connect
from services.queue.keys import space_key, space_name
from services.queue.producer import WriteQueue
from services.queue.reads import REMOTE_ERRORS, ReadClient, RemoteReadError
from services.queue.settings import QueueSettings

QUEUE_NAME = "memoryos-maintenance"
JOB_TIMEOUT_MARGIN_S = 60
"""A reindex job outlives its wait for the owner by this much, so rq never kills it mid-answer."""
RETRY_INTERVALS_S = [10, 60, 300]
"""Waits before the reindex job's retries (the last one repeats): a worker starting, or restarting."""


def _queue() -> WriteQueue:
    settings = QueueSettings()
    return WriteQueue(connect(settings), settings)


def sweep_space(space: str) -> str:
    """Ask the owner of `tenant/user/assistant` to erase what has expired by now; returns the entry id."""
    return _queue().enqueue(space_key(space), ExpireDue(at=time.time()))


def sweep_every_space() -> int:
    """The scheduled expiry sweep: one `ExpireDue` per space the queue knows; returns how many were asked.
    Spaces with nothing due apply it as a logged no-op; the engine's own timer also sweeps open spaces."""
    queue = _queue()
    now = time.time()
    spaces = queue.known_spaces()
    for key in spaces:
        queue.enqueue(key, ExpireDue(at=now))
    return len(spaces)


def reindex_space_job(space: str, model: str) -> dict[str, Any]:
    """Ask the owner of `tenant/user/assistant` to re-embed the space with `model`, the model its workers
    serve (`services/worker/reindex.py`), and wait for it; returns the owner's `ReindexReport`. The job
    never opens the space: the owner closes it in its pool, runs the engine's reindex and reopens it.

    A failure raises, so rq retries it (`enqueue_reindex`): no worker owns the shard yet
    (`ReadUnavailableError`), the space is busy, the owner stopped midway. A refusal that a retry would
    only repeat (no such space, a model the workers do not serve: a 4xx in `REMOTE_ERRORS`) fails the job
    at once, its retries dropped. A retry after a timeout re-embeds again, which is harmless."""
    settings = QueueSettings()
    client = connect(settings)
    try:
        reads = ReadClient(client, settings)
        report = reads.ask(space_key(space), REINDEX, {"model": model}, timeout_s=settings.reindex_timeout_s)
    except RemoteReadError as error:
        status, _ = REMOTE_ERRORS.get(error.kind, (500, None))
        job = get_current_job()
        if status < 500 and job is not None:
            job.retries_left = None  # rq's worker reads this very instance when the job fails
        raise
    finally:
        client.close()
    return report.model_dump(mode="json")


def enqueue_reindex(client: redis.Redis, settings: QueueSettings, key: SpaceKey, model: str) -> Job:
    """Queue `reindex_space_job` for the space, with rq's retries and a timeout above the owner's."""
    for field, value in (
        ("tenant", key.tenant),
        ("user_id", key.user_id),
        ("assistant_id", key.assistant_id),
    ):
        validate_id(field, value)
    if not model.strip():
        raise InvalidInputError("model", "give the embedding model's name")
    intervals = RETRY_INTERVALS_S[: max(1, settings.reindex_retries)]
    return Queue(QUEUE_NAME, connection=client).enqueue(
        reindex_space_job,
        space_name(key),
        model,
        job_timeout=int(settings.reindex_timeout_s) + JOB_TIMEOUT_MARGIN_S,
        retry=Retry(max=settings.reindex_retries, interval=intervals) if settings.reindex_retries else None,
        description=f"reindex {space_name(key)} with {model}",
    )
