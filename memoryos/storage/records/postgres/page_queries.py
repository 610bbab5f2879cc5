"""`PostgresStore`'s queries over pages: the same contract as the SQLite store's
(`memoryos/storage/records/sqlite/page_queries.py`), each page's terms kept for BM25 (`lexical.py`)."""

import json
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from memoryos.storage.records.base import FrequencyAsk, PageSample, RankingRows, ranking_candidates
from memoryos.storage.records.postgres import lexical
from memoryos.storage.records.postgres.sqlite_dates import julian_days
from memoryos.storage.records.postgres.store_queries import (
    PAGE_FROM,
    LaterRows,
    PostgresQueries,
    Row,
    Statement,
    bigints,
)
from memoryos.storage.records.store_rows import PAGE_COLUMNS, page_from_row
from memoryos.storage.records.vector_blobs import from_blobs, to_blob
from memoryos.types import Page, Turn

PAGES_BY_ID = f"SELECT {PAGE_COLUMNS} FROM {PAGE_FROM} WHERE p.space_id = %s AND p.page_id = ANY(%s)"
NEWEST_IN_TIER = (
    f"SELECT {PAGE_COLUMNS} FROM {PAGE_FROM} WHERE p.space_id = %s AND p.tier = %s ORDER BY p.page_id DESC "
    "LIMIT %s"
)
NEXT_EXPIRY = (
    "LEAST((SELECT MIN(expires_at) FROM pages WHERE space_id = %(space)s), "
    "(SELECT MIN(expires_at) FROM knowledge WHERE space_id = %(space)s))"
)
"""When the space's next page or fact expires, as an expression (LEAST passes over a NULL)."""
SHORT_TERM_OVERFLOW = (
    f"SELECT {PAGE_COLUMNS} FROM {PAGE_FROM} WHERE p.space_id = %(space)s AND p.tier = 'stm' AND p.page_id < "
    "COALESCE((SELECT MIN(page_id) FROM pages WHERE space_id = %(space)s AND vector IS NULL AND tier = 'stm'), "
    "9223372036854775807) ORDER BY p.page_id LIMIT GREATEST(0, (SELECT COUNT(*) FROM pages "
    "WHERE space_id = %(space)s AND tier = 'stm') - %(capacity)s)"
).encode()
"""The short-term overflow (`PassMarks.overflow`), as the SQLite store's `short_term_overflow` reads it."""
RANKED_AND_NEWEST = (
    f"SELECT 0, {PAGE_COLUMNS} FROM {PAGE_FROM} WHERE p.space_id = %(space)s AND p.page_id = ANY(%(ids)s::bigint[]) "
    f"UNION ALL (SELECT 1, {PAGE_COLUMNS} FROM {PAGE_FROM} WHERE p.space_id = %(space)s AND p.tier = 'stm' "
    "ORDER BY p.page_id DESC LIMIT %(newest)s)"
)
"""`PAGES_BY_ID` and the newest `NEWEST_IN_TIER` of short-term memory in one statement, each row tagged
with its part (0: asked by id, 1: short-term, newest first): a retrieval's pages, one statement fewer
for psycopg and the server to handle (each costs about as much as its rows here)."""


_BEFORE = (
    "(SELECT page_id FROM pages WHERE space_id = %(space_id)s AND page_id = q.id - 1), "
    "(SELECT MAX(page_id) FROM pages WHERE space_id = %(space_id)s AND page_id < q.id)"
)
_AFTER = (
    "(SELECT page_id FROM pages WHERE space_id = %(space_id)s AND page_id = q.id + 1), "
    "(SELECT MIN(page_id) FROM pages WHERE space_id = %(space_id)s AND page_id > q.id)"
)
NEIGHBOURS = f"COALESCE({_BEFORE}), COALESCE({_AFTER})"
"""The columns (the id stored before it, the id after it) of the pages `q.id`: id±1 is probed first (one
primary-key lookup each), and only a gap is walked to the nearest id, as the SQLite store does. Scalar
subqueries, each a primary-key probe whatever the statistics: as `EXISTS`, a plan made before the space
was analyzed hashed every page of the space instead."""


