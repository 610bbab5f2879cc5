"""The `Memoryos` facade end to end with a hashed fake embedder, the offline LLM and a fixed clock."""

import logging
import math
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest

from memoryos import EmbeddingModelMismatchError, LLMError, MemoryConfig, Memoryos
from memoryos.embedding.shared import shared_embedder
from memoryos.errors import StorageError
from memoryos.llm.base import AnswerRequest, MemoryLLM
from memoryos.llm.offline.backend import OfflineLLM
from memoryos.space.memory_space import STORE_FILE
from tests.support.committed import committed_rows
from tests.support.fakes import FAKE_DIM, FAKE_MODEL_NAME, FakeClock, HashEmbedder, ScriptedLLM
from tests.support.record_stores import store_settings

NURSE = ("I work as a nurse in Lyon.", "Nursing in Lyon must keep you busy.")
CAT = ("I have a cat named Miso.", "Miso is a lovely name for a cat.")
HIKING = ("I love hiking in the Alps every summer.", "Alpine trails are beautiful in summer.")
GUITAR = ("I started learning the guitar last month.", "Guitar takes patience; scales help.")
PORTO = ("My sister Maria lives in Porto.", "Porto is a beautiful city by the river.")
MUSEUM = ("Any museum tips for Lyon?", "I recommend the Musée des Confluences in Lyon.")
TOPICS = [NURSE, CAT, HIKING, GUITAR, PORTO, MUSEUM]


def make(
    root: Path,
    user_id: str = "alice",
    assistant_id: str = "helper",
    *,
    llm: MemoryLLM | None = None,
    clock: FakeClock | None = None,
    embedder: HashEmbedder | None = None,
    max_text_chars: int = 200,
    ingest_mode: Literal["background", "inline"] = "inline",
    llm_backoff_max_s: float | None = None,
    **kwargs: Any,
) -> Memoryos:
    """Inline ingest by default: these tests inspect the space right after a write.
    tests/unit/test_background_ingest.py covers the background mode. On the store of the test
    (`store_settings`): SQLite files unless the module runs on both stores. A test that waits for a
    failed LLM step's retry, and is not about the pause before it (1 s at first), shortens that pause
    with `llm_backoff_max_s`."""
    return Memoryos(
        user_id,
        None,
        root,
        assistant_id=assistant_id,
        config=MemoryConfig(
            faiss_use_gpu="never",
            max_text_chars=max_text_chars,
            ingest_mode=ingest_mode,
            **({} if llm_backoff_max_s is None else {"llm_backoff_max_s": llm_backoff_max_s}),
            **store_settings(),
        ),
        embedder=embedder or HashEmbedder(),
        llm=llm or OfflineLLM(),
        clock=clock or FakeClock(),
        **kwargs,
    )


RETRY_S = 0.1
"""The pause before a failed LLM step is retried, in the tests that wait for the retry (1 s at first by
default; the pause itself is tests/unit/test_scheduler.py's)."""


