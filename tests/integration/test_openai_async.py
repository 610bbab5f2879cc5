"""`OpenAILLM.async_view()` with the real `openai.AsyncOpenAI` client against a local OpenAI-compatible
server: the same parsing, retries and usage as the sync path, and `LimitedLLM`'s bound seen by the server."""

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

from memoryos.errors import LLMError
from memoryos.llm import LimitedLLM
from memoryos.llm.base import AsyncMemoryLLM, ExtractedKnowledge, MemoryLLM, TopicSummary
from memoryos.llm.openai_async import AsyncOpenAILLM
from memoryos.types import Page
from tests.integration.test_openai_backend import API_KEY, make_llm
from tests.support.openai_server import ScriptedOpenAIServer, ScriptedReply
from tests.support.openai_server import openai_server as openai_server  # the fixture

pytestmark = pytest.mark.integration

T = TypeVar("T")

PAGES = [
    Page(
        page_id=1,
        user_input="I'm planning a hike in the Alps next week.",
        agent_response="Pack layers: the weather changes fast up there.",
        timestamp="2024-06-01 09:00:00",
        meta_info="The user plans an Alpine hike.",
    )
]
CONSOLIDATION_REPLIES = (
    "<think>same subject</think>Yes.",
    "<think>\nshort\n</think>\n\nAn Alpine hike is planned.",
    'Here:\n```json\n{"summary": "Planning an Alpine hike", "keywords": ["hiking", "Alps", "hiking"]}\n```',
    "- Likes hiking\n- Plans an Alpine hike",
    '{"user_facts": ["The user plans a hike in the Alps."], "assistant_facts": "- Advised packing layers"}',
)


def run_on(view: AsyncOpenAILLM, work: Callable[[], Awaitable[T]]) -> T:
    """`work()` on a fresh event loop, the view's client closed on it afterwards."""

    async def main() -> T:
        try:
            return await work()
        finally:
            await view.aclose()

    return asyncio.run(main())


def consolidate_sync(llm: MemoryLLM) -> list[object]:
    return [
        llm.is_continuation(PAGES[0], PAGES[0]),
        llm.summarize_chain(PAGES),
        llm.summarize_topic(PAGES),
        llm.update_profile("- Likes hiking", PAGES),
        llm.extract_knowledge(PAGES),
    ]


async def consolidate_async(llm: AsyncMemoryLLM) -> list[object]:
    """One after the other: the server answers in request order."""
    return [
        await llm.is_continuation(PAGES[0], PAGES[0]),
        await llm.summarize_chain(PAGES),
        await llm.summarize_topic(PAGES),
        await llm.update_profile("- Likes hiking", PAGES),
        await llm.extract_knowledge(PAGES),
    ]


def test_the_consolidation_tasks_parse_as_the_sync_ones_do(openai_server: ScriptedOpenAIServer) -> None:
    llm = make_llm(openai_server)
    openai_server.script(*CONSOLIDATION_REPLIES)
    expected = consolidate_sync(llm)
    openai_server.script(*CONSOLIDATION_REPLIES)
    view = llm.async_view()
    assert run_on(view, lambda: consolidate_async(view)) == expected
    assert expected == [
        True,
        "An Alpine hike is planned.",
        TopicSummary(summary="Planning an Alpine hike", keywords=["hiking", "Alps"]),
        "- Likes hiking\n- Plans an Alpine hike",
        ExtractedKnowledge(
            user_facts=["The user plans a hike in the Alps."], assistant_facts=["Advised packing layers"]
        ),
    ]
    sync_requests, async_requests = openai_server.requests[:5], openai_server.requests[5:]
    assert [r.body for r in async_requests] == [r.body for r in sync_requests]  # same prompts and model
    assert all(r.headers["authorization"] == f"Bearer {API_KEY}" for r in async_requests)


def test_the_view_is_one_per_backend(openai_server: ScriptedOpenAIServer) -> None:
    llm = make_llm(openai_server)
    assert llm.async_view() is llm.async_view()


def test_a_rate_limit_is_retried_by_the_client(openai_server: ScriptedOpenAIServer) -> None:
    openai_server.script(ScriptedReply(status=429), "no")
    view = make_llm(openai_server, retries=2).async_view()
    assert run_on(view, lambda: view.is_continuation(PAGES[0], PAGES[0])) is False
    assert len(openai_server.requests) == 2


def test_a_server_error_past_the_retries_raises_llm_error(openai_server: ScriptedOpenAIServer) -> None:
    openai_server.script(*[ScriptedReply(status=500)] * 3)
    view = make_llm(openai_server, retries=2).async_view()
    with pytest.raises(LLMError, match="'profile' failed: InternalServerError"):
        run_on(view, lambda: view.update_profile("- Likes hiking", PAGES))
    assert len(openai_server.requests) == 3


