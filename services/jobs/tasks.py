"""The maintenance jobs. Each reads its queue settings from the environment (`MEMORYOS_*`), as any rq job
runs in its own worker process, and talks to the Redis its rq worker was given (`rq worker --url`): the
one it took the job from, where the owners it asks listen (`job_client`)."""

import time
from collections.abc import Callable
from typing import Any, TypeVar, cast

import redis
from rq import Queue, Retry
from rq.job import Job, get_current_job

from memoryos.errors import InvalidInputError
from memoryos.space.ops import ExpireDue
from memoryos.space.pool import SpaceKey
from memoryos.tracing import current_carrier
from memoryos.validation import validate_id
from services.jobs.tracing import TRACE_META, traced_job
from services.queue.connection import connect, connect_like
from services.queue.keys import Keys, space_key, space_name
from services.queue.owner_calls import OwnerCallClient
from services.queue.producer import WriteQueue
from services.queue.settings import QueueSettings
from services.spaces.calls import REINDEX, OwnerCall
from services.spaces.errors import (
    ErrorAnswer,
    OwnerRefusedError,
    OwnerUnavailableError,
    message_for,
    refusal_answer,
    space_missing,
)

T = TypeVar("T")

QUEUE_NAME = "memoryos-maintenance"
JOB_TIMEOUT_MARGIN_S = 60
"""A space job outlives its wait for the owner by this much, so rq never kills it mid-answer."""
RETRY_INTERVALS_S = [10, 60, 300]
"""Waits before a space job's retries (the last one repeats): a worker starting, or restarting."""


def job_client(settings: QueueSettings) -> redis.Redis:
    """A client of the Redis the running job came from (its rq worker's `--url`); outside a job (a test
    calling the function), of `settings.redis_url`. Not `MEMORYOS_REDIS_URL` alone: under `rq worker --url`
    naming another Redis, the owners it would ask are not there."""
    job = get_current_job()
    return connect(settings) if job is None else connect_like(job.connection, settings)


def _queue() -> WriteQueue:
    settings = QueueSettings()
    return WriteQueue(job_client(settings), settings)


@traced_job
def sweep_space(space: str) -> str:
    """Ask the owner of `tenant/user/assistant` to erase what has expired by now; returns the entry id."""
    return _queue().enqueue(space_key(space), ExpireDue(at=time.time()))


@traced_job
def sweep_every_space() -> int:
    """The scheduled expiry sweep: one `ExpireDue` per space the queue knows; returns how many were asked.
    Spaces with nothing due apply it as a logged no-op; the engine's own timer also sweeps open spaces."""
    queue = _queue()
    now = time.time()
    spaces = queue.known_spaces()
    for key in spaces:
        queue.enqueue(key, ExpireDue(at=now))
    return len(spaces)


@traced_job
def rewrite_aof_after_forgets() -> bool:
    """Scheduled with the sweep: when forgets have applied since the last run, have Redis rewrite its AOF,
    so a forgotten user's text (their queued writes, an export that crossed Redis) leaves Redis's files
    too; the rewrite writes what Redis holds now, where the forget purged it. Without it the AOF keeps the
    text until Redis chooses to rewrite on its own growth rule, which a quiet deployment never reaches. The
    bound: `MEMORYOS_SWEEP_INTERVAL_S` (300 s) plus the rewrite's time. A rewrite already running may
    have started before the forget: the count is kept and the next run asks again. Returns whether a
    rewrite was asked for."""
    settings = QueueSettings()
    client = job_client(settings)
    counter = Keys(settings.redis_namespace).forgotten_since_rewrite()
    try:
        forgets = int(cast(bytes | None, client.getdel(counter)) or 0)
        if not forgets or not int(cast(dict[str, Any], client.info("persistence")).get("aof_enabled", 0)):
            return False  # nothing forgotten, or no AOF: nothing of it on disk
        try:
            client.bgrewriteaof()
        except redis.ResponseError:  # one in progress, begun maybe before the forget: ask next time
            client.incrby(counter, forgets)
            return False
        return True
    finally:
        client.close()


