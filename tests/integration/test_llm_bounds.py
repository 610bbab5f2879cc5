"""Bounded, structured LLM calls (issue 37): what the real `openai` client sends to a real local server,
and what the backend does when that server refuses `response_format` or replies as a model gone wrong
(a line repeated up to the token cap, prose around the JSON, reasoning cut off)."""

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import SecretStr

from memoryos.config import MemoryConfig
from memoryos.errors import LLMError
from memoryos.eval.stub_llm_server import MEMORY_TASK_RULES, BadReply, StubLLMServer
from memoryos.llm.base import AnswerRequest
from memoryos.llm.chat_tasks import KNOWLEDGE_SCHEMA, TOPIC_SCHEMA
from memoryos.llm.openai_backend import OpenAILLM
from memoryos.llm.openai_client import REASK_TEMPERATURE
from memoryos.types import Page
from tests.support.openai_server import ScriptedOpenAIServer, ScriptedReply
from tests.support.openai_server import openai_server as openai_server  # the fixture

pytestmark = pytest.mark.integration

TOPIC_JSON = '{"summary": "Catching up on family, work and plans.", "keywords": ["family", "work", "plans"]}'
FACTS_JSON = '{"user_facts": ["The user has a close friend."], "assistant_facts": []}'


def page(page_id: int, text: str) -> Page:
    stamp = datetime(2024, 5, 1, 10, page_id, tzinfo=UTC)
    return Page(
        page_id=page_id,
        user_input=text,
        agent_response="Tell me more.",
        timestamp=stamp.strftime("%Y-%m-%d %H:%M:%S"),
        created_at=stamp.timestamp(),
    )


PAGES = [page(1, "My friend Sam and I went hiking."), page(2, "We are planning a trip to Porto.")]


def bounded_config(base_url: str, **overrides: Any) -> MemoryConfig:
    return MemoryConfig(
        openai_api_key=SecretStr("sk-test"), openai_base_url=base_url, llm_max_retries=0, **overrides
    )


def every_task(llm: OpenAILLM) -> None:
    """One call of each task, in the order of `EXPECTED`."""
    assert llm.is_continuation(PAGES[0], PAGES[1]) is True
    assert llm.summarize_chain(PAGES)
    assert llm.summarize_topic(PAGES).keywords == ["family", "work", "plans"]
    assert llm.update_profile("", PAGES)
    assert llm.extract_knowledge(PAGES).user_facts == ["The user has a close friend."]
    request = AnswerRequest(
        query="Who is Sam?", short_term=PAGES, retrieved=[], user_profile="", user_knowledge=[],
        assistant_knowledge=[],
    )  # fmt: skip
    assert llm.answer(request)


CAPS = {
    "llm_max_tokens_continuity": 3,
    "llm_max_tokens_chain_summary": 40,
    "llm_max_tokens_topic": 50,
    "llm_max_tokens_profile": 60,
    "llm_max_tokens_knowledge": 70,
    "llm_max_tokens_answer": 80,
    "llm_temperature_answer": 0.4,
}
EXPECTED = [(3, 0.0, None), (40, 0.0, None), (50, 0.0, TOPIC_SCHEMA), (60, 0.0, None)]
EXPECTED += [(70, 0.0, KNOWLEDGE_SCHEMA), (80, 0.4, None)]
"""(max_tokens, temperature, schema sent) per task, in `every_task`'s order."""


def sent(body: dict[str, Any]) -> tuple[int, float, dict[str, Any] | None]:
    response_format = body.get("response_format")
    schema = None
    if response_format is not None:
        assert response_format["type"] == "json_schema" and response_format["json_schema"]["strict"] is True
        schema = response_format["json_schema"]["schema"]
    return body.get("max_tokens"), body.get("temperature"), schema  # type: ignore[return-value]


@pytest.fixture
def stub(request: pytest.FixtureRequest) -> Iterator[StubLLMServer]:
    """The stub with MemoryOS's task rules; `indirect` params: (reject_response_format, bad_reply)."""
    reject, bad_reply = getattr(request, "param", (False, None))
    with StubLLMServer(
        "Sam is your friend.", MEMORY_TASK_RULES, reject_response_format=reject, bad_reply=bad_reply
    ) as server:
        yield server


def test_every_task_is_sent_its_cap_temperature_and_schema(stub: StubLLMServer) -> None:
    every_task(OpenAILLM(bounded_config(stub.base_url, **CAPS)))
    assert [sent(body) for body in stub.requests] == EXPECTED


def test_the_defaults_bound_every_call_and_sample_memory_tasks_greedily(stub: StubLLMServer) -> None:
    every_task(OpenAILLM(bounded_config(stub.base_url)))
    defaults = MemoryConfig()
    bodies = stub.requests
    assert [body["max_tokens"] for body in bodies] == [
        defaults.llm_max_tokens_continuity,
        defaults.llm_max_tokens_chain_summary,
        defaults.llm_max_tokens_topic,
        defaults.llm_max_tokens_profile,
        defaults.llm_max_tokens_knowledge,
        defaults.llm_max_tokens_answer,
    ]
    assert [body["temperature"] for body in bodies] == [0.0] * 5 + [defaults.llm_temperature_answer]


