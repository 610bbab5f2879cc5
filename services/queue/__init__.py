"""The write queue between the API and the workers: Redis Streams, one stream per shard of spaces.

A write is planned by the engine (`memoryos.space.writes.plan_write`: checked, turned into its op) and appended
to its shard's stream; the API acknowledges it once Redis holds it. The worker that owns the shard (a
lease in Redis, `services/worker/leases.py`) reads it through the consumer group, applies it to the space
(idempotent by write id), then acknowledges and deletes the entry. Nothing here decides anything about
memory: it moves ops.
"""
