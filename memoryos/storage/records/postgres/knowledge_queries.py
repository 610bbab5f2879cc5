"""`PostgresStore`'s queries over long-term memory: facts and the profile (the contract of
`memoryos/storage/records/sqlite/knowledge_queries.py`)."""

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from memoryos.storage.records.postgres.store_queries import PostgresQueries
from memoryos.storage.records.store_rows import ENTRY_COLUMNS, entry_from_row
from memoryos.storage.records.vector_blobs import to_blob
from memoryos.types import FactOrigin, KnowledgeEntry, KnowledgeKind

_LINES = (
    "line(root, e) AS (SELECT e, e FROM roots UNION "
    "SELECT line.root, k.entry_id FROM knowledge k JOIN line ON k.space_id = %(space)s "
    "AND k.replaced_by = line.e)"
)
"""`roots` and every version each replaced, recursively: the versions whose sources support it."""


ACTIVE_COLUMNS = ("entry_id", "text", "timestamp", "vector", "updated_at", "expires_at")
"""What `active_knowledge` gives of each fact (`active_fact`)."""


def active_fact(row: Sequence[Any]) -> dict[str, Any]:
    """A row of `ACTIVE_COLUMNS` as `active_knowledge` gives it: the vector as bytes."""
    fact = dict(zip(ACTIVE_COLUMNS, row, strict=True))
    fact["vector"] = bytes(fact["vector"])
    return fact


FACT_SUPPORT = (
    "WITH RECURSIVE roots(e) AS (SELECT entry_id FROM knowledge WHERE space_id = %(space)s "
    f"AND entry_id = ANY(%(ids)s)), {_LINES} SELECT line.root, ARRAY(SELECT s.page_id FROM "
    "knowledge_sources s WHERE s.space_id = %(space)s AND s.entry_id = line.e) FROM line"
)
"""`fact_support`'s statement: each version's sources read through the primary key, per version (a
correlated ARRAY); a join let the planner hash every source of the space, most of the statement's time."""


def support_of(entry_ids: Sequence[int], rows: Sequence[tuple[Any, ...]]) -> dict[int, list[int]]:
    """`fact_support` of `entry_ids` from the rows of `FACT_SUPPORT`."""
    support: dict[int, set[int]] = {int(e): set() for e in entry_ids}
    for root, page_ids in rows:
        support[int(root)].update(int(page_id) for page_id in page_ids)
    return {entry_id: sorted(pages) for entry_id, pages in support.items()}