@pytest.mark.parametrize("stub", [(True, "prose")], indirect=True)
def test_a_refused_response_format_falls_back_to_free_text_once_for_both_paths(
    stub: StubLLMServer,
) -> None:
    """The first JSON task's request is refused (400) and sent again without `response_format`; the
    prose around its JSON is parsed as before. The backend remembers: neither its sync path nor its
    async view sends `response_format` again."""
    llm = OpenAILLM(bounded_config(stub.base_url, **CAPS))
    assert llm.summarize_topic(PAGES).summary == "Catching up on family, work and plans."
    assert llm.extract_knowledge(PAGES).user_facts == ["The user has a close friend."]
    view = llm.async_view()

    async def in_the_view() -> list[str]:
        try:
            return (await view.extract_knowledge(PAGES)).user_facts
        finally:
            await view.aclose()

    assert asyncio.run(in_the_view()) == ["The user has a close friend."]
    assert [sent(body) for body in stub.requests] == [
        (50, 0.0, TOPIC_SCHEMA),  # refused with 400
        (50, 0.0, None),
        (70, 0.0, None),
        (70, 0.0, None),
    ]
    assert llm.usage["topic"].calls == 1 and llm.usage["knowledge"].calls == 2


def test_a_400_with_another_cause_is_raised_and_teaches_nothing(openai_server: ScriptedOpenAIServer) -> None:
    """Sent again without the schema, the request fails too: the error is not the schema's, so it is
    raised, and the next JSON task still sends `response_format`; once a reply to it has come, a 400 is
    never again taken for a refusal."""
    openai_server.script(
        ScriptedReply(status=400), ScriptedReply(status=400), TOPIC_JSON, ScriptedReply(status=400)
    )
    llm = OpenAILLM(bounded_config(openai_server.base_url))
    with pytest.raises(LLMError, match="'topic' failed: BadRequestError"):
        llm.summarize_topic(PAGES)
    assert llm.summarize_topic(PAGES).keywords == ["family", "work", "plans"]
    with pytest.raises(LLMError, match="'knowledge' failed: BadRequestError"):
        llm.extract_knowledge(PAGES)
    bodies = [request.body for request in openai_server.requests]
    assert ["response_format" in body for body in bodies] == [True, False, True, True]


def test_an_unparseable_reply_is_asked_again_at_a_higher_temperature(
    openai_server: ScriptedOpenAIServer,
) -> None:
    """At temperature 0 a server decodes greedily: the same request would get the same bad reply."""
    openai_server.script("The topic is family.", TOPIC_JSON)
    llm = OpenAILLM(bounded_config(openai_server.base_url))
    assert llm.summarize_topic(PAGES).summary == "Catching up on family, work and plans."
    assert [request.body["temperature"] for request in openai_server.requests] == [0.0, REASK_TEMPERATURE]


LOOPING: BadReply = "loop"


@pytest.mark.parametrize("stub", [(False, LOOPING)], indirect=True)
def test_a_looping_model_is_cut_at_each_tasks_cap(stub: StubLLMServer) -> None:
    """Each reply repeats its line until the request's `max_tokens` (the stub's 4096 when none is sent,
    as a server's default cap). Decisions and JSON are read from the first line; a summary or profile cut
    at its cap is refused, never stored, with the setting to raise named."""
    llm = OpenAILLM(bounded_config(stub.base_url, **CAPS))
    assert llm.is_continuation(PAGES[0], PAGES[1]) is True
    assert llm.summarize_topic(PAGES).keywords == ["family", "work", "plans"]
    assert llm.extract_knowledge(PAGES).user_facts == ["The user has a close friend."]
    with pytest.raises(LLMError, match=r"cut at max_tokens=60 \(llm_max_tokens_profile"):
        llm.update_profile("", PAGES)
    with pytest.raises(LLMError, match=r"cut at max_tokens=40 \(llm_max_tokens_chain_summary"):
        llm.summarize_chain(PAGES)
    completion = {operation: usage.completion_tokens for operation, usage in llm.usage.items()}
    assert completion == {"continuity": 3, "topic": 50, "knowledge": 70, "profile": 60, "chain_summary": 40}


def test_reasoning_cut_off_by_the_cap_names_the_setting() -> None:
    with StubLLMServer("<think> Let me weigh both turns", bad_reply="loop") as server:
        llm = OpenAILLM(bounded_config(server.base_url))
        with pytest.raises(LLMError, match="llm_max_tokens_continuity; a reasoning model needs more"):
            llm.is_continuation(PAGES[0], PAGES[1])
        assert server.requests_served == 1  # not asked again at the same cap
