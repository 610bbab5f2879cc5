"""Moving a data directory's memory spaces into the PostgreSQL database, and back into files.

Why: a deployment that started on SQLite files (`<data_dir>/<tenant>/<user_id>/<assistant_id>/memory.sqlite`)
moves to the database (`memoryos/storage/records/postgres/`) without losing anything a client relies on:
every id (pages, segments, chains, facts, profile versions) stays the same, so ids a client kept still
name the same items; and the op log moves with its write ids, so a write the queue delivers again after
the move is recognized as applied instead of being stored twice. Each space's counters continue after the
highest id it ever gave (SQLite's `sqlite_sequence`), so a page deleted before the move never has its id
reused after it. `move_to_files` is the way back, with the same guarantees.

These run OFFLINE: stop every worker, `memoryos serve` and `memoryos mcp` of the data directory first.
Each space is claimed (`SpaceHold`) while it moves, so a local process that still has it open makes it
fail rather than change under the copy; a worker serving from the database is not seen that way.

Each space moves in one transaction of its destination: a space that fails midway leaves nothing there,
is reported, and the others go on. A space the destination already holds is refused, never overwritten.
Index snapshots are not moved: they are a cache, rebuilt from the stored vectors on the space's first open
(a snapshot of the other store has another fingerprint and is never loaded).
"""

import contextlib
import os
import shutil
import sqlite3
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from memoryos.config import MemoryConfig
from memoryos.errors import InvalidInputError, MemoryOSError
from memoryos.space import tombstones
from memoryos.space.layout import make_data_root, remove_empty_parents
from memoryos.storage.records.factory import STORE_FILE, database_pool
from memoryos.storage.records.sqlite.store import SqliteStore
from memoryos.storage.space_lock import SpaceHold
from memoryos.validation import validate_id

if TYPE_CHECKING:  # psycopg is the workers' dependency only: imported where a database is used
    import psycopg
    from psycopg_pool import ConnectionPool

Space = tuple[str, str, str]
"""(tenant, user_id, assistant_id)."""


@dataclass(frozen=True)
class _Table:
    """A table both stores have, with the same columns (PostgreSQL adds `space_id` in front)."""

    name: str
    columns: tuple[str, ...]
    flags: frozenset[str] = frozenset()
    """Booleans in PostgreSQL, 0/1 integers in SQLite."""
    counter: str | None = None
    """The `spaces` counter that gives the first column's ids in PostgreSQL (SQLite: AUTOINCREMENT)."""


TABLES = (
    _Table("meta", ("key", "value")),
    _Table("chains", ("chain_id", "summary", "stale"), frozenset({"stale"})),
    _Table(
        "segments",
        (
            "segment_id",
            "summary",
            "keywords",
            "vector",
            "topic_count",
            "visit_count",
            "interaction_count",
            "last_visit_at",
            "created_at",
            "archived",
            "updated_at",
            "stale",
        ),
        frozenset({"archived", "stale"}),
        "next_segment_id",
    ),
    _Table(
        "pages",
        (
            "page_id",
            "user_input",
            "agent_response",
            "timestamp",
            "meta_data",
            "tier",
            "segment_id",
            "chain_id",
            "analyzed",
            "analysis_attempts",
            "vector",
            "vector_seq",
            "created_at",
            "updated_at",
            "expires_at",
            "op_id",
        ),
        frozenset({"analyzed"}),
        "next_page_id",
    ),
    _Table(
        "knowledge",
        (
            "entry_id",
            "kind",
            "text",
            "timestamp",
            "vector",
            "active",
            "replaced_by",
            "updated_at",
            "created_at",
            "expires_at",
            "origin",
        ),
        frozenset({"active"}),
        "next_entry_id",
    ),
    _Table("knowledge_sources", ("entry_id", "page_id")),
    _Table(
        "profile_versions",
        ("version", "text", "created_at", "source_segment_id", "source_page_ids"),
        counter="next_profile_version",
    ),
    _Table("withdrawn_vectors", ("seq", "page_id"), counter="next_withdrawn_seq"),
    _Table("op_log", ("seq", "kind", "at", "detail", "op_id", "write_id"), counter="next_op_seq"),
)
"""Every table of a space (SQLite's schema version 4), in an order that inserts what a row refers to
before the row. SQLite's `pages_fts` and PostgreSQL's `page_terms` and `pages.user_len`/`agent_len` are
each store's own lexical index, made again from the pages' text."""

