"""`python -m bench --only scheduler` at tiny sizes with the hash embedder, and the stub LLM's canned
replies against MemoryOS's own prompts and parsers. Shapes and counts only: no timing is asserted."""

import json
from typing import Any

import pytest

from bench.engine.scheduler import run_scheduler, scheduler_markdown
from memoryos.config import MemoryConfig
from memoryos.eval.locomo import LocomoConversation, LocomoPair, LocomoQuestion
from memoryos.eval.stub_llm_server import MEMORY_TASK_RULES
from memoryos.llm import chat_tasks
from memoryos.types import Page
from tests.support.fakes import HashEmbedder

TASKS = ("chain_summary", "continuity", "knowledge", "profile", "topic")
TOPICS = ("hiking in the hills", "a new puppy", "baking sourdough", "learning the violin")


def _conversation(pairs: int) -> LocomoConversation:
    """Two sessions a day apart (a chain break without the LLM), then short exchanges."""
    return LocomoConversation(
        sample_id="tiny",
        speaker_a="Ana",
        speaker_b="Ben",
        pairs=[
            LocomoPair(
                index=i,
                session=1 + i // (pairs // 2),
                timestamp=f"2023-05-{8 + i // (pairs // 2):02d} 10:{i:02d}:00",
                timestamp_raw="",
                user_input=f"Ana talks about {TOPICS[i % len(TOPICS)]}, turn {i}.",
                agent_response=f"Ben asks more about {TOPICS[i % len(TOPICS)]}.",
                dia_ids=[f"D1:{i}"],
            )
            for i in range(pairs)
        ],
        qa=[
            LocomoQuestion(question=f"What did Ana say about {t}?", evidence=[], evidence_norm=[], category=1)
            for t in TOPICS
        ],
    )


def test_scheduler_part_runs_and_reports_every_figure() -> None:
    config = MemoryConfig(short_term_capacity=3, mid_term_heat_threshold=1.0, embedding_max_wait_ms=1.0)
    conversation = _conversation(12)
    results = run_scheduler(
        config,
        HashEmbedder(),
        conversation,
        spaces=4,
        rounds=2,
        solo_turns=3,
        llm_delay_s=0.01,
        concurrencies=(1, 4),
        retrieve_concurrency=4,
        log=lambda _: None,
    )

    solo, many = results["ingest"]
    assert (solo["spaces"], solo["turns"], many["spaces"], many["turns"]) == (1, 3, 4, 8)
    assert many["texts_encoded"] == 8  # nothing consolidated: pages only
    assert 1 <= many["encode_calls"] <= 8
    assert many["mean_batch_size"] == pytest.approx(8 / many["encode_calls"], abs=0.05)
    assert solo["add_until_searchable"]["p50_ms"] > 0

    assert [row["llm_max_concurrency"] for row in results["consolidate"]] == [1, 4]
    for row in results["consolidate"]:
        assert row["settled"], row  # every canned reply parsed: nothing is backing off
        assert row["pages"] == 12 and row["short_term_pages"] <= 3
        assert row["llm_calls"] == row["llm_requests_served"] > 0
        assert set(row["llm_calls_by_task"]) == set(TASKS)
        assert 1 <= row["llm_max_in_flight"] <= row["llm_max_concurrency"]
        assert row["user_facts"] >= 1 and row["segments"] >= 1

    retrieve = results["retrieve"]
    assert retrieve["reads"] == 12 and retrieve["llm_calls"] > 0
    assert 0 <= retrieve["reads_with_llm_call_in_flight"] <= 12
    assert set(retrieve["retrieve"]) == {"p50_ms", "p95_ms"}

    json.dumps(results)  # what bench writes
    table = scheduler_markdown({"machine": "test", **results})
    assert "4 spaces at once" in table and "llm_max_concurrency 4" in table


def _pages() -> list[Page]:
    return [
        Page(
            page_id=i,
            user_input=f"I went {TOPICS[i]} yesterday.",
            agent_response="Tell me more!",
            timestamp="2023-05-08 10:00:00",
        )
        for i in (1, 2)
    ]


def test_memory_task_rules_answer_each_consolidation_task_with_a_reply_it_parses() -> None:
    first, second = _pages()
    tasks: list[chat_tasks.ChatTask[Any]] = [
        chat_tasks.continuity_task(first, second),
        chat_tasks.chain_summary_task([first, second]),
        chat_tasks.topic_task([first, second]),
        chat_tasks.profile_task("- Likes walks.", [first, second]),
        chat_tasks.knowledge_task([first, second]),
    ]
    for task, (marker, reply) in zip(tasks, MEMORY_TASK_RULES, strict=True):
        prompt = " ".join(message["content"] for message in task.messages)
        matching = [m for m, _ in MEMORY_TASK_RULES if m in prompt]
        assert matching == [marker], task.operation  # its own rule, and only it
        task.parse(reply)  # raises LLMError on a reply the task cannot use
