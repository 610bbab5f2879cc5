"""The rq jobs noted per space (`Keys.space_jobs`, written as a job is queued): deleted when the space is
forgotten, since a job's record names its user and a queued import would bring the memory back."""

from typing import cast

import redis
from rq.job import Job, JobStatus

from memoryos.space.pool import SpaceKey
from services.queue.keys import Keys, space_name
from services.queue.settings import QueueSettings


def purge_space_jobs(client: redis.Redis, settings: QueueSettings, key: SpaceKey) -> int:
    """Delete the space's rq jobs but one running now (a forget: a job's record names the user, and a
    queued import would bring the memory back); returns how many. A running one is left to finish or
    fail on its own: its space is gone, and an export it makes is deleted by the owner."""
    noted = Keys(settings.redis_namespace).space_jobs(space_name(key))
    job_ids = [job_id.decode() for job_id in cast(set[bytes], client.smembers(noted))]
    deleted = 0
    for job in Job.fetch_many(job_ids, connection=client):
        if job is not None and job.get_status(refresh=False) != JobStatus.STARTED:
            job.delete()  # out of its queue and registries too
            deleted += 1
    client.delete(noted)
    return deleted
