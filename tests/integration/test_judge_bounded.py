"""The eval judge's calls are bounded as the engine's are (issue 52): a token cap, temperature 0, the
label's JSON schema, and the engine's fallback to free text when the endpoint refuses `response_format`,
checked on what the local OpenAI-compatible stub server recorded."""

from pathlib import Path

import pytest
from pydantic import SecretStr

from memoryos.config import MemoryConfig
from memoryos.errors import LLMError
from memoryos.eval.judge import JUDGE_MAX_TOKENS, JUDGE_SCHEMA, OpenAIJudge
from tests.support.openai_server import ScriptedOpenAIServer, ScriptedReply
from tests.support.openai_server import openai_server as openai_server  # the fixture

pytestmark = pytest.mark.integration


def judge_on(server: ScriptedOpenAIServer, tmp_path: Path) -> OpenAIJudge:
    config = MemoryConfig(
        data_dir=tmp_path,
        openai_api_key=SecretStr("sk-test"),
        openai_base_url=server.base_url,
        llm_max_retries=0,
    )
    return OpenAIJudge(config, model="judge-model")


def test_the_judge_request_is_bounded_and_asks_for_the_label_schema(
    openai_server: ScriptedOpenAIServer, tmp_path: Path
) -> None:
    openai_server.script('{"label": "CORRECT"}')
    judge = judge_on(openai_server, tmp_path)

    assert judge.is_correct("Where did Evan hike?", "the Rockies", "In the Rocky Mountains.") is True

    (request,) = [r.body for r in openai_server.requests]
    assert request["model"] == "judge-model"
    assert request["max_tokens"] == JUDGE_MAX_TOKENS and request["temperature"] == 0.0
    assert request["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "judge", "schema": JUDGE_SCHEMA, "strict": True},
    }
    assert judge.usage.calls == 1


def test_a_server_refusing_the_schema_gets_free_text_requests_from_then_on(
    openai_server: ScriptedOpenAIServer, tmp_path: Path
) -> None:
    openai_server.script(
        ScriptedReply(status=400),  # "response_format is not supported", as servers without it answer
        "It names another place. WRONG",
        "Same date. CORRECT",
    )
    judge = judge_on(openai_server, tmp_path)

    assert judge.is_correct("Where did Evan hike?", "the Rockies", "In the Alps.") is False
    assert judge.is_correct("When?", "7 May 2023", "May 7th, 2023") is True

    sent = [r.body for r in openai_server.requests]
    assert ["response_format" in body for body in sent] == [True, False, False]
    assert all(body["max_tokens"] == JUDGE_MAX_TOKENS and body["temperature"] == 0.0 for body in sent)
    assert judge.usage.calls == 2, "the refused request was never answered"


def test_an_unlabelled_reply_is_asked_again_hotter_then_refused(
    openai_server: ScriptedOpenAIServer, tmp_path: Path
) -> None:
    openai_server.script('{"label": "MAYBE"}', "I cannot tell.")
    judge = judge_on(openai_server, tmp_path)

    with pytest.raises(LLMError, match="no CORRECT/WRONG label"):
        judge.is_correct("Where did Evan hike?", "the Rockies", "Somewhere.")

    temperatures = [r.body["temperature"] for r in openai_server.requests]
    assert temperatures[0] == 0.0 and temperatures[1] > 0.0  # a second greedy sample would repeat the first
