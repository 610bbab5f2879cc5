"""The connection handling every family of `PostgresStore`'s queries shares: one statement on a borrowed
connection, or every statement of the calling thread's open transaction on that transaction's connection.

A transaction locks its space's row (`FOR UPDATE`): one writer per space at a time, as SQLite's
`BEGIN IMMEDIATE` gives per file, and the space's id counters (`spaces.next_*`) are read with the lock
and written back once at commit, with `change_seq` bumped so other processes know to catch up. When the
space belongs to a fenced shard, the same statement locks the shard's fence row `FOR SHARE` and the
number found there must be this owner's: a new owner cannot record its number until the transaction
ends, and a stale owner's transaction is refused (`FencedOutError`) before it writes anything.
"""

import contextlib
import functools
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import numpy as np
import psycopg
from psycopg import errors as pg_errors
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row
from psycopg.sql import SQL
from psycopg_pool import ConnectionPool

from memoryos.errors import DatabaseUnavailableError, FencedOutError, StorageError, StoreBusyError
from memoryos.storage.records.base import LAST_CHAINED_META, Fence, OpKey
from memoryos.storage.records.postgres import lexical
from memoryos.storage.records.store_rows import PAGE_COLUMNS
from memoryos.storage.records.vector_blobs import from_blobs

COUNTERS = (
    "next_page_id",
    "next_segment_id",
    "next_entry_id",
    "next_profile_version",
    "next_withdrawn_seq",
    "next_op_seq",
    "max_vector_seq",
)
"""The per-space counters of `spaces`, read under the row lock and written back at commit."""

OP_LOG_ROWS = SQL(
    "SELECT op_id, write_id, detail FROM op_log WHERE space_id = {} "
    "AND (op_id = ANY({}::text[]) OR write_id = ANY({}::text[]))"
)
"""The op log's entries of some ops, by op id or write id (`logged_ops`): with parameters, or with the
values as literals in BEGIN's simple query, which carries no parameters."""


def op_log_values(space_id: int, keys: Sequence[OpKey]) -> tuple[int, list[str], list[str]]:
    """`OP_LOG_ROWS`' values for the ops of `keys`."""
    return (
        int(space_id),
        [op_id for op_id, _ in keys],
        [write_id for _, write_id in keys if write_id is not None],
    )


PAGE_FROM = "pages p LEFT JOIN chains c ON c.space_id = p.space_id AND c.chain_id = p.chain_id"
"""A space's pages with their chain's summary (`PAGE_COLUMNS`)."""

LAST_CHAINED_ID = (
    f"(SELECT value::bigint FROM meta WHERE space_id = {{space}} AND key = '{LAST_CHAINED_META}')"
)
"""The id of the page chained last, as a subquery (`{space}`: the space's id or its parameter)."""

_BEGIN_PAGES = (
    f"SELECT {PAGE_COLUMNS} FROM {PAGE_FROM} WHERE p.space_id = {{space}} AND (p.page_id = ANY('{{ids}}'::bigint[]) "
    f"OR p.page_id = {LAST_CHAINED_ID})"
)
"""Pages a transaction's ops read first, with the page chained last (a link may continue it), read with
BEGIN (`_begin`): literals only, an integer and an array of integers (`bigints`)."""

_UNREACHABLE = (psycopg.OperationalError, psycopg.InterfaceError, pg_errors.IdleInTransactionSessionTimeout)
"""The database went away under a call: restarted, unreachable, or it ended a transaction left idle."""


def storage_error(error: psycopg.Error) -> StorageError:
    """A database failure as the engine's `StorageError`: `DatabaseUnavailableError` when the database
    went away under the call (retried as long as it takes), else a full or failing server."""
    kind = DatabaseUnavailableError if isinstance(error, _UNREACHABLE) else StorageError
    return kind(f"the memory database could not be used: {type(error).__name__}: {error}")


