"""`SqliteStore`'s queries over long-term memory: the user's and assistant's facts, and the profile."""

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from memoryos.storage.records.sqlite.store_queries import StoreQueries, id_chunks
from memoryos.storage.records.store_rows import ENTRY_COLUMNS, entry_from_row
from memoryos.storage.records.vector_blobs import to_blob
from memoryos.types import FactOrigin, KnowledgeEntry, KnowledgeKind

_LINES = (
    "line(root, e) AS (SELECT e, e FROM roots UNION "
    "SELECT line.root, k.entry_id FROM knowledge k JOIN line ON k.replaced_by = line.e)"
)
"""`roots` and, for each, every version it replaced (and those replaced, recursively): the versions whose
recorded sources support it. Walked through the `knowledge_by_replaced_by` index."""


class KnowledgeQueries(StoreQueries):
    """Facts (active, or retired as history) and the profile's versions."""

    # --- knowledge ------------------------------------------------------------------------------------
    def active_knowledge(self, kind: KnowledgeKind) -> list[dict[str, Any]]:
        rows = self._db.execute(
            "SELECT entry_id, text, timestamp, vector, updated_at, expires_at FROM knowledge "
            "WHERE kind = ? AND active = 1 "
            "ORDER BY entry_id",
            (kind,),
        )
        return [dict(row) for row in rows]

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
        cursor = self._db.execute(
            "INSERT INTO knowledge(kind, text, timestamp, vector, updated_at, created_at, origin, expires_at) "
            "VALUES (?,?,?,?,?,?,?,?)",
            (kind, text, timestamp, to_blob(vector), at, at, origin, expires_at),
        )
        entry_id = int(cursor.lastrowid or 0)
        self.add_knowledge_sources(entry_id, source_page_ids)
        return entry_id

    def add_knowledge_sources(self, entry_id: int, page_ids: Sequence[int]) -> None:
        self._db.executemany(
            "INSERT OR IGNORE INTO knowledge_sources(entry_id, page_id) VALUES (?, ?)",
            [(entry_id, pid) for pid in page_ids],
        )

    def knowledge_entries(self, entry_ids: Sequence[int]) -> list[KnowledgeEntry]:
        """Facts by id (active or history), in the order given; missing ids skipped."""
        if not entry_ids:
            return []
        marks = ",".join("?" * len(entry_ids))
        rows = self._db.execute(
            f"SELECT {ENTRY_COLUMNS} FROM knowledge k WHERE k.entry_id IN ({marks})", entry_ids
        ).fetchall()
        support = self.fact_support([row[0] for row in rows])
        by_id = {row[0]: entry_from_row(row, support[row[0]]) for row in rows}
        return [by_id[i] for i in entry_ids if i in by_id]

    def active_entries(self, kind: KnowledgeKind) -> list[KnowledgeEntry]:
        rows = self._db.execute(
            f"SELECT {ENTRY_COLUMNS} FROM knowledge k WHERE k.kind = ? AND k.active = 1 ORDER BY k.entry_id",
            (kind,),
        ).fetchall()
        support = self.fact_support([row[0] for row in rows])
        return [entry_from_row(row, support[row[0]]) for row in rows]

    def fact_support(self, entry_ids: Sequence[int]) -> dict[int, list[int]]:
        """The pages each fact stands on, sorted: those recorded for it and for every version it replaced,
        recursively. A version records only its own sources (`add_knowledge_sources`); the union is taken
        here, when asked, rather than copied into each new version."""
        support: dict[int, set[int]] = {int(e): set() for e in entry_ids}
        ids = list(support)
        for chunk, marks in id_chunks(ids, 500):
            rows = self._db.execute(
                f"WITH RECURSIVE roots(e) AS (SELECT entry_id FROM knowledge WHERE entry_id IN ({marks})), "
                f"{_LINES} SELECT line.root, s.page_id FROM line "
                "JOIN knowledge_sources s ON s.entry_id = line.e",
                chunk,
            )
            for root, page_id in rows:
                support[int(root)].add(int(page_id))
        return {entry_id: sorted(pages) for entry_id, pages in support.items()}

    def fact_version_ids(self, entry_id: int) -> list[int]:
        """Every version of the fact `entry_id` belongs to, oldest first: the versions it replaced (and
        theirs, recursively) and the ones that replaced it."""
        latest = entry_id
        while (
            newer := self._one("SELECT replaced_by FROM knowledge WHERE entry_id = ?", (latest,))
        ) is not None:
            latest = int(newer)
        rows = self._db.execute(
            "WITH RECURSIVE chain(id) AS (SELECT ? UNION SELECT k.entry_id FROM knowledge k JOIN chain "
            "ON k.replaced_by = chain.id) SELECT id FROM chain ORDER BY id",
            (latest,),
        )
        return [int(row[0]) for row in rows]

    def delete_knowledge(self, entry_ids: Sequence[int]) -> None:
        """Remove facts with their text, vector and sources (rows gone, not retired)."""
        self._db.executemany(
            "UPDATE knowledge SET replaced_by = NULL WHERE replaced_by = ?", [(i,) for i in entry_ids]
        )
        self._db.executemany("DELETE FROM knowledge WHERE entry_id = ?", [(i,) for i in entry_ids])

    def facts_only_from(self, page_ids: Sequence[int]) -> list[int]:
        """Facts (every version) whose support (`fact_support`: its sources and those of the versions it
        replaced) is not empty and lies wholly among `page_ids`. Candidates are the versions with a source
        among them and every version that replaced one of those, since support passes to the newer."""
        if not page_ids:
            return []
        marks = ",".join("?" * len(page_ids))
        rows = self._db.execute(
            "WITH RECURSIVE roots(e) AS ("
            f"SELECT entry_id FROM knowledge_sources WHERE page_id IN ({marks}) "
            "UNION SELECT k.replaced_by FROM knowledge k JOIN roots ON k.entry_id = roots.e "
            f"WHERE k.replaced_by IS NOT NULL), {_LINES} "
            "SELECT roots.e FROM roots WHERE NOT EXISTS (SELECT 1 FROM line JOIN knowledge_sources s "
            f"ON s.entry_id = line.e WHERE line.root = roots.e AND s.page_id NOT IN ({marks}))",
            [*page_ids, *page_ids],
        )
        return sorted(int(row[0]) for row in rows)

    def remove_knowledge_sources(self, page_ids: Sequence[int]) -> None:
        self._db.executemany("DELETE FROM knowledge_sources WHERE page_id = ?", [(p,) for p in page_ids])

    def expired_knowledge_ids(self, now: float) -> list[int]:
        rows = self._db.execute(
            "SELECT entry_id FROM knowledge WHERE expires_at IS NOT NULL AND expires_at <= ? ORDER BY entry_id",
            (now,),
        )
        return [int(row[0]) for row in rows]

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

    def knowledge_history(self, kind: KnowledgeKind) -> list[dict[str, Any]]:
        """Retired facts of one kind (replaced, or dropped for space), oldest first."""
        rows = self._db.execute(
            "SELECT entry_id, text, timestamp, replaced_by FROM knowledge WHERE kind = ? AND active = 0 "
            "ORDER BY entry_id",
            (kind,),
        )
        return [dict(row) for row in rows]

    # --- profile --------------------------------------------------------------------------------------
    def latest_profile(self) -> str:
        value = self._one("SELECT text FROM profile_versions ORDER BY version DESC LIMIT 1")
        return "" if value is None else str(value)

    def latest_profile_version(self) -> int | None:
        value = self._one("SELECT MAX(version) FROM profile_versions")
        return None if value is None else int(value)

    def insert_profile(
        self, text: str, at: float, source_segment_id: int | None, source_page_ids: Sequence[int] = ()
    ) -> None:
        self._db.execute(
            "INSERT INTO profile_versions(text, created_at, source_segment_id, source_page_ids) "
            "VALUES (?, ?, ?, ?)",
            (text, at, source_segment_id, json.dumps(list(source_page_ids))),
        )

    def delete_profile_versions(self) -> None:
        """Every version goes: each may carry text of a page since deleted (a rebuild starts over)."""
        self._db.execute("DELETE FROM profile_versions")

    def profile_version_count(self) -> int:
        return int(self._one("SELECT COUNT(*) FROM profile_versions"))
