"""The one way the service opens Redis: timeouts and a pool sized for the queue's own blocking calls.

redis-py 8 changed two defaults that break a queue under load: every socket read times out after 5 s,
and a client's pool holds at most 100 connections and raises `MaxConnectionsError` past that. A read
through the owning worker blocks (BLPOP) for as long as the worker takes to apply the writes before it,
so a busy worker would turn slow reads into `redis.TimeoutError`, and a burst of concurrent requests (an
API under load, a bench with a thread per user) into `Too many connections`. Here blocking calls wait in
slices well below the socket timeout (`BLOCK_SLICE_S`), and a request that finds the pool busy waits
for a connection (`BlockingConnectionPool`) rather than failing.
"""

import redis

from services.queue.settings import QueueSettings

REDIS_UNAVAILABLE = (redis.ConnectionError, redis.TimeoutError)
"""What a call raises while Redis is away, restarting, or replaying its AOF (`BusyLoadingError` is a
`ConnectionError`): a worker waits it out, the API answers 503 with `Retry-After`."""

BLOCK_SLICE_S = 1.0
"""Longest single blocking command (BLPOP, XREADGROUP BLOCK): far below `redis_socket_timeout_s`, so a
long wait is many short commands and a socket timeout means Redis stopped answering."""


def connect(settings: QueueSettings) -> redis.Redis:
    """A client of `settings.redis_url` with the service's timeouts and pool."""
    return connect_like(redis.Redis.from_url(settings.redis_url), settings)  # from_url only parses


def connect_like(client: redis.Redis, settings: QueueSettings) -> redis.Redis:
    """A client of the Redis that `client` talks to — its address, database, credentials and TLS — with
    the service's timeouts and pool: for an rq job, whose Redis is the one its `rq worker --url` was
    given, not `MEMORYOS_REDIS_URL`."""
    pool = client.connection_pool
    kwargs = {
        **pool.connection_kwargs,
        "socket_timeout": settings.redis_socket_timeout_s,
        "socket_connect_timeout": settings.redis_socket_timeout_s,
    }
    blocking = redis.BlockingConnectionPool(
        connection_class=pool.connection_class,
        max_connections=settings.redis_max_connections,
        timeout=settings.redis_socket_timeout_s,
        **kwargs,
    )
    return redis.Redis(connection_pool=blocking)