def bigints(ids: Iterable[int]) -> str:
    """Ids as the text of a PostgreSQL array, for a `%s::bigint[]` parameter on a read's path: psycopg
    adapts a list element by element in Python (about 0.1 ms for 200 ids, the candidates of a
    retrieval), a text goes as it is. Each id passes through `int`, so nothing else can get in."""
    return "{" + ",".join(str(int(i)) for i in ids) + "}"


_ARRAY_CAST = re.compile(r"%s::(\w+)\[\]")
_AS_NUMBER: dict[str, Callable[[Any], Any]] = {"float8": float, "bigint": int, "int": int}


def binary_arrays(sql: str, fixed: Sequence[Any], rows: Sequence[tuple[Any, ...]]) -> tuple[bytes, list[Any]]:
    """A multi-row statement (`sql`: its `fixed` parameters, then one `%s::TYPE[]` array per column of
    `rows`) with every parameter sent in binary (`%b`), and its parameters.

    As text, psycopg quotes each element of a text array through a regular expression and a bytea as hex:
    most of the worker's CPU for a run of pages and their terms, twice to five times binary's. Binary
    wants one Python type per array, so the numeric columns are made `float` or `int` (a timestamp may
    come as an int)."""
    binary_sql, numbers = _binary_form(sql)
    columns = [list(column) for column in zip(*rows, strict=True)]
    for position, number in numbers:
        columns[position] = [None if value is None else number(value) for value in columns[position]]
    return binary_sql, [*fixed, *columns]


@functools.cache
def _binary_form(sql: str) -> tuple[bytes, tuple[tuple[int, Callable[[Any], Any]], ...]]:
    """`sql` with binary placeholders, and which array columns are numeric (their position, their Python
    type): read once per statement text, not at every flush (the statements are a handful of constants)."""
    casts = _ARRAY_CAST.findall(sql)
    numbers = tuple((position, _AS_NUMBER[cast]) for position, cast in enumerate(casts) if cast in _AS_NUMBER)
    return sql.replace("%s", "%b").encode(), numbers


Statement = tuple[bytes, Sequence[Any] | Mapping[str, Any]]
"""A statement's text and its parameters, ready to send."""


_WRITTEN_TABLE = re.compile(r"^\s*(?:INSERT\s+INTO|UPDATE)\s+(\w+)", re.IGNORECASE)


@functools.cache
def _naming_table_of(sql: str) -> Callable[[str], re.Match[str] | None]:
    """A search for the name of the table `sql` writes (a whole word), in another statement's text."""
    table = _WRITTEN_TABLE.match(sql)
    if table is None:
        raise ValueError(f"not a multi-row INSERT or UPDATE: {sql[:60]}")
    return re.compile(rf"\b{table.group(1)}\b").search


Row = tuple[Any, ...]
LaterRows = Callable[[], Sequence[Row]]
"""Rows made only when the transaction's writes are sent (after `_Transaction.terms` is tokenized)."""
RowsSent = Callable[[str, Sequence[Any], Sequence[Row]], Statement]
"""How a multi-row statement goes with its rows (`binary_arrays`, unless its statement wants another
form): the statement's text and its parameters from `sql`, its `fixed` parameters and the rows."""


class _Rows:
    """Rows for one multi-row statement (`sql` with `fixed` parameters, then one array per column), grown
    by the same kind of writes of the transaction while no other write touches its table in between.
    Each write gives its rows, or a function that makes them when they are sent (`LaterRows`); `sent`
    makes the statement of them (the same `sql` is always sent the same way)."""

    __slots__ = ("fixed", "new_rows", "parts", "sent", "sql")

    def __init__(self, sql: str, fixed: tuple[Any, ...], sent: RowsSent = binary_arrays) -> None:
        self.sql = sql
        self.fixed = fixed
        self.sent = sent
        self.parts: list[Sequence[Row] | LaterRows] = []
        self.new_rows = sql.lstrip().upper().startswith("INSERT") and "ON CONFLICT" not in sql.upper()
        """A plain INSERT: its rows are new, keyed by ids the transaction gave out (an existing key
        fails), so no update the transaction made before them can have touched them."""

    def rows(self) -> list[Row]:
        """Every write's rows, in the order of the writes."""
        return [row for part in self.parts for row in (part() if callable(part) else part)]


