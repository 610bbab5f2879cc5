"""`SqliteStore`: the canonical store of one memory space (pages, chains, segments, facts, profile, vectors).

Durability: WAL journal with `synchronous=FULL`, one transaction per op, so a write the caller saw
acknowledged survives a crash at any instant. Vector indexes are derived from this file and rebuilt
from it when missing or corrupt. How vectors become blobs is `../vector_blobs.py`; how rows become pages and
segments, `../store_rows.py`. This module opens the store and keeps its schema, meta and op log; the queries
are grouped by table in `page_queries.py`, `segment_queries.py` and `knowledge_queries.py`.
"""

import contextlib
import functools
import json
import os
import sqlite3
import tempfile
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from memoryos.errors import StorageError
from memoryos.storage.records.base import (
    KNOWLEDGE_KINDS,
    FrequencyAsk,
    OpKey,
    PassMarks,
    RankingRows,
    ReadMarks,
    ReadOpening,
    RebuildMarks,
    RetrievalBasis,
    RetrievedRows,
    last_chained_page,
    logged_detail,
    ranking_candidates,
)
from memoryos.storage.records.sqlite.knowledge_queries import KnowledgeQueries
from memoryos.storage.records.sqlite.page_queries import PageQueries
from memoryos.storage.records.sqlite.schema import MIGRATIONS, SCHEMA, SCHEMA_VERSION
from memoryos.storage.records.sqlite.segment_queries import SegmentQueries

CHECKPOINT_WAIT_MS = 200
"""How long a lifecycle op's WAL checkpoint waits for other processes' readers before giving up."""


def _statements(script: str) -> Iterator[str]:
    """The statements of a SQL script, one at a time: `executescript` would COMMIT the transaction a
    schema change must run inside."""
    pending = ""
    for piece in script.split(";"):
        pending += piece + ";"
        if sqlite3.complete_statement(pending):
            if pending.strip(" \n;"):
                yield pending
            pending = ""


@functools.cache
def _empty_store(meta: tuple[tuple[str, str], ...]) -> bytes:
    """The file of a store with the current schema, the `meta` rows and nothing else, made once per
    process and `meta` the usual way (SQLite treats an empty file as a new database; the schema is then
    created in it)."""
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "empty.sqlite"
        path.touch()
        store = SqliteStore(path)
        with store.transaction():
            for key, value in meta:
                store.set_meta(key, value)
        store.close()  # checkpointed on close: the whole store is in the one file
        return path.read_bytes()


def _place_empty_store(path: Path, meta: tuple[tuple[str, str], ...]) -> None:
    """Put a copy of the empty store, holding the `meta` rows, at `path`, which does not exist yet.

    Placing a ready copy costs a new space's open a fraction of creating the schema (its statements, the
    switch to WAL, their commits), most of a worker's cost for a new user's first write (docs/engine.md,
    "Store schema versions"). The copy is written beside `path`, fsynced and hard-linked into place, so
    another process sees no store or a whole one, never a half-written file; of two processes creating
    the same space, one link wins and both open that store. Where the copy cannot be placed (a file system
    without hard links, a full disk), nothing is left behind and SQLite creates the store as before."""
    scratch = path.with_name(f".{path.name}.{uuid.uuid4().hex}.new")
    try:
        with os.fdopen(os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644), "wb") as file:
            file.write(_empty_store(meta))  # SQLite's own mode for a new database: 0644, less the umask
            file.flush()
            os.fsync(file.fileno())
        with contextlib.suppress(FileExistsError):  # another process placed it first
            os.link(scratch, path)
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)  # the store's name is durable before anything is written into it
        finally:
            os.close(directory)
    except OSError:
        pass  # SQLite creates the store itself, and says what is wrong if it cannot either
    finally:
        with contextlib.suppress(OSError):
            scratch.unlink()