def wait_until(condition: Callable[[], bool], timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def add_all(memory: Memoryos, pairs: list[tuple[str, str]], start_minute: int = 0) -> list[int]:
    return [
        memory.add_memory(user, agent, timestamp=f"2024-05-01 10:{start_minute + i:02d}:00")
        for i, (user, agent) in enumerate(pairs)
    ]


def op_kinds(memory: Memoryos) -> list[str]:
    return [row[0] for row in committed_rows(memory, "SELECT kind FROM op_log ORDER BY seq")]


def stored_state(memory: Memoryos) -> dict[str, Any]:
    """Everything a caller could observe of the space, to compare before and after a rejected call —
    but the files' size, which moves with the WAL and the snapshots written at close."""
    store = memory.space.store
    return {
        "stats": {**memory.get_memory_stats(), "storage_bytes": None},
        "pages": store.pages(list(range(1, store.max_page_id() + 1))),
        "ops": op_kinds(memory),
        "profile": memory.get_user_profile_summary(),
        "user": memory.get_user_knowledge(),
        "assistant": memory.get_assistant_knowledge_summary(),
        "index": memory.space.page_index.count(),
    }


def all_texts(memory: Memoryos) -> list[tuple[str, str]]:
    store = memory.space.store
    return [(p.user_input, p.agent_response) for p in store.pages(list(range(1, store.max_page_id() + 1)))]


@pytest.fixture
def memory(tmp_path: Path) -> Memoryos:
    return make(tmp_path, short_term_capacity=2)


# --- writing and reading ------------------------------------------------------------------------------
def test_add_memory_returns_page_ids_and_consolidates_overflow(memory: Memoryos) -> None:
    ids = add_all(memory, TOPICS)
    assert ids == sorted(ids) and len(set(ids)) == len(TOPICS)
    stats = memory.get_memory_stats()
    assert stats["short_term_pages"] == 2
    assert stats["mid_term_pages"] + stats["archived_pages"] == len(TOPICS) - 2
    assert stats["segments"] and sum(s["page_count"] for s in stats["segments"]) == stats["mid_term_pages"]
    assert (stats["embedding_model"], stats["embedding_dim"]) == (FAKE_MODEL_NAME, FAKE_DIM)
    assert stats["llm_usage"]["topic"]["calls"] >= 1
    assert [p.user_input for p in memory.retrieve("Porto").short_term_memory] == [PORTO[0], MUSEUM[0]]
    memory.close()


def test_add_memories_stores_a_batch_in_order(memory: Memoryos) -> None:
    ids = memory.add_memories(
        [{"user_input": u, "agent_response": a, "timestamp": "2024-05-01 10:00:00"} for u, a in TOPICS[:3]]
    )
    assert len(ids) == 3
    assert [p.user_input for p in memory.space.pages(ids)] == [u for u, _ in TOPICS[:3]]
    memory.close()


def test_retrieve_finds_a_consolidated_page_by_its_words(memory: Memoryos) -> None:
    ids = add_all(memory, TOPICS)
    context = memory.retrieve("Where does Maria, my sister, live?")
    assert context.retrieved_pages[0].page_id == ids[TOPICS.index(PORTO)]
    nurse = memory.retrieve("nurse job Lyon", top_k=1).retrieved_pages
    assert [p.page_id for p in nurse] == [ids[0]] and nurse[0].tier == "mtm"
    memory.close()


def test_timestamps_in_both_accepted_formats_are_stored_in_the_reference_form(memory: Memoryos) -> None:
    a = memory.add_memory(*NURSE, timestamp="2024-05-01T10:00:00+02:00")
    b = memory.add_memory(*CAT, timestamp="2024-05-01 11:30:00")
    c = memory.add_memory(*HIKING)  # now, from the injected clock
    stamps = [p.timestamp for p in memory.space.pages([a, b, c])]
    assert stamps == ["2024-05-01 08:00:00", "2024-05-01 11:30:00", "2024-05-01 10:00:00"]
    memory.close()


def test_a_page_from_an_early_year_is_consolidated_like_any_other(memory: Memoryos) -> None:
    memory.add_memory(*NURSE, timestamp="0999-05-01T10:00:00")
    add_all(memory, TOPICS[1:4])
    (early,) = [p for p in memory.space.store.pages_in_tier("mtm") if p.user_input == NURSE[0]]
    assert early.timestamp == "0999-05-01 10:00:00"
    memory.close()


def test_meta_data_is_stored_and_returned_in_every_tier_and_after_reopen(tmp_path: Path) -> None:
    memory = make(tmp_path, short_term_capacity=1)
    memory.add_memory(*PORTO, meta_data={"session": "s1", "n": 3, "tags": ["family"]})
    assert memory.retrieve("Porto").short_term_memory[0].meta_data == {
        "session": "s1",
        "n": 3,
        "tags": ["family"],
    }
    memory.add_memory(*CAT)
    hit = memory.retrieve("Maria Porto sister", top_k=1).retrieved_pages[0]
    assert (hit.tier, hit.meta_data) == ("mtm", {"session": "s1", "n": 3, "tags": ["family"]})
    assert memory.retrieve("cat Miso").short_term_memory[0].meta_data == {}
    memory.close()
    reopened = make(tmp_path, short_term_capacity=1)
    assert reopened.retrieve("Maria Porto", top_k=1).retrieved_pages[0].meta_data["session"] == "s1"
    reopened.close()


def test_get_response_answers_from_memory_and_remembers_the_exchange(tmp_path: Path) -> None:
    memory = make(tmp_path, short_term_capacity=3)
    add_all(memory, TOPICS)
    response = memory.get_response("Where does my sister Maria live?")
    assert "Porto" in response
    last = memory.retrieve("Maria").short_term_memory[-1]
    assert (last.user_input, last.agent_response) == ("Where does my sister Maria live?", response)
    memory.close()


def test_an_answer_over_max_text_chars_is_returned_whole_and_stored_cut(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    class Verbose(ScriptedLLM):
        def answer(self, request: AnswerRequest) -> str:
            return "Porto. " * 60  # 420 characters; these tests' max_text_chars is 200

    memory = make(tmp_path, llm=Verbose(), short_term_capacity=3)
    add_all(memory, TOPICS[:2])
    with caplog.at_level(logging.WARNING, logger="memoryos.facade.memoryos"):
        response = memory.get_response("Where does my sister Maria live?")
    assert response == "Porto. " * 60
    stored = memory.retrieve("Maria").short_term_memory[-1]
    assert stored.agent_response == response[:200]
    assert any("stored cut" in record.getMessage() for record in caplog.records)
    memory.close()


def test_get_response_with_a_failing_llm_raises_and_stores_nothing(tmp_path: Path) -> None:
    llm = ScriptedLLM(fail_on={"answer"})
    memory = make(tmp_path, llm=llm, short_term_capacity=3)
    add_all(memory, TOPICS[:2])
    before = stored_state(memory)
    with pytest.raises(LLMError):
        memory.get_response("What is my job?")
    after = stored_state(memory)
    assert after["pages"] == before["pages"]
    assert [k for k in after["ops"][len(before["ops"]) :] if k != "record_visits"] == []
    memory.close()


def test_force_mid_term_analysis_builds_profile_and_facts(memory: Memoryos) -> None:
    add_all(memory, [MUSEUM, *TOPICS[:-1]])
    assert memory.get_user_profile_summary() == ""  # heat threshold 5 not reached by single pages
    memory.force_mid_term_analysis()
    profile = memory.get_user_profile_summary()
    assert "nurse in Lyon" in profile and "cat named Miso" in profile
    knowledge = [k["knowledge"] for k in memory.get_user_knowledge()]
    assert any("nurse" in k for k in knowledge)
    assistant = memory.get_assistant_knowledge_summary()
    assert any("Musée des Confluences" in k["knowledge"] for k in assistant)
    # the reference's fields, and our id to act on the fact
    assert all(set(k) == {"knowledge", "timestamp", "entry_id"} for k in assistant)
    assert all(p.analyzed for p in memory.space.store.pages_in_tier("mtm"))
    assert memory.get_memory_stats()["profile_versions"] >= 1
    memory.close()


def test_hot_segments_are_promoted_automatically(tmp_path: Path) -> None:
    memory = make(tmp_path, short_term_capacity=1, mid_term_heat_threshold=1.0)
    add_all(memory, [NURSE, CAT])
    assert "nurse in Lyon" in memory.get_user_profile_summary()
    memory.close()


def test_segment_heat_in_stats_cools_as_time_passes(tmp_path: Path) -> None:
    clock = FakeClock()
    memory = make(tmp_path, clock=clock, short_term_capacity=1)
    add_all(memory, [NURSE, CAT])
    (segment,) = memory.get_memory_stats()["segments"]
    assert segment["heat"] == pytest.approx(2.0)
    clock.advance(hours=24)
    (cooled,) = memory.get_memory_stats()["segments"]
    assert cooled["heat"] == pytest.approx(1 + math.exp(-1))
    memory.close()


def test_a_fact_said_again_is_stored_once_and_facts_are_bounded(tmp_path: Path) -> None:
    memory = make(tmp_path, short_term_capacity=1, long_term_knowledge_capacity=3)
    add_all(memory, [NURSE, CAT])
    memory.force_mid_term_analysis()
    add_all(memory, [NURSE, CAT], start_minute=2)  # said again, and filed again
    memory.force_mid_term_analysis()
    facts = [k["knowledge"] for k in memory.get_user_knowledge()]
    assert sum("nurse" in fact for fact in facts) == 1
    add_all(memory, [HIKING, GUITAR, PORTO, MUSEUM], start_minute=4)
    memory.force_mid_term_analysis()
    assert len(memory.get_user_knowledge()) == 3
    assert memory.get_memory_stats()["user_knowledge"] == 3
    assert memory.space.store.knowledge_history("user")  # dropped facts are kept as history
    memory.close()


# --- an LLM failure never becomes memory --------------------------------------------------------------
def test_profile_failure_keeps_the_previous_profile_and_the_pages_and_is_retried(tmp_path: Path) -> None:
    llm = ScriptedLLM()
    memory = make(
        tmp_path, llm=llm, short_term_capacity=1, mid_term_heat_threshold=1.0, llm_backoff_max_s=RETRY_S
    )
    add_all(memory, [NURSE, CAT])  # NURSE leaves STM and is analyzed at once
    first = memory.get_user_profile_summary()
    assert "nurse" in first

    llm.fail_on = {"profile"}
    attempts = llm.calls.get("profile", 0)
    add_all(memory, [HIKING], start_minute=2)  # CAT leaves STM; its analysis fails
    assert llm.calls["profile"] > attempts
    assert memory.get_user_profile_summary() == first
    assert memory.get_memory_stats()["profile_versions"] == 1
    assert not any("Miso" in k["knowledge"] for k in memory.get_user_knowledge())
    cat_page = next(p for p in memory.space.store.pages_in_tier("mtm") if p.user_input == CAT[0])
    assert not cat_page.analyzed
    assert all_texts(memory) == [NURSE, CAT, HIKING]

    llm.fail_on = set()
    add_all(memory, [GUITAR], start_minute=3)
    # The space backs off after a failure (not retried on every write): the retry comes after RETRY_S.
    wait_until(lambda: "Miso" in memory.get_user_profile_summary())
    profile = memory.get_user_profile_summary()
    assert "nurse" in profile and "Miso" in profile and "hiking" in profile
    assert any("Miso" in k["knowledge"] for k in memory.get_user_knowledge())
    memory.close()


def test_topic_failure_keeps_pages_in_short_term_memory_until_it_succeeds(tmp_path: Path) -> None:
    llm = ScriptedLLM(fail_on={"topic"})
    memory = make(tmp_path, llm=llm, short_term_capacity=1, llm_backoff_max_s=RETRY_S)
    add_all(memory, TOPICS[:3])
    stats = memory.get_memory_stats()
    assert (stats["short_term_pages"], stats["mid_term_pages"], stats["segments"]) == (3, 0, [])
    llm.fail_on = set()
    add_all(memory, TOPICS[3:4], start_minute=3)
    wait_until(lambda: memory.get_memory_stats()["mid_term_pages"] == 3)  # after the space's backoff
    stats = memory.get_memory_stats()
    assert (stats["short_term_pages"], stats["mid_term_pages"]) == (1, 3)
    assert all_texts(memory) == TOPICS[:4]
    memory.close()


def test_a_segment_whose_analysis_keeps_failing_does_not_starve_the_others(tmp_path: Path) -> None:
    llm = ScriptedLLM(poison="Miso")
    memory = make(tmp_path, llm=llm, short_term_capacity=1, mid_term_heat_threshold=1.0)
    add_all(memory, [NURSE, CAT, HIKING, GUITAR])  # CAT then HIKING leave STM, each in its own segment
    mid_term = {p.user_input: p for p in memory.space.store.pages_in_tier("mtm")}
    cat, hiking = mid_term[CAT[0]], mid_term[HIKING[0]]
    assert cat.segment_id is not None and cat.segment_id < (hiking.segment_id or 0)
    profile = memory.get_user_profile_summary()
    assert "hiking" in profile and "nurse" in profile
    assert memory.space.pages([hiking.page_id])[0].analyzed
    assert not memory.space.pages([cat.page_id])[0].analyzed  # kept, to be retried
    assert "Miso" not in profile
    with pytest.raises(LLMError):  # the explicit call reports the failure, after analyzing the rest
        memory.force_mid_term_analysis()
    memory.close()


def test_pages_that_cannot_be_filed_yet_do_not_hold_back_promotion(tmp_path: Path) -> None:
    llm = ScriptedLLM(fail_on={"profile"})
    memory = make(
        tmp_path, llm=llm, short_term_capacity=1, mid_term_heat_threshold=1.0, llm_backoff_max_s=RETRY_S
    )
    add_all(memory, [NURSE, CAT])  # NURSE is filed; its analysis fails
    assert memory.get_user_profile_summary() == ""
    llm.fail_on = {"topic"}
    add_all(memory, [HIKING], start_minute=2)  # CAT cannot be filed now, NURSE's segment is still hot
    wait_until(lambda: "nurse" in memory.get_user_profile_summary())  # once its own backoff ends
    assert memory.get_memory_stats()["short_term_pages"] == 2
    memory.close()


# --- retrieval is a read ------------------------------------------------------------------------------
def test_retrieval_writes_nothing_but_a_record_visits_op(tmp_path: Path) -> None:
    # No promotion: it would reset the visited segments' counters and hide the visits counted here.
    memory = make(tmp_path, short_term_capacity=2, mid_term_heat_threshold=1e6)
    add_all(memory, TOPICS)
    pages_before = stored_state(memory)["pages"]
    ops_before = op_kinds(memory)
    segments_before = {s.segment_id: s.visit_count for s in memory.space.segments()}

    first = memory.retrieve("nurse in Lyon")
    second = memory.retrieve("nurse in Lyon")
    assert first.model_dump() == second.model_dump()
    assert any(p.tier == "mtm" for p in first.retrieved_pages)

    assert op_kinds(memory) == ops_before, "reads buffer their visits: nothing is written on their path"
    assert stored_state(memory)["pages"] == pages_before

    memory.add_memory("One more thing.", "Sure.")  # the next write records the buffered visits as one op
    new_ops = op_kinds(memory)[len(ops_before) :]
    assert new_ops.count("record_visits") == 1
    visited = {p.segment_id for p in first.retrieved_pages if p.tier == "mtm"}
    after = {s.segment_id: s.visit_count for s in memory.space.segments()}
    assert visited and all(after[sid] == segments_before[sid] + 2 for sid in visited)
    memory.close()


def test_visits_buffered_by_reads_are_recorded_at_close(tmp_path: Path) -> None:
    memory = make(tmp_path, short_term_capacity=2)
    add_all(memory, TOPICS)
    visited = {p.segment_id for p in memory.retrieve("nurse in Lyon").retrieved_pages if p.tier == "mtm"}
    before = {s.segment_id: s.visit_count for s in memory.space.segments()}
    memory.close()
    reopened = make(tmp_path, short_term_capacity=2)
    after = {s.segment_id: s.visit_count for s in reopened.space.segments()}
    assert visited and all(after[sid] == before[sid] + 1 for sid in visited)
    reopened.close()


# --- scoping and lifecycle ----------------------------------------------------------------------------
def test_assistant_facts_are_scoped_to_the_users_space(tmp_path: Path) -> None:
    alice = make(tmp_path, "alice", "helper", short_term_capacity=1)
    bob = make(tmp_path, "bob", "helper", short_term_capacity=1)
    add_all(alice, [MUSEUM, NURSE])
    alice.force_mid_term_analysis()
    assert any("Confluences" in k["knowledge"] for k in alice.get_assistant_knowledge_summary())
    assert alice.retrieve("museum recommend Confluences").retrieved_assistant_knowledge

    add_all(bob, [CAT, HIKING])
    bob.force_mid_term_analysis()
    assert bob.get_assistant_knowledge_summary() == []
    context = bob.retrieve("museum recommend Confluences")
    assert context.retrieved_assistant_knowledge == []
    assert all("Confluences" not in p.agent_response for p in context.retrieved_pages)
    assert "nurse" not in bob.get_user_profile_summary()

    assert alice.space.directory == tmp_path / "default" / "alice" / "helper"
    assert bob.space.directory == tmp_path / "default" / "bob" / "helper"
    alice.close()
    bob.close()


def test_forget_user_removes_the_space_files_and_nothing_else(tmp_path: Path) -> None:
    alice = make(tmp_path, "alice")
    alice_coach = make(tmp_path, "alice", "coach")
    bob = make(tmp_path, "bob")
    add_all(alice, TOPICS[:2])
    add_all(alice_coach, TOPICS[4:6])
    add_all(bob, TOPICS[2:4])
    directory = alice.space.directory
    assert (directory / STORE_FILE).exists()
    alice.forget_user()
    assert not directory.exists()
    assert sorted(p.name for p in directory.parent.iterdir()) == ["coach"]  # the user's other assistant
    assert all_texts(alice_coach) == TOPICS[4:6]
    alice_coach.forget_user()
    assert sorted(p.name for p in (tmp_path / "default").iterdir()) == ["bob"]  # "alice" gone from disk
    alice.close()  # a no-op after forgetting
    alice_coach.close()
    bob.close()
    reopened = make(tmp_path, "bob")
    assert all_texts(reopened) == TOPICS[2:4]
    reopened.forget_user()
    assert tmp_path.is_dir() and list(tmp_path.iterdir()) == []  # the tenant went too; the data root stays
    fresh = make(tmp_path, "alice")
    assert all_texts(fresh) == []
    fresh.close()


def test_dialogue_chain_continues_across_a_restart(tmp_path: Path) -> None:
    first = make(tmp_path, short_term_capacity=1)
    a = first.add_memory("I adopted a puppy named Rex.", "Congrats on Rex!", timestamp="2024-05-01 10:00:00")
    b = first.add_memory("Rex chewed my puppy bed.", "Puppies chew a lot.", timestamp="2024-05-01 10:05:00")
    first.close()
    second = make(tmp_path, short_term_capacity=1)
    second.add_memory("Rex the puppy also barks.", "Training helps.", timestamp="2024-05-01 10:10:00")
    page_a, page_b = second.space.pages([a, b])
    assert page_a.chain_id is not None and page_b.chain_id == page_a.chain_id
    assert page_a.meta_info == page_b.meta_info and page_a.meta_info
    second.close()


def test_reopen_restores_everything(tmp_path: Path) -> None:
    memory = make(tmp_path, short_term_capacity=2)
    add_all(memory, TOPICS)
    memory.force_mid_term_analysis()
    before = stored_state(memory)
    hits = memory.retrieve("Maria Porto").retrieved_pages
    memory.close()
    reopened = make(tmp_path, short_term_capacity=2)
    after = stored_state(reopened)
    assert {k: v for k, v in after.items() if k not in ("ops", "stats")} == {
        k: v for k, v in before.items() if k not in ("ops", "stats")
    }

    def without_heat(stats: dict[str, Any]) -> dict[str, Any]:
        """Usage is per process, and the retrieval's visits (recorded at close) raise heat."""
        segments = [{k: v for k, v in s.items() if not k.startswith("heat")} for s in stats["segments"]]
        return {**stats, "llm_usage": None, "segments": segments}

    assert without_heat(after["stats"]) == without_heat(before["stats"])
    heat_before = {s["segment_id"]: s["heat"] for s in before["stats"]["segments"]}
    assert all(s["heat"] >= heat_before[s["segment_id"]] for s in after["stats"]["segments"])
    assert [p.page_id for p in reopened.retrieve("Maria Porto").retrieved_pages] == [p.page_id for p in hits]
    reopened.close()


def test_another_embedding_model_is_refused_until_reindexed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = make(tmp_path)
    add_all(memory, TOPICS)
    memory.close()
    with pytest.raises(EmbeddingModelMismatchError, match="memoryos reindex"):
        make(tmp_path, embedder=HashEmbedder(name="other-model", dim=128))

    import memoryos.portability.reindex as reindex

    monkeypatch.setattr(reindex, "create_embedder", lambda config: HashEmbedder(name="other-model", dim=128))
    config = MemoryConfig(data_dir=tmp_path, embedding_model_name="other-model", faiss_use_gpu="never")
    summary = reindex.reindex_space(config, "alice", "helper")
    assert summary["pages"] == len(TOPICS)
    moved = make(tmp_path, embedder=HashEmbedder(name="other-model", dim=128))
    assert moved.get_memory_stats()["embedding_dim"] == 128
    assert all_texts(moved) == TOPICS
    assert moved.retrieve("Maria sister Porto", top_k=1).retrieved_pages[0].user_input == PORTO[0]
    moved.close()


# --- bad input: a ValueError naming the field, and nothing stored changes -----------------------------
GOOD = {"user_input": "hello", "agent_response": "hi there"}
BAD_CALLS: list[tuple[str, Callable[[Memoryos], object], str]] = [
    ("empty user_input", lambda m: m.add_memory("", "ok"), "user_input"),
    ("whitespace user_input", lambda m: m.add_memory(" \n\t", "ok"), "user_input"),
    ("empty agent_response", lambda m: m.add_memory("hello", ""), "agent_response"),
    ("whitespace agent_response", lambda m: m.add_memory("hello", "   "), "agent_response"),
    ("None user_input", lambda m: m.add_memory(None, "ok"), "user_input"),  # type: ignore[arg-type]
    ("over-long user_input", lambda m: m.add_memory("x" * 201, "ok"), "user_input"),
    ("over-long agent_response", lambda m: m.add_memory("ok", "y" * 201), "agent_response"),
    ("NUL in text", lambda m: m.add_memory("a\x00b", "ok"), "user_input"),
    ("unparseable timestamp", lambda m: m.add_memory("a", "b", timestamp="next tuesday"), "timestamp"),
    ("impossible date", lambda m: m.add_memory("a", "b", timestamp="2024-02-30 10:00:00"), "timestamp"),
    ("numeric timestamp", lambda m: m.add_memory("a", "b", timestamp=1714557600), "timestamp"),  # type: ignore[arg-type]
    ("meta_data not a mapping", lambda m: m.add_memory("a", "b", meta_data=["x"]), "meta_data"),  # type: ignore[arg-type]
    (
        "meta_data not JSON",
        lambda m: m.add_memory("a", "b", meta_data={"at": datetime(2024, 5, 1)}),
        "meta_data",
    ),
    ("empty batch", lambda m: m.add_memories([]), "turns"),
    (
        "one bad turn in a batch",
        lambda m: m.add_memories([GOOD, GOOD, {"user_input": "q", "agent_response": " "}]),
        r"turns\[2\]\.agent_response",
    ),
    ("a batch item not a mapping", lambda m: m.add_memories([GOOD, "hello"]), r"turns\[1\]"),  # type: ignore[list-item]
    ("empty query", lambda m: m.retrieve("  "), "query"),
    ("over-long query", lambda m: m.retrieve("q" * 201), "query"),
    ("zero top_k", lambda m: m.retrieve("tea", top_k=0), "top_k"),
    ("negative knowledge_top_k", lambda m: m.retrieve("tea", knowledge_top_k=-1), "knowledge_top_k"),
    ("empty get_response query", lambda m: m.get_response(""), "query"),
]


@pytest.mark.parametrize(
    ("call", "field"), [(c, f) for _, c, f in BAD_CALLS], ids=[n for n, _, _ in BAD_CALLS]
)
def test_bad_input_raises_value_error_naming_the_field_and_changes_nothing(
    tmp_path: Path, call: Callable[[Memoryos], object], field: str
) -> None:
    memory = make(tmp_path, short_term_capacity=2)
    add_all(memory, TOPICS[:4])
    before = stored_state(memory)
    with pytest.raises(ValueError, match=rf"^{field}: "):
        call(memory)
    assert stored_state(memory) == before
    memory.close()


def test_a_pair_with_one_empty_side_is_refused_never_silently_dropped(memory: Memoryos) -> None:
    """Reference weakness #9: it dropped such a pair and reported success."""
    with pytest.raises(ValueError, match="agent_response"):
        memory.add_memory("Remember my locker code is 4711.", "")
    short = [("ok", "sure"), ("thanks!", "You're welcome."), ("?", "!"), *TOPICS]
    add_all(memory, short)
    assert all_texts(memory) == short
    stats = memory.get_memory_stats()
    assert stats["short_term_pages"] + stats["mid_term_pages"] + stats["archived_pages"] == len(short)
    memory.close()


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"user_id": ".."}, "user_id"),
        ({"user_id": "a/b"}, "user_id"),
        ({"user_id": "a\x00b"}, "user_id"),
        ({"user_id": "u" * 129}, "user_id"),
        ({"user_id": ""}, "user_id"),
        ({"assistant_id": "../alice"}, "assistant_id"),
        ({"assistant_id": "x\n"}, "assistant_id"),
        ({"short_term_capacity": 0}, "short_term_capacity"),
        ({"mid_term_capacity": -1}, "mid_term_capacity"),
        ({"long_term_knowledge_capacity": 0}, "long_term_knowledge_capacity"),
        ({"retrieval_queue_capacity": 0}, "retrieval_queue_capacity"),
        ({"mid_term_heat_threshold": 0}, "mid_term_heat_threshold"),
        ({"short_term_capacity": True}, "short_term_capacity"),
        ({"retrieval_queue_capacity": False}, "retrieval_queue_capacity"),
        ({"embedding_model_kwargs": {"local_files_only": False}}, "embedding_model_kwargs"),
    ],
)
def test_bad_constructor_arguments_are_rejected_before_anything_is_opened(
    tmp_path: Path, kwargs: dict[str, Any], field: str
) -> None:
    existing = make(tmp_path, short_term_capacity=2)
    add_all(existing, TOPICS[:3])
    before = stored_state(existing)
    existing.close()
    paths_before = sorted(tmp_path.rglob("*"))

    args: dict[str, Any] = {"user_id": "alice", "assistant_id": "helper", **kwargs}
    user_id, assistant_id = args.pop("user_id"), args.pop("assistant_id")
    with pytest.raises(ValueError, match=field):
        make(tmp_path, user_id, assistant_id, **args)

    assert sorted(tmp_path.rglob("*")) == paths_before
    reopened = make(tmp_path, short_term_capacity=2)
    after = stored_state(reopened)
    before["stats"]["llm_usage"] = after["stats"]["llm_usage"] = None
    assert after == before
    reopened.close()