def test_an_unparseable_reply_is_asked_for_once_more(openai_server: ScriptedOpenAIServer) -> None:
    openai_server.script("Sorry, I cannot produce JSON.", '{"summary": "Alpine hike", "keywords": ["alps"]}')
    llm = make_llm(openai_server)
    view = llm.async_view()
    assert run_on(view, lambda: view.summarize_topic(PAGES)).summary == "Alpine hike"
    assert llm.usage["topic"].calls == 2


def test_a_second_unparseable_reply_raises(openai_server: ScriptedOpenAIServer) -> None:
    openai_server.script("Not JSON.", "Still not JSON.", '{"summary": "never asked for"}')
    view = make_llm(openai_server).async_view()
    with pytest.raises(LLMError, match="'topic' failed after a retry"):
        run_on(view, lambda: view.summarize_topic(PAGES))
    assert len(openai_server.requests) == 2


def test_a_proxy_page_instead_of_json_raises(openai_server: ScriptedOpenAIServer) -> None:
    openai_server.script(ScriptedReply(raw_body="<html>502 Bad Gateway</html>"))
    view = make_llm(openai_server).async_view()
    with pytest.raises(LLMError, match="malformed"):
        run_on(view, lambda: view.summarize_chain(PAGES))


def test_twenty_calls_reach_exactly_the_bound_at_the_server(openai_server: ScriptedOpenAIServer) -> None:
    openai_server.respond_always("yes", delay_s=0.3)
    view = make_llm(openai_server).async_view()
    limited = LimitedLLM(view, max_concurrency=8, timeout_s=60.0)

    async def twenty() -> list[bool]:
        return await asyncio.gather(*(limited.is_continuation(PAGES[0], PAGES[0]) for _ in range(20)))

    assert run_on(view, twenty) == [True] * 20
    assert openai_server.max_in_flight == 8
    assert limited.max_in_flight_seen == 8
    assert openai_server.in_flight == limited.in_flight == 0
    assert len(openai_server.requests) == 20


def test_a_hung_call_is_cut_by_the_limited_deadline(openai_server: ScriptedOpenAIServer) -> None:
    openai_server.respond_always("too late", delay_s=30.0)
    view = make_llm(openai_server, retries=0, timeout_s=60.0).async_view()
    limited = LimitedLLM(view, max_concurrency=2, timeout_s=0.3)
    with pytest.raises(LLMError, match="'summarize_chain' timed out"):
        run_on(view, lambda: limited.summarize_chain(PAGES))
    assert limited.in_flight == 0


def test_usage_is_counted_in_the_backends_one_counter(openai_server: ScriptedOpenAIServer) -> None:
    openai_server.script(
        ScriptedReply("yes", prompt_tokens=100, completion_tokens=1),
        ScriptedReply("no", prompt_tokens=120, completion_tokens=2),
        ScriptedReply("An Alpine hike.", send_usage=False),
    )
    llm = make_llm(openai_server)
    view = llm.async_view()
    assert llm.is_continuation(PAGES[0], PAGES[0]) is True

    async def two() -> None:
        assert await view.is_continuation(PAGES[0], PAGES[0]) is False
        assert await view.summarize_chain(PAGES) == "An Alpine hike."

    run_on(view, two)
    assert view.usage == llm.usage
    assert llm.usage["continuity"].model_dump() == {"calls": 2, "prompt_tokens": 220, "completion_tokens": 3}
    assert llm.usage["chain_summary"].calls == 1
    assert llm.usage["chain_summary"].completion_tokens > 0  # estimated: the server sent no usage


def test_the_view_is_bound_to_the_loop_it_was_first_used_on(openai_server: ScriptedOpenAIServer) -> None:
    openai_server.respond_always("yes")
    view = make_llm(openai_server).async_view()
    assert asyncio.run(view.is_continuation(PAGES[0], PAGES[0])) is True
    with pytest.raises(LLMError, match="bound to the event loop"):
        asyncio.run(view.is_continuation(PAGES[0], PAGES[0]))


def test_a_closed_view_binds_to_the_next_loop(openai_server: ScriptedOpenAIServer) -> None:
    openai_server.respond_always("yes")
    view = make_llm(openai_server).async_view()
    assert run_on(view, lambda: view.is_continuation(PAGES[0], PAGES[0])) is True
    assert run_on(view, lambda: view.is_continuation(PAGES[0], PAGES[0])) is True
    assert len(openai_server.requests) == 2
