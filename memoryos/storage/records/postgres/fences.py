"""Fencing numbers: a shard's new owner draws one from the database and records it before serving.

The number comes from the `fence_numbers` sequence, which only grows (unlike a Redis counter, which an
AOF restore can set back and `maxmemory` can refuse to increment). Recording it waits for every write
transaction that holds the shard's row `FOR SHARE` (`store_queries.py`): once `take_shard` returns, no
transaction of the previous owner can commit, and every later one is refused. A transaction frozen
mid-way holds the row only until the server's `idle_in_transaction_session_timeout` ends it.
"""

from psycopg_pool import ConnectionPool

from memoryos.storage.records.postgres.store_queries import borrowed


def take_shard(pool: ConnectionPool, shard: int) -> int:
    """Draw a new fencing number for `shard` and record it as the shard's; returns it. Every transaction
    of a space of the shard checks this number from now on."""
    with borrowed(pool) as connection:
        row = connection.execute(
            "INSERT INTO shard_fences(shard, number) VALUES (%s, nextval('fence_numbers')) "
            "ON CONFLICT (shard) DO UPDATE SET number = EXCLUDED.number RETURNING number",
            (shard,),
        ).fetchone()
    assert row is not None
    return int(row[0])
