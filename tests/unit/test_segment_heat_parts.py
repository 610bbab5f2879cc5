"""Heat's parts as `stats` reports them (the playground stacks them into one bar): each part is its
weighted term of `policy.heat_of`, and the parts add up to the heat the engine ranks segments by."""

import math
from pathlib import Path

import pytest

from memoryos import MemoryConfig, Memoryos
from memoryos.llm.offline.backend import OfflineLLM
from memoryos.space import policy
from memoryos.space.policy import HeatWeights, SegmentState
from memoryos.types import MemoryStats, SegmentStats
from tests.support.fakes import T0, FakeClock, HashEmbedder

HOUR = 3600.0
WEIGHTS = HeatWeights(alpha=2.0, beta=3.0, gamma=4.0, tau_hours=10.0)


@pytest.mark.parametrize(
    ("visits", "interactions", "hours"),
    [(0, 0, 0.0), (3, 4, 0.0), (5, 7, 10.0), (1, 2, 1000.0), (2, 0, -1.0)],
)
def test_the_parts_are_the_weighted_terms_and_sum_to_heat_of(
    visits: int, interactions: int, hours: float
) -> None:
    segment = SegmentState(1, visits, interactions, T0)
    now = T0 + hours * HOUR
    parts = policy.heat_parts(segment, now, WEIGHTS)
    assert parts.visits == 2.0 * visits
    assert parts.length == 3.0 * interactions
    assert parts.recency == pytest.approx(4.0 * math.exp(-max(0.0, hours) / 10.0))
    assert parts.total == policy.heat_of(segment, now, WEIGHTS)  # exactly: same terms, same order


def test_stats_reports_each_segments_heat_parts_and_the_promotion_threshold(tmp_path: Path) -> None:
    clock = FakeClock()
    config = MemoryConfig(
        faiss_use_gpu="never",
        ingest_mode="inline",
        heat_alpha=WEIGHTS.alpha,
        heat_beta=WEIGHTS.beta,
        heat_gamma=WEIGHTS.gamma,
        heat_tau_hours=WEIGHTS.tau_hours,
    )
    # A threshold no segment reaches: nothing is promoted, so the interaction counters are not reset.
    memory = Memoryos(
        "alice",
        None,
        tmp_path,
        config=config,
        embedder=HashEmbedder(),
        llm=OfflineLLM(),
        clock=clock,
        short_term_capacity=1,
        mid_term_heat_threshold=1e6,
    )
    turns = [
        ("I work as a nurse in Lyon.", "Nursing in Lyon must keep you busy."),
        ("I have a cat named Miso.", "Miso is a lovely name for a cat."),
        ("I love hiking in the Alps every summer.", "Alpine trails are beautiful in summer."),
        ("My sister Maria lives in Porto.", "Porto is a beautiful city by the river."),
    ]
    for minute, (user, agent) in enumerate(turns):
        memory.add_memory(user, agent, timestamp=f"2024-05-01 10:{minute:02d}:00")
    memory.retrieve("Where does my sister Maria live?")  # a visit to the segments it returns
    clock.advance(hours=5)

    stats = memory.stats()
    assert stats.promotion_threshold == 1e6
    assert stats.segments, "the overflowing short-term pages should have formed segments"
    rows = {s.segment_id: s for s in memory.space.segments()}
    engine_heats = memory.space.segment_heats(clock())
    for segment in stats.segments:
        row = rows[segment.segment_id]
        assert segment.heat_visits == WEIGHTS.alpha * row.visit_count
        assert segment.heat_length == WEIGHTS.beta * row.interaction_count
        hours = (clock() - row.last_visit_at) / HOUR
        assert segment.heat_recency == pytest.approx(WEIGHTS.gamma * math.exp(-hours / WEIGHTS.tau_hours))
        assert segment.heat_visits + segment.heat_length + segment.heat_recency == segment.heat
        assert segment.heat == engine_heats[segment.segment_id]
    assert any(s.heat_length > 0 for s in stats.segments)
    assert any(s.heat_visits > 0 for s in stats.segments), "the retrieval should have visited a segment"
    on_disk = sum(p.stat().st_size for p in memory.space.directory.rglob("*") if p.is_file())
    assert stats.storage_bytes == on_disk > 0
    memory.close()


def test_stats_saved_before_the_parts_existed_still_validate() -> None:
    old_segment = SegmentStats.model_validate({"segment_id": 1, "summary": "s", "page_count": 2, "heat": 3.5})
    assert (old_segment.heat_visits, old_segment.heat_length, old_segment.heat_recency) == (0.0, 0.0, 0.0)
    old_stats = MemoryStats.model_validate(
        {
            "user_id": "u",
            "assistant_id": "a",
            "short_term_pages": 0,
            "mid_term_pages": 2,
            "archived_pages": 0,
            "segments": [old_segment.model_dump(exclude={"heat_visits", "heat_length", "heat_recency"})],
            "user_knowledge": 0,
            "assistant_knowledge": 0,
            "profile_versions": 0,
            "embedding_model": "m",
            "embedding_dim": 8,
        }
    )
    assert old_stats.promotion_threshold is None and old_stats.segments[0].heat == 3.5
    assert old_stats.storage_bytes is None