FILE_SCHEMA_KEY = "schema_version"
"""A meta row of the SQLite file only (its own schema's version): not moved either way."""

MOVING_SUFFIX = ".moving"
"""A file being written by `move_to_files` is `.memory.sqlite.moving` until it is complete, then renamed:
a crash midway leaves no `memory.sqlite` that the engine would open, nor one that refuses a rerun."""

TERMS_BATCH = 500
"""Pages tokenized at once for `page_terms` (`lexical.page_terms`): memory bounded on a large space."""

Rows = dict[str, list[tuple[Any, ...]]]
"""Each table's rows, columns in `_Table.columns` order."""


@dataclass(frozen=True)
class SpaceMove:
    """What happened to one space."""

    space: Space
    outcome: Literal["moved", "refused", "failed"]
    detail: str
    """For a moved space, what it held; otherwise why it was not moved. Ids and counts, never memory text."""
    left_at: str | None = None
    """Where a moved space's source is still kept (its file, or "the database"), for the operator to remove
    after checking; None when it was removed."""

    def line(self) -> str:
        """One line for the operator."""
        where = "" if self.left_at is None else f"; kept at {self.left_at}"
        return f"{self.outcome} {'/'.join(self.space)}: {self.detail}{where}"


@dataclass
class MoveReport:
    """Every space a move found, in the order it handled them."""

    destination: Literal["database", "files"]
    spaces: list[SpaceMove] = field(default_factory=list)

    def count(self, outcome: Literal["moved", "refused", "failed"]) -> int:
        return sum(1 for move in self.spaces if move.outcome == outcome)

    @property
    def ok(self) -> bool:
        """Whether every space was moved (a refused or failed one needs the operator)."""
        return all(move.outcome == "moved" for move in self.spaces)

    def summary(self) -> str:
        kept = [move.left_at for move in self.spaces if move.left_at is not None]
        into = "the database" if self.destination == "database" else "files"
        text = (
            f"moved {self.count('moved')} of {len(self.spaces)} spaces into {into}; "
            f"{self.count('refused')} refused, {self.count('failed')} failed"
        )
        if kept:
            text += f"; {len(kept)} moved spaces are still kept at their source (listed above)"
        return text


def move_to_database(
    config: MemoryConfig, *, remove_files: bool = False, progress: Callable[[str], None] | None = None
) -> MoveReport:
    """Copy every space directory under `config.data_dir` into `config.database_url`'s database, each in
    one transaction, keeping every id and the op log. OFFLINE: no process may use the data directory or
    serve from the database meanwhile.

    A space the database already holds is refused and left as it is there; a space that fails is rolled
    back; both are reported and the others go on. `remove_files`: a moved space's directory (store file,
    its WAL, index snapshot, lock file) is removed after its transaction committed, and the directories
    left empty above it; by default the files stay for the operator to remove after checking (the report
    names them). `progress` receives each space's line (`SpaceMove.line`) as it is done. The
    directory's tombstones are noted in the database first (and the database's in the directory, moving
    back), so a forget on either side still holds after the move."""
    pool = database_pool(config)
    _carry_tombstones(_files(config), config)
    report = MoveReport("database")
    for key, directory in sorted(tombstones.space_directories(config.data_dir)):
        move = _space_to_database(pool, config, key, directory, remove_files)
        report.spaces.append(move)
        if progress is not None:
            progress(move.line())
    if any(move.outcome == "moved" for move in report.spaces):
        _settle(pool)
    return report


