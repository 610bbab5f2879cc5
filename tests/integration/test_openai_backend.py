"""`OpenAILLM` with the real `openai` client against a local OpenAI-compatible server."""

import logging
import time

import pytest
from pydantic import SecretStr

from memoryos.config import MemoryConfig
from memoryos.errors import LLMError
from memoryos.llm.base import AnswerRequest
from memoryos.llm.openai_backend import OpenAILLM
from memoryos.types import Page
from tests.support.openai_server import ScriptedOpenAIServer, ScriptedReply
from tests.support.openai_server import openai_server as openai_server  # the fixture

pytestmark = pytest.mark.integration

API_KEY = "sk-test-do-not-log"
PAGES = [
    Page(
        page_id=1,
        user_input="I'm planning a hike in the Alps next week.",
        agent_response="Pack layers: the weather changes fast up there.",
        timestamp="2024-06-01 09:00:00",
        meta_info="The user plans an Alpine hike.",
    )
]


def make_llm(server: ScriptedOpenAIServer, *, retries: int = 2, timeout_s: float = 5.0) -> OpenAILLM:
    config = MemoryConfig(
        openai_api_key=SecretStr(API_KEY),
        openai_base_url=server.base_url,
        llm_model="test-model-7b",
        llm_timeout_s=timeout_s,
        llm_max_retries=retries,
    )
    return OpenAILLM(config)


def user_message(server: ScriptedOpenAIServer, index: int = -1) -> str:
    return str(server.requests[index].body["messages"][-1]["content"])


def test_topic_json_in_fences_after_reasoning(openai_server: ScriptedOpenAIServer) -> None:
    openai_server.script(
        '<think>Draft: {"summary": "weather"}</think>\nHere you go:\n```json\n'
        '{"summary": "Planning an Alpine hike", "keywords": ["hiking", "Alps", "hiking", ""]}\n```'
    )
    topic = make_llm(openai_server).summarize_topic(PAGES)
    assert topic.summary == "Planning an Alpine hike"
    assert topic.keywords == ["hiking", "Alps"]


def test_knowledge_facts_parsed(openai_server: ScriptedOpenAIServer) -> None:
    openai_server.script(
        'The facts: {"user_facts": ["The user plans a hike in the Alps in June 2024."],'
        ' "assistant_facts": []}'
    )
    knowledge = make_llm(openai_server).extract_knowledge(PAGES)
    assert knowledge.user_facts == ["The user plans a hike in the Alps in June 2024."]
    assert knowledge.assistant_facts == []


def test_continuity_and_text_replies_have_reasoning_stripped(openai_server: ScriptedOpenAIServer) -> None:
    openai_server.script(
        "<think>same subject</think>Yes.", "<think>\nshort\n</think>\n\nAn Alpine hike is planned."
    )
    llm = make_llm(openai_server)
    assert llm.is_continuation(PAGES[0], PAGES[0]) is True
    assert llm.summarize_chain(PAGES) == "An Alpine hike is planned."


def test_the_request_carries_the_configured_model_and_key(openai_server: ScriptedOpenAIServer) -> None:
    openai_server.script("A hike.")
    make_llm(openai_server).summarize_chain(PAGES)
    (sent,) = openai_server.requests
    assert sent.path == "/v1/chat/completions"
    assert sent.body["model"] == "test-model-7b"
    assert sent.headers["authorization"] == f"Bearer {API_KEY}"
    assert "I'm planning a hike in the Alps next week." in user_message(openai_server)


def test_retries_after_a_server_error(openai_server: ScriptedOpenAIServer) -> None:
    openai_server.script(ScriptedReply(status=500), ScriptedReply(status=503), "no")
    assert make_llm(openai_server, retries=2).is_continuation(PAGES[0], PAGES[0]) is False
    assert len(openai_server.requests) == 3


def test_a_persistent_failure_raises_instead_of_returning_text(openai_server: ScriptedOpenAIServer) -> None:
    openai_server.script(*[ScriptedReply(status=500)] * 3)
    with pytest.raises(LLMError, match="profile"):
        make_llm(openai_server, retries=2).update_profile("- Likes hiking", PAGES)
    assert len(openai_server.requests) == 3


def test_a_client_error_is_not_retried(openai_server: ScriptedOpenAIServer) -> None:
    openai_server.script(ScriptedReply(status=401))
    with pytest.raises(LLMError, match="AuthenticationError"):
        make_llm(openai_server, retries=3).answer(
            AnswerRequest(
                query="q",
                short_term=[],
                retrieved=[],
                user_profile="",
                user_knowledge=[],
                assistant_knowledge=[],
            )
        )
    assert len(openai_server.requests) == 1


