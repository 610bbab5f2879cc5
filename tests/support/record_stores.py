"""The engine's storage tests on both record stores: SQLite files and the PostgreSQL database.

A test module opts in with `both_record_stores` (an autouse, parametrized fixture) and builds its
settings with `store_settings()`: each test then runs once per store, the second time against a fresh
database of the session's real PostgreSQL server (`tests/support/postgres_server.py`). What a test reads
of the committed op log goes through `op_log`, which reads either store from outside the engine.
"""

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from memoryos.storage.records.factory import STORE_FILE, space_of

_database_url: str | None = None


@pytest.fixture(params=["sqlite", "postgres"])
def both_record_stores(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run the test on the SQLite store, then on the PostgreSQL store (a fresh database)."""
    global _database_url
    if request.param == "postgres":
        _database_url = request.getfixturevalue("database_url")
    try:
        yield request.param
    finally:
        _database_url = None
        from memoryos.storage.records.postgres.connection import close_pools

        close_pools()


def store_settings() -> dict[str, Any]:
    """The settings that select the store the current test runs on."""
    return {} if _database_url is None else {"database_url": _database_url}


def op_log(directory: Path) -> list[dict[str, Any]]:
    """Every op committed to the space in `directory` (kind, at, op_id, write_id, detail), oldest first,
    read through a connection of its own: what is on disk, not what the engine caches."""
    rows = table_rows(directory, "op_log", "kind, at, op_id, write_id, detail", order_by="seq")
    return [
        {"kind": kind, "at": at, "op_id": op_id, "write_id": write_id, "detail": json.loads(detail)}
        for kind, at, op_id, write_id, detail in rows
    ]


def table_rows(
    directory: Path, table: str, columns: str = "*", order_by: str | None = None
) -> list[tuple[Any, ...]]:
    """The rows of one of the space's tables (names from the test, never from input), as the store
    holds them: SQLite's file, or the database's rows of the space without their `space_id`."""
    order = f" ORDER BY {order_by}" if order_by else ""
    if _database_url is None:
        db = sqlite3.connect(f"file:{directory / STORE_FILE}?mode=ro", uri=True)
        try:
            return [tuple(row) for row in db.execute(f"SELECT {columns} FROM {table}{order}")]
        finally:
            db.close()
    selected = "t.*" if columns == "*" else columns
    with psycopg.connect(_database_url) as connection:
        cursor = connection.execute(
            f"SELECT {selected} FROM {table} t JOIN spaces s USING (space_id) WHERE s.tenant = %s "
            f"AND s.user_id = %s AND s.assistant_id = %s{order}",
            space_of(directory),
        )
        names = [column.name for column in cursor.description or ()]
        keep = [i for i, name in enumerate(names) if name != "space_id"]
        return [tuple(row[i] for i in keep) for row in cursor.fetchall()]


def database_tables_holding(needle: str) -> list[str]:
    """The tables of the current test's database with a row whose text holds `needle` (any column, the
    row cast to text; bytea as hex, so texts only); [] on the SQLite store, whose bytes are files."""
    if _database_url is None:
        return []
    with psycopg.connect(_database_url) as connection:
        tables = [
            row[0]
            for row in connection.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        ]
        return [
            table
            for table in sorted(tables)
            if connection.execute(
                sql.SQL("SELECT EXISTS (SELECT 1 FROM {} t WHERE t::text LIKE %s)").format(
                    sql.Identifier(table)
                ),
                (f"%{needle}%",),
            ).fetchone()
            == (True,)
        ]
