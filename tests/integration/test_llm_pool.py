"""LLM calls pooled across spaces (issue 10): 20 spaces consolidating at once keep the endpoint busy up
to `llm_max_concurrency`, through the real `openai` async client against a local OpenAI-compatible server
that records how many requests it is handling at once."""

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from memoryos import Memoryos
from memoryos.config import MemoryConfig
from memoryos.scheduler import Scheduler
from tests.support.fakes import HashEmbedder
from tests.support.openai_server import ScriptedOpenAIServer
from tests.support.openai_server import openai_server as openai_server  # the fixture

pytestmark = pytest.mark.integration

EVERY_TASK_REPLY = (
    'no {"summary": "tea", "keywords": ["tea"], "user_facts": ["likes tea"], "assistant_facts": []}'
)
"""Parses for every consolidation task: continuity reads the first word, topic and facts the JSON object,
chain summary and profile take the text."""


def pool_config(tmp_path: Path, server: ScriptedOpenAIServer, concurrency: int) -> MemoryConfig:
    """Short-term memory of 2, so every few writes file pages and call the LLM, at most `concurrency` at once."""
    return MemoryConfig(
        data_dir=tmp_path,
        faiss_use_gpu="never",
        short_term_capacity=2,
        openai_api_key="test-key",
        openai_base_url=server.base_url,
        llm_max_concurrency=concurrency,
    )


def test_twenty_spaces_consolidating_keep_the_llm_bound_busy(
    tmp_path: Path, openai_server: ScriptedOpenAIServer
) -> None:
    """Each reply takes 0.1 s, long enough that requests overlap: without the bound, these spaces' 220
    calls reach 64 in flight at once; with it, the 8 slots are all taken."""
    concurrency = 8
    openai_server.respond_always(EVERY_TASK_REPLY, delay_s=0.1)
    config = pool_config(tmp_path, openai_server, concurrency)
    scheduler = Scheduler(config, name="pool-test")
    embedder = HashEmbedder()
    try:
        memories = [
            Memoryos.from_config(f"user{i}", config, embedder=embedder, scheduler=scheduler)
            for i in range(20)
        ]
        for i, memory in enumerate(memories):
            memory.add_memories(
                [{"user_input": f"user{i} turn {j} about topic{j}", "agent_response": "ok"} for j in range(6)]
            )
        for memory in memories:
            memory.flush()
        assert concurrency // 2 <= openai_server.max_in_flight <= concurrency
        for memory in memories:
            stats = memory.stats()
            assert (stats.short_term_pages, stats.mid_term_pages) == (2, 4)  # every overflow page filed
        for memory in memories:
            memory.close()
    finally:
        scheduler.close()


def test_answers_share_the_bound_with_consolidation(
    tmp_path: Path, openai_server: ScriptedOpenAIServer
) -> None:
    """`get_response` from many callers while spaces consolidate: never more requests in flight than
    `llm_max_concurrency`. Answers went around the bound, and a one-slot local model got two at once.
    Each reply takes 0.05 s: answers let around the bound still overlap each other and consolidation's
    calls (5 in flight at once when tried), and the 36 calls, one at a time, take about 2 s."""
    openai_server.respond_always(EVERY_TASK_REPLY, delay_s=0.05)
    config = pool_config(tmp_path, openai_server, 1)
    scheduler = Scheduler(config, name="answer-bound-test")
    embedder = HashEmbedder()
    try:
        memories = [
            Memoryos.from_config(f"user{i}", config, embedder=embedder, scheduler=scheduler) for i in range(4)
        ]
        for i, memory in enumerate(memories):
            memory.add_memories(
                [{"user_input": f"user{i} turn {j} about topic{j}", "agent_response": "ok"} for j in range(4)]
            )
        with ThreadPoolExecutor(4) as pool:  # while the overflow of each space is being filed
            answers = list(pool.map(lambda memory: memory.get_response("What do I like?"), memories))
        for memory in memories:
            memory.flush()
        assert answers == [EVERY_TASK_REPLY] * 4
        assert openai_server.max_in_flight == 1
        for memory in memories:
            memory.close()
    finally:
        scheduler.close()
