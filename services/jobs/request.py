"""`memoryos reindex|export|import --redis-url URL`: work on a deployment's spaces asked as rq jobs.

The commands open no space and load no model: they queue a job (`services/jobs/tasks.py`,
`services/jobs/bundles.py`) that asks the space's owner (the worker holding its shard). `reindex`
without `--wait` prints the job's id and returns; the job shows in `rq info`. With `--wait` it follows
the job (through rq's retries) and prints the owner's report, or fails with the job's error. `--all`
queues one reindex per space the queue knows (every tenant's), as the expiry sweep walks them.
`export` and `import` always wait: export then writes the bundle from Redis to `--out`, import prints
the owner's report.

A job nobody can take is not waited for forever: while it is queued and no rq worker listens on its
queue for `NO_RQ_WORKER_GRACE_S`, the command stops with exit status 4 and says how to start one. An
export or import job is canceled then (its bundle would have no reader, its upload expires); a reindex
job stays queued and runs when a worker starts.
"""

import argparse
import time
from pathlib import Path
from typing import NoReturn

import redis
from rq import Queue, Worker
from rq.job import Job, JobStatus

from memoryos.cli.bundle import exported
from memoryos.cli.output import print_json
from memoryos.cli.session import config_of
from memoryos.errors import InvalidInputError, MemoryOSError
from memoryos.portability.bundles.read import BundleReader
from memoryos.space.pool import SpaceKey
from memoryos.storage.space_lock import SpaceBusyError
from services.jobs.bundles import enqueue_export, enqueue_import
from services.jobs.tasks import QUEUE_NAME, enqueue_reindex
from services.queue.bundle_transfer import discard, download
from services.queue.connection import connect
from services.queue.keys import Keys, space_name
from services.queue.producer import WriteQueue
from services.queue.settings import QueueSettings, redacted_url
from services.spaces.errors import RemoteSpaceNotFoundError

POLL_S = 0.5
ENDED = (JobStatus.FINISHED, JobStatus.FAILED, JobStatus.STOPPED, JobStatus.CANCELED)
NO_RQ_WORKER_GRACE_S = 30.0
"""How long a queued job may have no rq worker on its queue before the command gives up on it: long
enough for a worker's restart or a rollout, short enough that a deployment without one is told so."""


class NoJobWorkerError(SpaceBusyError):
    """The job stayed queued with no rq worker listening on its queue (exit status 4: unavailable)."""

    def __init__(self, message: str) -> None:
        super().__init__(Path(), message)


def _space(args: argparse.Namespace) -> SpaceKey:
    return SpaceKey(config_of(args).tenant, args.user, args.assistant)


def request_reindex(args: argparse.Namespace) -> None:
    """Queue the reindex of `--user`/`--assistant` (tenant: `MEMORYOS_TENANT`), or of every space the
    queue knows (`--all`), with `--model`."""
    settings = QueueSettings(redis_url=args.redis_url)
    client = connect(settings)
    try:
        if args.all:
            _reindex_all(client, settings, args)
            return
        key = _space(args)
        job = enqueue_reindex(client, settings, key, args.model)
        if not args.wait:
            print_json({"job_id": job.id, "queue": QUEUE_NAME, "space": space_name(key), "model": args.model})
            return
        print_json({"space": space_name(key), **_outcome(job, cancel_unserved=False)})
    finally:
        client.close()


def _reindex_all(client: redis.Redis, settings: QueueSettings, args: argparse.Namespace) -> None:
    """One job per known space; with `--wait`, every outcome printed, then the first failure raised."""
    spaces = sorted(WriteQueue(client, settings).known_spaces(), key=space_name)
    if not spaces:
        raise InvalidInputError("--all", f"the queue at {redacted_url(args.redis_url)} knows no space")
    jobs = [(space_name(key), enqueue_reindex(client, settings, key, args.model)) for key in spaces]
    if not args.wait:
        queued = [{"space": name, "job_id": job.id} for name, job in jobs]
        print_json({"queue": QUEUE_NAME, "model": args.model, "jobs": queued})
        return
    outcomes: list[dict[str, object]] = []
    failures: list[MemoryOSError] = []
    for name, job in jobs:
        try:
            outcomes.append({"space": name, **_outcome(job, cancel_unserved=False)})
        except MemoryOSError as failed:
            failures.append(failed)
            outcomes.append({"space": name, "job_id": job.id, "error": str(failed)})
    print_json({"model": args.model, "spaces": outcomes})
    if failures:
        raise MemoryOSError(f"{len(failures)} of {len(jobs)} reindex jobs failed; first: {failures[0]}")