FieldChange = tuple[str, Any]
"""How an update changes a column: ("=", value), ("+", amount added) or ("max", value it is raised to)."""


def _merged_change(earlier: FieldChange | None, later: FieldChange) -> FieldChange:
    """One change with the effect of `earlier` followed by `later` on the same column."""
    kind, value = later
    if earlier is None or kind == "=":
        return later
    before_kind, before = earlier
    if kind == "+" and before_kind in ("=", "+"):
        return (before_kind, before + value)
    if kind == "max" and before_kind in ("=", "max"):
        return (before_kind, value if before is None else max(before, value))
    raise ValueError(f"a column changed by {before_kind!r} and then by {kind!r} in one transaction")


class _FieldUpdates:
    """Updates of rows of one table by key, gathered from the transaction's updates while no other write
    touches the table in between: each row keeps one change per column (`_merged_change`: the effect
    of them in order), and the rows go as one statement per set of changed columns (`statements`).

    Why: consolidation moves a page with updates of one row each — its chain, then its tier and segment,
    the segment's summary, then its counters —, and as statements of their own they were most of the
    statements of a commit; gathered, a commit sends one per table."""

    __slots__ = ("changes", "fixed", "key", "sql", "table", "types")

    def __init__(self, table: str, key: str, types: Mapping[str, str], space_id: int) -> None:
        self.table = table
        self.key = key
        self.types = types
        self.fixed = (space_id,)
        self.sql = f"UPDATE {table}"
        """What `_joinable` reads the written table's name in."""
        self.changes: dict[int, dict[str, FieldChange]] = {}

    def change(self, row_ids: Iterable[int], kind: str, values: Mapping[str, Any]) -> None:
        """Change `values`' columns of the rows `row_ids` by `kind` ("=", "+" or "max")."""
        unknown = set(values) - set(self.types)
        if unknown:
            raise ValueError(f"{self.table}: no column to update named {', '.join(sorted(unknown))}")
        for row_id in row_ids:
            row = self.changes.setdefault(int(row_id), {})
            for column, value in values.items():
                row[column] = _merged_change(row.get(column), (kind, value))

    def statements(self) -> list[Statement]:
        """One UPDATE per set of changed columns (a row is in one of them: their order is free)."""
        groups: dict[tuple[tuple[str, str], ...], list[tuple[Any, ...]]] = {}
        for row_id, row in self.changes.items():
            shape = tuple(sorted((column, kind) for column, (kind, _) in row.items()))
            groups.setdefault(shape, []).append((row_id, *(row[column][1] for column, _ in shape)))
        return [binary_arrays(self._update_sql(shape), self.fixed, rows) for shape, rows in groups.items()]

    def _update_sql(self, shape: tuple[tuple[str, str], ...]) -> str:
        assigned = {
            "=": "v.{0}",
            "+": "t.{0} + v.{0}",
            "max": "GREATEST(t.{0}, v.{0})",
        }
        assignments = ", ".join(f"{column} = {assigned[kind].format(column)}" for column, kind in shape)
        arrays = ", ".join(f"%s::{type_}[]" for type_ in ("bigint", *(self.types[c] for c, _ in shape)))
        columns = ", ".join((self.key, *(column for column, _ in shape)))
        return (
            f"UPDATE {self.table} t SET {assignments} FROM (SELECT %s::bigint AS space_id, r.* FROM "
            f"unnest({arrays}) AS r({columns})) AS v WHERE t.space_id = v.space_id AND t.{self.key} = v.{self.key}"
        )


