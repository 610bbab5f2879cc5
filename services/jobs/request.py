"""`memoryos reindex --redis-url URL`: the reindex of a space asked of a deployment, as an rq job.

The command opens no space and loads no model: it queues `reindex_space_job`, which asks the space's
owner (the worker holding its shard) to re-embed it. Without `--wait` it prints the job's id and returns;
the job shows in `rq info`. With `--wait` it follows the job (through rq's retries) and prints the
owner's report, or fails with the job's last error.
"""

import argparse
import time

from rq.job import Job, JobStatus

from memoryos.cli_output import print_json
from memoryos.cli_session import config_of
from memoryos.errors import MemoryOSError
from memoryos.space_pool import SpaceKey
from services.jobs.tasks import QUEUE_NAME, enqueue_reindex
from services.queue.connection import connect
from services.queue.keys import space_name
from services.queue.settings import QueueSettings

POLL_S = 0.5
ENDED = (JobStatus.FINISHED, JobStatus.FAILED, JobStatus.STOPPED, JobStatus.CANCELED)


def request_reindex(args: argparse.Namespace) -> None:
    """Queue the reindex of `--user`/`--assistant` (tenant: `MEMORYOS_TENANT`) with `--model`."""
    settings = QueueSettings(redis_url=args.redis_url)
    key = SpaceKey(config_of(args).tenant, args.user, args.assistant)
    client = connect(settings)
    try:
        job = enqueue_reindex(client, settings, key, args.model)
        if not args.wait:
            print_json({"job_id": job.id, "queue": QUEUE_NAME, "space": space_name(key), "model": args.model})
            return
        print_json({"space": space_name(key), **_outcome(job)})
    finally:
        client.close()


def _outcome(job: Job) -> dict[str, object]:
    """The finished job's report; `MemoryOSError` naming the job's last error once rq gave up on it.
    Polled: `Job.latest_result(timeout=)` blocks in one Redis command, past the client's socket timeout."""
    while (status := job.get_status(refresh=True)) not in ENDED:
        time.sleep(POLL_S)
    result = job.latest_result()
    if status == JobStatus.FINISHED and result is not None:
        return dict(result.return_value or {})
    reason = (result.exc_string or "").strip().splitlines()[-1:] if result is not None else []
    raise MemoryOSError(
        f"reindex job {job.id} {JobStatus(status).value}: {reason[0] if reason else 'no reason recorded'}"
    )
