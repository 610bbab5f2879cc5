"""`PostgresStore`: one memory space's records in the service's PostgreSQL database.

The same contract as `SqliteStore` (`memoryos/storage/records/base.py` names it), so the engine runs on
either unchanged. What differs is where it lives and who may write: every space of every worker is in
one database, so any worker can serve any space from the database alone; a space's rows are keyed by its
`space_id`; its writes are serialized by a row lock and, in the service, fenced by the shard's number
(`store_queries.py`). An open store holds no connection: each call borrows one from the process's pool.

The space's `incarnation` changes when it is forgotten and made again: an index snapshot made of another
incarnation is never loaded into this one.
"""

import json
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import psycopg
from psycopg.rows import dict_row
from psycopg.sql import Placeholder
from psycopg_pool import ConnectionPool

from memoryos.errors import SpaceNotFoundError, StorageError
from memoryos.storage.records.base import (
    KNOWLEDGE_KINDS,
    Fence,
    FrequencyAsk,
    OpKey,
    PassMarks,
    ReadMarks,
    ReadOpening,
    RebuildMarks,
    RetrievalBasis,
    RetrievedRows,
    logged_detail,
)
from memoryos.storage.records.postgres import lexical
from memoryos.storage.records.postgres.knowledge_queries import (
    ACTIVE_COLUMNS,
    FACT_SUPPORT,
    PostgresKnowledgeQueries,
    active_fact,
    support_of,
)
from memoryos.storage.records.postgres.page_queries import (
    NEXT_EXPIRY,
    RANKED_AND_NEWEST,
    SHORT_TERM_OVERFLOW,
    PostgresPageQueries,
    in_order,
)
from memoryos.storage.records.postgres.segment_queries import (
    HAS_UNANALYZED_PAGES,
    PostgresSegmentQueries,
    active_segments_query,
)
from memoryos.storage.records.postgres.store_queries import (
    LAST_CHAINED_ID,
    OP_LOG_ROWS,
    PAGE_FROM,
    bigints,
    op_log_values,
)
from memoryos.storage.records.store_rows import PAGE_COLUMNS, page_from_row, segment_from_row
from memoryos.types import KnowledgeKind

_READ_MARKS = (
    b"SELECT change_seq, (SELECT COALESCE(MAX(page_id), 0) FROM pages WHERE space_id = %(space)s), "
    b"(SELECT MIN(page_id) FROM pages WHERE space_id = %(space)s AND vector IS NULL) "
    b"FROM spaces WHERE space_id = %(space)s"
)
_BASIS_SCALARS = (
    b"SELECT (SELECT change_seq FROM spaces WHERE space_id = %(space)s), "
    b"(SELECT COUNT(*) FROM pages WHERE space_id = %(space)s AND expires_at <= %(now)s), "
    b"(SELECT text FROM profile_versions WHERE space_id = %(space)s ORDER BY version DESC "
    b"LIMIT 1), (SELECT MAX(version) FROM profile_versions WHERE space_id = %(space)s)"
)
_ACTIVE_FACTS_SINCE = (
    f"SELECT s.change_seq, k.kind, {', '.join(f'k.{column}' for column in ACTIVE_COLUMNS)} FROM spaces s "
    "LEFT JOIN knowledge k ON k.space_id = s.space_id AND k.kind = ANY(%s) AND k.active "
    "WHERE s.space_id = %s AND s.change_seq IS DISTINCT FROM %s ORDER BY k.entry_id"
).encode()
"""Every kind's active facts with the data version they were read at (a NULL fact: none), or no row at
all when the space is still at the data version given: the version and the facts come from the same
statement, so they belong together whatever commits meanwhile (every write to a space bumps it)."""


class _KeptFacts(NamedTuple):
    """The active facts of a space as read at one data version (`_ACTIVE_FACTS_SINCE`)."""

    version: int | None
    """None: not known (the facts are asked again)."""
    facts: dict[KnowledgeKind, list[dict[str, Any]]]


