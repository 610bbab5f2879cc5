"""Rows of either record store (SQLite's, PostgreSQL's) as `Page`, `Segment` and `KnowledgeEntry` values.

A page is read by position (its chain summary comes from a join), so the column list and the conversion
live together here: changing one without the other would shift every field. Both stores select the same
columns; only the join differs (`PAGE_FROM` is SQLite's: PostgreSQL's joins on the space too).
"""

import json
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from memoryos.types import KnowledgeEntry, Page, Segment

PAGE_COLUMNS = (
    "p.page_id, p.user_input, p.agent_response, p.timestamp, p.meta_data, p.tier, p.segment_id, "
    "p.chain_id, p.analyzed, c.summary, p.vector IS NOT NULL, p.created_at, p.updated_at, p.expires_at, "
    "p.op_id"
)
"""Selected from `PAGE_FROM` (or PostgreSQL's join), in the order `page_from_row` reads them."""
PAGE_FROM = "pages p LEFT JOIN chains c ON c.chain_id = p.chain_id"


def page_from_row(row: sqlite3.Row | tuple[Any, ...]) -> Page:
    return Page(
        page_id=row[0],
        user_input=row[1],
        agent_response=row[2],
        timestamp=row[3],
        meta_data=json.loads(row[4]) if row[4] else {},
        tier=row[5],
        segment_id=row[6],
        chain_id=row[7],
        analyzed=bool(row[8]),
        meta_info=row[9],
        embedded=bool(row[10]),
        created_at=row[11],
        updated_at=row[12],
        expires_at=row[13],
        op_id=row[14],
    )


SEGMENT_COLUMNS = (
    "s.segment_id, s.summary, s.keywords, s.visit_count, s.interaction_count, s.last_visit_at, "
    "s.created_at, s.archived, s.updated_at"
)
"""What `segment_from_row` reads, selected from `segments s` (not its vector: most readers never use it)."""


def segment_from_row(row: sqlite3.Row | Mapping[str, Any]) -> Segment:
    """A `SELECT {SEGMENT_COLUMNS}, <count> AS page_count FROM segments s` row."""
    return Segment(
        segment_id=row["segment_id"],
        summary=row["summary"],
        keywords=json.loads(row["keywords"]),
        visit_count=row["visit_count"],
        interaction_count=row["interaction_count"],
        last_visit_at=row["last_visit_at"],
        created_at=row["created_at"],
        page_count=row["page_count"],
        archived=bool(row["archived"]),
        updated_at=row["updated_at"],
    )


ENTRY_COLUMNS = (
    "k.entry_id, k.kind, k.text, k.timestamp, k.created_at, k.updated_at, k.expires_at, k.origin, k.active, "
    "k.replaced_by"
)
"""What `entry_from_row` reads, selected from `knowledge k`."""


def entry_from_row(row: sqlite3.Row | Sequence[Any], sources: list[int]) -> KnowledgeEntry:
    """A `SELECT {ENTRY_COLUMNS}` row as a fact, with the pages it stands on."""
    return KnowledgeEntry(
        entry_id=row[0],
        kind=row[1],
        knowledge=row[2],
        timestamp=row[3],
        created_at=row[4],
        updated_at=row[5],
        expires_at=row[6],
        origin=row[7],
        active=bool(row[8]),
        replaced_by=row[9],
        source_page_ids=sources,
    )
