"""A worker's check of the forgotten spaces against what a restore may have brought back.

A forget leaves two tombstones that are restored independently: a file on the data volume
(`memoryos/space/tombstones.py`) and a field of `<ns>:tombstones` in Redis (`services/queue/tombstones.py`),
each the digest of the space's key and the forget's time — no id and no text. Before a worker takes any
shard — at start, and again whenever Redis answers after an outage, since it may have come back from a
backup — it copies each side's tombstones that the other lacks (or holds older) across, digest for
digest, erases every space directory that predates its tombstone, and drops what Redis still holds from
before the forget of each space whose tombstone Redis lacked. A digest names no space, so the volume's
space directories are walked once and each key's digest looked up, and the stores opened are those of
tombstoned spaces; Redis's streams, dead letters and sets of space names are read only when Redis lacked
a tombstone, once for all of them. Logs name a space by its digest's first 12 characters only.
"""

import logging
import math
from collections.abc import Callable

import redis

from memoryos.space import tombstones as volume
from services.queue import tombstones as in_redis
from services.queue.keys import Keys
from services.queue.settings import QueueSettings
from services.worker.spaces import WorkerSpaces

log = logging.getLogger(__name__)


def honour_tombstones(
    client: redis.Redis, settings: QueueSettings, spaces: WorkerSpaces, on_wait: Callable[[], None]
) -> None:
    """Reconcile both sides' tombstones and erase what a restore brought back of forgotten spaces.
    `on_wait`: run while an erase waits for a space in use in this worker (the worker renews its leases)."""
    keys = Keys(settings.redis_namespace)
    on_volume = volume.read_all(spaces.config)
    in_hash = in_redis.read_all(client, keys)
    for digest, at in in_hash.items():
        if on_volume.get(digest, -math.inf) < at:
            volume.record(spaces.config, digest, at)  # the volume came back from before this forget
    redis_lacked = {digest: at for digest, at in on_volume.items() if in_hash.get(digest, -math.inf) < at}
    for digest, at in redis_lacked.items():
        in_redis.record(client, keys, digest, at)
    newest = {**on_volume, **{digest: max(at, on_volume.get(digest, at)) for digest, at in in_hash.items()}}
    volume.erase_restored(spaces.config, newest, lambda key, at: spaces.forget(key, at, on_wait))
    volume.prune_snapshot_cache(
        spaces.config, set(spaces.pool.open_keys())
    )  # forgotten while this one was down
    # What survived the erase above holds a write newer than the forget: it lives on.
    dropped = in_redis.drop_before(client, keys, settings.shard_count, redis_lacked, spaces.exists)
    for digest, count in dropped.items():
        if count:
            log.info(
                "a restored Redis's writes of a forgotten space were dropped",
                extra={"tombstone": digest[:12], "dropped": count},
            )