class SqliteStore(PageQueries, SegmentQueries, KnowledgeQueries):
    """One SQLite file per space. Not thread-safe by itself: `MemorySpace` serializes access with a lock."""

    incarnation = ""
    """A file is its own identity: a forget removes it with the snapshots beside it, so index snapshots
    need no other mark of which space they belong to."""

    created = False
    """Never said: an open's reads of an empty file cost no round trip (`RecordStore.created`)."""

    def __init__(
        self,
        path: Path,
        busy_timeout_s: float = 30.0,
        new_store_meta: Callable[[], dict[str, str]] | None = None,
        fence: Callable[[], None] | None = None,
    ) -> None:
        """Open the store, creating or migrating its schema. `busy_timeout_s`: how long a write waits for
        another process's write transaction on the same space before failing. `new_store_meta`: the meta
        rows a store created now starts with (called only then): a new space's embedding fingerprint
        comes in the placed file instead of a commit of its own, one fsync less per new user. `fence`:
        called before every commit, raising `FencedOutError` to refuse it (a service worker's shard fence,
        `fences.py`)."""
        self.path = path
        self._fence = fence
        self._busy_timeout_ms = int(busy_timeout_s * 1000)
        if not path.exists():
            _place_empty_store(path, tuple(sorted((new_store_meta or dict)().items())))
        try:
            self._db = sqlite3.connect(
                path, isolation_level=None, check_same_thread=False, timeout=busy_timeout_s
            )
        except sqlite3.DatabaseError as error:
            raise StorageError(f"cannot open memory store {path}: {error}") from error
        try:
            self._db.row_factory = sqlite3.Row
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("PRAGMA foreign_keys=ON")
            # Deleted rows' bytes are overwritten, not left in free pages: a deleted memory leaves the file.
            self._db.execute("PRAGMA secure_delete=ON")
            self._prepare_schema()
        except sqlite3.DatabaseError as error:
            self._db.close()
            raise StorageError(f"cannot open memory store {path}: {error}") from error
        except BaseException:
            self._db.close()
            raise

    def _prepare_schema(self) -> None:
        """Create the schema in a new store, or migrate an older one, in one transaction.

        A store already at this version is only read: most opens are of such a store (a worker's pool
        reopens spaces all day), and a write transaction there cost a commit and its fsync each time.
        Otherwise the version is read again inside the transaction: two processes opening an old store at
        once migrate it once. A store newer than this code is refused untouched.
        """
        if self._schema_version() == SCHEMA_VERSION:
            return
        with self.transaction():
            version = self._schema_version()
            if version is None:
                for statement in _statements(SCHEMA):
                    self._db.execute(statement)
                self.set_meta("schema_version", str(SCHEMA_VERSION))
                return
            if version > SCHEMA_VERSION:
                raise StorageError(
                    f"{self.path} has schema version {version}, newer than this MemoryOS reads "
                    f"({SCHEMA_VERSION}): upgrade MemoryOS to open it"
                )
            for step in range(version, SCHEMA_VERSION):
                for statement in _statements(MIGRATIONS[step]):
                    self._db.execute(statement)
            self.set_meta("schema_version", str(SCHEMA_VERSION))

    def _schema_version(self) -> int | None:
        """The store's schema version; None for a new (empty) store."""
        if not self._one("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'"):
            return None
        version = self.get_meta("schema_version")
        return None if version is None else int(version)

    def erase(self) -> None:
        """Close the store: its file goes with the space's directory, which the caller removes once a
        `ForgetSpace` op emptied it (a crash while the files go leaves an empty store, never a half-erased
        one)."""
        self.close()

    # --- meta and log ---------------------------------------------------------------------------------
    def get_meta(self, key: str) -> str | None:
        value = self._one("SELECT value FROM meta WHERE key = ?", (key,))
        return None if value is None else str(value)

    def meta_at_open(self) -> dict[str, str]:
        """`all_meta`, read now: in process, an open has nothing to save by reading it with the file."""
        return self.all_meta()

    def all_meta(self) -> dict[str, str]:
        return {str(key): str(value) for key, value in self._db.execute("SELECT key, value FROM meta")}

    def set_meta(self, key: str, value: str) -> None:
        self._db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, value))

    def delete_all(self, tables: tuple[str, ...], keep_meta: tuple[str, ...]) -> None:
        """Delete every row of `tables` (names from the code, never from input) and every meta key but
        `keep_meta`."""
        for table in tables:
            self._db.execute(f"DELETE FROM {table}")
        marks = ",".join("?" * len(keep_meta))
        self._db.execute(f"DELETE FROM meta WHERE key NOT IN ({marks})", keep_meta)

    def delete_meta(self, key: str) -> None:
        self._db.execute("DELETE FROM meta WHERE key = ?", (key,))

    def data_version(self) -> int:
        """Changes whenever another connection (another process) commits to this store: a cheap test of
        whether there is anything to catch up with before a read."""
        return int(self._one("PRAGMA data_version"))

    def committed_data_version(self) -> int:
        """`data_version` as the last transaction through this store left it: read under its write lock,
        so a later `data_version` differs only when another connection committed since."""
        committed = self._committed_data_version
        return self.data_version() if committed is None else committed

    def read_marks(self) -> ReadMarks:
        """`max_page_id`, the oldest pending page and `data_version`, one after another in that order, as
        a read asked them before (`ReadMarks`: a database answers them at once; a local file, each as it
        comes). A page stored in between is then past the read's mark, never pending within it unseen."""
        max_page_id = self.max_page_id()
        pending = self.pending_page_ids(1)
        return ReadMarks(max_page_id, pending[0] if pending else None, self.data_version())

    def pass_marks(self, now: float, profile_stale_meta: str, short_term_capacity: int) -> PassMarks:
        """`PassMarks`, one read after another (a database answers them at once)."""
        rebuild = RebuildMarks(
            bool(self.count_expired(now) or self.expired_knowledge_ids(now)),
            sorted(self.stale_chain_ids()),
            sorted(self.stale_segment_ids()),
            self.get_meta(profile_stale_meta) is not None,
        )
        return PassMarks(
            rebuild,
            self.short_term_overflow(short_term_capacity),
            last_chained_page(self),
            self.active_segments(),
            self.unanalyzed_segment_ids(),
            self.next_expiry(),
        )

    def retrieval_basis(self, now: float) -> RetrievalBasis:
        """`count_expired(now)`, the latest profile and its version, and every kind's active facts, one
        after another (`RetrievalBasis`: a database sends them at once)."""
        return RetrievalBasis(
            self.count_expired(now),
            self.latest_profile(),
            self.latest_profile_version(),
            {kind: self.active_knowledge(kind) for kind in KNOWLEDGE_KINDS},
        )

    def read_opening(self, asks: Sequence[FrequencyAsk], now: float) -> ReadOpening:
        """`read_marks`, `document_frequencies(asks)` and `retrieval_basis(now)`, one after another
        (`ReadOpening`: a database answers them at once)."""
        return ReadOpening(self.read_marks(), self.document_frequencies(asks), self.retrieval_basis(now))

    def ranking_rows(
        self,
        dense_ids: Sequence[int],
        terms: Sequence[str],
        limit: int,
        pool: int,
        column_weights: tuple[float, float] | None,
    ) -> RankingRows:
        """`lexical_search(terms, limit, column_weights)`, then the `neighbour_ids` of the candidates it
        makes with `dense_ids` (`ranking_candidates`, `pool` lexical hits) (`RankingRows`: a database
        sends them as one statement)."""
        lexical = self.lexical_search(terms, limit, column_weights)
        return RankingRows(lexical, self.neighbour_ids(ranking_candidates(dense_ids, lexical, pool)))

    def retrieved_rows(
        self, page_ids: Sequence[int], short_term: int, entry_ids: Sequence[int]
    ) -> RetrievedRows:
        """`pages(page_ids)`, the `short_term` newest short-term pages (`newest_in_tier`) and
        `fact_support(entry_ids)`, one after another (`RetrievedRows`: a database sends them at once)."""
        return RetrievedRows(
            self.pages(page_ids), self.newest_in_tier("stm", short_term), self.fact_support(entry_ids)
        )

    def log_op(self, kind: str, at: float, detail: dict[str, Any], op_id: str, write_id: str | None) -> None:
        """Audit trail of applied ops: kind, op and write ids, planned time and the ids the op touched or
        created — no texts, no vectors. The ids are unique: an op or write applied once is found here."""
        self._db.execute(
            "INSERT INTO op_log(kind, at, detail, op_id, write_id) VALUES (?, ?, ?, ?, ?)",
            (kind, at, json.dumps(detail), op_id, write_id),
        )

    def checkpoint(self) -> None:
        """Copy the WAL into the database and truncate it, so pages a lifecycle op overwrote leave the WAL
        file too. Best effort and bounded: while another process reads, SQLite cannot truncate, and the
        caller is not held for the store's whole busy timeout — the next checkpoint catches up."""
        self._db.execute(f"PRAGMA busy_timeout = {CHECKPOINT_WAIT_MS}")
        try:
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        finally:
            self._db.execute(f"PRAGMA busy_timeout = {self._busy_timeout_ms}")

    def logged_op(self, op_id: str, write_id: str | None) -> dict[str, Any] | None:
        """The log detail of an op already applied under `op_id`, or of a write already stored under
        `write_id`; None when neither was. `WriteIdConflictError` when `write_id` was stored with other
        content: both op ids are content ids (`CONTENT_ID_PREFIX`) and differ. Checked here, inside the
        transaction that would store the write, so two processes cannot both take the id."""
        rows = self._db.execute(
            "SELECT op_id, write_id, detail FROM op_log WHERE op_id = ? OR (? IS NOT NULL AND write_id = ?) "
            "LIMIT 1",
            (op_id, write_id, write_id),
        ).fetchall()
        return logged_detail(op_id, write_id, rows)

    def logged_ops(self, keys: Sequence[OpKey]) -> list[dict[str, Any] | None]:
        """`logged_op` of each (op id, write id), in order (a local file answers each at once)."""
        return [self.logged_op(op_id, write_id) for op_id, write_id in keys]
