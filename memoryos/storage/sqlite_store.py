"""`SqliteStore`: the canonical store of one memory space (pages, chains, segments, facts, profile, vectors).

Durability: WAL journal with `synchronous=FULL`, one transaction per op, so a write the caller saw
acknowledged survives a crash at any instant. Vector indexes are derived from this file and rebuilt
from it when missing or corrupt. How vectors become blobs is `vector_blobs.py`; how rows become pages and
segments, `store_rows.py`.
"""

import json
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from memoryos.errors import StorageError
from memoryos.storage.schema import MIGRATIONS, SCHEMA, SCHEMA_VERSION
from memoryos.storage.store_rows import PAGE_COLUMNS, PAGE_FROM, page_from_row, segment_from_row
from memoryos.storage.vector_blobs import from_blobs, to_blob
from memoryos.types import KnowledgeKind, Page, Segment, Turn


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


class SqliteStore:
    """One SQLite file per space. Not thread-safe by itself: `MemorySpace` serializes access with a lock."""

    def __init__(self, path: Path, busy_timeout_s: float = 30.0) -> None:
        """Open the store, creating or migrating its schema. `busy_timeout_s`: how long a write waits for
        another process's write transaction on the same space before failing."""
        self.path = path
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
            self._prepare_schema()
        except sqlite3.DatabaseError as error:
            self._db.close()
            raise StorageError(f"cannot open memory store {path}: {error}") from error
        except BaseException:
            self._db.close()
            raise

    def _prepare_schema(self) -> None:
        """Create the schema in a new store, or migrate an older one, in one transaction.

        The version is read inside the transaction: two processes opening an old store at once migrate
        it once. A store newer than this code is refused untouched.
        """
        with self.transaction():
            has_meta = self._one("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'")
            version = self.get_meta("schema_version") if has_meta else None
            if version is None:
                for statement in _statements(SCHEMA):
                    self._db.execute(statement)
                self.set_meta("schema_version", str(SCHEMA_VERSION))
                return
            stored = int(version)
            if stored > SCHEMA_VERSION:
                raise StorageError(
                    f"{self.path} has schema version {stored}, newer than this MemoryOS reads "
                    f"({SCHEMA_VERSION}): upgrade MemoryOS to open it"
                )
            for step in range(stored, SCHEMA_VERSION):
                for statement in _statements(MIGRATIONS[step]):
                    self._db.execute(statement)
            self.set_meta("schema_version", str(SCHEMA_VERSION))

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """All writes inside commit together or not at all (BEGIN IMMEDIATE: one writer at a time)."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _one(self, sql: str, params: Sequence[Any] = ()) -> Any:
        row = self._db.execute(sql, params).fetchone()
        return None if row is None else row[0]

    # --- meta and log ---------------------------------------------------------------------------------
    def get_meta(self, key: str) -> str | None:
        value = self._one("SELECT value FROM meta WHERE key = ?", (key,))
        return None if value is None else str(value)

    def set_meta(self, key: str, value: str) -> None:
        self._db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, value))

    def data_version(self) -> int:
        """Changes whenever another connection (another process) commits to this store: a cheap test of
        whether there is anything to catch up with before a read."""
        return int(self._one("PRAGMA data_version"))

    def log_op(self, kind: str, at: float, detail: dict[str, Any], op_id: str, write_id: str | None) -> None:
        """Audit trail of applied ops: kind, op and write ids, planned time and the ids the op touched or
        created — no texts, no vectors. The ids are unique: an op or write applied once is found here."""
        self._db.execute(
            "INSERT INTO op_log(kind, at, detail, op_id, write_id) VALUES (?, ?, ?, ?, ?)",
            (kind, at, json.dumps(detail), op_id, write_id),
        )

    def logged_op(self, op_id: str, write_id: str | None) -> dict[str, Any] | None:
        """The log detail of an op already applied under `op_id`, or of a write already stored under
        `write_id`; None when neither was."""
        row = self._db.execute(
            "SELECT detail FROM op_log WHERE op_id = ? OR (? IS NOT NULL AND write_id = ?) LIMIT 1",
            (op_id, write_id, write_id),
        ).fetchone()
        return None if row is None else dict(json.loads(row[0]))

    # --- pages ----------------------------------------------------------------------------------------
    def insert_pages(self, turns: Sequence[Turn], vectors: np.ndarray | None) -> list[int]:
        """Store pages in STM; without `vectors` they are pending (vector NULL) until `set_page_vectors`."""
        ids: list[int] = []
        next_seq = self.max_vector_seq() + 1
        for i, turn in enumerate(turns):
            cursor = self._db.execute(
                "INSERT INTO pages(user_input, agent_response, timestamp, meta_data, vector, vector_seq) "
                "VALUES (?,?,?,?,?,?)",
                (
                    turn.user_input,
                    turn.agent_response,
                    turn.timestamp,
                    json.dumps(turn.meta_data) if turn.meta_data else None,
                    None if vectors is None else to_blob(vectors[i]),
                    None if vectors is None else next_seq + i,
                ),
            )
            page_id = int(cursor.lastrowid or 0)
            self._db.execute(
                "INSERT INTO pages_fts(rowid, user_input, agent_response) VALUES (?, ?, ?)",
                (page_id, turn.user_input, turn.agent_response),
            )
            ids.append(page_id)
        return ids

    def pages(self, page_ids: Sequence[int]) -> list[Page]:
        """Pages in the order of `page_ids` (missing ids skipped)."""
        if not page_ids:
            return []
        marks = ",".join("?" * len(page_ids))
        rows = self._db.execute(
            f"SELECT {PAGE_COLUMNS} FROM {PAGE_FROM} WHERE p.page_id IN ({marks})", page_ids
        )
        by_id = {row[0]: page_from_row(row) for row in rows}
        return [by_id[pid] for pid in page_ids if pid in by_id]

    def pages_in_tier(self, tier: str) -> list[Page]:
        rows = self._db.execute(
            f"SELECT {PAGE_COLUMNS} FROM {PAGE_FROM} WHERE p.tier = ? ORDER BY p.page_id", (tier,)
        )
        return [page_from_row(row) for row in rows]

    def count_pages(self) -> dict[str, int]:
        rows = self._db.execute("SELECT tier, COUNT(*) FROM pages GROUP BY tier")
        return {row[0]: row[1] for row in rows}

    def page_vectors(self, page_ids: Sequence[int], dim: int) -> np.ndarray:
        """Vectors of `page_ids`, in that order; every id must exist."""
        return self._vectors_by_id("pages", "page_id", page_ids, dim)

    def embedded_page_vectors(self, page_ids: Sequence[int], dim: int) -> tuple[list[int], np.ndarray]:
        """(ids, vectors) of those `page_ids` that have a vector, in the order given: pages still waiting
        for theirs (another thread's or process's fresh write) are left out, never read as NULL."""
        found: dict[int, bytes] = {}
        for start in range(0, len(page_ids), 900):
            chunk = list(page_ids[start : start + 900])
            marks = ",".join("?" * len(chunk))
            found.update(
                self._db.execute(
                    f"SELECT page_id, vector FROM pages WHERE page_id IN ({marks}) AND vector IS NOT NULL",
                    chunk,
                ).fetchall()
            )
        ids = [pid for pid in page_ids if pid in found]
        return ids, from_blobs([found[pid] for pid in ids], dim)

    def _vectors_by_id(self, table: str, key: str, ids: Sequence[int], dim: int) -> np.ndarray:
        if not ids:
            return np.zeros((0, dim), dtype=np.float32)
        marks = ",".join("?" * len(ids))
        rows = dict(
            self._db.execute(f"SELECT {key}, vector FROM {table} WHERE {key} IN ({marks})", ids).fetchall()
        )
        return from_blobs([rows[i] for i in ids], dim)

    def page_vectors_after(self, after_seq: int, dim: int, limit: int) -> tuple[np.ndarray, np.ndarray, int]:
        """(ids, vectors, last seq) of pages embedded after vector sequence `after_seq`, in embedding
        order, at most `limit`: index replay at open and catch-up with other processes' writes."""
        rows = self._db.execute(
            "SELECT page_id, vector, vector_seq FROM pages WHERE vector_seq > ? ORDER BY vector_seq LIMIT ?",
            (after_seq, limit),
        ).fetchall()
        ids = np.array([row[0] for row in rows], dtype=np.int64)
        return ids, from_blobs([row[1] for row in rows], dim), int(rows[-1][2]) if rows else after_seq

    def max_vector_seq(self) -> int:
        """The vector sequence of the page embedded last (0: none yet)."""
        return int(self._one("SELECT COALESCE(MAX(vector_seq), 0) FROM pages"))

    def sample_page_vectors(self, size: int, dim: int) -> np.ndarray:
        """Up to `size` page vectors spread evenly over the space (all of them when it is small)."""
        total = int(self._one("SELECT COUNT(*) FROM pages WHERE vector IS NOT NULL"))
        step = max(1, total // size)
        rows = self._db.execute(
            "SELECT vector FROM (SELECT vector, ROW_NUMBER() OVER (ORDER BY page_id) AS n FROM pages "
            "WHERE vector IS NOT NULL) "
            "WHERE (n - 1) % ? = 0 LIMIT ?",
            (step, size),
        ).fetchall()
        return from_blobs([row[0] for row in rows], dim)

    def all_page_texts(self) -> list[tuple[int, str, str]]:
        return [
            tuple(row) for row in self._db.execute("SELECT page_id, user_input, agent_response FROM pages")
        ]

    def pending_page_ids(self, limit: int) -> list[int]:
        rows = self._db.execute(
            "SELECT page_id FROM pages WHERE vector IS NULL ORDER BY page_id LIMIT ?", (limit,)
        )
        return [row[0] for row in rows]

    def set_page_vectors(self, page_ids: Sequence[int], vectors: np.ndarray) -> list[int]:
        """Give pending pages their vectors, each with the next vector sequence; returns the ids set.

        A page that already has a vector (another process embedded it first) or no longer exists is left
        alone, so embedding the same page twice changes nothing.
        """
        pending = set(self.pending_among(page_ids))
        chosen = [(pid, vector) for pid, vector in zip(page_ids, vectors, strict=True) if pid in pending]
        self.assign_vectors(chosen)
        return [pid for pid, _ in chosen]

    def pending_among(self, page_ids: Sequence[int]) -> list[int]:
        """Those of `page_ids` that exist and have no vector yet."""
        found: list[int] = []
        for start in range(0, len(page_ids), 900):
            chunk = list(page_ids[start : start + 900])
            marks = ",".join("?" * len(chunk))
            found += [
                row[0]
                for row in self._db.execute(
                    f"SELECT page_id FROM pages WHERE page_id IN ({marks}) AND vector IS NULL", chunk
                )
            ]
        return found

    def assign_vectors(self, vectors: Sequence[tuple[int, np.ndarray]]) -> None:
        """Store vectors of pages under new vector sequences, in the given order (replacing any vector a
        page had: `memoryos reindex`)."""
        next_seq = self.max_vector_seq() + 1
        self._db.executemany(
            "UPDATE pages SET vector = ?, vector_seq = ? WHERE page_id = ?",
            [(to_blob(vector), next_seq + i, pid) for i, (pid, vector) in enumerate(vectors)],
        )

    def max_page_id(self) -> int:
        return int(self._one("SELECT COALESCE(MAX(page_id), 0) FROM pages"))

    def neighbour_ids(self, page_ids: Sequence[int]) -> dict[int, tuple[int | None, int | None]]:
        """For each page, the ids of the page stored just before and just after it.

        Ids are consecutive unless pages were deleted, so id±1 is checked for all pages in one query and
        only the gaps are looked up one by one.
        """
        probes = sorted({pid + step for pid in page_ids for step in (-1, 1)})
        present: set[int] = set()
        for start in range(0, len(probes), 900):
            chunk = probes[start : start + 900]
            marks = ",".join("?" * len(chunk))
            present.update(
                row[0]
                for row in self._db.execute(f"SELECT page_id FROM pages WHERE page_id IN ({marks})", chunk)
            )

        def before(pid: int) -> int | None:
            if pid - 1 in present:
                return pid - 1
            return self._one("SELECT MAX(page_id) FROM pages WHERE page_id < ?", (pid,))

        def after(pid: int) -> int | None:
            if pid + 1 in present:
                return pid + 1
            return self._one("SELECT MIN(page_id) FROM pages WHERE page_id > ?", (pid,))

        return {pid: (before(pid), after(pid)) for pid in page_ids}

    def set_page_fields(self, page_ids: Sequence[int], **fields: Any) -> None:
        assignments = ", ".join(f"{name} = ?" for name in fields)
        self._db.executemany(
            f"UPDATE pages SET {assignments} WHERE page_id = ?", [(*fields.values(), pid) for pid in page_ids]
        )

    def document_frequency(self, match_expression: str, at_most: int | None = None) -> int:
        """Pages matching the expression; with `at_most`, counting stops there (a bounded cost for words
        found in most pages of a large space)."""
        if at_most is None:
            return int(
                self._one("SELECT COUNT(*) FROM pages_fts WHERE pages_fts MATCH ?", (match_expression,))
            )
        return int(
            self._one(
                "SELECT COUNT(*) FROM (SELECT 1 FROM pages_fts WHERE pages_fts MATCH ? LIMIT ?)",
                (match_expression, at_most),
            )
        )

    def page_julian_days(self, page_ids: Sequence[int]) -> dict[int, float]:
        """Each page's timestamp as a Julian day number (SQLite parses the stored text)."""
        days: dict[int, float] = {}
        for start in range(0, len(page_ids), 900):
            chunk = page_ids[start : start + 900]
            marks = ",".join("?" * len(chunk))
            days.update(
                self._db.execute(
                    f"SELECT page_id, julianday(timestamp) FROM pages WHERE page_id IN ({marks})", chunk
                ).fetchall()
            )
        return days

    def lexical_search(self, match_expression: str, limit: int) -> list[tuple[int, float]]:
        """(page_id, BM25 score) best first; SQLite's bm25() is negative-is-better, so it is negated."""
        rows = self._db.execute(
            "SELECT rowid, -bm25(pages_fts) AS score FROM pages_fts WHERE pages_fts MATCH ? "
            "ORDER BY bm25(pages_fts) LIMIT ?",
            (match_expression, limit),
        )
        return [(int(row[0]), float(row[1])) for row in rows]

    # --- chains ---------------------------------------------------------------------------------------
    def upsert_chain(self, chain_id: int, summary: str) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO chains(chain_id, summary) VALUES (?, ?)", (chain_id, summary)
        )

    def chain_page_ids(self, chain_id: int) -> list[int]:
        rows = self._db.execute("SELECT page_id FROM pages WHERE chain_id = ? ORDER BY page_id", (chain_id,))
        return [row[0] for row in rows]

    # --- segments -------------------------------------------------------------------------------------
    def active_segments(self, count_pages: bool = False) -> list[Segment]:
        """Segments in mid-term memory. Counting their pages reads every page's index entry, so only
        `stats` asks for it; heat and placement do not need it."""
        count = "(SELECT COUNT(*) FROM pages p WHERE p.segment_id = s.segment_id)" if count_pages else "0"
        rows = self._db.execute(
            f"SELECT s.*, {count} AS page_count FROM segments s WHERE s.archived = 0 ORDER BY s.segment_id"
        )
        return [segment_from_row(row) for row in rows]

    def all_segment_ids(self) -> list[int]:
        return [row[0] for row in self._db.execute("SELECT segment_id FROM segments")]

    def segment_vectors(self, segment_ids: Sequence[int], dim: int) -> np.ndarray:
        return self._vectors_by_id("segments", "segment_id", segment_ids, dim)

    def segment_topic_count(self, segment_id: int) -> int:
        return int(self._one("SELECT topic_count FROM segments WHERE segment_id = ?", (segment_id,)))

    def insert_segment(self, summary: str, keywords: list[str], vector: np.ndarray, at: float) -> int:
        cursor = self._db.execute(
            "INSERT INTO segments(summary, keywords, vector, last_visit_at, created_at) VALUES (?,?,?,?,?)",
            (summary, json.dumps(keywords), to_blob(vector), at, at),
        )
        return int(cursor.lastrowid or 0)

    def update_segment(self, segment_id: int, **fields: Any) -> None:
        values = {
            k: json.dumps(v) if k == "keywords" else to_blob(v) if k == "vector" else v
            for k, v in fields.items()
        }
        assignments = ", ".join(f"{name} = ?" for name in values)
        self._db.execute(
            f"UPDATE segments SET {assignments} WHERE segment_id = ?", (*values.values(), segment_id)
        )

    def add_segment_counters(self, segment_id: int, visits: int, interactions: int, at: float) -> None:
        self._db.execute(
            "UPDATE segments SET visit_count = visit_count + ?, interaction_count = interaction_count + ?, "
            "last_visit_at = MAX(last_visit_at, ?) WHERE segment_id = ?",
            (visits, interactions, at, segment_id),
        )

    def unanalyzed_segment_ids(self) -> set[int]:
        # One probe of the partial index `pages_unanalyzed` per segment, not a pass over every page.
        rows = self._db.execute(
            "SELECT s.segment_id FROM segments s WHERE s.archived = 0 AND EXISTS (SELECT 1 FROM pages p "
            "WHERE p.segment_id = s.segment_id AND p.analyzed = 0 AND p.tier = 'mtm')"
        )
        return {row[0] for row in rows}

    def segment_page_ids(self, segment_id: int, only_unanalyzed: bool = False) -> list[int]:
        extra = " AND analyzed = 0" if only_unanalyzed else ""
        rows = self._db.execute(
            f"SELECT page_id FROM pages WHERE segment_id = ?{extra} ORDER BY page_id", (segment_id,)
        )
        return [row[0] for row in rows]

    # --- knowledge ------------------------------------------------------------------------------------
    def active_knowledge(self, kind: KnowledgeKind) -> list[sqlite3.Row]:
        return self._db.execute(
            "SELECT entry_id, text, timestamp, vector, updated_at FROM knowledge WHERE kind = ? AND active = 1 "
            "ORDER BY entry_id",
            (kind,),
        ).fetchall()

    def insert_knowledge(
        self, kind: KnowledgeKind, text: str, timestamp: str, vector: np.ndarray, at: float
    ) -> int:
        cursor = self._db.execute(
            "INSERT INTO knowledge(kind, text, timestamp, vector, updated_at) VALUES (?,?,?,?,?)",
            (kind, text, timestamp, to_blob(vector), at),
        )
        return int(cursor.lastrowid or 0)

    def all_knowledge_texts(self) -> list[tuple[int, str]]:
        """Every searchable (active) fact; history keeps no vector."""
        return [
            (row[0], row[1])
            for row in self._db.execute("SELECT entry_id, text FROM knowledge WHERE active = 1")
        ]

    def set_knowledge_vector(self, entry_id: int, vector: np.ndarray) -> None:
        self._db.execute("UPDATE knowledge SET vector = ? WHERE entry_id = ?", (to_blob(vector), entry_id))

    def retire_knowledge(self, entry_id: int, replaced_by: int | None) -> None:
        """Keep the old fact as history: inactive, pointing at what replaced it (None: dropped for space)."""
        self._db.execute(
            "UPDATE knowledge SET active = 0, replaced_by = ? WHERE entry_id = ?", (replaced_by, entry_id)
        )

    def touch_knowledge(self, entry_id: int, timestamp: str, at: float) -> None:
        self._db.execute(
            "UPDATE knowledge SET timestamp = ?, updated_at = ? WHERE entry_id = ?", (timestamp, at, entry_id)
        )

    def knowledge_history(self, kind: KnowledgeKind) -> list[sqlite3.Row]:
        return self._db.execute(
            "SELECT entry_id, text, timestamp, replaced_by FROM knowledge WHERE kind = ? AND active = 0 ORDER BY entry_id",
            (kind,),
        ).fetchall()

    # --- profile --------------------------------------------------------------------------------------
    def latest_profile(self) -> str:
        value = self._one("SELECT text FROM profile_versions ORDER BY version DESC LIMIT 1")
        return "" if value is None else str(value)

    def insert_profile(self, text: str, at: float, source_segment_id: int | None) -> None:
        self._db.execute(
            "INSERT INTO profile_versions(text, created_at, source_segment_id) VALUES (?, ?, ?)",
            (text, at, source_segment_id),
        )

    def profile_version_count(self) -> int:
        return int(self._one("SELECT COUNT(*) FROM profile_versions"))
