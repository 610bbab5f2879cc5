"""`PostgresStore`'s queries over mid-term memory: dialogue chains and topic segments (the contract of
`memoryos/storage/records/sqlite/segment_queries.py`)."""

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from memoryos.storage.records.base import ActiveSegments
from memoryos.storage.records.postgres.store_queries import PostgresQueries
from memoryos.storage.records.store_rows import SEGMENT_COLUMNS, segment_from_row
from memoryos.storage.records.vector_blobs import from_blobs, to_blob
from memoryos.types import Segment

FLAGS = frozenset({"archived", "stale"})
"""Segment columns the engine sets as 0/1 (SQLite's integers), booleans here."""

SEGMENT_FIELDS = {
    "summary": "text",
    "keywords": "text",
    "vector": "bytea",
    "topic_count": "int",
    "visit_count": "int",
    "interaction_count": "int",
    "last_visit_at": "float8",
    "updated_at": "float8",
    "archived": "boolean",
    "stale": "boolean",
}
"""The columns of a segment the engine updates (`update_segment`, `add_segment_counters`), with their types."""


HAS_UNANALYZED_PAGES = (
    "EXISTS (SELECT 1 FROM pages p WHERE p.space_id = s.space_id AND p.segment_id = s.segment_id "
    "AND NOT p.analyzed AND p.tier = 'mtm')"
)
"""Whether segment `s` has pages not yet analyzed: a probe of the partial index `pages_unanalyzed`."""


def active_segments_query(extra_columns: str) -> str:
    """The space's (`%(space)s`) active segments in id order, `SEGMENT_COLUMNS` and `extra_columns`."""
    return (
        f"SELECT {SEGMENT_COLUMNS}, {extra_columns} FROM segments s WHERE s.space_id = %(space)s "
        "AND NOT s.archived ORDER BY s.segment_id"
    )


class PostgresSegmentQueries(PostgresQueries):
    """Chains (a summary per dialogue chain) and segments (a topic, its vector, keywords and counters)."""

    def upsert_chain(self, chain_id: int, summary: str) -> None:
        """One row of a statement for the transaction's chains (`_write_rows`); a chain given twice keeps
        its last summary (one row a chain: an upsert may not touch a row twice)."""
        self._write_rows(
            "INSERT INTO chains(space_id, chain_id, summary, stale) SELECT DISTINCT ON (r.chain_id) %s, "
            "r.chain_id, r.summary, false FROM unnest(%s::bigint[], %s::text[]) WITH ORDINALITY AS "
            "r(chain_id, summary, position) ORDER BY r.chain_id, r.position DESC "
            "ON CONFLICT (space_id, chain_id) DO UPDATE SET summary = EXCLUDED.summary, stale = false",
            (self.space_id,),
            [(chain_id, summary)],
        )

    def mark_stale(self, chain_ids: Sequence[int], segment_ids: Sequence[int]) -> None:
        """As the SQLite store's: emptied chains and segments go, the others are marked for a rewrite."""
        for chain_id in chain_ids:
            if not self.chain_page_ids(chain_id):
                self._write(
                    "DELETE FROM chains WHERE space_id = %s AND chain_id = %s", (self.space_id, chain_id)
                )
            else:
                self._write(
                    "UPDATE chains SET stale = true WHERE space_id = %s AND chain_id = %s",
                    (self.space_id, chain_id),
                )
        for segment_id in segment_ids:
            if not self.segment_page_ids(segment_id):
                self._write(
                    "DELETE FROM segments WHERE space_id = %s AND segment_id = %s",
                    (self.space_id, segment_id),
                )
            else:
                self._write(
                    "UPDATE segments SET stale = true WHERE space_id = %s AND segment_id = %s",
                    (self.space_id, segment_id),
                )

    def stale_chain_ids(self) -> list[int]:
        return self._ids("SELECT chain_id FROM chains WHERE space_id = %s AND stale")

    def stale_segment_ids(self) -> list[int]:
        return self._ids("SELECT segment_id FROM segments WHERE space_id = %s AND stale")

    def chain_page_ids(self, chain_id: int) -> list[int]:
        return self._ids(
            "SELECT page_id FROM pages WHERE space_id = %s AND chain_id = %s ORDER BY page_id", chain_id
        )

    def _ids(self, sql: str, *params: Any) -> list[int]:
        return [int(row[0]) for row in self._all(sql, (self.space_id, *params))]

    def active_segments(self, count_pages: bool = False) -> list[Segment]:
        count = (
            "(SELECT COUNT(*) FROM pages p WHERE p.space_id = s.space_id AND p.segment_id = s.segment_id)"
            if count_pages
            else "0"
        )
        return [segment_from_row(row) for row in self._active_segment_rows(f"{count} AS page_count")]

    def active_segments_with_vectors(self, dim: int) -> ActiveSegments:
        rows = self._active_segment_rows("0 AS page_count, s.vector, s.topic_count")
        return ActiveSegments(
            [segment_from_row(row) for row in rows],
            from_blobs([bytes(row["vector"]) for row in rows], dim),
            [int(row["topic_count"]) for row in rows],
        )

    def _active_segment_rows(self, extra_columns: str) -> list[dict[str, Any]]:
        rows = self._dicts(active_segments_query(extra_columns), {"space": self.space_id})
        for row in rows:
            row["archived"] = bool(row["archived"])
        return rows

    def all_segment_ids(self) -> list[int]:
        return self._ids("SELECT segment_id FROM segments WHERE space_id = %s")

    def insert_segment(
        self, summary: str, keywords: list[str], vector: np.ndarray, at: float, interactions: int
    ) -> int:
        segment_id = self._take("next_segment_id")
        self._write_rows(
            "INSERT INTO segments(space_id, segment_id, summary, keywords, vector, last_visit_at, created_at, "
            "interaction_count) SELECT %s, r.* FROM unnest(%s::bigint[], %s::text[], %s::text[], "
            "%s::bytea[], %s::float8[], %s::float8[], %s::int[]) AS r",
            (self.space_id,),
            [(segment_id, summary, json.dumps(keywords), to_blob(vector), at, at, interactions)],
        )
        return segment_id

    def update_segment(self, segment_id: int, **fields: Any) -> None:
        """Gathered with the transaction's other updates of segments (`_update_fields`)."""
        values = {
            k: json.dumps(v)
            if k == "keywords"
            else to_blob(v)
            if k == "vector"
            else bool(v)
            if k in FLAGS
            else v
            for k, v in fields.items()
        }
        self._update_fields("segments", "segment_id", SEGMENT_FIELDS, [segment_id], "=", **values)

    def add_segment_counters(self, segment_id: int, visits: int, interactions: int, at: float) -> None:
        self._update_fields(
            "segments",
            "segment_id",
            SEGMENT_FIELDS,
            [segment_id],
            "+",
            visit_count=visits,
            interaction_count=interactions,
        )
        self._update_fields("segments", "segment_id", SEGMENT_FIELDS, [segment_id], "max", last_visit_at=at)

    def unanalyzed_segment_ids(self) -> set[int]:
        return set(
            self._ids(
                f"SELECT s.segment_id FROM segments s WHERE s.space_id = %s AND NOT s.archived AND "
                f"{HAS_UNANALYZED_PAGES}"
            )
        )

    def segment_page_ids(self, segment_id: int, only_unanalyzed: bool = False) -> list[int]:
        extra = " AND NOT analyzed" if only_unanalyzed else ""
        return self._ids(
            f"SELECT page_id FROM pages WHERE space_id = %s AND segment_id = %s{extra} ORDER BY page_id",
            segment_id,
        )