_Deferred = tuple[str, Sequence[Any] | Mapping[str, Any]] | _Rows | _FieldUpdates
"""A write waiting in the transaction: a statement and its parameters, or rows gathered for one."""


def _commutes(waiting: _Deferred, joining: _Rows | _FieldUpdates) -> bool:
    """Whether a write of the same table may be passed by `joining`: new rows and updates of rows by key
    touch different rows (an update given before a row existed cannot have named it), in either order."""
    return (isinstance(waiting, _FieldUpdates) and isinstance(joining, _Rows) and joining.new_rows) or (
        isinstance(waiting, _Rows) and waiting.new_rows and isinstance(joining, _FieldUpdates)
    )


_Joining = TypeVar("_Joining", _Rows, _FieldUpdates)


def _joinable(deferred: Sequence[_Deferred], new: _Joining) -> _Joining | None:
    """The waiting write that `new` (rows or updates not yet waiting) can join: the latest of the same
    statement (the same `sql` and `fixed`: for updates, the same table), provided that every write
    waiting after it either leaves its table alone or commutes with `new` (`_commutes`)."""
    names_table = _naming_table_of(new.sql)
    for write in reversed(deferred):
        if isinstance(write, type(new)) and write.sql == new.sql and write.fixed == new.fixed:
            return write
        if names_table(write[0] if isinstance(write, tuple) else write.sql) and not _commutes(write, new):
            return None
    return None


def _roll_back(connection: psycopg.Connection) -> None:
    """End a transaction that failed, where it is still open: the connection goes back to the pool
    clean. A connection the database dropped has nothing to roll back (the server did it)."""
    if connection.closed or connection.info.transaction_status == TransactionStatus.IDLE:
        return
    with contextlib.suppress(psycopg.Error):  # the pool discards a connection broken or still in one
        connection.execute(b"ROLLBACK")


@contextmanager
def borrowed(pool: ConnectionPool) -> Iterator[psycopg.Connection]:
    """A connection of the pool for one block; a database that went away under it is raised as
    `DatabaseUnavailableError`, which every caller waits out (a worker never dies of a restart)."""
    try:
        with pool.connection() as connection:
            yield connection
    except _UNREACHABLE as error:
        raise storage_error(error) from error


class _Transaction:
    """The open write transaction of one thread: its connection, the space's counters and meta as read
    under the lock, and the writes not yet sent. Writes wait, in order, until the transaction reads or
    commits, and then go in one pipeline (one round trip); consecutive rows of one kind (a run of pages)
    become one statement, and the op log's rows one more at commit."""

    __slots__ = (
        "change_seq",
        "connection",
        "counters",
        "deferred",
        "dirty",
        "logged",
        "meta",
        "op_log_keys",
        "op_log_rows",
        "page_rows",
        "pages_added",
        "pages_read",
        "terms",
        "tokens_added",
    )

    def __init__(
        self, connection: psycopg.Connection, counters: dict[str, int], meta: dict[str, str], change_seq: int
    ) -> None:
        self.connection = connection
        self.counters = counters
        self.meta = meta
        self.change_seq = change_seq
        self.deferred: list[_Deferred] = []
        self.logged: list[tuple[int, str, float, str, str, str | None]] = []
        # The op log's entries for the keys given to `transaction`, read under the lock at BEGIN.
        self.op_log_keys: frozenset[OpKey] = frozenset()
        self.op_log_rows: list[tuple[str | None, str | None, str]] = []
        # The pages asked for with BEGIN (and the page chained last), and the rows found of them.
        self.pages_read: frozenset[int] = frozenset()
        self.page_rows: dict[int, tuple[Any, ...]] = {}
        self.pages_added = 0  # net pages and page tokens the transaction added (the corpus totals)
        self.tokens_added = 0
        self.terms = lexical.TermsBatch()  # the texts of the pages it inserted, tokenized when sent
        self.dirty = False

    @contextmanager
    def sending(self) -> Iterator[psycopg.Connection]:
        """The transaction's connection in a pipeline that starts with the writes waiting, in order: what
        the block sends goes in the same round trip as them."""
        with self.connection.pipeline():
            for sql, params in self.statements():
                self.connection.execute(sql, params)
            yield self.connection

    def flush(self) -> None:
        """Send the writes waiting (before a read of the transaction)."""
        if self.deferred:
            with self.sending():
                pass

    def count_terms(self) -> None:
        """Tokenize the texts of the pages inserted since the last call, all in one batch, and add their
        tokens to the corpus totals: before the rows that need them are made."""
        self.tokens_added += self.terms.tokenize()

    def reset_corpus_totals(self) -> None:
        """The space's pages are all deleted, those this transaction inserted before with them: the totals
        it adds start again from zero, the tokens of those pages counted first (else their count, made
        when they are sent, would land after the reset)."""
        self.count_terms()
        self.pages_added = self.tokens_added = 0

    def statements(self) -> list[Statement]:
        """The writes waiting, in order, as statements to send; none wait after."""
        self.count_terms()
        waiting, self.deferred = self.deferred, []
        statements: list[Statement] = []
        for write in waiting:
            if isinstance(write, _Rows):
                if rows := write.rows():  # a page of no token has no terms
                    statements.append(write.sent(write.sql, write.fixed, rows))
            elif isinstance(write, _FieldUpdates):
                statements += write.statements()
            else:
                statements.append((write[0].encode(), write[1]))
        return statements


