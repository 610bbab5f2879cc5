"""`memoryos reindex|export|import --redis-url URL`: work on a deployment's spaces asked as rq jobs.

The commands open no space and load no model: they queue a job (`services/jobs/tasks.py`,
`services/jobs/bundles.py`) that asks the space's owner (the worker holding its shard). `reindex`
without `--wait` prints the job's id and returns; the job shows in `rq info`. With `--wait` it follows
the job (through rq's retries) and prints the owner's report, or fails with the job's error. `--all`
queues one reindex per space the queue knows (every tenant's), as the expiry sweep walks them.
`export` and `import` always wait: export then writes the bundle from Redis to `--out`, import prints
the owner's report.
"""

import argparse
import time
from pathlib import Path

import redis
from rq.job import Job, JobStatus

from memoryos.bundle_read import BundleReader
from memoryos.cli_bundle import exported
from memoryos.cli_output import print_json
from memoryos.cli_session import config_of
from memoryos.errors import InvalidInputError, MemoryOSError
from memoryos.space_pool import SpaceKey
from services.cli_remote import RemoteSpaceNotFoundError
from services.jobs.bundles import enqueue_export, enqueue_import
from services.jobs.tasks import QUEUE_NAME, enqueue_reindex
from services.queue.bundle_transfer import discard, download
from services.queue.connection import connect
from services.queue.keys import Keys, space_name
from services.queue.producer import WriteQueue
from services.queue.settings import QueueSettings, redacted_url

POLL_S = 0.5
ENDED = (JobStatus.FINISHED, JobStatus.FAILED, JobStatus.STOPPED, JobStatus.CANCELED)


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
        print_json({"space": space_name(key), **_outcome(job)})
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
            outcomes.append({"space": name, **_outcome(job)})
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
        transfer_id = str(_outcome(job)["transfer_id"])
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
            print_json(_outcome(job))
        except BaseException:
            transfer_id = job.args[1] if len(job.args) > 1 else ""
            discard(client, Keys(settings.redis_namespace), str(transfer_id))  # interrupted: not left behind
            raise
    finally:
        client.close()


def _outcome(job: Job) -> dict[str, object]:
    """The finished job's report; once rq gave up on it, the job's error as the engine's error (a space
    that does not exist exits 3, a refusal 2). Polled: `Job.latest_result(timeout=)` blocks in one Redis
    command, past the client's socket timeout."""
    while (status := job.get_status(refresh=True)) not in ENDED:
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
