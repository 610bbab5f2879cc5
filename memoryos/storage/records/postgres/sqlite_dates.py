"""SQLite's `julianday` in process, for the PostgreSQL store.

Retrieval scores a page's nearness to a date the query names from its timestamp text as SQLite's
`julianday` reads it (NULL for text it cannot read). PostgreSQL parses dates by other rules, so the
PostgreSQL store asks SQLite itself, in an in-memory database of each thread: the same reading, and so the
same ranking, on either store.
"""

import json
import sqlite3
import threading
from collections.abc import Sequence

_local = threading.local()


def julian_days(timestamps: Sequence[str]) -> list[float | None]:
    """Each timestamp as SQLite's `julianday` reads it, in order (None where it reads none)."""
    if not timestamps:
        return []
    connection: sqlite3.Connection | None = getattr(_local, "connection", None)
    if connection is None:
        connection = _local.connection = sqlite3.connect(":memory:")
    rows = connection.execute(
        "SELECT julianday(value) FROM json_each(?) ORDER BY key", (json.dumps(list(timestamps)),)
    ).fetchall()
    return [row[0] for row in rows]
