"""Tombstones in the database: the `tombstones` table every worker sees, instead of files on one volume.

The same record as on a data volume (`memoryos/space/tombstones.py`): a digest of the space's key and
when the forget was planned, no id and no text. A database restored from a backup taken before a forget
brings the space's rows back but, restored with them, may lack the tombstone too; Redis's copy
(`services/queue/tombstones.py`) is copied back by the worker at start, and the space's rows, predating
it, are erased again.
"""

from psycopg_pool import ConnectionPool

from memoryos.storage.records.postgres.store_queries import borrowed


def record(pool: ConnectionPool, digest: str, forgotten_at: float) -> None:
    """Note the forget of the space of `digest`, keeping a newer one already noted."""
    with borrowed(pool) as connection:
        connection.execute(
            "INSERT INTO tombstones(digest, forgotten_at) VALUES (%s, %s) ON CONFLICT (digest) DO UPDATE "
            "SET forgotten_at = GREATEST(tombstones.forgotten_at, EXCLUDED.forgotten_at)",
            (digest, forgotten_at),
        )


def read_all(pool: ConnectionPool) -> dict[str, float]:
    with borrowed(pool) as connection:
        rows = connection.execute("SELECT digest, forgotten_at FROM tombstones").fetchall()
    return {str(row[0]): float(row[1]) for row in rows}


def spaces_with_newest_write(
    pool: ConnectionPool, write_kinds: tuple[str, ...]
) -> list[tuple[str, str, str, float | None]]:
    """Every space the database holds, with when its newest write (an op of `write_kinds`) was planned
    (None: none): what a restore check compares with the tombstones."""
    with borrowed(pool) as connection:
        rows = connection.execute(
            "SELECT s.tenant, s.user_id, s.assistant_id, (SELECT MAX(o.at) FROM op_log o "
            "WHERE o.space_id = s.space_id AND o.kind = ANY(%s)) FROM spaces s",
            (list(write_kinds),),
        ).fetchall()
    return [(row[0], row[1], row[2], None if row[3] is None else float(row[3])) for row in rows]


def spaces_held(pool: ConnectionPool, keys: list[tuple[str, str, str]]) -> set[tuple[str, str, str]]:
    """Those of `keys` (tenant, user_id, assistant_id) the database holds a space for."""
    with borrowed(pool) as connection:
        rows = connection.execute(
            "SELECT s.tenant, s.user_id, s.assistant_id FROM spaces s JOIN unnest(%s::text[], %s::text[], "
            "%s::text[]) AS k(tenant, user_id, assistant_id) USING (tenant, user_id, assistant_id)",
            ([k[0] for k in keys], [k[1] for k in keys], [k[2] for k in keys]),
        ).fetchall()
    return {(row[0], row[1], row[2]) for row in rows}