@pytest.mark.parametrize("tenant", ["..", "../../escape", "a/b", "/abs", "t" * 129])
def test_a_tenant_that_would_leave_the_data_dir_is_refused_and_nothing_is_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tenant: str
) -> None:
    data_dir = tmp_path / "a" / "data"
    monkeypatch.setenv("MEMORYOS_TENANT", tenant)
    with pytest.raises(ValueError, match="tenant"):
        Memoryos("alice", None, data_dir, embedder=HashEmbedder(), llm=OfflineLLM())
    monkeypatch.delenv("MEMORYOS_TENANT")
    unchecked = MemoryConfig.model_construct(tenant=tenant, faiss_use_gpu="never")  # skips validation
    with pytest.raises(ValueError, match="tenant"):
        Memoryos("alice", None, data_dir, config=unchecked, embedder=HashEmbedder(), llm=OfflineLLM())
    assert list(tmp_path.rglob("*")) == []


def test_a_corrupt_store_is_a_storage_error_and_is_left_as_it_was(tmp_path: Path) -> None:
    """Reference weakness: a file that fails to parse was silently replaced by an empty tier."""
    directory = MemoryConfig(data_dir=tmp_path).space_dir("alice", "helper")
    directory.mkdir(parents=True)
    garbage = bytes(range(256)) * 64
    (directory / STORE_FILE).write_bytes(garbage)
    with pytest.raises(StorageError):
        make(tmp_path)
    assert (directory / STORE_FILE).read_bytes() == garbage