RANKING_ROWS = f"""
WITH lexical AS MATERIALIZED ({lexical.LEXICAL_SEARCH}),
candidates AS MATERIALIZED (
    SELECT d.id FROM unnest(%(dense)s::bigint[]) AS d(id)
    UNION
    SELECT best.page_id FROM (SELECT page_id FROM lexical ORDER BY score DESC, page_id LIMIT %(pool)s) AS best
)
SELECT 0, page_id, score, NULL::bigint, NULL::bigint FROM lexical
UNION ALL
SELECT 1, n.id, NULL::float8, n.before, n.after FROM (
    SELECT q.id, COALESCE(b.id, {_BEFORE}) AS before, COALESCE(a.id, {_AFTER}) AS after
    FROM candidates q LEFT JOIN candidates b ON b.id = q.id - 1 LEFT JOIN candidates a ON a.id = q.id + 1
) AS n
WHERE n.before IS DISTINCT FROM n.id - 1 OR n.after IS DISTINCT FROM n.id + 1
"""
"""`ranking_rows` in one statement, each row tagged with its part: 0 a lexical hit (page, score), 1 a
candidate whose neighbours are not id-1 and id+1 (page, before, after). The candidates are
`ranking_candidates`' set: the dense hits and the `pool` best lexical hits, in the lexical search's order
(score, then id), so the set is the one the engine makes of the hits, and the caller gives every
candidate without a row id±1 for neighbours. Pages are consecutive unless some were deleted, so that is
most candidates: sending all of them, each a row to make, send and decode, cost a tenth of the
statement. A candidate whose id±1 is a candidate too has it for a neighbour with no probe (candidates
are pages: lexical hits of this statement, dense hits of the index, which holds the space's pages as of
the read's catch-up); the others' neighbours are read by primary-key probes (scalar subqueries,
evaluated only when needed), never by a join whose plan depends on statistics a database just filled
does not have. Many candidates sit side by side in a conversation: about 20% of the statement's time at
400 pages."""


_PAGE_SAMPLE = """
WITH counts AS MATERIALIZED (
    SELECT s.page_count,
           s.page_count - (SELECT count(*) FROM pages p WHERE p.space_id = s.space_id AND p.vector IS NULL)
               AS embedded
    FROM spaces s WHERE s.space_id = %(space)s
)
SELECT 0, counts.page_count, NULL::bytea FROM counts
UNION ALL
(
    SELECT 1, numbered.page_id,
           (SELECT p.vector FROM pages p WHERE p.space_id = %(space)s AND p.page_id = numbered.page_id)
    FROM (
        SELECT page_id, ROW_NUMBER() OVER (ORDER BY page_id) AS n FROM pages
        WHERE space_id = %(space)s AND vector IS NOT NULL
    ) AS numbered CROSS JOIN counts
    WHERE (numbered.n - 1) %% GREATEST(1, counts.embedded / %(size)s) = 0
    ORDER BY numbered.page_id LIMIT %(size)s
)
"""
"""`page_sample` in one statement, each row tagged with its part: 0 the space's page count, 1 a sampled
page (id, vector). The rows are numbered by id alone and only the chosen ones' vectors read (a probe
each): numbered with their vectors, every vector of the space went through the window (20 MB at 10,000
× 1024-d). The vectors are kept in their rows (`schema.py`), so each pass over a space's rows reads them
all from disk: the numbering is the one pass. The page count is the space's counter and the embedded
pages are the others than those waiting for a vector (`pages_pending`, a partial index): counted by
tier, then counted with a vector, the pages of a space reopened on a database just restarted were read
twice more, 50 ms of a cold open at 10,000 pages."""


PAGE_FIELDS = {
    "tier": "text",
    "segment_id": "bigint",
    "chain_id": "bigint",
    "analyzed": "boolean",
    "analysis_attempts": "int",
}
"""The columns of a page the engine updates by id (`set_page_fields`), with their types."""


