"""`SqliteStore`'s queries over pages: storing turns, their vectors, and the full-text index.

Pages are most of a space — every turn, its vector and its words in `pages_fts` — and most of the store's
queries; they are kept apart from the smaller tables (`segment_queries.py`, `knowledge_queries.py`).
"""

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from memoryos.storage.records.base import FrequencyAsk, PageSample, Side
from memoryos.storage.records.sqlite.store_queries import StoreQueries, id_chunks
from memoryos.storage.records.store_rows import PAGE_COLUMNS, PAGE_FROM, page_from_row
from memoryos.storage.records.vector_blobs import from_blobs, to_blob
from memoryos.types import Page, Turn


def quoted(term: str) -> str:
    """A term as an FTS5 string: user text is never read as query syntax (NEAR, AND, column filters)."""
    return '"' + term.replace('"', '""') + '"'


class PageQueries(StoreQueries):
    """Pages: the turns of the conversation, their vectors (with their embedding sequence) and BM25 search."""

    def insert_pages(
        self,
        turns: Sequence[Turn],
        vectors: np.ndarray | None,
        at: float | None = None,
        expires_at: float | None = None,
        op_id: str | None = None,
    ) -> list[int]:
        """Store pages in STM; without `vectors` they are pending (vector NULL) until `set_page_vectors`.
        `at` is when they were stored, `op_id` the op that stored them (provenance)."""
        ids: list[int] = []
        next_seq = self.max_vector_seq() + 1
        for i, turn in enumerate(turns):
            cursor = self._db.execute(
                "INSERT INTO pages(user_input, agent_response, timestamp, meta_data, vector, vector_seq, "
                "created_at, updated_at, expires_at, op_id) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (
                    turn.user_input,
                    turn.agent_response,
                    turn.timestamp,
                    json.dumps(turn.meta_data) if turn.meta_data else None,
                    None if vectors is None else to_blob(vectors[i]),
                    None if vectors is None else next_seq + i,
                    at,
                    at,
                    expires_at,
                    op_id,
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

    def short_term_overflow(self, capacity: int) -> list[Page]:
        """The oldest short-term pages beyond the newest `capacity`, up to the oldest short-term page not
        yet embedded (excluded): what consolidation may move now, read without the rest of the tier.
        While embedding lags, thousands of pages wait in short-term memory; reading them all as `Page`s on
        every pass held the GIL for most of the API's scheduler thread (docs/api.md)."""
        rows = self._db.execute(
            f"SELECT {PAGE_COLUMNS} FROM {PAGE_FROM} WHERE p.tier = 'stm' AND p.page_id < COALESCE("
            "(SELECT MIN(page_id) FROM pages WHERE vector IS NULL AND tier = 'stm'), 9223372036854775807) "
            "ORDER BY p.page_id LIMIT max(0, (SELECT COUNT(*) FROM pages WHERE tier = 'stm') - ?)",
            (capacity,),
        )
        return [page_from_row(row) for row in rows]

    def newest_in_tier(self, tier: str, limit: int) -> list[Page]:
        """The `limit` newest pages of `tier`, oldest first."""
        rows = self._db.execute(
            f"SELECT {PAGE_COLUMNS} FROM {PAGE_FROM} WHERE p.tier = ? ORDER BY p.page_id DESC LIMIT ?",
            (tier, limit),
        )
        return [page_from_row(row) for row in rows][::-1]

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
        for chunk, marks in id_chunks(page_ids):
            found.update(
                self._db.execute(
                    f"SELECT page_id, vector FROM pages WHERE page_id IN ({marks}) AND vector IS NOT NULL",
                    chunk,
                ).fetchall()
            )
        ids = [pid for pid in page_ids if pid in found]
        return ids, from_blobs([found[pid] for pid in ids], dim)

    def page_vectors_after(self, after_seq: int, dim: int, limit: int) -> tuple[np.ndarray, np.ndarray, int]:
        """(ids, vectors, last seq) of pages embedded after vector sequence `after_seq`, in embedding
        order, at most `limit`: index replay at open and catch-up with other processes' writes."""
        rows = self._db.execute(
            "SELECT page_id, vector, vector_seq FROM pages WHERE vector_seq > ? AND vector_seq IS NOT NULL "
            "ORDER BY vector_seq LIMIT ?",
            (after_seq, limit),
        ).fetchall()
        ids = np.array([row[0] for row in rows], dtype=np.int64)
        return ids, from_blobs([row[1] for row in rows], dim), int(rows[-1][2]) if rows else after_seq

    def max_vector_seq(self) -> int:
        """The vector sequence of the page embedded last (0: none yet)."""
        # The WHERE lets SQLite read the maximum off the partial index instead of scanning every page.
        return int(self._one("SELECT COALESCE(MAX(vector_seq), 0) FROM pages WHERE vector_seq IS NOT NULL"))

    def page_sample(self, size: int, dim: int) -> PageSample:
        """The space's page count and up to `size` page vectors spread evenly over it (`PageSample`)."""
        pages, embedded = self._db.execute("SELECT COUNT(*), COUNT(vector) FROM pages").fetchone()
        step = max(1, int(embedded) // size)
        rows = self._db.execute(
            "SELECT vector FROM (SELECT vector, ROW_NUMBER() OVER (ORDER BY page_id) AS n FROM pages "
            "WHERE vector IS NOT NULL) "
            "WHERE (n - 1) % ? = 0 LIMIT ?",
            (step, size),
        ).fetchall()
        return PageSample(int(pages), from_blobs([row[0] for row in rows], dim))

    def page_total(self) -> int:
        """Every page of the space, of any tier, with a vector or not (`PageSample.pages`)."""
        return int(self._one("SELECT COUNT(*) FROM pages"))

    def all_page_texts(self) -> list[tuple[int, str, str]]:
        return [
            tuple(row) for row in self._db.execute("SELECT page_id, user_input, agent_response FROM pages")
        ]

    def count_pending(self, through_page_id: int | None = None) -> int:
        """Pages stored but not yet embedded, up to `through_page_id` when given (read off the partial
        index of pending pages)."""
        if through_page_id is None:
            return int(self._one("SELECT COUNT(*) FROM pages WHERE vector IS NULL"))
        return int(
            self._one("SELECT COUNT(*) FROM pages WHERE vector IS NULL AND page_id <= ?", (through_page_id,))
        )

    def pending_page_ids(self, limit: int) -> list[int]:
        rows = self._db.execute(
            "SELECT page_id FROM pages WHERE vector IS NULL ORDER BY page_id LIMIT ?", (limit,)
        )
        return [row[0] for row in rows]

    def pending_pages(self, limit: int) -> list[Page]:
        rows = self._db.execute(
            f"SELECT {PAGE_COLUMNS} FROM {PAGE_FROM} WHERE p.vector IS NULL ORDER BY p.page_id LIMIT ?",
            (limit,),
        )
        return [page_from_row(row) for row in rows]

    def set_page_vectors(self, page_ids: Sequence[int], vectors: np.ndarray) -> tuple[list[int], np.ndarray]:
        """Give pending pages their vectors, each with the next vector sequence; returns the ids set and
        their vectors (for the in-memory index, which then needs no read back).

        A page that already has a vector (another process embedded it first) or no longer exists is left
        alone, so embedding the same page twice changes nothing.
        """
        pending = set(self.pending_among(page_ids))
        rows = [i for i, pid in enumerate(page_ids) if pid in pending]
        chosen = [page_ids[i] for i in rows]
        self.assign_vectors(list(zip(chosen, vectors[rows], strict=True)))
        return chosen, vectors[rows]

    def pending_among(self, page_ids: Sequence[int]) -> list[int]:
        """Those of `page_ids` that exist and have no vector yet."""
        found: list[int] = []
        for chunk, marks in id_chunks(page_ids):
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
        for chunk, marks in id_chunks(probes):
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

    # --- lifecycle: edits, deletes, expiry, paging ------------------------------------------------------
    def _fts_remove(self, page: Page) -> None:
        """Drop a page's words from the external-content FTS index: it needs the indexed text back."""
        self._db.execute(
            "INSERT INTO pages_fts(pages_fts, rowid, user_input, agent_response) VALUES ('delete', ?, ?, ?)",
            (page.page_id, page.user_input, page.agent_response),
        )

    def _withdraw_vector(self, page_id: int) -> None:
        self._db.execute("INSERT INTO withdrawn_vectors(page_id) VALUES (?)", (page_id,))

    def delete_pages(self, pages: Sequence[Page]) -> None:
        """Remove pages with their text, vector and full-text entries; their ids are never reused."""
        for page in pages:
            self._fts_remove(page)
            if page.embedded:
                self._withdraw_vector(page.page_id)
            self._db.execute("DELETE FROM pages WHERE page_id = ?", (page.page_id,))

    def replace_page_text(
        self, page: Page, user_input: str, agent_response: str, meta_data: dict[str, Any], at: float
    ) -> None:
        """Edit a page: new text, no vector until it is embedded again (pending), not yet analyzed."""
        self._fts_remove(page)
        if page.embedded:
            self._withdraw_vector(page.page_id)
        self._db.execute(
            "UPDATE pages SET user_input = ?, agent_response = ?, meta_data = ?, vector = NULL, "
            "vector_seq = NULL, analyzed = 0, analysis_attempts = 0, updated_at = ? WHERE page_id = ?",
            (user_input, agent_response, json.dumps(meta_data) if meta_data else None, at, page.page_id),
        )
        self._db.execute(
            "INSERT INTO pages_fts(rowid, user_input, agent_response) VALUES (?, ?, ?)",
            (page.page_id, user_input, agent_response),
        )

    def compact_text_index(self) -> None:
        """Rewrite the full-text index without the entries of deleted or edited pages. FTS5 keeps a
        deleted page's words in its b-tree (marked deleted) until segments merge; a user who deleted a
        page expects its words gone from the file, so lifecycle ops merge them out at once."""
        self._db.execute("INSERT INTO pages_fts(pages_fts) VALUES ('optimize')")

    def clear_full_text_index(self) -> None:
        """Empty the full-text index whole (FTS5's 'delete-all' for an external-content table)."""
        self._db.execute("INSERT INTO pages_fts(pages_fts) VALUES ('delete-all')")
        self.compact_text_index()

    def withdrawn_after(self, after_seq: int) -> tuple[list[int], int]:
        """(page ids, last seq) of vectors withdrawn after `after_seq`: what an index must drop."""
        rows = self._db.execute(
            "SELECT seq, page_id FROM withdrawn_vectors WHERE seq > ? ORDER BY seq", (after_seq,)
        ).fetchall()
        return [int(row[1]) for row in rows], int(rows[-1][0]) if rows else after_seq

    def vectors_if_covered(
        self, page_ids: Sequence[int], through_seq: int, dim: int
    ) -> tuple[list[int], np.ndarray]:
        """(ids, vectors) of those pages whose current vector has a sequence up to `through_seq`: the ones
        an index covering `through_seq` must hold after dropping their withdrawn vectors."""
        found: list[tuple[int, bytes]] = []
        for chunk, marks in id_chunks(page_ids):
            found += self._db.execute(
                f"SELECT page_id, vector FROM pages WHERE page_id IN ({marks}) AND vector_seq <= ?",
                [*chunk, through_seq],
            ).fetchall()
        return [int(row[0]) for row in found], from_blobs([row[1] for row in found], dim)

    def page_list(self, offset: int, limit: int) -> tuple[list[Page], int]:
        """Pages in id order from `offset`, at most `limit`, and how many the space holds."""
        rows = self._db.execute(
            f"SELECT {PAGE_COLUMNS} FROM {PAGE_FROM} ORDER BY p.page_id LIMIT ? OFFSET ?", (limit, offset)
        )
        pages = [page_from_row(row) for row in rows]
        return pages, int(self._one("SELECT COUNT(*) FROM pages"))

    def expired_page_ids(self, now: float) -> list[int]:
        rows = self._db.execute(
            "SELECT page_id FROM pages WHERE expires_at IS NOT NULL AND expires_at <= ? ORDER BY page_id",
            (now,),
        )
        return [int(row[0]) for row in rows]

    def analyzed_page_ids(self) -> list[int]:
        """Pages already merged into the profile and facts, in id order: what a profile rebuild reads."""
        return [
            int(row[0])
            for row in self._db.execute("SELECT page_id FROM pages WHERE analyzed = 1 ORDER BY page_id")
        ]

    def count_expired(self, now: float) -> int:
        return int(
            self._one("SELECT COUNT(*) FROM pages WHERE expires_at IS NOT NULL AND expires_at <= ?", (now,))
        )

    def next_expiry(self) -> float | None:
        """When the next page or fact expires (None: nothing expires)."""
        return self._one(
            "SELECT MIN(expires_at) FROM (SELECT expires_at FROM pages WHERE expires_at IS NOT NULL "
            "UNION ALL SELECT expires_at FROM knowledge WHERE expires_at IS NOT NULL)"
        )

    def count_analysis_attempt(self, page_ids: Sequence[int]) -> None:
        self._db.executemany(
            "UPDATE pages SET analysis_attempts = analysis_attempts + 1 WHERE page_id = ?",
            [(pid,) for pid in page_ids],
        )

    def analysis_attempts(self, page_ids: Sequence[int]) -> int:
        """The most refused analyses any of the pages had (0 for none, or no such page)."""
        most = 0
        for chunk, marks in id_chunks(page_ids):
            found = self._one(f"SELECT MAX(analysis_attempts) FROM pages WHERE page_id IN ({marks})", chunk)
            most = max(most, int(found or 0))
        return most

    def set_page_fields(self, page_ids: Sequence[int], **fields: Any) -> None:
        assignments = ", ".join(f"{name} = ?" for name in fields)
        self._db.executemany(
            f"UPDATE pages SET {assignments} WHERE page_id = ?", [(*fields.values(), pid) for pid in page_ids]
        )

    def document_frequencies(self, asks: Sequence[FrequencyAsk]) -> list[list[int]]:
        """For each ask, the pages matching each of its terms, in order (`FrequencyAsk`). Several asks
        at once save a database its round trips; a local file answers each term as it comes."""
        return [
            [self._document_frequency(term, ask.column, ask.at_most) for term in ask.terms] for ask in asks
        ]

    def _document_frequency(self, term: str, column: Side | None, at_most: int | None) -> int:
        expression = quoted(term) if column is None else f"{column} : {quoted(term)}"
        if at_most is None:
            return int(self._one("SELECT COUNT(*) FROM pages_fts WHERE pages_fts MATCH ?", (expression,)))
        return int(
            self._one(
                "SELECT COUNT(*) FROM (SELECT 1 FROM pages_fts WHERE pages_fts MATCH ? LIMIT ?)",
                (expression, at_most),
            )
        )

    def page_julian_days(self, page_ids: Sequence[int]) -> dict[int, float | None]:
        """Each page's timestamp as a Julian day number (SQLite parses the stored text)."""
        days: dict[int, float | None] = {}
        for chunk, marks in id_chunks(page_ids):
            days.update(
                self._db.execute(
                    f"SELECT page_id, julianday(timestamp) FROM pages WHERE page_id IN ({marks})", chunk
                ).fetchall()
            )
        return days

    def lexical_search(
        self, terms: Sequence[str], limit: int, column_weights: tuple[float, float] | None = None
    ) -> list[tuple[int, float]]:
        """(page_id, BM25 score) of the pages matching any of `terms`, best first. `column_weights` scale
        the (user_input, agent_response) sides' contributions; None weighs both 1."""
        if not terms:
            return []
        return self.match_search(" OR ".join(quoted(term) for term in terms), limit, column_weights)

    def match_search(
        self, match_expression: str, limit: int, column_weights: tuple[float, float] | None = None
    ) -> list[tuple[int, float]]:
        """`lexical_search` for an FTS5 MATCH expression (a benchmark's NEAR queries); SQLite's bm25() is
        negative-is-better, so it is negated."""
        weights = "" if column_weights is None else ", ?, ?"
        rows = self._db.execute(
            f"SELECT rowid, -bm25(pages_fts{weights}) AS score FROM pages_fts WHERE pages_fts MATCH ? "
            "ORDER BY score DESC LIMIT ?",
            (*(column_weights or ()), match_expression, limit),
        )
        return [(int(row[0]), float(row[1])) for row in rows]
