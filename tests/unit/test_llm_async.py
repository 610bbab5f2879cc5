"""The async LLM adapters: `InlineAsyncLLM`, `as_async`, and the bound, deadline and error rule of
`LimitedLLM`, with the offline backend and the scripted fake (no server, no model)."""

import asyncio
from collections.abc import Sequence

import pytest
from pydantic import SecretStr

from memoryos.config import MemoryConfig
from memoryos.errors import LLMError
from memoryos.llm import AsyncMemoryLLM, CallSlots, InlineAsyncLLM, LimitedLLM, as_async, call_deadline_s
from memoryos.llm.base import AnswerRequest, TopicSummary
from memoryos.llm.offline.backend import OfflineLLM
from memoryos.llm.openai_backend import OpenAILLM
from memoryos.types import Page
from tests.support.fakes import DelayedAsyncLLM, ScriptedLLM


def page(page_id: int, user: str, agent: str, timestamp: str) -> Page:
    return Page(page_id=page_id, user_input=user, agent_response=agent, timestamp=timestamp)


TEACHER = page(
    1,
    "I'm a teacher in Lyon. My name is Ann.",
    "I recommend the Musée des Confluences.",
    "2024-05-01 10:00:00",
)
MATH = page(2, "Yes, I teach math to teenagers in Lyon.", "Math is a great subject.", "2024-05-01 10:05:00")
PASTA = page(3, "What's a good pasta recipe?", "Try carbonara: eggs, pecorino.", "2024-05-02 19:00:00")
PAGES = [TEACHER, MATH, PASTA]
REQUEST = AnswerRequest(
    query="Where does Ann teach?",
    short_term=[PASTA],
    retrieved=[TEACHER, MATH],
    user_profile="",
    user_knowledge=[],
    assistant_knowledge=[],
)


class ExplodingLLM(ScriptedLLM):
    """A backend with a bug: its topic summaries raise something other than `LLMError`."""

    def summarize_topic(self, pages: Sequence[Page]) -> TopicSummary:
        raise KeyError("summary")


async def every_task(llm: AsyncMemoryLLM) -> list[object]:
    return [
        await llm.is_continuation(TEACHER, MATH),
        await llm.is_continuation(MATH, PASTA),
        await llm.summarize_chain(PAGES),
        await llm.summarize_topic(PAGES),
        await llm.update_profile("- Likes museums", PAGES),
        await llm.extract_knowledge(PAGES),
        await llm.answer(REQUEST),
    ]


def test_inline_gives_the_sync_offline_results_and_usage() -> None:
    sync = OfflineLLM()
    expected = [
        sync.is_continuation(TEACHER, MATH),
        sync.is_continuation(MATH, PASTA),
        sync.summarize_chain(PAGES),
        sync.summarize_topic(PAGES),
        sync.update_profile("- Likes museums", PAGES),
        sync.extract_knowledge(PAGES),
        sync.answer(REQUEST),
    ]
    inline = InlineAsyncLLM(OfflineLLM())
    assert asyncio.run(every_task(inline)) == expected
    assert inline.usage == sync.usage
    assert expected[:2] == [True, False]


def test_as_async_takes_the_backends_own_view_or_runs_it_inline() -> None:
    offline = OfflineLLM()
    inline = as_async(offline)
    assert isinstance(inline, InlineAsyncLLM)
    assert inline.llm is offline
    assert isinstance(as_async(ScriptedLLM()), DelayedAsyncLLM)
    openai_llm = OpenAILLM(
        MemoryConfig(openai_api_key=SecretStr("sk-test"), openai_base_url="http://127.0.0.1:9")
    )
    assert as_async(openai_llm) is openai_llm.async_view()


def test_the_scripted_fake_works_inline_and_through_its_delayed_view() -> None:
    scripted = ScriptedLLM()
    inline_results = asyncio.run(every_task(InlineAsyncLLM(scripted)))
    assert asyncio.run(every_task(ScriptedLLM(delay_s=0.001).async_view())) == inline_results
    assert scripted.calls["continuity"] == 2
    with pytest.raises(LLMError, match="topic"):
        asyncio.run(ScriptedLLM(fail_on={"topic"}, delay_s=0.001).async_view().summarize_topic(PAGES))