def _settle(pool: "ConnectionPool") -> None:
    """`VACUUM (ANALYZE)` the tables a move filled, as PostgreSQL advises after a bulk load ("Populating a
    Database": ANALYZE afterwards). The planner gets the tables' statistics, and the visibility map that
    autovacuum would set only later is set now: the workers' first reads probe the primary keys without
    visiting the heap for each row (index-only scans; a retrieve's neighbour probes about 20% faster at
    400 pages). VACUUM runs outside a transaction: on the pool's autocommit connection."""
    tables = ["spaces", *(table.name for table in TABLES), "page_terms"]
    with pool.connection() as connection:
        connection.execute(f"VACUUM (ANALYZE) {', '.join(tables)}".encode())


def move_to_files(
    config: MemoryConfig, *, remove_rows: bool = False, progress: Callable[[str], None] | None = None
) -> MoveReport:
    """Copy every space of `config.database_url`'s database into its SQLite file under `config.data_dir`,
    keeping every id and the op log: the reverse of `move_to_database`. OFFLINE, as it is.

    A space that already has a file is refused, the file left as it is; a space that fails leaves no file
    behind. `remove_rows`: a moved space's rows are deleted from the database once its file is in place;
    by default they stay. `progress` as in `move_to_database`."""
    pool = database_pool(config)
    _carry_tombstones(config, _files(config))
    with pool.connection() as connection:
        found = connection.execute(
            "SELECT space_id, tenant, user_id, assistant_id FROM spaces ORDER BY tenant, user_id, assistant_id"
        ).fetchall()
    report = MoveReport("files")
    for space_id, *space in found:
        move = _space_to_file(pool, config, int(space_id), (space[0], space[1], space[2]), remove_rows)
        report.spaces.append(move)
        if progress is not None:
            progress(move.line())
    return report


def _files(config: MemoryConfig) -> MemoryConfig:
    """`config` on its data directory's files rather than its database."""
    return config.model_copy(update={"database_url": None})


def _carry_tombstones(source: MemoryConfig, destination: MemoryConfig) -> None:
    """Every tombstone of `source` noted in `destination` too (a newer one there is kept): a forget
    recorded on one side still erases a restored copy of the space after the move."""
    for space_digest, forgotten_at in tombstones.read_all(source).items():
        tombstones.record(destination, space_digest, forgotten_at)


def unmoved_spaces(data_dir: Path, database_has: Callable[[Space], bool]) -> list[Space]:
    """The spaces under `data_dir` with a SQLite file that the database does not hold (`database_has`):
    memory a worker serving from the database would not see, so it refuses to start while there is any."""
    return sorted(key for key, _directory in tombstones.space_directories(data_dir) if not database_has(key))


# --- into the database ----------------------------------------------------------------------------------
class _Refused(Exception):
    """The destination already holds the space: nothing is written."""


