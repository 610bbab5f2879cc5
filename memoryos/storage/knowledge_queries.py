"""`SqliteStore`'s queries over long-term memory: the user's and assistant's facts, and the profile."""

import sqlite3

import numpy as np

from memoryos.storage.store_queries import StoreQueries
from memoryos.storage.vector_blobs import to_blob
from memoryos.types import KnowledgeKind


class KnowledgeQueries(StoreQueries):
    """Facts (active, or retired as history) and the profile's versions."""

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