def test_an_empty_profile_reply_is_asked_again_then_raises(openai_server: ScriptedOpenAIServer) -> None:
    openai_server.script("", "<think>nothing to add</think>")
    with pytest.raises(LLMError, match="empty"):
        make_llm(openai_server).update_profile("- Likes hiking", PAGES)
    assert len(openai_server.requests) == 2


def test_unparseable_json_is_asked_for_once_more(openai_server: ScriptedOpenAIServer) -> None:
    openai_server.script("Sorry, I cannot produce JSON.", '{"summary": "Alpine hike", "keywords": ["alps"]}')
    llm = make_llm(openai_server)
    assert llm.summarize_topic(PAGES).summary == "Alpine hike"
    assert llm.usage["topic"].calls == 2


def test_a_proxy_page_instead_of_json_raises(openai_server: ScriptedOpenAIServer) -> None:
    openai_server.script(ScriptedReply(raw_body="<html>502 Bad Gateway</html>"))
    with pytest.raises(LLMError, match="malformed"):
        make_llm(openai_server).summarize_chain(PAGES)


def test_the_timeout_is_honoured(openai_server: ScriptedOpenAIServer) -> None:
    openai_server.script(ScriptedReply("too late", delay_s=5.0))
    started = time.monotonic()
    with pytest.raises(LLMError, match="APITimeoutError"):
        make_llm(openai_server, retries=0, timeout_s=0.3).summarize_chain(PAGES)
    assert time.monotonic() - started < 2.0


def test_usage_is_counted_per_operation_from_the_response(openai_server: ScriptedOpenAIServer) -> None:
    openai_server.script(
        ScriptedReply("yes", prompt_tokens=100, completion_tokens=1),
        ScriptedReply("no", prompt_tokens=120, completion_tokens=2),
        ScriptedReply("- Plans a hike in the Alps", prompt_tokens=300, completion_tokens=9),
    )
    llm = make_llm(openai_server)
    llm.is_continuation(PAGES[0], PAGES[0])
    llm.is_continuation(PAGES[0], PAGES[0])
    llm.update_profile("", PAGES)
    usage = {name: entry.model_dump() for name, entry in llm.usage.items()}
    assert usage == {
        "continuity": {"calls": 2, "prompt_tokens": 220, "completion_tokens": 3},
        "profile": {"calls": 1, "prompt_tokens": 300, "completion_tokens": 9},
    }


def test_usage_is_estimated_when_the_server_sends_none(openai_server: ScriptedOpenAIServer) -> None:
    openai_server.script(ScriptedReply("An Alpine hike is planned.", send_usage=False))
    llm = make_llm(openai_server)
    llm.summarize_chain(PAGES)
    usage = llm.usage["chain_summary"]
    assert usage.calls == 1
    assert usage.prompt_tokens > 20
    assert 0 < usage.completion_tokens < 20


def test_profile_prompt_merges_the_current_profile(openai_server: ScriptedOpenAIServer) -> None:
    openai_server.script("- Likes hiking\n- Plans an Alpine hike")
    profile = make_llm(openai_server).update_profile("- Likes hiking", PAGES)
    assert profile == "- Likes hiking\n- Plans an Alpine hike"
    assert "- Likes hiking" in user_message(openai_server)


def test_answer_prompt_carries_the_memory_context_and_style(openai_server: ScriptedOpenAIServer) -> None:
    openai_server.script("Bring layers!")
    reply = make_llm(openai_server).answer(
        AnswerRequest(
            query="What should I pack?",
            short_term=[],
            retrieved=PAGES,
            user_profile="- Likes hiking",
            user_knowledge=["The user plans a hike in the Alps."],
            assistant_knowledge=["The assistant advised packing layers."],
            relationship_with_user="travel coach",
            style_hint="two short bullet points",
        )
    )
    assert reply == "Bring layers!"
    system, user = (message["content"] for message in openai_server.requests[0].body["messages"])
    assert "travel coach" in system and "- Likes hiking" in system  # the stable part: a cacheable prefix
    for expected in (
        "2024-06-01 09:00:00",
        "The user plans an Alpine hike.",
        "The user plans a hike in the Alps.",
        "The assistant advised packing layers.",
        "What should I pack?",
    ):
        assert expected in user
    assert "two short bullet points" in user
    assert "30 words" not in system + user
    assert "English" not in system + user


def test_neither_the_key_nor_memory_text_is_logged_at_info(
    openai_server: ScriptedOpenAIServer, caplog: pytest.LogCaptureFixture
) -> None:
    openai_server.script(
        ScriptedReply(status=500), "Not JSON at all", '{"summary": "Alpine hike", "keywords": []}'
    )
    with caplog.at_level(logging.INFO):
        make_llm(openai_server).summarize_topic(PAGES)
    assert caplog.records  # the retry and the re-ask were logged
    assert API_KEY not in caplog.text
    assert "Alps" not in caplog.text