def _space_to_database(
    pool: "ConnectionPool", config: MemoryConfig, space: Space, directory: Path, remove_files: bool
) -> SpaceMove:
    store = directory / STORE_FILE
    try:
        hold = SpaceHold(directory, config.space_lock_timeout_s, require=STORE_FILE)
    except MemoryOSError as error:
        return SpaceMove(space, "failed", _reason(error))
    kept: str | None = str(store)
    detail = ""
    try:
        hold.claim("move it into the database")
        SqliteStore(store, config.store_busy_timeout_s).close()  # an older schema is migrated first
        rows, sequences = _read_file(store)
        with pool.connection() as connection, connection.transaction():
            created = connection.execute(
                "INSERT INTO spaces(tenant, user_id, assistant_id, incarnation, created_at, "
                "next_page_id, next_segment_id, next_entry_id, next_profile_version, next_withdrawn_seq, "
                "next_op_seq, max_vector_seq) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
                "ON CONFLICT (tenant, user_id, assistant_id) DO NOTHING RETURNING space_id",
                (*space, uuid.uuid4().hex, time.time(), *_counters(rows, sequences)),
            ).fetchone()
            if created is None:
                raise _Refused
            _copy_into(connection, int(created[0]), rows)
            connection.execute(  # BM25's corpus totals, as the store keeps them up to date
                "UPDATE spaces SET page_count = (SELECT COUNT(*) FROM pages WHERE space_id = %(id)s), "
                "token_count = (SELECT COALESCE(SUM(user_len + agent_len), 0) FROM pages "
                "WHERE space_id = %(id)s) WHERE space_id = %(id)s",
                {"id": int(created[0])},
            )
    except _Refused:
        return SpaceMove(space, "refused", "already in the database (left as it is there and here)")
    except Exception as error:  # any failure of this space is reported; the others still move
        return SpaceMove(space, "failed", f"{_reason(error)} (nothing of it was stored)")
    else:
        if remove_files:
            try:
                shutil.rmtree(directory)  # held: no local process opens it meanwhile
                kept = None
            except OSError as error:
                detail = f"; its directory could not be removed: {_reason(error)}"
    finally:
        hold.release()
    if kept is None:
        remove_empty_parents(directory)
    return SpaceMove(space, "moved", _held(rows) + detail, kept)


def _read_file(store: Path) -> tuple[Rows, dict[str, int]]:
    """Every row of the file's tables, and SQLite's `sqlite_sequence` (the highest id each AUTOINCREMENT
    table ever gave), read in one read-only transaction."""
    with contextlib.closing(sqlite3.connect(f"{store.resolve().as_uri()}?mode=ro", uri=True)) as db:
        db.execute("BEGIN")
        rows = {
            table.name: db.execute(
                f"SELECT {', '.join(table.columns)} FROM {table.name} ORDER BY {table.columns[0]}"
            ).fetchall()
            for table in TABLES
        }
        rows["meta"] = [row for row in rows["meta"] if row[0] != FILE_SCHEMA_KEY]
        sequences = {str(name): int(seq) for name, seq in db.execute("SELECT name, seq FROM sqlite_sequence")}
        db.execute("COMMIT")
    return rows, sequences


def _counters(rows: Rows, sequences: dict[str, int]) -> list[int]:
    """The space's `spaces` counters, in the INSERT's order: each table's next id comes after the highest it
    ever gave (`sqlite_sequence`, else the highest row), so an id freed by a delete is never given again;
    `max_vector_seq` is the highest vector sequence stored."""
    next_ids = {
        table.counter: max([sequences.get(table.name, 0), *(int(row[0]) for row in rows[table.name])]) + 1
        for table in TABLES
        if table.counter is not None
    }
    vector_seq = next(table for table in TABLES if table.name == "pages").columns.index("vector_seq")
    max_vector_seq = max(
        (int(row[vector_seq]) for row in rows["pages"] if row[vector_seq] is not None), default=0
    )
    return [
        next_ids["next_page_id"],
        next_ids["next_segment_id"],
        next_ids["next_entry_id"],
        next_ids["next_profile_version"],
        next_ids["next_withdrawn_seq"],
        next_ids["next_op_seq"],
        max_vector_seq,
    ]


def _copy_into(connection: "psycopg.Connection", space_id: int, rows: Rows) -> None:
    """Every row into the space `space_id` (COPY: a space can hold many thousand pages), booleans as
    booleans, with each page's lexical terms (`lexical.page_terms`, as the PostgreSQL store stores them)."""
    for table in TABLES:
        flags = [i for i, name in enumerate(table.columns) if name in table.flags]
        columns = list(table.columns)
        table_rows = [_with_flags(row, flags, bool) for row in rows[table.name]]
        if table.name == "pages":
            columns += ["user_len", "agent_len"]
            table_rows = _pages_with_lengths(connection, space_id, table_rows)
        with (
            connection.cursor() as cursor,
            cursor.copy(f"COPY {table.name} (space_id, {', '.join(columns)}) FROM STDIN".encode()) as copy,
        ):
            for row in table_rows:
                copy.write_row((space_id, *row))


