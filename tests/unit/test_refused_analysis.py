"""A slice whose proposals the guards refuse is not lost (issue 52): what passed is stored, its pages stay
unanalyzed for the next pass to analyse again, and after `guard_analysis_attempts` refused analyses they
are marked analyzed and counted as given up. (A stub LLM proposing one grounded and one invented fact;
the passes forced one by one, the heat threshold out of reach so no write starts one.)"""

from collections.abc import Sequence
from pathlib import Path

import pytest

from memoryos import MemoryConfig, Memoryos
from memoryos.llm.base import ExtractedKnowledge
from memoryos.planning.guards import REFUSALS
from memoryos.space.ops import DeferAnalysis, MarkAnalyzed, UpdatePage
from memoryos.types import Page
from tests.support.fakes import FakeClock, HashEmbedder, ScriptedLLM

TURNS = [
    {
        "user_input": f"I work as a data scientist in Oslo and I love green tea, cup {i}.",
        "agent_response": "Noted.",
    }
    for i in range(6)
]
GROUNDED = "The user works as a data scientist in Oslo."
INVENTED = "The user owns a sailing boat in Lisbon."


class ProposingLLM(ScriptedLLM):
    """Proposes a grounded profile, a grounded fact and an invented one; records the pages of each
    facts request."""

    def __init__(self) -> None:
        super().__init__()
        self.analysed: list[list[int]] = []

    def update_profile(self, current_profile: str, pages: Sequence[Page]) -> str:
        self._attempt("profile", pages)
        return "- Works as a data scientist in Oslo\n- Loves green tea"

    def extract_knowledge(self, pages: Sequence[Page]) -> ExtractedKnowledge:
        self._attempt("knowledge", pages)
        self.analysed.append([p.page_id for p in pages])
        return ExtractedKnowledge(user_facts=[GROUNDED, INVENTED], assistant_facts=[])


def open_memory(root: Path, llm: ScriptedLLM, attempts: int = 3) -> Memoryos:
    """Guards on, two turns kept short-term, analysis only when forced."""
    config = MemoryConfig(
        data_dir=root,
        openai_api_key=None,
        faiss_use_gpu="never",
        ingest_mode="inline",
        short_term_capacity=2,
        mid_term_heat_threshold=1e9,
        llm_guards="on",
        guard_analysis_attempts=attempts,
    )
    return Memoryos.from_config("ana", config, embedder=HashEmbedder(), llm=llm, clock=FakeClock())


def unanalyzed(memory: Memoryos) -> list[int]:
    return sorted(
        p.page_id for s in memory.space.segments() for p in memory.space.unanalyzed_pages(s.segment_id)
    )


def test_a_refused_slice_is_analysed_again_by_the_next_passes_then_given_up(tmp_path: Path) -> None:
    llm = ProposingLLM()
    before = REFUSALS.snapshot()
    with open_memory(tmp_path, llm, attempts=3) as memory:
        memory.add_memories(TURNS)
        memory.flush()
        moved = unanalyzed(memory)
        assert moved and llm.analysed == [], "the passes of the writes analysed nothing"

        memory.force_mid_term_analysis()
        assert llm.analysed == [moved]
        assert unanalyzed(memory) == moved, "a refused slice stays unanalyzed"
        assert memory.space.analysis_attempts(moved) == 1
        assert [f.knowledge for f in memory.space.knowledge("user")] == [GROUNDED], "what passed is stored"
        assert memory.space.profile()

        memory.force_mid_term_analysis()
        assert llm.analysed == [moved, moved], "the next pass analysed the same pages again"
        assert unanalyzed(memory) == moved and memory.space.analysis_attempts(moved) == 2

        memory.force_mid_term_analysis()  # the third refused analysis: given up
        assert unanalyzed(memory) == []
        memory.force_mid_term_analysis()
        assert llm.analysed == [moved] * 3, "no analysis after the bound"
        facts = memory.space.knowledge("user")
        assert [f.knowledge for f in facts] == [GROUNDED], "restated, not stored three times"
        assert set(facts[0].source_page_ids) == set(moved)
    after = REFUSALS.snapshot()
    grew = {key: after.get(key, 0) - before.get(key, 0) for key in after}
    assert grew["fact_ungrounded"] == 3
    assert grew["analysis_deferred"] == 2 and grew["analysis_given_up"] == 1


def test_one_attempt_marks_a_refused_slice_analyzed_at_once(tmp_path: Path) -> None:
    llm = ProposingLLM()
    with open_memory(tmp_path, llm, attempts=1) as memory:
        memory.add_memories(TURNS)
        memory.flush()
        memory.force_mid_term_analysis()
        memory.force_mid_term_analysis()
        assert len(llm.analysed) == 1 and unanalyzed(memory) == []


def test_deferring_counts_attempts_an_edit_clears_them_and_an_analyzed_page_is_not_deferred(
    tmp_path: Path,
) -> None:
    with open_memory(tmp_path, ProposingLLM(), attempts=3) as memory:
        memory.add_memories(TURNS)
        memory.flush()
        (segment,) = memory.space.segments()
        first, second = unanalyzed(memory)[:2]
        memory.space.apply(DeferAnalysis(segment_id=segment.segment_id, page_ids=[first, second]))
        memory.space.apply(DeferAnalysis(segment_id=segment.segment_id, page_ids=[first]))
        assert memory.space.analysis_attempts([first]) == 2 and memory.space.analysis_attempts([second]) == 1
        assert memory.space.analysis_attempts([first, second]) == 2

        memory.space.apply(UpdatePage(page_id=first, user_input="I moved to Bergen.", agent_response="Oh!"))
        assert memory.space.analysis_attempts([first]) == 0, "an edited page is new text, analysed afresh"

        memory.space.apply(MarkAnalyzed(segment_id=segment.segment_id, page_ids=[second]))
        memory.space.apply(DeferAnalysis(segment_id=segment.segment_id, page_ids=[second]))
        assert memory.space.analysis_attempts([second]) == 1, "stale: the page was analyzed meanwhile"


@pytest.mark.parametrize("attempts", [0, -1])
def test_at_least_one_analysis_is_asked_for(attempts: int) -> None:
    with pytest.raises(ValueError, match="guard_analysis_attempts"):
        MemoryConfig(guard_analysis_attempts=attempts)