class PostgresStore(PostgresPageQueries, PostgresSegmentQueries, PostgresKnowledgeQueries):
    """One space's rows. Safe to share between threads: each call borrows its own connection, and a
    transaction belongs to the thread that opened it."""

    def __init__(
        self,
        pool: ConnectionPool,
        space: tuple[str, str, str],
        *,
        create: bool,
        not_found: Callable[[], SpaceNotFoundError],
        new_store_meta: Callable[[], dict[str, str]] | None = None,
        shard: int | None = None,
        fence: Fence | None = None,
    ) -> None:
        """Open the space `(tenant, user_id, assistant_id)`, creating its row (with `new_store_meta`'s
        rows) when `create`; otherwise `not_found()` is raised for a space the database does not hold.
        `shard` and `fence`: the shard whose fencing number every write transaction checks, and this
        process's number for it (None for both: unfenced, a single embedded process or an offline
        command)."""
        self._pool = pool
        self._local = threading.local()
        self.shard = shard
        self._fence = fence
        self.space = space
        self._facts_kept: _KeptFacts | None = None
        found = self._find()
        self.created = False
        if found is None:
            if not create:
                raise not_found()
            found, self.created = self._create(new_store_meta or dict)
        self.space_id, self.incarnation, self._meta_at_open = found

    def _find(self) -> tuple[int, str, dict[str, str]] | None:
        """The space's id, incarnation and meta, read together (`meta_at_open`): one round trip."""
        rows = self._all(
            "SELECT s.space_id, s.incarnation, (SELECT json_object_agg(m.key, m.value) FROM meta m "
            "WHERE m.space_id = s.space_id) FROM spaces s "
            "WHERE s.tenant = %s AND s.user_id = %s AND s.assistant_id = %s",
            self.space,
        )
        if not rows:
            return None
        space_id, incarnation, meta = rows[0]
        return int(space_id), str(incarnation), {str(k): str(v) for k, v in (meta or {}).items()}

    def _create(
        self, new_store_meta: Callable[[], dict[str, str]]
    ) -> tuple[tuple[int, str, dict[str, str]], bool]:
        """Insert the space's row and its first meta rows in one statement (one round trip, atomic on its
        own); of two processes creating the same space at once, one row wins and both use it. Returns the
        space (as `_find`) and whether this call made it (`created`)."""
        meta = sorted(new_store_meta().items())
        rows = self._all(
            "WITH created AS (INSERT INTO spaces(tenant, user_id, assistant_id, incarnation, created_at) "
            "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (tenant, user_id, assistant_id) DO NOTHING "
            "RETURNING space_id, incarnation), "
            "first_meta AS (INSERT INTO meta(space_id, key, value) SELECT created.space_id, m.key, m.value "
            "FROM created, unnest(%s::text[], %s::text[]) AS m(key, value)) "
            "SELECT space_id, incarnation FROM created",
            (*self.space, uuid.uuid4().hex, time.time(), [k for k, _ in meta], [v for _, v in meta]),
        )
        if rows:
            return (int(rows[0][0]), str(rows[0][1]), dict(meta)), True
        found = self._find()
        if found is None:
            raise StorageError("the memory space was erased while it was being created")
        return found, False

    def close(self) -> None:
        """Nothing to release: the store holds no connection between calls."""

    # --- meta and log ---------------------------------------------------------------------------------
    def get_meta(self, key: str) -> str | None:
        transaction = self._current()
        if transaction is not None:
            return transaction.meta.get(key)  # read with the space's lock, kept up to date below
        value = self._one("SELECT value FROM meta WHERE space_id = %s AND key = %s", (self.space_id, key))
        return None if value is None else str(value)

    def meta_at_open(self) -> dict[str, str]:
        """The meta read with the space's row at open, or written with it (`_find`, `_create`)."""
        return dict(self._meta_at_open)

    def all_meta(self) -> dict[str, str]:
        transaction = self._current()
        if transaction is not None:
            return dict(transaction.meta)
        return {
            str(key): str(value)
            for key, value in self._all("SELECT key, value FROM meta WHERE space_id = %s", (self.space_id,))
        }

    def set_meta(self, key: str, value: str) -> None:
        """One row of a statement for the transaction's meta (`_write_rows`): consolidation sets the page
        chained last at every link. A key given twice keeps its last value."""
        self._write_rows(
            "INSERT INTO meta(space_id, key, value) SELECT DISTINCT ON (r.key) %s, r.key, r.value FROM "
            "unnest(%s::text[], %s::text[]) WITH ORDINALITY AS r(key, value, position) "
            "ORDER BY r.key, r.position DESC ON CONFLICT (space_id, key) DO UPDATE SET value = EXCLUDED.value",
            (self.space_id,),
            [(key, value)],
        )
        self._open_transaction().meta[key] = value

    def delete_all(self, tables: tuple[str, ...], keep_meta: tuple[str, ...]) -> None:
        """Delete every row of the space in `tables` (names from the code, never from input) and every meta
        key but `keep_meta`; a page's terms go with the pages."""
        for table in tables:
            if table == "pages_fts":
                continue  # SQLite's full-text table: here the terms are `page_terms`
            if table == "pages":
                self._write("DELETE FROM page_terms WHERE space_id = %s", (self.space_id,))
                self._write(
                    "UPDATE spaces SET page_count = 0, token_count = 0 WHERE space_id = %s", (self.space_id,)
                )
                self._open_transaction().reset_corpus_totals()
            self._write(f"DELETE FROM {table} WHERE space_id = %s", (self.space_id,))
        self._write(
            "DELETE FROM meta WHERE space_id = %s AND NOT (key = ANY(%s))", (self.space_id, list(keep_meta))
        )
        meta = self._open_transaction().meta
        for key in [key for key in meta if key not in keep_meta]:
            del meta[key]

    def delete_meta(self, key: str) -> None:
        self._write("DELETE FROM meta WHERE space_id = %s AND key = %s", (self.space_id, key))
        self._open_transaction().meta.pop(key, None)

    def committed_data_version(self) -> int:
        """`data_version` as this thread's last transaction through the store left it, with no round trip
        (a query where it has none): a later `data_version` differs only when another process committed
        since, unlike one read after the commit, which may already include another's."""
        committed: int | None = getattr(self._local, "committed_change_seq", None)
        return self.data_version() if committed is None else committed

    def data_version(self) -> int:
        """Changes whenever any process commits to this space (`spaces.change_seq`): the cheap test of
        whether there is anything to catch up with before a read."""
        value = self._one("SELECT change_seq FROM spaces WHERE space_id = %s", (self.space_id,))
        if value is None:
            raise StorageError("the memory space was erased (forgotten) while it was open")
        return int(value)

    def read_marks(self) -> ReadMarks:
        """As `SqliteStore.read_marks`, in one statement: a read's first round trip instead of three."""
        with self._connection() as connection:
            return _marks_of(_send_marks(connection, self.space_id))

    def retrieval_basis(self, now: float) -> RetrievalBasis:
        """As `SqliteStore.retrieval_basis`, in one round trip: the expired pages and the profile in one
        statement, every kind's active facts in another, sent together."""
        with self._connection() as connection:
            with connection.pipeline():
                sent = self._send_basis(connection, now)
            return self._basis_of(*sent)

    def read_opening(self, asks: Sequence[FrequencyAsk], now: float) -> ReadOpening:
        """As `SqliteStore.read_opening`, in one round trip: the marks', the counts' and the basis'
        statements sent together, none waiting for another's answer."""
        counting = lexical.FrequencyCount(self.space_id, asks)
        with self._connection() as connection:
            with connection.pipeline():
                marks = _send_marks(connection, self.space_id)
                counts = counting.send(connection)
                basis = self._send_basis(connection, now)
            return ReadOpening(
                _marks_of(marks),
                counting.answer(counts),
                self._basis_of(*basis),
            )

    def _send_basis(
        self, connection: psycopg.Connection, now: float
    ) -> tuple[psycopg.Cursor[Any], psycopg.Cursor[Any], _KeptFacts | None]:
        """`RetrievalBasis`' two statements, sent: the expired pages and the profile, then every kind's
        active facts unless the space is still at the data version of the facts this store kept (then no
        row: the facts and their vectors, most of the bytes, are neither sent nor decoded again). The
        facts come in binary: as text their vectors would be twice the bytes, then decoded."""
        kept = self._facts_kept
        scalars = connection.execute(_BASIS_SCALARS, {"space": self.space_id, "now": now})
        facts = connection.execute(
            _ACTIVE_FACTS_SINCE,
            (list(KNOWLEDGE_KINDS), self.space_id, None if kept is None else kept.version),
            binary=True,
        )
        return scalars, facts, kept

    def _basis_of(
        self, scalars: psycopg.Cursor[Any], facts: psycopg.Cursor[Any], kept: _KeptFacts | None
    ) -> RetrievalBasis:
        ((version, expired, profile, profile_version),) = scalars.fetchall()
        if version is None:
            raise StorageError("the memory space was erased (forgotten) while it was open")
        rows = facts.fetchall()
        if rows or kept is None:  # read at a newer data version: kept for the next read
            by_kind: dict[KnowledgeKind, list[dict[str, Any]]] = {kind: [] for kind in KNOWLEDGE_KINDS}
            for row in rows:
                if row[1] is not None:  # the space's row alone: no active fact
                    by_kind[row[1]].append(active_fact(row[2:]))
            kept = self._facts_kept = _KeptFacts(int(rows[0][0]) if rows else None, by_kind)
        return RetrievalBasis(
            int(expired),
            "" if profile is None else str(profile),
            None if profile_version is None else int(profile_version),
            kept.facts,
        )

    def retrieved_rows(
        self, page_ids: Sequence[int], short_term: int, entry_ids: Sequence[int]
    ) -> RetrievedRows:
        """As `SqliteStore.retrieved_rows`, in one round trip: the ranked pages, the newest short-term
        pages and the facts' support, each its own statement, sent together."""
        ids = list(dict.fromkeys(int(e) for e in entry_ids))
        with self._connection() as connection:
            with connection.pipeline():
                pages = connection.execute(
                    RANKED_AND_NEWEST.encode(),
                    {"space": self.space_id, "ids": bigints(page_ids), "newest": short_term},
                )
                sources = (
                    connection.execute(FACT_SUPPORT.encode(), {"space": self.space_id, "ids": ids})
                    if ids
                    else None
                )
            rows = pages.fetchall()
            return RetrievedRows(
                in_order([row[1:] for row in rows if row[0] == 0], page_ids),
                [page_from_row(row[1:]) for row in rows if row[0] == 1][::-1],
                support_of(ids, [] if sources is None else sources.fetchall()),
            )

    def log_op(self, kind: str, at: float, detail: dict[str, Any], op_id: str, write_id: str | None) -> None:
        """Kept with the transaction and inserted with its commit: a run of ops logs in one statement."""
        transaction = self._open_transaction()
        transaction.dirty = True
        transaction.logged.append((self._take("next_op_seq"), kind, at, json.dumps(detail), op_id, write_id))

    def checkpoint(self) -> None:
        """Nothing to do: deleted rows leave the tables at once (dead tuples until vacuum: docs/service.md)."""

    def logged_op(self, op_id: str, write_id: str | None) -> dict[str, Any] | None:
        """As `SqliteStore.logged_op`: the detail of an op applied under `op_id` or a write stored under
        `write_id`; `WriteIdConflictError` when the write id was stored with other content."""
        return self.logged_ops([(op_id, write_id)])[0]

    def logged_ops(self, keys: Sequence[OpKey]) -> list[dict[str, Any] | None]:
        """`logged_op` of each (op id, write id), in one statement for all of them: the rows this
        transaction logged are looked at first (they go in at its commit). Keys given to `transaction`
        were read with its BEGIN: no statement (no other writer of the space could log since)."""
        transaction = self._current()
        logged = [] if transaction is None else [(row[4], row[5], row[3]) for row in transaction.logged]
        if transaction is not None and transaction.op_log_keys.issuperset(keys):
            return [
                logged_detail(op_id, write_id, [*logged, *transaction.op_log_rows])
                for op_id, write_id in keys
            ]
        with self._connection(flush=False) as connection:  # the op log's own rows wait in `logged`
            query = OP_LOG_ROWS.format(Placeholder(), Placeholder(), Placeholder())
            logged += connection.execute(query, op_log_values(self.space_id, keys)).fetchall()
        return [logged_detail(op_id, write_id, logged) for op_id, write_id in keys]

    def pass_marks(self, now: float, profile_stale_meta: str, short_term_capacity: int) -> PassMarks:
        """As `SqliteStore.pass_marks`, in one round trip: four statements sent together (`_PASS_SCALARS`,
        `SHORT_TERM_OVERFLOW`, `_LAST_CHAINED`, `_PASS_SEGMENTS`), none waiting for another's answer."""
        values = {
            "space": self.space_id,
            "now": now,
            "profile_stale": profile_stale_meta,
            "capacity": short_term_capacity,
        }
        with self._connection() as connection:
            with connection.pipeline():
                scalars = connection.execute(_PASS_SCALARS, values)
                overflow = connection.execute(SHORT_TERM_OVERFLOW, values)
                chained = connection.execute(_LAST_CHAINED, values)
                segments = connection.cursor(row_factory=dict_row).execute(_PASS_SEGMENTS, values)
            ((expired, chains, stale_segments, profile_stale, next_expiry),) = scalars.fetchall()
            last = chained.fetchall()
            active = segments.fetchall()
        return PassMarks(
            RebuildMarks(bool(expired), list(chains), list(stale_segments), bool(profile_stale)),
            [page_from_row(row) for row in overflow.fetchall()],
            page_from_row(last[0]) if last else None,
            [segment_from_row(row) for row in active],
            {int(row["segment_id"]) for row in active if row["unanalyzed"]},
            None if next_expiry is None else float(next_expiry),
        )

    def erase(self) -> None:
        """Delete every row of the space at once (its `spaces` row and, by cascade and a trigger for its
        terms, everything keyed by it), fenced like any write; the store is unusable afterwards."""
        with self.transaction():  # not dirty: no counters to write back, the row goes
            self._open_transaction().connection.execute(
                "DELETE FROM spaces WHERE space_id = %s", (self.space_id,)
            )