def _pages_with_lengths(
    connection: "psycopg.Connection", space_id: int, pages: list[tuple[Any, ...]]
) -> list[tuple[Any, ...]]:
    """The pages' rows with their token counts appended; their `page_terms` rows copied meanwhile."""
    from memoryos.storage.records.postgres import lexical

    done: list[tuple[Any, ...]] = []
    with (
        connection.cursor() as cursor,
        cursor.copy(
            b"COPY page_terms (space_id, term, page_id, user_tf, agent_tf, length) FROM STDIN"
        ) as copy,
    ):
        for start in range(0, len(pages), TERMS_BATCH):
            batch = pages[start : start + TERMS_BATCH]
            for page, terms in zip(
                batch, lexical.page_terms([(row[1], row[2]) for row in batch]), strict=True
            ):
                length = terms.user_len + terms.agent_len
                for term, (user_tf, agent_tf) in terms.terms.items():
                    copy.write_row((space_id, term, page[0], user_tf, agent_tf, length))
                done.append((*page, terms.user_len, terms.agent_len))
    return done


# --- into files -------------------------------------------------------------------------------------------
def _space_to_file(
    pool: "ConnectionPool", config: MemoryConfig, space_id: int, space: Space, remove_rows: bool
) -> SpaceMove:
    try:
        fields = ("tenant", "user_id", "assistant_id")
        directory = config.data_dir.joinpath(
            *(validate_id(f, value) for f, value in zip(fields, space, strict=True))
        )
    except InvalidInputError as error:
        return SpaceMove(space, "failed", f"{_reason(error)}: no file can be named by it")
    if (directory / STORE_FILE).exists():
        return SpaceMove(
            space, "refused", f"{directory / STORE_FILE} exists (left as it is, and the rows too)"
        )
    try:
        make_data_root(config.data_dir)
        hold = SpaceHold(directory, config.space_lock_timeout_s)
    except MemoryOSError as error:
        return SpaceMove(space, "failed", _reason(error))
    try:
        hold.claim("move it into a file")
        rows, counters = _read_database(pool, space_id)
        _write_file(directory, rows, counters, config.store_busy_timeout_s)
    except Exception as error:  # any failure of this space is reported; the others still move
        return SpaceMove(space, "failed", f"{_reason(error)} (no file was left)")
    finally:
        hold.release()
    if not remove_rows:
        return SpaceMove(space, "moved", _held(rows), "the database")
    try:
        with pool.connection() as connection:
            connection.execute("DELETE FROM spaces WHERE space_id = %s", (space_id,))  # its rows cascade
    except Exception as error:
        return SpaceMove(
            space, "moved", f"{_held(rows)}; its rows could not be deleted: {_reason(error)}", "the database"
        )
    return SpaceMove(space, "moved", _held(rows))


def _read_database(pool: "ConnectionPool", space_id: int) -> tuple[Rows, dict[str, int]]:
    """Every row of the space and its counters, read in one snapshot; booleans as SQLite's 0/1."""
    from memoryos.storage.records.postgres.store_queries import COUNTERS

    with pool.connection() as connection, connection.transaction():
        connection.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        counters = connection.execute(
            f"SELECT {', '.join(COUNTERS)} FROM spaces WHERE space_id = %s".encode(), (space_id,)
        ).fetchone()
        if counters is None:
            raise MemoryOSError("the space was erased while it was being moved")
        rows: Rows = {}
        for table in TABLES:
            flags = [i for i, name in enumerate(table.columns) if name in table.flags]
            found = connection.execute(
                f"SELECT {', '.join(table.columns)} FROM {table.name} WHERE space_id = %s "
                f"ORDER BY {table.columns[0]}".encode(),
                (space_id,),
            ).fetchall()
            rows[table.name] = [_with_flags(row, flags, int) for row in found]
    rows["meta"] = [row for row in rows["meta"] if row[0] != FILE_SCHEMA_KEY]
    return rows, dict(zip(COUNTERS, (int(value) for value in counters), strict=True))