_INSERT_TERMS = (
    "INSERT INTO page_terms(space_id, term, page_id, user_tf, agent_tf, length) SELECT %s, r.* FROM "
    "unnest(string_to_array(%s, chr(31)), %s::bigint[], %s::int[], %s::int[], %s::int[]) AS r"
)
"""Pages' terms (`term_rows`), the space's id first, sent as `terms_statement` makes them."""

TERM_SEPARATOR = "\x1f"
"""Between the terms of `terms_statement`'s one text (`chr(31)` in `_INSERT_TERMS`). No token holds it:
FTS5's unicode61 tokenizer ends a token at every control character."""


def terms_statement(sql: str, fixed: Sequence[Any], rows: Sequence[Row]) -> Statement:
    """`_INSERT_TERMS` with its rows as one value per column: the terms joined by `TERM_SEPARATOR`, and
    each integer column as an array literal, which the server splits and parses.

    Why not the binary arrays every other run of rows goes as (`binary_arrays`): psycopg adapts an array
    element by element in Python, and a run of a dozen pages has about 500 term rows, five columns each:
    0.42 ms a run with the columns made, against 0.13 ms this way (measured alone), which made the
    worker's applying about 6% faster (docs/service.md, "Measured a tenth time")."""
    terms, *numbers = zip(*rows, strict=True)
    literals = ("{" + ",".join(map(str, column)) + "}" for column in numbers)
    return sql.encode(), [*fixed, TERM_SEPARATOR.join(terms), *literals]


def term_rows(page_ids: Sequence[int], terms: Sequence[lexical.PageTerms]) -> list[Row]:
    """`_INSERT_TERMS`' rows for pages and their terms."""
    return [
        (term, page_id, user_tf, agent_tf, page.user_len + page.agent_len)
        for page_id, page in zip(page_ids, terms, strict=True)
        for term, (user_tf, agent_tf) in page.terms.items()
    ]


def in_order(rows: Sequence[tuple[Any, ...]], page_ids: Sequence[int]) -> list[Page]:
    """The pages of `PAGES_BY_ID`'s rows in the order of `page_ids`, missing ids skipped."""
    by_id = {row[0]: page_from_row(row) for row in rows}
    return [by_id[pid] for pid in page_ids if pid in by_id]


