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


def op_log(directory: Path) -> list[tuple[str, dict[str, Any]]]:
    """(kind, detail) of every op committed to the space in `directory`, oldest first, read through a
    connection of its own: what is on disk, not what the engine caches."""
    if _database_url is None:
        db = sqlite3.connect(f"file:{directory / STORE_FILE}?mode=ro", uri=True)
        try:
            rows = db.execute("SELECT kind, detail FROM op_log ORDER BY seq").fetchall()
        finally:
            db.close()
    else:
        with psycopg.connect(_database_url) as connection:
            rows = connection.execute(
                "SELECT o.kind, o.detail FROM op_log o JOIN spaces s USING (space_id) WHERE s.tenant = %s "
                "AND s.user_id = %s AND s.assistant_id = %s ORDER BY o.seq",
                space_of(directory),
            ).fetchall()
    return [(row[0], json.loads(row[1])) for row in rows]