def request_export(args: argparse.Namespace) -> None:
    """Export `--user`/`--assistant` through its owner into Redis, then write the bundle to `--out`."""
    settings = QueueSettings(redis_url=args.redis_url)
    keys = Keys(settings.redis_namespace)
    client = connect(settings)
    try:
        job = enqueue_export(client, settings, _space(args))
        transfer_id = str(_outcome(job, cancel_unserved=True)["transfer_id"])
        out = Path(args.out)
        download(client, keys, transfer_id, out)  # deleted from Redis once written: this was our job
    finally:
        client.close()
    with BundleReader(out) as bundle:
        manifest = bundle.manifest
    print_json({**exported(out, manifest), "job_id": job.id})


def request_import(args: argparse.Namespace, bundle: Path) -> None:
    """Put `bundle` in Redis and have the space's owner import it; prints the owner's report."""
    settings = QueueSettings(redis_url=args.redis_url)
    client = connect(settings)
    try:
        job = enqueue_import(client, settings, _space(args), bundle)
        try:
            print_json(_outcome(job, cancel_unserved=True))
        except BaseException:
            transfer_id = job.args[1] if len(job.args) > 1 else ""
            discard(client, Keys(settings.redis_namespace), str(transfer_id))  # interrupted: not left behind
            raise
    finally:
        client.close()


def _outcome(job: Job, *, cancel_unserved: bool) -> dict[str, object]:
    """The finished job's report; once rq gave up on it, the job's error as the engine's error (a space
    that does not exist exits 3, a refusal 2). Polled: `Job.latest_result(timeout=)` blocks in one Redis
    command, past the client's socket timeout. `NoJobWorkerError` when the job stays queued with no rq
    worker on its queue (`_unserved_since`); with `cancel_unserved` the job is canceled first."""
    queue = Queue(job.origin, connection=job.connection)
    unserved_since: float | None = None
    while (status := job.get_status(refresh=True)) not in ENDED:
        unserved_since = _unserved_since(queue, status, unserved_since)
        if unserved_since is not None and time.monotonic() - unserved_since > NO_RQ_WORKER_GRACE_S:
            _give_up_unserved(job, cancel=cancel_unserved)
        time.sleep(POLL_S)
    result = job.latest_result()
    if status == JobStatus.FINISHED and result is not None:
        return dict(result.return_value or {})
    kind = job.meta.get("kind", "the")
    error = job.meta.get("error")
    if error is not None:
        field = error["field"] or "job"
        message = f"{kind} job {job.id} failed: {error['message'].removeprefix(f'{field}: ')}"
        if error["status"] == 404:
            raise RemoteSpaceNotFoundError(message)
        if 400 <= error["status"] < 500:
            raise InvalidInputError(field, message)
        raise MemoryOSError(message)
    reason = (result.exc_string or "").strip().splitlines()[-1:] if result is not None else []
    raise MemoryOSError(
        f"{kind} job {job.id} {JobStatus(status).value}: {reason[0] if reason else 'no reason recorded'}"
    )


def _unserved_since(queue: Queue, status: JobStatus, since: float | None) -> float | None:
    """Since when the job has waited in `queue` with no rq worker listening on it; None while it is
    taken, or some worker could take it."""
    if status != JobStatus.QUEUED or Worker.count(queue=queue):
        return None
    return since if since is not None else time.monotonic()


def _give_up_unserved(job: Job, *, cancel: bool) -> NoReturn:
    """Raise `NoJobWorkerError` for a job no rq worker took, canceling it first when `cancel`."""
    if cancel:
        job.cancel()
    fate = "canceled" if cancel else "left queued: it runs when a worker starts"
    raise NoJobWorkerError(
        f"no rq worker took {job.meta.get('kind', 'the')} job {job.id} in {NO_RQ_WORKER_GRACE_S:g} s: "
        f"none listens on queue {job.origin!r}; start one (`rq worker --url $MEMORYOS_REDIS_URL "
        f"{job.origin}`; the compose service rq-worker, or the Kubernetes deployment memoryos-rq-worker); "
        f"the job was {fate}"
    )