def ask_owner(space: str, call: OwnerCall[T], args: dict[str, Any], timeout_s: float) -> T:
    """Ask the owner of `tenant/user/assistant` to run `call` and wait (up to `timeout_s`) for its answer:
    how every space job acts on a space it never opens.

    A failure raises, so rq retries the job: no worker owns the shard yet (`OwnerUnavailableError`), the
    space is busy, the owner stopped midway. A refusal that a retry would only repeat (no such space, an
    invalid bundle, a model the workers do not serve: a 4xx in `services/spaces/errors.py`) fails the job at once, its
    retries dropped. Either way the job's meta records the error as the API would have answered it
    (`services/jobs/status.py`), in words that name no path of the owner's."""
    settings = QueueSettings()
    client = job_client(settings)
    try:
        return OwnerCallClient(client, settings).ask(space_key(space), call, args, timeout_s=timeout_s)
    except OwnerRefusedError as error:
        answer = refusal_answer(error)
        _record_error(answer.status, answer.code, _caller_message(space, error, answer), error)
        job = get_current_job()
        if answer.status < 500 and job is not None:
            job.retries_left = None  # rq's worker reads this very instance when the job fails
        raise
    except OwnerUnavailableError as error:
        _record_error(503, "unavailable", str(error), error)
        raise
    finally:
        client.close()


def _caller_message(space: str, error: OwnerRefusedError, answer: ErrorAnswer) -> str:
    """The owner's refusal for the job's caller, as the API words it: a missing space is told by its ids
    (the owner's message names its data directory)."""
    if error.kind == "SpaceNotFoundError":
        key = space_key(space)
        return space_missing(key.user_id, key.assistant_id)
    return message_for(error, answer)


def _record_error(status: int, code: str | None, message: str, error: Exception) -> None:
    job = get_current_job()
    if job is not None:
        job.meta["error"] = {
            "status": status,
            "code": code,
            "message": message,
            "field": getattr(error, "field", None),
        }
        job.save_meta()


def will_retry() -> bool:
    """Whether rq will run the current job again if it fails now (`ask_owner` drops the retries of a
    refusal)."""
    job = get_current_job()
    return job is not None and bool(job.retries_left)


@traced_job
def reindex_space_job(space: str, model: str) -> dict[str, Any]:
    """Ask the owner of `tenant/user/assistant` to re-embed the space with `model`, the model its workers
    serve (`services/worker/reindex.py`), and wait for it; returns the owner's `ReindexReport`. The job
    never opens the space: the owner closes it in its pool, runs the engine's reindex and reopens it.
    Failures as `ask_owner`'s; a retry after a timeout re-embeds again, which is harmless."""
    settings = QueueSettings()
    report = ask_owner(space, REINDEX, {"model": model}, settings.reindex_timeout_s)
    return report.model_dump(mode="json")


def check_ids(key: SpaceKey) -> None:
    """`InvalidInputError` naming the first id of the space that is not one (before it reaches a key)."""
    for field, value in (
        ("tenant", key.tenant),
        ("user_id", key.user_id),
        ("assistant_id", key.assistant_id),
    ):
        validate_id(field, value)


def enqueue_space_job(
    client: redis.Redis,
    settings: QueueSettings,
    key: SpaceKey,
    kind: str,
    func: Callable[..., Any],
    *args: Any,
    timeout_s: float,
    retries: int,
) -> Job:
    """Queue `func(space, *args)`, a job acting on the space, with rq's retries, a timeout above the
    owner's, and its result kept `job_result_ttl_s`. Its meta names the space and `kind`, so the API
    shows a job to its own tenant only, and carries the caller's trace context (`services/jobs/tracing.py`)."""
    check_ids(key)
    intervals = RETRY_INTERVALS_S[: max(1, retries)]
    meta: dict[str, Any] = {
        "kind": kind,
        "tenant": key.tenant,
        "user_id": key.user_id,
        "assistant_id": key.assistant_id,
    }
    if (carrier := current_carrier()) is not None:  # the job's span joins the caller's trace
        meta[TRACE_META] = carrier
    job = Queue(QUEUE_NAME, connection=client).enqueue(
        func,
        space_name(key),
        *args,
        job_timeout=int(timeout_s) + JOB_TIMEOUT_MARGIN_S,
        retry=Retry(max=retries, interval=intervals) if retries else None,
        result_ttl=settings.job_result_ttl_s,
        description=f"{kind} {space_name(key)}",
        meta=meta,
    )
    client.sadd(Keys(settings.redis_namespace).space_jobs(space_name(key)), job.id)
    return job


def enqueue_reindex(client: redis.Redis, settings: QueueSettings, key: SpaceKey, model: str) -> Job:
    """Queue `reindex_space_job` for the space."""
    if not model.strip():
        raise InvalidInputError("model", "give the embedding model's name")
    return enqueue_space_job(
        client,
        settings,
        key,
        "reindex",
        reindex_space_job,
        model,
        timeout_s=settings.reindex_timeout_s,
        retries=settings.reindex_retries,
    )
