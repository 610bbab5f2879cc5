"""Consolidation applies each step's ops together, in one transaction: the chain links and filings of
the runs of pages leaving short-term memory in a pass, and an analysed slice's profile, facts and mark. A
commit per op was an fsync per page moved out of short-term memory, and a commit per run still one per
page where pages do not continue each other; a step applied together is also all done or not begun after
a crash. (Hashed fake embedder, the offline LLM, inline ingest: consolidation runs inside each write.)"""

from collections.abc import Sequence
from pathlib import Path

import pytest

from memoryos import Memoryos
from memoryos.errors import LLMError
from memoryos.llm.base import TopicSummary
from memoryos.llm.offline.backend import OfflineLLM
from memoryos.space.ops import AddKnowledge, AnyOp, FileTopic, LinkChain, MarkAnalyzed, UpdateProfile
from memoryos.types import Page
from tests.unit.test_facade import make


def record_transactions(memory: Memoryos, monkeypatch: pytest.MonkeyPatch) -> list[list[type]]:
    """A list that gets, per transaction the space applies ops in, the kinds of those ops in order."""
    transactions: list[list[type]] = []
    apply_together = memory.space._apply_together

    def recorded(ops: Sequence[AnyOp], wait_for_writers: bool = True) -> list[dict[str, object]]:
        transactions.append([type(op) for op in ops])
        return apply_together(ops, wait_for_writers)

    monkeypatch.setattr(memory.space, "_apply_together", recorded)
    return transactions


def chained_turns(count: int) -> list[dict[str, str]]:
    """Turns that share content words, so the offline LLM chains them into one run of pages, and that
    state facts about the user, so their analysis adds facts."""
    return [
        {
            "user_input": f"I work as a data scientist in Oslo and I love tea number {i}.",
            "agent_response": f"I will remember that you love tea {i}.",
        }
        for i in range(count)
    ]


@pytest.fixture
def consolidated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[list[type]]:
    """The kinds of ops of each transaction while 8 chained turns are written with 2 kept short-term:
    6 pages move out as one run, and their segment is hot enough to be analysed at once."""
    with make(tmp_path, short_term_capacity=2) as memory:
        transactions = record_transactions(memory, monkeypatch)
        memory.add_memories(chained_turns(8))
        memory.flush()
        pages = memory.space.pages(list(range(1, 7)))
        assert all(p.chain_id is not None and p.segment_id is not None for p in pages)
        assert memory.space.profile()
    return transactions


def test_a_runs_chain_links_and_its_filing_commit_together(consolidated: list[list[type]]) -> None:
    moved = [kinds for kinds in consolidated if LinkChain in kinds or FileTopic in kinds]
    assert moved, "nothing left short-term memory"
    for kinds in moved:
        assert kinds[-1] is FileTopic and set(kinds[:-1]) == {LinkChain}
    assert sum(kinds.count(LinkChain) for kinds in moved) == 6  # every page beyond the two kept
    assert len(moved) < 6  # runs of several pages, one commit each


def test_an_analysed_slices_profile_facts_and_mark_commit_together(consolidated: list[list[type]]) -> None:
    analysed = [kinds for kinds in consolidated if UpdateProfile in kinds or MarkAnalyzed in kinds]
    assert analysed, "no segment was analysed"
    for kinds in analysed:
        assert kinds[0] is UpdateProfile and kinds[-1] is MarkAnalyzed
        assert set(kinds[1:-1]) <= {AddKnowledge}
    assert any(AddKnowledge in kinds for kinds in analysed)  # the facts went in with their mark


UNRELATED_TURNS = [
    {"user_input": user_input, "agent_response": "Noted."}
    for user_input in (
        "Volcanoes erupt near Iceland.",
        "Penguins waddle across glaciers.",
        "Saxophones sound mellow tonight.",
        "Marathon training starts Monday.",
        "Quantum computers factor primes.",
        "Sourdough needs patient kneading.",
        "Lighthouses guide sailors home.",
        "Origami cranes fold easily.",
    )
]
"""Turns sharing no content word: the offline LLM starts a new chain at each, so each page is a run."""


def test_runs_leaving_short_term_memory_in_one_pass_commit_together(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with make(tmp_path, short_term_capacity=2) as memory:
        transactions = record_transactions(memory, monkeypatch)
        memory.add_memories(UNRELATED_TURNS)
        memory.flush()
        pages = memory.space.pages(list(range(1, 9)))
        chains = {p.chain_id for p in pages[:6]}
    assert [p.tier for p in pages] == ["mtm"] * 6 + ["stm"] * 2
    assert len(chains) == 6  # six runs: no page continued the one before it
    moved = [kinds for kinds in transactions if LinkChain in kinds or FileTopic in kinds]
    assert moved == [
        [LinkChain, FileTopic] * 6
    ]  # one commit for the pass, each run's links before its filing


class FailingTopicLLM(OfflineLLM):
    """The offline LLM, except that a topic summary of the page about quantum computers fails."""

    def summarize_topic(self, pages: Sequence[Page]) -> TopicSummary:
        if any("Quantum" in page.user_input for page in pages):
            raise LLMError("the endpoint failed")
        return super().summarize_topic(pages)


def test_the_runs_before_a_failed_summary_still_leave_short_term_memory(tmp_path: Path) -> None:
    """Runs after a run whose summary failed wait for the retry; the runs before it do not."""
    with make(tmp_path, short_term_capacity=2, llm=FailingTopicLLM()) as memory:
        memory.add_memories(UNRELATED_TURNS)
        memory.flush()
        tiers = [p.tier for p in memory.space.pages(list(range(1, 9)))]
    assert tiers == ["mtm"] * 4 + ["stm"] * 4  # turns 1-4 filed; the failing fifth and those after wait