class BatchCountingEmbedder(HashEmbedder):
    """A `HashEmbedder` that records the texts of each `encode` call."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[list[str]] = []

    def encode(self, texts: Sequence[str], *, is_query: bool = False) -> np.ndarray:
        self.calls.append(list(texts))
        return super().encode(texts, is_query=is_query)


def test_add_memories_embeds_all_its_turns_in_one_batch(tmp_path: Path) -> None:
    embedder = BatchCountingEmbedder()
    memory = make(tmp_path, embedder=embedder, short_term_capacity=len(TOPICS))
    ids = memory.add_memories([{"user_input": u, "agent_response": a} for u, a in TOPICS])
    assert len(embedder.calls) == 1
    assert sorted(embedder.calls[0]) == sorted(page.text() for page in memory.space.pages(ids))
    memory.close()


def test_embedding_settings_decide_which_shared_model_a_space_gets() -> None:
    minilm = MemoryConfig(embedding_device="cpu")
    truncated = MemoryConfig(embedding_device="cpu", embedding_model_kwargs={"truncate_dim": 128})
    assert shared_embedder(minilm) is shared_embedder(MemoryConfig(embedding_device="cpu"))
    assert shared_embedder(truncated) is not shared_embedder(minilm)
    assert shared_embedder(truncated) is not shared_embedder(
        truncated.model_copy(update={"embedding_runtime": "torch"})
    )


def test_a_model_with_the_recorded_name_but_another_dimension_is_a_mismatch(tmp_path: Path) -> None:
    make(tmp_path).close()
    memory = make(tmp_path, embedder=HashEmbedder(dim=32))
    with pytest.raises(EmbeddingModelMismatchError, match="memoryos reindex"):
        memory.add_memory("I like tea.", "Noted.")
    assert memory.space.store.count_pages() == {}
    memory.close()