class PostgresKnowledgeQueries(PostgresQueries):
    """Facts (active, or retired as history) and the profile's versions."""

    def active_knowledge(self, kind: KnowledgeKind) -> list[dict[str, Any]]:
        rows = self._all(
            f"SELECT {', '.join(ACTIVE_COLUMNS)} FROM knowledge WHERE space_id = %s AND kind = %s AND active "
            "ORDER BY entry_id",
            (self.space_id, kind),
            binary=True,
        )
        return [active_fact(row) for row in rows]

    def insert_knowledge(
        self,
        kind: KnowledgeKind,
        text: str,
        timestamp: str,
        vector: np.ndarray,
        at: float,
        source_page_ids: Sequence[int] = (),
        origin: FactOrigin = "consolidation",
        expires_at: float | None = None,
    ) -> int:
        entry_id = self._take("next_entry_id")
        self._write(
            "INSERT INTO knowledge(space_id, entry_id, kind, text, timestamp, vector, updated_at, created_at, "
            "origin, expires_at) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)",
            (self.space_id, entry_id, kind, text, timestamp, to_blob(vector), at, at, origin, expires_at),
        )
        self.add_knowledge_sources(entry_id, source_page_ids)
        return entry_id

    def add_knowledge_sources(self, entry_id: int, page_ids: Sequence[int]) -> None:
        self._write_rows(
            "INSERT INTO knowledge_sources(space_id, entry_id, page_id) SELECT %s, r.* FROM "
            "unnest(%s::bigint[], %s::bigint[]) AS r ON CONFLICT DO NOTHING",
            (self.space_id,),
            [(entry_id, pid) for pid in page_ids],
        )

    def knowledge_entries(self, entry_ids: Sequence[int]) -> list[KnowledgeEntry]:
        if not entry_ids:
            return []
        rows = self._all(
            f"SELECT {ENTRY_COLUMNS} FROM knowledge k WHERE k.space_id = %s AND k.entry_id = ANY(%s)",
            (self.space_id, list(entry_ids)),
        )
        support = self.fact_support([row[0] for row in rows])
        by_id = {row[0]: entry_from_row(row, support[row[0]]) for row in rows}
        return [by_id[i] for i in entry_ids if i in by_id]

    def active_entries(self, kind: KnowledgeKind) -> list[KnowledgeEntry]:
        rows = self._all(
            f"SELECT {ENTRY_COLUMNS} FROM knowledge k WHERE k.space_id = %s AND k.kind = %s AND k.active "
            "ORDER BY k.entry_id",
            (self.space_id, kind),
        )
        support = self.fact_support([row[0] for row in rows])
        return [entry_from_row(row, support[row[0]]) for row in rows]

    def fact_support(self, entry_ids: Sequence[int]) -> dict[int, list[int]]:
        if not entry_ids:
            return {}
        ids = list(dict.fromkeys(int(e) for e in entry_ids))
        return support_of(ids, self._all(FACT_SUPPORT, {"space": self.space_id, "ids": ids}))

    def fact_version_ids(self, entry_id: int) -> list[int]:
        latest = entry_id
        while (
            newer := self._one(
                "SELECT replaced_by FROM knowledge WHERE space_id = %s AND entry_id = %s",
                (self.space_id, latest),
            )
        ) is not None:
            latest = int(newer)
        rows = self._all(
            "WITH RECURSIVE chain(id) AS (SELECT %s::bigint UNION SELECT k.entry_id FROM knowledge k JOIN chain "
            "ON k.space_id = %s AND k.replaced_by = chain.id) SELECT id FROM chain ORDER BY id",
            (latest, self.space_id),
        )
        return [int(row[0]) for row in rows]

    def delete_knowledge(self, entry_ids: Sequence[int]) -> None:
        ids = list(entry_ids)
        self._write(
            "UPDATE knowledge SET replaced_by = NULL WHERE space_id = %s AND replaced_by = ANY(%s)",
            (self.space_id, ids),
        )
        self._write(
            "DELETE FROM knowledge_sources WHERE space_id = %s AND entry_id = ANY(%s)", (self.space_id, ids)
        )
        self._write("DELETE FROM knowledge WHERE space_id = %s AND entry_id = ANY(%s)", (self.space_id, ids))

    def facts_only_from(self, page_ids: Sequence[int]) -> list[int]:
        if not page_ids:
            return []
        rows = self._all(
            "WITH RECURSIVE roots(e) AS ("
            "SELECT entry_id FROM knowledge_sources WHERE space_id = %(space)s AND page_id = ANY(%(pages)s) "
            "UNION SELECT k.replaced_by FROM knowledge k JOIN roots ON k.space_id = %(space)s "
            f"AND k.entry_id = roots.e WHERE k.replaced_by IS NOT NULL), {_LINES} "
            "SELECT roots.e FROM roots WHERE NOT EXISTS (SELECT 1 FROM line JOIN knowledge_sources s "
            "ON s.space_id = %(space)s AND s.entry_id = line.e WHERE line.root = roots.e "
            "AND NOT (s.page_id = ANY(%(pages)s)))",
            {"space": self.space_id, "pages": list(page_ids)},
        )
        return sorted(int(row[0]) for row in rows)

    def remove_knowledge_sources(self, page_ids: Sequence[int]) -> None:
        self._write(
            "DELETE FROM knowledge_sources WHERE space_id = %s AND page_id = ANY(%s)",
            (self.space_id, list(page_ids)),
        )

    def expired_knowledge_ids(self, now: float) -> list[int]:
        rows = self._all(
            "SELECT entry_id FROM knowledge WHERE space_id = %s AND expires_at <= %s ORDER BY entry_id",
            (self.space_id, now),
        )
        return [int(row[0]) for row in rows]

    def all_knowledge_texts(self) -> list[tuple[int, str]]:
        rows = self._all(
            "SELECT entry_id, text FROM knowledge WHERE space_id = %s AND active", (self.space_id,)
        )
        return [(int(row[0]), row[1]) for row in rows]

    def set_knowledge_vector(self, entry_id: int, vector: np.ndarray) -> None:
        self._write(
            "UPDATE knowledge SET vector = %s WHERE space_id = %s AND entry_id = %s",
            (to_blob(vector), self.space_id, entry_id),
        )

    def retire_knowledge(self, entry_id: int, replaced_by: int | None) -> None:
        self._write(
            "UPDATE knowledge SET active = false, replaced_by = %s WHERE space_id = %s AND entry_id = %s",
            (replaced_by, self.space_id, entry_id),
        )

    def touch_knowledge(self, entry_id: int, timestamp: str, at: float) -> None:
        self._write(
            "UPDATE knowledge SET timestamp = %s, updated_at = %s WHERE space_id = %s AND entry_id = %s",
            (timestamp, at, self.space_id, entry_id),
        )

    def knowledge_history(self, kind: KnowledgeKind) -> list[dict[str, Any]]:
        return self._dicts(
            "SELECT entry_id, text, timestamp, replaced_by FROM knowledge WHERE space_id = %s AND kind = %s "
            "AND NOT active ORDER BY entry_id",
            (self.space_id, kind),
        )

    # --- profile --------------------------------------------------------------------------------------
    def latest_profile(self) -> str:
        value = self._one(
            "SELECT text FROM profile_versions WHERE space_id = %s ORDER BY version DESC LIMIT 1",
            (self.space_id,),
        )
        return "" if value is None else str(value)

    def latest_profile_version(self) -> int | None:
        value = self._one("SELECT MAX(version) FROM profile_versions WHERE space_id = %s", (self.space_id,))
        return None if value is None else int(value)

    def insert_profile(
        self, text: str, at: float, source_segment_id: int | None, source_page_ids: Sequence[int] = ()
    ) -> None:
        self._write(
            "INSERT INTO profile_versions(space_id, version, text, created_at, source_segment_id, source_page_ids) "
            "VALUES (%s, %s, %s, %s, %s, %s)",
            (
                self.space_id,
                self._take("next_profile_version"),
                text,
                at,
                source_segment_id,
                json.dumps(list(source_page_ids)),
            ),
        )

    def delete_profile_versions(self) -> None:
        self._write("DELETE FROM profile_versions WHERE space_id = %s", (self.space_id,))

    def profile_version_count(self) -> int:
        return int(self._one("SELECT COUNT(*) FROM profile_versions WHERE space_id = %s", (self.space_id,)))
