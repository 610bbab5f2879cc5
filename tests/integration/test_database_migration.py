"""The PostgreSQL store's schema: created in an empty database, migrated once when two processes start
together, left alone at its version, and a database newer than the code refused untouched."""

import threading

import psycopg
import pytest

from memoryos.errors import StorageError
from memoryos.storage.records.postgres.connection import migrate, schema_version
from memoryos.storage.records.postgres.schema import SCHEMA_VERSION


def tables(url: str) -> set[str]:
    with psycopg.connect(url) as connection:
        rows = connection.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall()
    return {row[0] for row in rows}


def test_an_empty_database_gets_the_whole_schema(database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as connection:
        assert schema_version(connection) == 0
        assert migrate(connection) == 0
        assert schema_version(connection) == SCHEMA_VERSION
        assert migrate(connection) == SCHEMA_VERSION  # at its version: nothing to do
    assert {"spaces", "pages", "page_terms", "op_log", "shard_fences", "tombstones"} <= tables(database_url)


def test_two_processes_starting_together_migrate_once(database_url: str) -> None:
    found: list[int] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def start() -> None:
        try:
            with psycopg.connect(database_url, autocommit=True) as connection:
                barrier.wait()
                found.append(migrate(connection))
        except BaseException as error:
            errors.append(error)

    starters = [threading.Thread(target=start) for _ in range(4)]
    for starter in starters:
        starter.start()
    for starter in starters:
        starter.join(timeout=30)
    assert not errors
    assert sorted(found) == [0] + [SCHEMA_VERSION] * 3  # one created the schema, the others found it
    with psycopg.connect(database_url) as connection:
        assert connection.execute("SELECT COUNT(*) FROM memoryos_schema").fetchone() == (1,)


def test_a_newer_database_is_refused_untouched(database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as connection:
        migrate(connection)
        connection.execute("UPDATE memoryos_schema SET version = %s", (SCHEMA_VERSION + 1,))
        with pytest.raises(StorageError, match="newer than this MemoryOS reads"):
            migrate(connection)
        assert schema_version(connection) == SCHEMA_VERSION + 1
