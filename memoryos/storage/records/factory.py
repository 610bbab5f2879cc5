"""Which record store holds a space: the service's PostgreSQL database when `database_url` is set, else
one SQLite file in the space's directory.

A space is named the same way for both: its directory `<data_dir>/<tenant>/<user_id>/<assistant_id>/`
(validated ids), which with PostgreSQL holds only the index snapshot cache and names the space's row.
"""

import functools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from memoryos.config import MemoryConfig
from memoryos.errors import FencedOutError, SpaceNotFoundError
from memoryos.storage.records.base import Fence, RecordStore

if TYPE_CHECKING:  # psycopg is the workers' dependency only: the API's image has none
    from psycopg_pool import ConnectionPool

STORE_FILE = "memory.sqlite"
"""The SQLite store's file in its space's directory."""


class ShardFence(NamedTuple):
    """The shard a space belongs to and this process's fencing number for it (`Fence`): every write
    transaction of the space is checked against the shard's recorded number."""

    shard: int
    number: Fence


def space_of(directory: Path) -> tuple[str, str, str]:
    """(tenant, user_id, assistant_id) of the space in `directory`."""
    return directory.parent.parent.name, directory.parent.name, directory.name


def uses_database(config: MemoryConfig) -> bool:
    return config.database_url is not None


def database_url(config: MemoryConfig) -> str:
    """The configured database's URL; `InvalidInputError` naming `database_url` for one libpq cannot
    read, before any connection is tried (a pool would retry a typo for its whole timeout)."""
    from memoryos.storage.records.postgres.connection import checked_url

    assert config.database_url is not None
    return checked_url(config.database_url.get_secret_value())


def database_pool(config: MemoryConfig) -> "ConnectionPool":
    """This process's pool for the configured database (the schema migrated on first use)."""
    from memoryos.storage.records.postgres.connection import database_pool as pool_for

    return pool_for(
        database_url(config),
        config.database_pool_size,
        config.database_idle_in_transaction_timeout_s,
    )


def take_shard_fence(config: MemoryConfig, shard: int) -> int:
    """Draw and record a new fencing number for `shard`: in the database (`postgres/fences.py`), else in
    the data directory (`sqlite/fences.py`, one host)."""
    if not uses_database(config):
        from memoryos.storage.records.sqlite import fences as on_this_host

        return on_this_host.take_shard(config.data_dir, shard)
    from memoryos.storage.records.postgres.fences import take_shard

    return take_shard(database_pool(config), shard)


def record_store_exists(config: MemoryConfig, directory: Path) -> bool:
    """Whether the space in `directory` has records (was written to, and not forgotten since)."""
    if not uses_database(config):
        return (directory / STORE_FILE).is_file()
    from memoryos.storage.records.postgres.store_queries import borrowed

    with borrowed(database_pool(config)) as connection:
        row = connection.execute(
            "SELECT 1 FROM spaces WHERE tenant = %s AND user_id = %s AND assistant_id = %s",
            space_of(directory),
        ).fetchone()
    return row is not None


def open_record_store(
    config: MemoryConfig,
    directory: Path,
    *,
    create: bool,
    new_store_meta: Callable[[], dict[str, str]],
    fence: ShardFence | None = None,
) -> RecordStore:
    """The space's store: PostgreSQL's rows when a database is configured (created when `create`, else
    `SpaceNotFoundError`), else the SQLite file in `directory` (whose existence the caller's file hold
    has checked). With `fence`, every write transaction checks the shard's number: in the database, or
    in the data directory's fence files on one host (`sqlite/fences.py`)."""
    if uses_database(config):
        from memoryos.storage.records.postgres.store import PostgresStore

        return PostgresStore(
            database_pool(config),
            space_of(directory),
            create=create,
            not_found=lambda: SpaceNotFoundError(directory),
            new_store_meta=new_store_meta,
            shard=None if fence is None else fence.shard,
            fence=None if fence is None else fence.number,
        )
    from memoryos.storage.records.sqlite.store import SqliteStore

    check = None if fence is None else functools.partial(_check_file_fence, config.data_dir, fence)
    return SqliteStore(
        directory / STORE_FILE, config.store_busy_timeout_s, new_store_meta=new_store_meta, fence=check
    )


def _check_file_fence(data_dir: Path, fence: ShardFence) -> None:
    """`FencedOutError` unless the shard's recorded number on this host is the one this process holds."""
    from memoryos.storage.records.sqlite.fences import recorded

    held, found = fence.number(), recorded(data_dir, fence.shard)
    if held is None or found != held:
        raise FencedOutError(fence.shard, held, found)
