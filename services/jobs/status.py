"""A space job as its tenant sees it through the API (`GET /v1/jobs/{job_id}`).

rq's job ids are global; the tenant and space a job acts on are in its meta (`enqueue_space_job`). A
job is shown only to a key of that tenant (and, for a key bound to one user, of that user): any other
caller is told there is no such job, exactly as for an id that never existed, so ids reveal nothing.
"""

import re

import redis
from rq.exceptions import NoSuchJobError
from rq.job import Job, JobStatus

from memoryos.errors import InvalidInputError

JOB_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
"""rq's own ids (`uuid4()`): anything else is refused before it reaches a key."""


class JobNotFoundError(LookupError):
    """No job of that id for this caller (none at all, expired, or another tenant's)."""


class JobNotReadyError(Exception):
    """The job has not finished: what it makes (an export's bundle) is not there yet."""


def tenant_job(client: redis.Redis, job_id: str, tenant: str, user_id: str | None) -> Job:
    """The job of `job_id` if it acts on a space of `tenant` (and of `user_id`, when given);
    `InvalidInputError` for an id that is not rq's, `JobNotFoundError` otherwise."""
    if not JOB_ID.fullmatch(job_id):
        raise InvalidInputError("job_id", "not a job id")
    try:
        job = Job.fetch(job_id, connection=client)
    except NoSuchJobError:
        job = None
    meta = job.meta if job is not None else {}
    if (
        job is None
        or meta.get("tenant") != tenant
        or meta.get("kind") not in ("export", "import", "reindex")
        or (user_id is not None and meta.get("user_id") != user_id)
    ):
        raise JobNotFoundError(f"no job {job_id}")
    return job


def export_transfer_id(job: Job) -> str:
    """Where the finished export job's bundle waits in Redis; `JobNotReadyError` before it finished,
    `JobNotFoundError` for a job that is no export."""
    if job.meta.get("kind") != "export":
        raise JobNotFoundError(f"job {job.id} is a {job.meta.get('kind')} job: it has no bundle")
    status = job.get_status(refresh=False)
    if status != JobStatus.FINISHED:
        state = JobStatus(status).value if status is not None else "expired"
        raise JobNotReadyError(f"export job {job.id} is {state}: its bundle is there once it has finished")
    return str((job.return_value() or {})["transfer_id"])