def test_fifty_concurrent_calls_never_exceed_the_bound() -> None:
    slow = ScriptedLLM(delay_s=0.01)
    limited = LimitedLLM(as_async(slow), max_concurrency=4, timeout_s=30.0)

    async def fifty() -> list[str]:
        return await asyncio.gather(*(limited.summarize_chain([TEACHER]) for _ in range(50)))

    summaries = asyncio.run(fifty())
    assert summaries == [OfflineLLM().summarize_chain([TEACHER])] * 50
    assert slow.max_in_flight == 4  # what the backend saw
    assert limited.max_in_flight_seen == 4
    assert limited.in_flight == 0
    assert limited.slots.waiting == 0
    assert slow.calls["chain_summary"] == 50
    assert limited.usage["chain_summary"].calls == 50


def test_limited_llms_sharing_slots_share_one_bound() -> None:
    slots = LimitedLLM.shared_slots(3)
    first, second = ScriptedLLM(delay_s=0.01), ScriptedLLM(delay_s=0.01)
    limited = [LimitedLLM(as_async(llm), slots=slots, timeout_s=30.0) for llm in (first, second)]

    async def both() -> None:
        await asyncio.gather(*(limited[i % 2].is_continuation(TEACHER, MATH) for i in range(20)))

    asyncio.run(both())
    assert slots.max_in_flight_seen == 3
    assert limited[0].max_in_flight_seen == limited[1].max_in_flight_seen == 3


def test_a_call_past_its_deadline_raises_llm_error() -> None:
    limited = LimitedLLM(as_async(ScriptedLLM(delay_s=60.0)), max_concurrency=2, timeout_s=0.05)
    with pytest.raises(LLMError, match="'summarize_topic' timed out") as raised:
        asyncio.run(limited.summarize_topic(PAGES))
    assert isinstance(raised.value.__cause__, TimeoutError)
    assert limited.in_flight == 0


def test_an_unexpected_backend_exception_becomes_llm_error_with_its_cause() -> None:
    limited = LimitedLLM(as_async(ExplodingLLM()), max_concurrency=2, timeout_s=30.0)
    with pytest.raises(LLMError, match="'summarize_topic' failed unexpectedly: KeyError") as raised:
        asyncio.run(limited.summarize_topic(PAGES))
    assert isinstance(raised.value.__cause__, KeyError)
    assert limited.in_flight == 0


def test_an_llm_error_passes_through_unchanged() -> None:
    limited = LimitedLLM(as_async(ScriptedLLM(fail_on={"profile"})), max_concurrency=2, timeout_s=30.0)
    with pytest.raises(LLMError) as raised:
        asyncio.run(limited.update_profile("", PAGES))
    assert str(raised.value) == "scripted failure of profile"
    assert raised.value.__cause__ is None


def test_cancellation_propagates_and_frees_the_slot() -> None:
    slow = ScriptedLLM(delay_s=60.0)
    limited = LimitedLLM(as_async(slow), max_concurrency=1, timeout_s=120.0)

    async def cancel_running_and_waiting() -> None:
        running = asyncio.create_task(limited.answer(REQUEST))
        waiting = asyncio.create_task(limited.answer(REQUEST))
        while slow.in_flight < 1 or limited.slots.waiting < 1:
            await asyncio.sleep(0)
        waiting.cancel()
        running.cancel()
        for task in (running, waiting):
            with pytest.raises(asyncio.CancelledError):
                await task
        assert (limited.in_flight, limited.slots.waiting) == (0, 0)
        slow.delay_s = 0.0
        assert await limited.is_continuation(TEACHER, MATH) is True  # the slot was given back

    asyncio.run(cancel_running_and_waiting())
    assert "answer" not in slow.calls  # the cancelled calls never reached the backend's work


def test_the_bound_moves_to_a_new_loop_once_idle() -> None:
    limited = LimitedLLM(as_async(ScriptedLLM(delay_s=0.001)), max_concurrency=2, timeout_s=30.0)
    assert asyncio.run(limited.is_continuation(TEACHER, MATH)) is True
    assert asyncio.run(limited.is_continuation(TEACHER, MATH)) is True


def test_invalid_bounds_are_refused() -> None:
    inline = as_async(OfflineLLM())
    with pytest.raises(ValueError, match="max_concurrency"):
        LimitedLLM(inline, max_concurrency=0, timeout_s=1.0)
    with pytest.raises(ValueError, match="timeout_s"):
        LimitedLLM(inline, max_concurrency=1, timeout_s=0.0)
    with pytest.raises(ValueError, match="either"):
        LimitedLLM(inline, 2, 1.0, slots=CallSlots(2))  # type: ignore[call-overload]


def test_the_deadline_covers_every_attempt_and_backoff() -> None:
    config = MemoryConfig(llm_timeout_s=10.0, llm_max_retries=3)
    assert call_deadline_s(config) == 10.0 * 4 + 8.0 * 3
