"""What a fact stands on, and what recording it costs as a space grows (hashed fake embedder, the offline
LLM, inline ingest).

A fact records the pages it was drawn from. Before issue 13's fix every new version of a fact copied the
sources of the version it replaced, and a segment's whole backlog of unanalyzed pages was analyzed in one
request, each fact recording all of them: bench.serving.api's 10k-page space wrote millions of source rows in
ops that held the space's lock for minutes, and a retrieve through the API waited past its client's 120 s.
These tests count stored rows, never time.
"""

from pathlib import Path

from memoryos import Memoryos
from memoryos.planning.consolidation import ANALYSIS_MAX_PAGES
from memoryos.space.ops import AddKnowledge
from tests.support.committed import committed_rows
from tests.support.fakes import axis
from tests.unit.test_facade import make

BATCHES = 5
PAGES_PER_BATCH = 4


def _restated_fact(tmp_path: Path) -> tuple[Memoryos, list[list[int]]]:
    """One fact restated (same vector, other words) by each of `BATCHES` batches of pages: a chain of
    versions, each replacing the one before."""
    memory = make(tmp_path, short_term_capacity=1000)  # nothing consolidated behind the test's back
    batches = [
        memory.add_memories(
            [
                {"user_input": f"Batch {b}, turn {i}: I like tea.", "agent_response": "Noted."}
                for i in range(4)
            ]
        )
        for b in range(BATCHES)
    ]
    vector = axis(memory.space.dim, 0).reshape(1, -1)
    for b, pages in enumerate(batches):
        memory.space.apply(
            AddKnowledge(
                knowledge_kind="user",
                texts=[f"User likes tea (version {b})."],
                vectors=vector,
                timestamp="2024-05-01 10:00:00",
                source_page_ids=pages,
            )
        )
    return memory, batches


def test_a_restated_fact_records_each_source_page_once_and_still_stands_on_every_version(
    tmp_path: Path,
) -> None:
    memory, batches = _restated_fact(tmp_path)
    every_page = sorted(p for pages in batches for p in pages)
    [latest] = memory.list_facts("user")
    assert latest.source_page_ids == every_page  # what it replaced still supports it
    versions = memory.fact_history(latest.entry_id).versions
    assert [v.source_page_ids for v in versions] == [
        sorted(p for pages in batches[: b + 1] for p in pages) for b in range(BATCHES)
    ]
    # One row per page and version that drew on it: not the history copied into each new version
    # (4 + 8 + 12 + 16 + 20 rows before the fix).
    assert committed_rows(memory, "SELECT COUNT(*) FROM knowledge_sources") == [(BATCHES * PAGES_PER_BATCH,)]
    memory.close()


def test_a_restated_fact_lives_while_any_page_under_any_of_its_versions_does(tmp_path: Path) -> None:
    memory, batches = _restated_fact(tmp_path)
    for page_id in [p for pages in batches[:-1] for p in pages]:
        memory.delete_page(page_id)
    [latest] = memory.list_facts("user")
    assert latest.source_page_ids == batches[-1]
    assert [v.entry_id for v in memory.fact_history(latest.entry_id).versions] == [latest.entry_id]
    for page_id in batches[-1]:
        memory.delete_page(page_id)
    assert memory.list_facts("user") == []
    assert committed_rows(memory, "SELECT COUNT(*) FROM knowledge") == [(0,)]
    memory.close()


def test_a_large_segment_is_analyzed_in_slices_each_fact_recording_only_its_slice(tmp_path: Path) -> None:
    memory = make(tmp_path, short_term_capacity=2, max_text_chars=400)
    pages = ANALYSIS_MAX_PAGES * 2 + 5
    memory.add_memories(
        [
            {"user_input": f"I bought a garden hose number {i}.", "agent_response": "Noted."}
            for i in range(pages)
        ]
    )
    memory.force_mid_term_analysis()
    memory.flush()
    segment_sizes = committed_rows(
        memory, "SELECT COUNT(*) FROM pages WHERE segment_id IS NOT NULL GROUP BY segment_id"
    )
    assert max(size for (size,) in segment_sizes) > ANALYSIS_MAX_PAGES  # the case this test is about
    assert committed_rows(memory, "SELECT COUNT(*) FROM pages WHERE tier = 'mtm' AND analyzed = 0") == [(0,)]
    own_sources = committed_rows(memory, "SELECT COUNT(*) FROM knowledge_sources GROUP BY entry_id")
    assert own_sources and max(count for (count,) in own_sources) <= ANALYSIS_MAX_PAGES
    memory.close()