_PASS_SCALARS = (
    b"SELECT EXISTS (SELECT 1 FROM pages WHERE space_id = %(space)s AND expires_at <= %(now)s) "
    b"OR EXISTS (SELECT 1 FROM knowledge WHERE space_id = %(space)s AND expires_at <= %(now)s), "
    b"ARRAY(SELECT chain_id FROM chains WHERE space_id = %(space)s AND stale ORDER BY chain_id), "
    b"ARRAY(SELECT segment_id FROM segments WHERE space_id = %(space)s AND stale ORDER BY segment_id), "
    b"EXISTS (SELECT 1 FROM meta WHERE space_id = %(space)s AND key = %(profile_stale)s), "
    + NEXT_EXPIRY.encode()
)
"""`RebuildMarks` and the next expiry in one statement: each part an index probe of the space's rows
(`NEXT_EXPIRY`)."""
_LAST_CHAINED = (
    f"SELECT {PAGE_COLUMNS} FROM {PAGE_FROM} WHERE p.space_id = %(space)s AND p.page_id = "
    + LAST_CHAINED_ID.format(space="%(space)s")
).encode()
"""The page chained last, found by its meta key in the same statement."""
_PASS_SEGMENTS = active_segments_query(f"0 AS page_count, {HAS_UNANALYZED_PAGES} AS unanalyzed").encode()
"""The active segments, each with whether it has pages not yet analyzed, in one statement."""


def _send_marks(connection: psycopg.Connection, space_id: int) -> psycopg.Cursor[Any]:
    """`ReadMarks`' statement, sent (its answer read by `_marks_of`)."""
    return connection.execute(_READ_MARKS, {"space": space_id})


def _marks_of(cursor: psycopg.Cursor[Any]) -> ReadMarks:
    rows = cursor.fetchall()
    if not rows:
        raise StorageError("the memory space was erased (forgotten) while it was open")
    version, max_page_id, first_pending = rows[0]
    return ReadMarks(int(max_page_id), None if first_pending is None else int(first_pending), int(version))
