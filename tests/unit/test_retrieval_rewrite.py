"""The optional LLM query rewrite (`memoryos/planning/query_rewrite.py`) against a local OpenAI-compatible server:
off by default, one call per distinct query, the question alone when the call fails or is too slow."""

from pathlib import Path

from pydantic import SecretStr

from memoryos import MemoryConfig, Memoryos
from memoryos.llm.offline.backend import OfflineLLM
from memoryos.planning.query_rewrite import QueryRewriter, query_rewriter
from tests.support.fakes import FakeClock, HashEmbedder
from tests.support.openai_server import ScriptedOpenAIServer, ScriptedReply
from tests.support.openai_server import openai_server as openai_server  # the fixture

QUESTION = "What hobbies does she have?"


def rewriter(server: ScriptedOpenAIServer, timeout_s: float = 5.0) -> QueryRewriter:
    config = MemoryConfig(
        openai_base_url=server.base_url, query_rewrite=True, query_rewrite_timeout_s=timeout_s
    )
    found = query_rewriter(config)
    assert found is not None
    return found


def test_off_by_default_and_without_an_endpoint() -> None:
    assert query_rewriter(MemoryConfig(openai_api_key=SecretStr("sk-test"))) is None
    assert query_rewriter(MemoryConfig(query_rewrite=True)) is None


def test_the_search_text_is_the_question_then_the_words_once_per_distinct_query(
    openai_server: ScriptedOpenAIServer,
) -> None:
    openai_server.script("<think>pots?</think> pottery,  camping", "violin")
    rewrite = rewriter(openai_server)
    assert rewrite.search_text(QUESTION) == f"{QUESTION} pottery, camping"
    assert rewrite.search_text(QUESTION) == f"{QUESTION} pottery, camping"
    assert rewrite.search_text("What does she play?") == "What does she play? violin"
    assert len(openai_server.requests) == 2 and rewrite.calls == 2
    assert openai_server.requests[0].body["messages"][-1]["content"] == QUESTION


def test_a_failed_or_slow_call_leaves_the_question_and_is_not_retried(
    openai_server: ScriptedOpenAIServer,
) -> None:
    openai_server.script(ScriptedReply(status=500), ScriptedReply("pottery", delay_s=1.0), "pottery")
    rewrite = rewriter(openai_server, timeout_s=0.2)
    assert rewrite.search_text(QUESTION) == QUESTION  # the 500, once
    assert rewrite.search_text(QUESTION) == QUESTION  # past the timeout
    assert len(openai_server.requests) == 2
    assert rewrite.search_text(QUESTION) == f"{QUESTION} pottery"  # failures are not cached


def test_the_rewrite_words_find_a_page_the_question_alone_misses(
    openai_server: ScriptedOpenAIServer, tmp_path: Path
) -> None:
    def memory(rewrite: bool) -> Memoryos:
        config = MemoryConfig(faiss_use_gpu="never", ingest_mode="inline", query_rewrite=rewrite)
        return Memoryos(
            f"user{int(rewrite)}",
            None,
            tmp_path,
            openai_base_url=openai_server.base_url,
            config=config,
            embedder=HashEmbedder(),
            llm=OfflineLLM(),
            clock=FakeClock(),
        )

    openai_server.respond_always("pottery, class")
    for rewrite in (True, False):
        with memory(rewrite) as mem:
            for i in range(6):
                mem.add_memory(f"Any hobbies lately, friend {i}?" if i % 2 else "Morning!", "Not really.")
            mem.add_memory("Big news today.", "I signed up for a pottery class yesterday!")
            top = mem.retrieve(QUESTION, top_k=1).retrieved_pages[0]
            assert ("pottery" in top.agent_response) is rewrite
