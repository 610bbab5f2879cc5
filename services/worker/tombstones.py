"""A worker's check of the forgotten spaces against what a restore may have brought back.

A forget leaves two tombstones that are restored independently: a file on the data volume
(`memoryos/space/tombstones.py`) and a field of `<ns>:tombstones` in Redis (`services/queue/tombstones.py`).
Before a worker takes any shard — at start, and again whenever Redis answers after an outage, since it may
have come back from a backup — it copies each side's tombstones that the other lacks (or holds older)
across, erases every space directory that predates its tombstone, and, for each tombstone Redis lacked,
drops what Redis still holds of the space from before the forget. One pass over the tombstones: the
stores opened are those of tombstoned spaces that have a directory, and the streams scanned those of
spaces whose tombstone Redis lacked.
"""

import logging
import math
from collections.abc import Callable

import redis

from memoryos.space import tombstones as volume
from services.queue import tombstones as in_redis
from services.queue.keys import Keys, shard_of
from services.queue.settings import QueueSettings
from services.worker.spaces import WorkerSpaces

log = logging.getLogger(__name__)


def honour_tombstones(
    client: redis.Redis, settings: QueueSettings, spaces: WorkerSpaces, on_wait: Callable[[], None]
) -> None:
    """Reconcile both sides' tombstones and erase what a restore brought back of forgotten spaces.
    `on_wait`: run while an erase waits for a space in use in this worker (the worker renews its leases)."""
    keys = Keys(settings.redis_namespace)
    data_dir = spaces.config.data_dir
    on_volume = volume.read_all(data_dir)
    in_hash = in_redis.read_all(client, keys)
    for key, at in in_hash.items():
        if on_volume.get(key, -math.inf) < at:
            volume.record(data_dir, key, at)  # the volume came back from before this forget
    redis_lacked = {key: at for key, at in on_volume.items() if in_hash.get(key, -math.inf) < at}
    for key, at in redis_lacked.items():
        in_redis.record(client, keys, key, at)
    newest = {**on_volume, **{key: max(at, on_volume.get(key, at)) for key, at in in_hash.items()}}
    volume.erase_restored(spaces.config, newest, lambda key, at: spaces.forget(key, at, on_wait))
    for key, at in redis_lacked.items():
        lives_on = spaces.exists(key)  # what survived the erase above holds a write newer than the forget
        shard = shard_of(key, settings.shard_count)
        if in_redis.drop_before(client, keys, shard, key, at, lives_on):
            log.info(
                "a restored Redis's writes of a forgotten space were dropped", extra={"space": "/".join(key)}
            )