class PostgresQueries:
    """One space's rows (`space_id`) in the shared database, and the helpers every table's queries use."""

    _pool: ConnectionPool
    space_id: int
    shard: int | None
    _fence: Fence | None
    _local: threading.local

    # --- running statements ---------------------------------------------------------------------------
    @contextmanager
    def _connection(self, flush: bool = True) -> Iterator[psycopg.Connection]:
        """The open transaction's connection on this thread (its waiting writes sent first, so a read sees
        them; `flush` False for a read they cannot change), else one borrowed for the caller's block."""
        transaction = self._current()
        if transaction is not None:
            if flush:
                transaction.flush()
            yield transaction.connection
            return
        with borrowed(self._pool) as connection:
            yield connection

    def _fetched(
        self, sql: str, params: Sequence[Any] | Mapping[str, Any], binary: bool, row_factory: Any = None
    ) -> list[Any]:
        """The rows of one read. In a transaction with writes waiting, the writes and the read go in one
        pipeline and the rows are fetched after its end: the end's Sync is the one round trip. A fetch
        inside the pipeline would send a Flush and wait for the answer, and then the Sync would wait
        again: two round trips a read, for every op of a transaction that checks each op against what
        the ones before it wrote (consolidation's, `OpApplier`). Only the transaction's own connection is
        fetched from after its block: a borrowed one goes back to the pool at the block's end."""
        transaction = self._current()
        if transaction is None or not transaction.deferred:
            with self._connection() as connection, connection.cursor(row_factory=row_factory) as cursor:
                return cursor.execute(sql.encode(), params, binary=binary).fetchall()
        with transaction.sending() as connection:
            cursor = connection.cursor(row_factory=row_factory)
            cursor.execute(sql.encode(), params, binary=binary)
        with cursor:
            return cursor.fetchall()

    def _all(
        self, sql: str, params: Sequence[Any] | Mapping[str, Any] = (), binary: bool = False
    ) -> list[tuple[Any, ...]]:
        """The statement's rows; `binary` for rows carrying vectors: as text their bytes travel twice
        over (hex) and are decoded again, most of the time of a read of many vectors."""
        return self._fetched(sql, params, binary)

    def _dicts(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> list[dict[str, Any]]:
        return self._fetched(sql, params, False, dict_row)

    def _one(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> Any:
        rows = self._all(sql, params)
        return rows[0][0] if rows else None

    def _write(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> None:
        """A statement that changes the space: only inside `transaction` (a write is always fenced). It
        waits for the transaction's next read or its commit (`_Transaction.flush`)."""
        transaction = self._open_transaction()
        transaction.dirty = True
        transaction.deferred.append((sql, params))

    def _write_rows(
        self,
        sql: str,
        fixed: tuple[Any, ...],
        rows: Iterable[Row] | LaterRows,
        sent: RowsSent = binary_arrays,
    ) -> None:
        """Rows for `sql` (its `fixed` parameters, then one array per column, made by `sent`), or a
        function that makes them when they are sent: they join the rows of the same statement waiting in
        the transaction, unless a write waiting after those touches the same table (its order against
        them would change; new rows may pass updates, `_commutes`).

        Why not only the last write: a run of turns writes pages, then their terms, then pages again, and
        each op's rows as their own statements cost two statements a turn (the server parses, plans and
        runs each, and psycopg builds each). Moving rows earlier past writes of other tables is safe: the
        only foreign keys lead to `spaces`, which no transaction of a space writes."""
        part = rows if callable(rows) else list(rows)
        if not part:
            return
        transaction = self._open_transaction()
        transaction.dirty = True
        new = _Rows(sql, fixed, sent)
        joined = _joinable(transaction.deferred, new)
        if joined is None:
            joined = new
            transaction.deferred.append(joined)
        joined.parts.append(part)

    def _update_fields(
        self, table: str, key: str, types: Mapping[str, str], row_ids: Iterable[int], kind: str, **values: Any
    ) -> None:
        """Change columns of rows of `table` by their `key` (`types`: the columns that may change, and
        their PostgreSQL types): set ("="), add to ("+") or raise to ("max") `values`. The change joins
        the updates of the table waiting in the transaction (`_FieldUpdates`), which move to the end of
        the writes waiting: past writes of other tables and new rows of their own (`_commutes`), so the
        rows a later update names were written before it, as in the order given."""
        transaction = self._open_transaction()
        transaction.dirty = True
        new = _FieldUpdates(table, key, types, self.space_id)
        joined = _joinable(transaction.deferred, new)
        if joined is None:
            joined = new
        else:
            transaction.deferred.remove(joined)
        transaction.deferred.append(joined)
        joined.change(row_ids, kind, values)

    def _current(self) -> _Transaction | None:
        """This thread's open transaction, if any."""
        return getattr(self._local, "transaction", None)

    def _open_transaction(self) -> _Transaction:
        transaction = self._current()
        if transaction is None:
            raise StorageError("a write to the memory database outside a transaction")
        return transaction

    def _take(self, counter: str, count: int = 1) -> int:
        """The first of `count` new ids from the space's `counter`, inside the open transaction."""
        transaction = self._open_transaction()
        first = transaction.counters[counter]
        transaction.counters[counter] = first + count
        return first

    def _count_pages(self, pages: int, tokens: int) -> None:
        """Pages and page tokens added to the space (negative: removed), for BM25's corpus totals."""
        transaction = self._open_transaction()
        transaction.pages_added += pages
        transaction.tokens_added += tokens

    def _none_given_after(self, counter: str, value: int) -> bool:
        """Whether the open transaction's `counter` shows that no row can have a sequence past `value`
        (False outside a transaction: only a query can tell).

        Why: a write catches its page index up first (`SpacePageIndex.catch_up`: the vectors and the
        withdrawals other processes stored since it last looked), and almost always there are none: two
        round trips a write used to make, answered from the counters read under the space's row lock,
        which every writer of the space takes, so none can have given out a later sequence meanwhile."""
        transaction = self._current()
        return transaction is not None and transaction.counters[counter] <= value

    def _counter(self, counter: str) -> int:
        transaction = self._current()
        if transaction is not None:
            return transaction.counters[counter]
        return int(self._one(f"SELECT {counter} FROM spaces WHERE space_id = %s", (self.space_id,)))

    # --- transactions ---------------------------------------------------------------------------------
    @contextmanager
    def transaction(
        self, wait_for_writers: bool = True, ops: Sequence[OpKey] = (), pages: Sequence[int] = ()
    ) -> Iterator[None]:
        """All writes inside commit together or not at all, one writer per space at a time.

        `ops`: the keys the transaction will first ask `logged_ops` about (which of its ops were applied
        before), read with the lock in BEGIN's round trip rather than in one of their own. `pages`: the
        pages its ops will first read (`pages`, `pending_among`), read there too with the page chained
        last (`_BEGIN_PAGES`), and answered from what was read until the transaction's first write.

        Another writer of the space is waited for; without `wait_for_writers`, not at all:
        `StoreBusyError` at once, nothing begun. In a fenced shard, `FencedOutError` when this process's
        fencing number is no longer the shard's (another worker took it over). A database that cannot
        be reached, restarts or is full raises `StorageError` with nothing of the transaction stored."""
        if self._current() is not None:
            raise StorageError("transactions of a memory space do not nest")
        try:
            with self._pool.connection() as connection:
                try:
                    transaction = self._begin(connection, wait_for_writers, ops, pages)
                    self._local.transaction = transaction
                    try:
                        yield
                        self._commit(connection, transaction)
                    finally:
                        self._local.transaction = None
                except BaseException:
                    _roll_back(connection)
                    raise
        except pg_errors.LockNotAvailable as error:
            raise StoreBusyError("another connection is writing this memory space") from error
        except (pg_errors.DiskFull, pg_errors.OutOfMemory, *_UNREACHABLE) as error:
            raise storage_error(error) from error

    def _begin(
        self,
        connection: psycopg.Connection,
        wait_for_writers: bool,
        ops: Sequence[OpKey],
        pages: Sequence[int],
    ) -> _Transaction:
        """BEGIN and the lock of the space's row (and its shard's fence row, shared), reading its counters
        and meta, then the op log's entries for `ops` and the rows of `pages`, in one message of the
        simple query protocol: one round trip, not four, and the ops of the transaction read meta without
        asking the server again. Each statement after the lock sees every commit made before it.

        Why not a pipeline: psycopg ends a pipeline with a Sync and then a Flush request, and a server that
        reads anything after the Sync leaves `idle_in_transaction_session_timeout` unarmed until the next
        ReadyForQuery, so a worker frozen inside the transaction would hold the fence row for good. A
        simple query ends on ReadyForQuery. It carries no parameters, so the ids go in as integer
        literals (`int()`: nothing else can reach the text) and the op and write ids as literals that
        psycopg quotes (`psycopg.sql.Literal`)."""
        nowait = "" if wait_for_writers else " NOWAIT"
        fence_column = (
            f"(SELECT number FROM shard_fences f WHERE f.shard = {int(self.shard)} FOR SHARE{nowait})"
            if self.shard is not None
            else "NULL::bigint"
        )
        statements = (
            f"BEGIN; SELECT {', '.join(COUNTERS)}, change_seq, (SELECT json_object_agg(key, value) FROM meta m "
            f"WHERE m.space_id = s.space_id), {fence_column} FROM spaces s WHERE space_id = "
            f"{int(self.space_id)} FOR UPDATE OF s{nowait}"
        )
        if ops:
            statements += "; " + OP_LOG_ROWS.format(*op_log_values(self.space_id, ops)).as_string(connection)
        if pages:
            statements += "; " + _BEGIN_PAGES.format(space=int(self.space_id), ids=bigints(pages))
        cursor = connection.execute(statements.encode())
        cursor.nextset()  # past BEGIN's result
        transaction = _Transaction(connection, *self._locked_space(cursor.fetchone()))
        if ops:
            cursor.nextset()
            transaction.op_log_keys = frozenset(ops)
            transaction.op_log_rows = cursor.fetchall()
        if pages:
            cursor.nextset()
            rows = cursor.fetchall()
            transaction.page_rows = {int(row[0]): row for row in rows}
            transaction.pages_read = frozenset([*(int(pid) for pid in pages), *transaction.page_rows])
        return transaction

    def _kept_page_rows(self, page_ids: Sequence[int]) -> list[tuple[Any, ...]] | None:
        """The rows of `page_ids` as the open transaction's BEGIN read them (`PAGE_COLUMNS`, in order, the
        missing ones left out) while it has written nothing; None when they must be asked for."""
        transaction = self._current()
        if transaction is None or transaction.dirty or not transaction.pages_read.issuperset(page_ids):
            return None
        return [transaction.page_rows[pid] for pid in page_ids if pid in transaction.page_rows]

    def _commit(self, connection: psycopg.Connection, transaction: _Transaction) -> None:
        """The writes still waiting, the op log and counters (`_write_back`) and COMMIT in one pipeline:
        one round trip instead of two. An error of any of them is raised here, the transaction rolled
        back by the server. Every statement is built before the first is sent, so the server waits on
        this process mid-pipeline (where no timeout watches it) only for psycopg's sends. The space's
        `change_seq` the commit leaves is kept (`committed_data_version`): the counters' update returns
        it, and a transaction that wrote nothing leaves the one read under the lock."""
        statements = transaction.statements()
        if transaction.dirty:
            statements += self._write_back(transaction)
        with connection.pipeline():
            cursors = [connection.execute(sql, params) for sql, params in statements]
            connection.execute(b"COMMIT")
        returned = cursors[-1].fetchone() if transaction.dirty else (transaction.change_seq,)
        self._local.committed_change_seq = None if returned is None else int(returned[0])

    def _locked_space(self, row: tuple[Any, ...] | None) -> tuple[dict[str, int], dict[str, str], int]:
        """The counters, meta and change_seq of `_begin`'s row, once its fencing number is checked."""
        if row is None:
            raise StorageError("the memory space was erased (forgotten) while it was open")
        if self.shard is not None:
            held = self._fence() if self._fence is not None else None
            if held is None or row[-1] != held:
                raise FencedOutError(self.shard, held, row[-1])
        counters = dict(zip(COUNTERS, (int(value) for value in row[: len(COUNTERS)]), strict=True))
        change_seq, meta = row[len(COUNTERS)], row[len(COUNTERS) + 1]
        return counters, dict(meta or {}), int(change_seq)

    def _write_back(self, transaction: _Transaction) -> list[Statement]:
        """The op log rows of the transaction, then its counters (with `change_seq` bumped): the
        statements `_commit` sends before COMMIT."""
        assignments = ", ".join(f"{name} = %s" for name in COUNTERS)
        statements: list[Statement] = []
        if transaction.logged:
            statements.append(
                binary_arrays(
                    "INSERT INTO op_log(space_id, seq, kind, at, detail, op_id, write_id) SELECT %s, * "
                    "FROM unnest(%s::bigint[], %s::text[], %s::float8[], %s::text[], %s::text[], "
                    "%s::text[])",
                    (self.space_id,),
                    transaction.logged,
                )
            )
        statements.append(
            (
                f"UPDATE spaces SET {assignments}, page_count = page_count + %s, token_count = token_count + "
                "%s, change_seq = change_seq + 1 WHERE space_id = %s RETURNING change_seq".encode(),
                [
                    *(transaction.counters[name] for name in COUNTERS),
                    transaction.pages_added,
                    transaction.tokens_added,
                    self.space_id,
                ],
            )
        )
        return statements

    def _vectors_by_id(self, table: str, key: str, ids: Sequence[int], dim: int) -> np.ndarray:
        if not ids:
            return np.zeros((0, dim), dtype=np.float32)
        rows = dict(
            self._all(
                f"SELECT {key}, vector FROM {table} WHERE space_id = %s AND {key} = ANY(%s)",
                (self.space_id, list(ids)),
                binary=True,
            )
        )
        return from_blobs([bytes(rows[i]) for i in ids], dim)
