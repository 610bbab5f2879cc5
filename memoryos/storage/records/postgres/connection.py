"""Connections to the service's PostgreSQL database: one pool per process and URL, the schema migrated
once when the pool opens.

Why a pool, and one per process: a worker serves thousands of spaces, and an open space must not keep a
connection of its own (the server's `max_connections` is shared by every pod and process). Each store
call borrows a connection for one statement, or for one transaction, and gives it back; the pool's cap
(`database_pool_size`) bounds what a process can hold, so the sizing is pods × processes × cap against
`max_connections` (docs/service.md). Sessions carry `idle_in_transaction_session_timeout`, below the
shard lease's TTL: a worker frozen in the middle of a transaction (a GC pause, a SIGSTOP, a frozen VM)
cannot keep a shard's fence row locked past the time a new owner waits for it.

Sessions also plan every prepared statement once (`plan_cache_mode=force_generic_plan`). psycopg
prepares a statement after its fifth use on a connection; the server then still plans it again at each
execution while it judges a plan for the parameters at hand cheaper, which for a statement over arrays
of parameters (whose length only the custom plan knows) is always: the word counts of every retrieve were
planned anew, 0.27 ms each, longer than they ran. Every statement of the stores is written so that its
plan does not depend on the values or on statistics (primary-key ranges and probes, LATERAL fences),
which is what makes one plan for all values safe.
"""

import os
import threading

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool

from memoryos.errors import DatabaseUnavailableError, InvalidInputError, StorageError
from memoryos.storage.records.postgres.schema import MIGRATIONS, SCHEMA_VERSION

MIGRATION_LOCK = 0x6D656D6F72796F73
"""The advisory lock key two processes migrating the same database at once serialize on ("memoryos")."""

_pools: dict[tuple[int, str, int, float], ConnectionPool] = {}
_pools_lock = threading.Lock()


def database_pool(url: str, max_size: int, idle_in_transaction_timeout_s: float) -> ConnectionPool:
    """This process's pool for `url`, opened (and the schema migrated) on first use.

    Keyed by process id too: a forked child must not use its parent's sockets."""
    key = (os.getpid(), url, max_size, idle_in_transaction_timeout_s)
    with _pools_lock:
        pool = _pools.get(key)
        if pool is None:
            timeout_ms = max(1, int(idle_in_transaction_timeout_s * 1000))
            pool = ConnectionPool(
                url,
                min_size=1,
                max_size=max_size,
                kwargs={
                    "autocommit": True,
                    "options": (
                        f"-c idle_in_transaction_session_timeout={timeout_ms} -c plan_cache_mode=force_generic_plan"
                    ),
                    "connect_timeout": max(1, int(idle_in_transaction_timeout_s)),
                },
                # A call waits this long for a connection, then fails (the database is away): below the
                # shard lease's TTL, so a worker blocked on a database outage still renews its leases.
                timeout=idle_in_transaction_timeout_s,
                open=False,
                name="memoryos",
            )
            try:
                pool.open(wait=True, timeout=30)
                with pool.connection() as connection:
                    migrate(connection)
            except (psycopg.Error, TimeoutError) as error:
                pool.close()
                raise DatabaseUnavailableError(f"cannot use the database: {error}") from error
            _pools[key] = pool
        return pool


def checked_url(url: str) -> str:
    """`url` if libpq can read it as a connection string or URL with valid ports; else
    `InvalidInputError` naming `database_url` (the message never repeats the URL: it may hold a
    password)."""
    try:
        ports = conninfo_to_dict(url).get("port")
    except psycopg.ProgrammingError:
        raise InvalidInputError(
            "database_url", "not a PostgreSQL URL (postgresql://user@host:5432/dbname) or key=value string"
        ) from None
    for port in str(ports or "").split(","):
        if port and not (port.isdigit() and 0 < int(port) < 65536):
            raise InvalidInputError("database_url", "a port is not a number from 1 to 65535")
    return url


def close_pools() -> None:
    """Close every pool of this process (tests; a worker's shutdown)."""
    with _pools_lock:
        pools = list(_pools.values())
        _pools.clear()
    for pool in pools:
        pool.close()


def schema_version(connection: psycopg.Connection) -> int:
    """The database's schema version: 0 for an empty database. The catalog is read as a table, with the
    statement's snapshot: `to_regclass` answers from a cache that a waiter on the migration lock may not
    have refreshed, and would send it to create the tables a second time."""
    exists = connection.execute(
        "SELECT EXISTS (SELECT 1 FROM pg_tables WHERE schemaname = current_schema() "
        "AND tablename = 'memoryos_schema')"
    ).fetchone()
    if not exists or not exists[0]:
        return 0
    row = connection.execute("SELECT version FROM memoryos_schema").fetchone()
    return 0 if row is None else int(row[0])


def migrate(connection: psycopg.Connection) -> int:
    """Bring the database to `SCHEMA_VERSION`, in one transaction under an advisory lock; returns the
    version it found. The version is read again under the lock, so of two processes starting together
    one migrates and the other finds the work done. A database newer than this code is refused."""
    if schema_version(connection) == SCHEMA_VERSION:
        return SCHEMA_VERSION
    with connection.transaction():
        connection.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        found = schema_version(connection)
        if found > SCHEMA_VERSION:
            raise StorageError(
                f"the database has schema version {found}, newer than this MemoryOS reads "
                f"({SCHEMA_VERSION}): upgrade MemoryOS to use it"
            )
        for step in range(found, SCHEMA_VERSION):
            connection.execute(MIGRATIONS[step].encode())
        if found == 0:
            connection.execute("INSERT INTO memoryos_schema(version) VALUES (%s)", (SCHEMA_VERSION,))
        else:
            connection.execute("UPDATE memoryos_schema SET version = %s", (SCHEMA_VERSION,))
        return found
