"""The same conversation through `Memoryos` on both record stores gives the same memory and the same
retrievals: tiers, segments, facts, profile, and every question's ranked pages with their scores (the
differential test of the PostgreSQL store against the SQLite one)."""

import json
from pathlib import Path
from typing import Any

import pytest

from memoryos import MemoryConfig, Memoryos
from memoryos.storage.records.postgres.connection import close_pools
from tests.support.fakes import FakeClock, HashEmbedder

CONVERSATION = Path(__file__).parents[1] / "data" / "own_conversation.json"


def remembered(data_dir: Path, settings: dict[str, Any]) -> dict[str, Any]:
    conversation = json.loads(CONVERSATION.read_text())
    config = MemoryConfig.model_validate(
        {"faiss_use_gpu": "never", "ingest_mode": "inline", "short_term_capacity": 4, **settings}
    )
    config = config.model_copy(update={"data_dir": data_dir})
    # No LLM key: the offline backend's summaries and facts, deterministic on both stores.
    memory = Memoryos.from_config("nadia", config, embedder=HashEmbedder(), clock=FakeClock())
    try:
        for pair in conversation["pairs"]:
            memory.add_memory(pair["user_input"], pair["agent_response"], timestamp=pair["timestamp"])
        memory.flush()
        # A delete and an edit: BM25's corpus totals follow them on PostgreSQL, as FTS5's do on SQLite.
        memory.delete_page(3)
        memory.update_page(5, user_input="I started a pottery class and a ceramics course.")
        memory.flush()
        retrievals = []
        for qa in conversation["qa"]:
            context = memory.retrieve(qa["question"])
            retrievals.append(
                [(page.page_id, page.tier, round(page.score, 9)) for page in context.retrieved_pages]
            )
        stats = memory.stats()
        return {
            "retrievals": retrievals,
            "tiers": (stats.short_term_pages, stats.mid_term_pages, stats.archived_pages),
            "segments": [(s.summary, s.page_count) for s in memory.space.segments(count_pages=True)],
            "user_facts": [f["knowledge"] for f in memory.get_user_knowledge()],
            "assistant_facts": [f["knowledge"] for f in memory.get_assistant_knowledge_summary()],
            "profile": memory.get_user_profile_summary(),
        }
    finally:
        memory.close()
        close_pools()


@pytest.mark.integration
def test_both_stores_remember_and_retrieve_the_same(tmp_path: Path, database_url: str) -> None:
    on_sqlite = remembered(tmp_path / "sqlite", {})
    on_postgres = remembered(tmp_path / "postgres", {"database_url": database_url})
    assert on_sqlite["tiers"] == on_postgres["tiers"]
    assert on_sqlite["segments"] == on_postgres["segments"]
    assert on_sqlite["user_facts"] == on_postgres["user_facts"]
    assert on_sqlite["assistant_facts"] == on_postgres["assistant_facts"]
    assert on_sqlite["profile"] == on_postgres["profile"]
    assert on_sqlite["retrievals"] == on_postgres["retrievals"]
    assert sum(map(len, on_sqlite["retrievals"])) > 0