def _write_file(directory: Path, rows: Rows, counters: dict[str, int], busy_timeout_s: float) -> None:
    """The space's file, written under a temporary name in one transaction and renamed into place once
    complete. The file is made by `SqliteStore`, so its schema is the current one; every row goes in with
    its id, each page into `pages_fts` too, and `sqlite_sequence` is set so AUTOINCREMENT goes on after the
    database's counters (an id the database gave and freed is not given again)."""
    moving = directory / f".{STORE_FILE}{MOVING_SUFFIX}"
    _remove_store_files(moving)  # left by a move that crashed
    try:
        SqliteStore(moving, busy_timeout_s).close()
        with contextlib.closing(sqlite3.connect(moving, isolation_level=None)) as db:
            db.execute("PRAGMA synchronous=FULL")
            db.execute("PRAGMA foreign_keys=ON")
            db.execute("BEGIN IMMEDIATE")
            db.execute("PRAGMA defer_foreign_keys=ON")  # a fact refers to the later version replacing it
            try:
                _insert_rows(db, rows, counters)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            busy, _log, _done = db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            if busy:
                raise MemoryOSError(f"{moving} could not be checkpointed (another connection has it open)")
        os.replace(moving, directory / STORE_FILE)
        descriptor = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(descriptor)  # the file's name is durable before its source can be removed
        finally:
            os.close(descriptor)
    except BaseException:
        _remove_store_files(moving)
        raise


def _insert_rows(db: sqlite3.Connection, rows: Rows, counters: dict[str, int]) -> None:
    for table in TABLES:
        marks = ", ".join("?" * len(table.columns))
        verb = "INSERT OR REPLACE" if table.name == "meta" else "INSERT"  # the new file has meta of its own
        db.executemany(
            f"{verb} INTO {table.name} ({', '.join(table.columns)}) VALUES ({marks})", rows[table.name]
        )
        if table.name == "pages":
            db.executemany(
                "INSERT INTO pages_fts(rowid, user_input, agent_response) VALUES (?, ?, ?)",
                ((row[0], row[1], row[2]) for row in rows["pages"]),
            )
        if table.counter is not None:
            last_given = counters[table.counter] - 1
            if (
                db.execute(
                    "UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = ?", (last_given, table.name)
                ).rowcount
                == 0
            ):
                db.execute("INSERT INTO sqlite_sequence(name, seq) VALUES (?, ?)", (table.name, last_given))


def _remove_store_files(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}{suffix}")


# --- shared -----------------------------------------------------------------------------------------------
def _with_flags(row: Sequence[Any], flags: list[int], kind: Callable[[Any], Any]) -> tuple[Any, ...]:
    """`row` with its boolean columns (`flags`) as `kind`: bool for PostgreSQL, int for SQLite."""
    if not flags:
        return tuple(row)
    return tuple(kind(value) if i in flags and value is not None else value for i, value in enumerate(row))


def _held(rows: Rows) -> str:
    """What a moved space held, in counts."""
    return (
        f"{len(rows['pages'])} pages, {len(rows['segments'])} segments, {len(rows['knowledge'])} facts "
        f"(with history), {len(rows['profile_versions'])} profile versions, {len(rows['op_log'])} logged ops"
    )


def _reason(error: BaseException) -> str:
    """One line for a failure, without memory text: PostgreSQL's primary message only (its DETAIL may
    quote a row's values)."""
    primary = getattr(getattr(error, "diag", None), "message_primary", None)
    message = primary or str(error) or type(error).__name__
    return " ".join(f"{type(error).__name__}: {message}".split())
