"""`rq cron services/jobs/cron.py --url $MEMORYOS_REDIS_URL`: the schedule of the maintenance jobs.

The sweep's interval is `MEMORYOS_SWEEP_INTERVAL_S` (default 300 s): expired items are never returned
anyway, the sweep only bounds how long they stay on disk. The AOF rewrite after forgets runs as often:
it bounds how long a forgotten user's text stays in Redis's files."""

from rq import cron

from services.jobs.tasks import QUEUE_NAME, rewrite_aof_after_forgets, sweep_every_space
from services.queue.settings import QueueSettings

cron.register(sweep_every_space, QUEUE_NAME, interval=QueueSettings().sweep_interval_s)
cron.register(rewrite_aof_after_forgets, QUEUE_NAME, interval=QueueSettings().sweep_interval_s)
