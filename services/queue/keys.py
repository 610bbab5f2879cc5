"""Where things live in Redis: one function per key family, and the shard of a space.

The shard is a stable hash of the space's (tenant, user, assistant): every API replica and worker maps a
space to the same shard, and all of a space's writes land in one stream, so they apply in the order
accepted.
"""

import hashlib

from memoryos.space.pool import SpaceKey

CONSUMER_GROUP = "workers"
"""The one consumer group of every shard stream: a shard's entries go to its lease owner."""


def space_name(key: SpaceKey) -> str:
    """`tenant/user/assistant`: ids are validated path components, so `/` cannot occur inside one."""
    return f"{key.tenant}/{key.user_id}/{key.assistant_id}"


def space_key(name: str) -> SpaceKey:
    tenant, user_id, assistant_id = name.split("/")
    return SpaceKey(tenant, user_id, assistant_id)


def shard_of(key: SpaceKey, shard_count: int) -> int:
    digest = hashlib.blake2b(space_name(key).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shard_count


class Keys:
    """The key names of one deployment (`namespace`)."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace

    def writes(self, shard: int) -> str:
        return f"{self.namespace}:writes:{shard}"

    def last_writes(self, shard: int) -> str:
        """Hash of the shard's spaces -> entry id of each one's newest accepted write: what a read of the
        space waits for."""
        return f"{self.namespace}:last-write:{shard}"

    def lease(self, shard: int) -> str:
        return f"{self.namespace}:lease:{shard}"

    def worker(self, worker_id: str) -> str:
        return f"{self.namespace}:worker:{worker_id}"

    def workers_pattern(self) -> str:
        return f"{self.namespace}:worker:*"

    def owner_calls(self, shard: int) -> str:
        """Owner calls waiting for the shard's worker (named `reads` when they were reads only: a running
        deployment's lists keep that name)."""
        return f"{self.namespace}:reads:{shard}"

    def owner_calls_wake(self, server_id: str) -> str:
        """One worker's own list, popped with its shards' owner calls: its drain pushes to it so that its
        request thread leaves its blocking pop at once (`services/worker/owner_calls.py`)."""
        return f"{self.namespace}:owner-calls-wake:{server_id}"

    def reply(self, request_id: str) -> str:
        return f"{self.namespace}:reply:{request_id}"

    def bundle(self, transfer_id: str) -> str:
        """A bundle on its way between the API and a space's owner (export or import)."""
        return f"{self.namespace}:bundle:{transfer_id}"

    def space_bundles(self, space: str) -> str:
        """The transfer ids of a space's bundles in Redis: what a forget of the space deletes."""
        return f"{self.namespace}:space-bundles:{space}"

    def space_jobs(self, space: str) -> str:
        """The ids of the rq jobs queued for a space (`services/jobs/tasks.py`): what a forget deletes."""
        return f"{self.namespace}:space-jobs:{space}"

    def write_digests(self, space: str) -> str:
        """Hash of a space's caller-chosen write ids -> their content ids (`memoryos.space.writes`): how
        the API tells a retried write from its id reused for other content (`producer.ENQUEUE`)."""
        return f"{self.namespace}:write-digests:{space}"

    def write_digest_times(self, space: str) -> str:
        """Sorted set of the same write ids by when each was first accepted: the oldest leave the hash
        once `write_digest_ttl_s` old."""
        return f"{self.namespace}:write-digest-times:{space}"

    def dead_letters(self) -> str:
        return f"{self.namespace}:dead"

    def held(self, space: str) -> str:
        """A space's writes held until its reindex, oldest first (`services/worker/held.py`)."""
        return f"{self.namespace}:held:{space}"

    def held_spaces(self, shard: int) -> str:
        """The spaces of a shard that have writes held: every later write of theirs goes behind."""
        return f"{self.namespace}:held-spaces:{shard}"

    def spaces(self) -> str:
        """The set of spaces written to through the queue: what maintenance jobs walk."""
        return f"{self.namespace}:spaces"

    def forgotten_since_rewrite(self) -> str:
        """How many forgets applied since the last AOF rewrite (a count: no id, no text)."""
        return f"{self.namespace}:forgotten-since-rewrite"

    def forgets_failing(self) -> str:
        """Hash of the digest of each space whose forget failed and is being retried -> the failure (its
        kind, since when, how many tries; no id, no text): shown in `/readyz` and `/metrics` until the
        forget applies."""
        return f"{self.namespace}:forgets-failing"

    def tombstones(self) -> str:
        """Hash of the digest of each forgotten space's key -> when it was forgotten (no id, no text): what a
        Redis restored from before a forget is checked against (`services/queue/tombstones.py`)."""
        return f"{self.namespace}:tombstones"
