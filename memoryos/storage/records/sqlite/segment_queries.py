"""`SqliteStore`'s queries over mid-term memory: dialogue chains and topic segments."""

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

import numpy as np

from memoryos.storage.records.base import ActiveSegments
from memoryos.storage.records.sqlite.store_queries import StoreQueries
from memoryos.storage.records.store_rows import SEGMENT_COLUMNS, segment_from_row
from memoryos.storage.records.vector_blobs import from_blobs, to_blob
from memoryos.types import Segment


class SegmentQueries(StoreQueries):
    """Chains (a summary per dialogue chain) and segments (a topic, its vector, keywords and counters)."""

    # --- chains ---------------------------------------------------------------------------------------
    def upsert_chain(self, chain_id: int, summary: str) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO chains(chain_id, summary, stale) VALUES (?, ?, 0)", (chain_id, summary)
        )

    # --- derived texts to rebuild after a page was deleted or edited ----------------------------------
    def mark_stale(self, chain_ids: Sequence[int], segment_ids: Sequence[int]) -> None:
        """Chains and segments whose summary may carry text of a page deleted or edited since: emptied
        ones are removed at once, the rest keep their summary until the next consolidation rewrites it."""
        for chain_id in chain_ids:
            if not self.chain_page_ids(chain_id):
                self._db.execute("DELETE FROM chains WHERE chain_id = ?", (chain_id,))
            else:
                self._db.execute("UPDATE chains SET stale = 1 WHERE chain_id = ?", (chain_id,))
        for segment_id in segment_ids:
            if not self.segment_page_ids(segment_id):
                self._db.execute("DELETE FROM segments WHERE segment_id = ?", (segment_id,))
            else:
                self._db.execute("UPDATE segments SET stale = 1 WHERE segment_id = ?", (segment_id,))

    def stale_chain_ids(self) -> list[int]:
        return [row[0] for row in self._db.execute("SELECT chain_id FROM chains WHERE stale = 1")]

    def stale_segment_ids(self) -> list[int]:
        return [row[0] for row in self._db.execute("SELECT segment_id FROM segments WHERE stale = 1")]

    def chain_page_ids(self, chain_id: int) -> list[int]:
        rows = self._db.execute("SELECT page_id FROM pages WHERE chain_id = ? ORDER BY page_id", (chain_id,))
        return [row[0] for row in rows]

    # --- segments -------------------------------------------------------------------------------------
    def active_segments(self, count_pages: bool = False) -> list[Segment]:
        """Segments in mid-term memory. Counting their pages reads every page's index entry, so only
        `stats` asks for it; heat and placement do not need it."""
        count = "(SELECT COUNT(*) FROM pages p WHERE p.segment_id = s.segment_id)" if count_pages else "0"
        return [segment_from_row(row) for row in self._active_segment_rows(f"{count} AS page_count")]

    def active_segments_with_vectors(self, dim: int) -> ActiveSegments:
        """The active segments, their vectors and topic counts, in one read: filing a topic compares it
        with every one of them, once per page run leaving short-term memory."""
        rows = self._active_segment_rows("0 AS page_count, s.vector, s.topic_count")
        return ActiveSegments(
            [segment_from_row(row) for row in rows],
            from_blobs([row["vector"] for row in rows], dim),
            [int(row["topic_count"]) for row in rows],
        )

    def _active_segment_rows(self, extra_columns: str) -> list[sqlite3.Row]:
        return self._db.execute(
            f"SELECT {SEGMENT_COLUMNS}, {extra_columns} FROM segments s WHERE s.archived = 0 "
            "ORDER BY s.segment_id"
        ).fetchall()

    def all_segment_ids(self) -> list[int]:
        return [row[0] for row in self._db.execute("SELECT segment_id FROM segments")]

    def insert_segment(
        self, summary: str, keywords: list[str], vector: np.ndarray, at: float, interactions: int
    ) -> int:
        cursor = self._db.execute(
            "INSERT INTO segments(summary, keywords, vector, last_visit_at, created_at, interaction_count) "
            "VALUES (?,?,?,?,?,?)",
            (summary, json.dumps(keywords), to_blob(vector), at, at, interactions),
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