class PostgresPageQueries(PostgresQueries):
    """Pages: the turns of the conversation, their vectors (with their embedding sequence) and BM25."""

    def insert_pages(
        self,
        turns: Sequence[Turn],
        vectors: np.ndarray | None,
        at: float | None = None,
        expires_at: float | None = None,
        op_id: str | None = None,
    ) -> list[int]:
        if not turns:
            return []
        first = self._take("next_page_id", len(turns))
        ids = list(range(first, first + len(turns)))
        seq = self._take("max_vector_seq", 0 if vectors is None else len(turns)) + 1
        # Tokenized with the transaction's other new pages when its writes are sent (`TermsBatch`).
        batch = self._open_transaction().terms
        position = batch.add([(turn.user_input, turn.agent_response) for turn in turns])
        made = [
            (
                page_id,
                turn.user_input,
                turn.agent_response,
                turn.timestamp,
                json.dumps(turn.meta_data) if turn.meta_data else None,
                None if vectors is None else to_blob(vectors[i]),
                None if vectors is None else seq + i,
            )
            for i, (page_id, turn) in enumerate(zip(ids, turns, strict=True))
        ]

        def page_rows() -> list[tuple[Any, ...]]:
            return [
                (*row, terms.user_len, terms.agent_len, at, at, expires_at, op_id)
                for row, terms in zip(made, batch.terms(position, len(ids)), strict=True)
            ]

        # One statement for a run of writes, arrays per column: a statement per page cost most of a write.
        self._write_rows(
            "INSERT INTO pages(space_id, page_id, user_input, agent_response, timestamp, meta_data, vector, "
            "vector_seq, user_len, agent_len, created_at, updated_at, expires_at, op_id) "
            "SELECT %s, r.* FROM unnest(%s::bigint[], %s::text[], %s::text[], %s::text[], %s::text[], "
            "%s::bytea[], %s::bigint[], %s::int[], %s::int[], %s::float8[], %s::float8[], %s::float8[], "
            "%s::text[]) AS r",
            (self.space_id,),
            page_rows,
        )
        self._write_terms(lambda: term_rows(ids, batch.terms(position, len(ids))))
        self._count_pages(len(ids), 0)  # the tokens are counted when tokenized
        return ids

    def _write_terms(self, rows: Iterable[Row] | LaterRows) -> None:
        """Pages' term rows (`term_rows`): `_INSERT_TERMS`, always in the form `terms_statement` makes."""
        self._write_rows(_INSERT_TERMS, (self.space_id,), rows, terms_statement)

    def pages(self, page_ids: Sequence[int]) -> list[Page]:
        if not page_ids:
            return []
        kept = self._kept_page_rows(page_ids)  # read with the transaction's BEGIN
        if kept is not None:
            return [page_from_row(row) for row in kept]
        return in_order(self._all(PAGES_BY_ID, (self.space_id, list(page_ids))), page_ids)

    def _page_rows(self, where: str, params: Sequence[Any], tail: str = "") -> list[Page]:
        rows = self._all(
            f"SELECT {PAGE_COLUMNS} FROM {PAGE_FROM} WHERE p.space_id = %s AND {where} {tail}",
            (self.space_id, *params),
        )
        return [page_from_row(row) for row in rows]

    def pages_in_tier(self, tier: str) -> list[Page]:
        return self._page_rows("p.tier = %s", (tier,), "ORDER BY p.page_id")

    def newest_in_tier(self, tier: str, limit: int) -> list[Page]:
        return [page_from_row(row) for row in self._all(NEWEST_IN_TIER, (self.space_id, tier, limit))][::-1]

    def count_pages(self) -> dict[str, int]:
        rows = self._all(
            "SELECT tier, COUNT(*) FROM pages WHERE space_id = %s GROUP BY tier", (self.space_id,)
        )
        return {row[0]: int(row[1]) for row in rows}

    def page_vectors(self, page_ids: Sequence[int], dim: int) -> np.ndarray:
        return self._vectors_by_id("pages", "page_id", page_ids, dim)

    def ranking_rows(
        self,
        dense_ids: Sequence[int],
        terms: Sequence[str],
        limit: int,
        pool: int,
        column_weights: tuple[float, float] | None,
    ) -> RankingRows:
        """As `SqliteStore.ranking_rows`, in one statement (`RANKING_ROWS`): the lexical search and the
        neighbours of the candidates it makes, which waited for it."""
        params = lexical.search_params(self.space_id, terms, limit, column_weights)
        hits: list[tuple[int, float]] = []
        apart: dict[int, tuple[int | None, int | None]] = {}
        for part, page_id, score, before, after in self._all(
            RANKING_ROWS, {**params, "dense": bigints(dense_ids), "pool": pool}
        ):
            if part == 0:
                hits.append((int(page_id), float(score)))
            else:
                apart[int(page_id)] = (before, after)
        hits.sort(key=lambda hit: (-hit[1], hit[0]))
        neighbours = {
            pid: apart.get(pid, (pid - 1, pid + 1)) for pid in ranking_candidates(dense_ids, hits, pool)
        }
        return RankingRows(hits, neighbours)

    def embedded_page_vectors(self, page_ids: Sequence[int], dim: int) -> tuple[list[int], np.ndarray]:
        found = dict(
            self._all(
                "SELECT page_id, vector FROM pages WHERE space_id = %s AND page_id = ANY(%s) "
                "AND vector IS NOT NULL",
                (self.space_id, list(page_ids)),
                binary=True,
            )
        )
        ids = [pid for pid in page_ids if pid in found]
        return ids, from_blobs([bytes(found[pid]) for pid in ids], dim)

    def page_vectors_after(self, after_seq: int, dim: int, limit: int) -> tuple[np.ndarray, np.ndarray, int]:
        if self._none_given_after("max_vector_seq", after_seq):
            return np.zeros(0, dtype=np.int64), np.zeros((0, dim), dtype=np.float32), after_seq
        rows = self._all(
            "SELECT page_id, vector, vector_seq FROM pages WHERE space_id = %s AND vector_seq > %s "
            "ORDER BY vector_seq LIMIT %s",
            (self.space_id, after_seq, limit),
            binary=True,
        )
        ids = np.array([row[0] for row in rows], dtype=np.int64)
        return ids, from_blobs([bytes(row[1]) for row in rows], dim), int(rows[-1][2]) if rows else after_seq

    def max_vector_seq(self) -> int:
        """The last vector sequence given out (a counter that never goes back, so no sequence is reused
        after a page is deleted)."""
        return self._counter("max_vector_seq")

    def page_sample(self, size: int, dim: int) -> PageSample:
        """As `SqliteStore.page_sample`, in one statement (`_PAGE_SAMPLE`); the page count is the space's
        counter, kept for BM25, not a count of its rows."""
        rows = self._all(_PAGE_SAMPLE, {"space": self.space_id, "size": size}, binary=True)
        sampled = sorted((row[1], bytes(row[2])) for row in rows if row[0] == 1)
        return PageSample(
            next((int(row[1]) for row in rows if row[0] == 0), 0),
            from_blobs([vector for _, vector in sampled], dim),
        )

    def page_total(self) -> int:
        """The space's page counter, kept for BM25 (`page_sample`'s count)."""
        return int(self._one("SELECT page_count FROM spaces WHERE space_id = %s", (self.space_id,)))

    def all_page_texts(self) -> list[tuple[int, str, str]]:
        rows = self._all(
            "SELECT page_id, user_input, agent_response FROM pages WHERE space_id = %s", (self.space_id,)
        )
        return [(int(row[0]), row[1], row[2]) for row in rows]

    def count_pending(self, through_page_id: int | None = None) -> int:
        bound = 9223372036854775807 if through_page_id is None else through_page_id
        return int(
            self._one(
                "SELECT COUNT(*) FROM pages WHERE space_id = %s AND vector IS NULL AND page_id <= %s",
                (self.space_id, bound),
            )
        )

    def pending_page_ids(self, limit: int) -> list[int]:
        rows = self._all(
            "SELECT page_id FROM pages WHERE space_id = %s AND vector IS NULL ORDER BY page_id LIMIT %s",
            (self.space_id, limit),
        )
        return [int(row[0]) for row in rows]

    def pending_pages(self, limit: int) -> list[Page]:
        return self._page_rows("p.vector IS NULL", (limit,), "ORDER BY p.page_id LIMIT %s")

    def set_page_vectors(self, page_ids: Sequence[int], vectors: np.ndarray) -> tuple[list[int], np.ndarray]:
        pending = set(self.pending_among(page_ids))
        rows = [i for i, pid in enumerate(page_ids) if pid in pending]
        chosen = [page_ids[i] for i in rows]
        self.assign_vectors(list(zip(chosen, vectors[rows], strict=True)))
        return chosen, vectors[rows]

    def pending_among(self, page_ids: Sequence[int]) -> list[int]:
        kept = self._kept_page_rows(page_ids)  # read with the transaction's BEGIN
        if kept is not None:
            return [page.page_id for page in map(page_from_row, kept) if not page.embedded]
        rows = self._all(
            "SELECT page_id FROM pages WHERE space_id = %s AND page_id = ANY(%s) AND vector IS NULL",
            (self.space_id, list(page_ids)),
        )
        return [int(row[0]) for row in rows]

    def assign_vectors(self, vectors: Sequence[tuple[int, np.ndarray]]) -> None:
        if not vectors:
            return
        first = self._take("max_vector_seq", len(vectors)) + 1
        self._write(
            "UPDATE pages p SET vector = v.vector, vector_seq = v.seq FROM unnest(%s::bigint[], %s::bytea[], "
            "%s::bigint[]) AS v(page_id, vector, seq) WHERE p.space_id = %s AND p.page_id = v.page_id",
            (
                [pid for pid, _ in vectors],
                [to_blob(vector) for _, vector in vectors],
                list(range(first, first + len(vectors))),
                self.space_id,
            ),
        )

    def max_page_id(self) -> int:
        return int(
            self._one("SELECT COALESCE(MAX(page_id), 0) FROM pages WHERE space_id = %s", (self.space_id,))
        )

    def neighbour_ids(self, page_ids: Sequence[int]) -> dict[int, tuple[int | None, int | None]]:
        """For each page, the ids of the pages stored just before and after it, in one statement.

        Ids are consecutive unless pages were deleted, so id±1 is probed first (one primary-key lookup
        each) and only a gap is walked to the nearest id, as the SQLite store does: a MIN/MAX per page
        cost several times as much."""
        if not page_ids:
            return {}
        rows = self._all(
            f"SELECT q.id, {NEIGHBOURS} FROM unnest(%(ids)s::bigint[]) AS q(id)",
            {"space_id": self.space_id, "ids": bigints(page_ids)},
        )
        found = {int(row[0]): (row[1], row[2]) for row in rows}
        return {pid: found[pid] for pid in page_ids}

    # --- lifecycle: edits, deletes, expiry, paging ------------------------------------------------------
    def _withdraw_vectors(self, page_ids: Sequence[int]) -> None:
        first = self._take("next_withdrawn_seq", len(page_ids))
        self._write_rows(
            "INSERT INTO withdrawn_vectors(space_id, seq, page_id) SELECT %s, r.* FROM "
            "unnest(%s::bigint[], %s::bigint[]) AS r",
            (self.space_id,),
            [(first + i, pid) for i, pid in enumerate(page_ids)],
        )

    def delete_pages(self, pages: Sequence[Page]) -> None:
        ids = [page.page_id for page in pages]
        self._count_pages(-len(pages), -self._tokens_of(ids))
        self._withdraw_vectors([page.page_id for page in pages if page.embedded])
        self._write("DELETE FROM page_terms WHERE space_id = %s AND page_id = ANY(%s)", (self.space_id, ids))
        self._write("DELETE FROM pages WHERE space_id = %s AND page_id = ANY(%s)", (self.space_id, ids))

    def replace_page_text(
        self, page: Page, user_input: str, agent_response: str, meta_data: dict[str, Any], at: float
    ) -> None:
        if page.embedded:
            self._withdraw_vectors([page.page_id])
        (terms,) = lexical.page_terms([(user_input, agent_response)])
        self._count_pages(0, terms.user_len + terms.agent_len - self._tokens_of([page.page_id]))
        self._write(
            "UPDATE pages SET user_input = %s, agent_response = %s, meta_data = %s, vector = NULL, "
            "vector_seq = NULL, analyzed = false, analysis_attempts = 0, updated_at = %s, user_len = %s, "
            "agent_len = %s WHERE space_id = %s AND page_id = %s",
            (
                user_input,
                agent_response,
                json.dumps(meta_data) if meta_data else None,
                at,
                terms.user_len,
                terms.agent_len,
                self.space_id,
                page.page_id,
            ),
        )
        self._write(
            "DELETE FROM page_terms WHERE space_id = %s AND page_id = %s", (self.space_id, page.page_id)
        )
        self._write_terms(term_rows([page.page_id], [terms]))

    def _tokens_of(self, page_ids: Sequence[int]) -> int:
        return int(
            self._one(
                "SELECT COALESCE(SUM(user_len + agent_len), 0) FROM pages WHERE space_id = %s AND page_id = ANY(%s)",
                (self.space_id, list(page_ids)),
            )
        )

    def compact_text_index(self) -> None:
        """Nothing to merge: a deleted page's terms are rows, deleted with it."""

    def clear_full_text_index(self) -> None:
        self._write("DELETE FROM page_terms WHERE space_id = %s", (self.space_id,))

    def withdrawn_after(self, after_seq: int) -> tuple[list[int], int]:
        # `next_withdrawn_seq` is the next to give out: none past `after_seq` while it is at most one more
        if self._none_given_after("next_withdrawn_seq", after_seq + 1):
            return [], after_seq
        rows = self._all(
            "SELECT seq, page_id FROM withdrawn_vectors WHERE space_id = %s AND seq > %s ORDER BY seq",
            (self.space_id, after_seq),
        )
        return [int(row[1]) for row in rows], int(rows[-1][0]) if rows else after_seq

    def vectors_if_covered(
        self, page_ids: Sequence[int], through_seq: int, dim: int
    ) -> tuple[list[int], np.ndarray]:
        rows = self._all(
            "SELECT page_id, vector FROM pages WHERE space_id = %s AND page_id = ANY(%s) AND vector_seq <= %s",
            (self.space_id, list(page_ids), through_seq),
            binary=True,
        )
        return [int(row[0]) for row in rows], from_blobs([bytes(row[1]) for row in rows], dim)

    def page_list(self, offset: int, limit: int) -> tuple[list[Page], int]:
        pages = self._page_rows("true", (limit, offset), "ORDER BY p.page_id LIMIT %s OFFSET %s")
        return pages, int(self._one("SELECT COUNT(*) FROM pages WHERE space_id = %s", (self.space_id,)))

    def expired_page_ids(self, now: float) -> list[int]:
        rows = self._all(
            "SELECT page_id FROM pages WHERE space_id = %s AND expires_at <= %s ORDER BY page_id",
            (self.space_id, now),
        )
        return [int(row[0]) for row in rows]

    def analyzed_page_ids(self) -> list[int]:
        rows = self._all(
            "SELECT page_id FROM pages WHERE space_id = %s AND analyzed ORDER BY page_id", (self.space_id,)
        )
        return [int(row[0]) for row in rows]

    def count_expired(self, now: float) -> int:
        return int(
            self._one(
                "SELECT COUNT(*) FROM pages WHERE space_id = %s AND expires_at <= %s", (self.space_id, now)
            )
        )

    def next_expiry(self) -> float | None:
        """When the next page or fact expires (None: nothing expires); LEAST passes over a NULL."""
        return self._one(f"SELECT {NEXT_EXPIRY}", {"space": self.space_id})

    def count_analysis_attempt(self, page_ids: Sequence[int]) -> None:
        self._update_fields("pages", "page_id", PAGE_FIELDS, page_ids, "+", analysis_attempts=1)

    def analysis_attempts(self, page_ids: Sequence[int]) -> int:
        found = self._one(
            "SELECT MAX(analysis_attempts) FROM pages WHERE space_id = %s AND page_id = ANY(%s)",
            (self.space_id, list(page_ids)),
        )
        return int(found or 0)

    def set_page_fields(self, page_ids: Sequence[int], **fields: Any) -> None:
        """Gathered with the transaction's other updates of pages (`_update_fields`): consolidation sets
        each page's chain and then its tier and segment, one update each, in every commit."""
        values = {name: bool(v) if name == "analyzed" else v for name, v in fields.items()}
        self._update_fields("pages", "page_id", PAGE_FIELDS, page_ids, "=", **values)

    def document_frequencies(self, asks: Sequence[FrequencyAsk]) -> list[list[int]]:
        """As `SqliteStore.document_frequencies`, every term of every ask in one statement."""
        with self._connection() as connection:
            return lexical.document_frequencies(connection, self.space_id, asks)

    def page_julian_days(self, page_ids: Sequence[int]) -> dict[int, float | None]:
        """Each page's timestamp as a Julian day number, read by SQLite's own `julianday` (`sqlite_dates.py`)."""
        rows = self._all(
            "SELECT page_id, timestamp FROM pages WHERE space_id = %s AND page_id = ANY(%s)",
            (self.space_id, list(page_ids)),
        )
        return dict(zip((int(row[0]) for row in rows), julian_days([row[1] for row in rows]), strict=True))

    def lexical_search(
        self, terms: Sequence[str], limit: int, column_weights: tuple[float, float] | None = None
    ) -> list[tuple[int, float]]:
        with self._connection() as connection:
            return lexical.lexical_search(connection, self.space_id, terms, limit, column_weights)
