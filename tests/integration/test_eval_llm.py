"""The harness with an LLM over HTTP: answers and judge labels from a scripted OpenAI-compatible server,
the CLI against the stub server, and (when an interpreter with `memoryos-pro` is named) the reference."""

import json
import os
from pathlib import Path

import pytest
from pydantic import SecretStr

from memoryos.cli.main import main
from memoryos.config import MemoryConfig
from memoryos.eval.baselines import REFERENCE, run_reference
from memoryos.eval.harness import evaluate_conversation
from memoryos.eval.judge import ACCURACY_PROMPT, OpenAIJudge, parse_label
from memoryos.eval.metrics import bleu1, token_f1
from memoryos.eval.stub_llm_server import StubLLMServer
from memoryos.llm.openai_backend import OpenAILLM
from tests.support.fakes import HashEmbedder
from tests.support.openai_server import ScriptedOpenAIServer, ScriptedReply
from tests.support.openai_server import openai_server as openai_server  # the fixture
from tests.unit.test_eval_cli import write_raw_sample
from tests.unit.test_eval_harness import hand_built

pytestmark = pytest.mark.integration


def llm_config(base_url: str, data_dir: Path) -> MemoryConfig:
    return MemoryConfig(
        data_dir=data_dir,
        openai_api_key=SecretStr("sk-test"),
        openai_base_url=base_url,
        llm_model="answer-model",
        llm_max_retries=0,
    )


def test_answers_and_judge_labels_are_scored(openai_server: ScriptedOpenAIServer, tmp_path: Path) -> None:
    """Seven pairs fit in short-term memory, so ingestion makes no LLM call: the script is exactly one
    answer and one judge reply per question with a gold answer, in that order."""
    conversation = hand_built()
    openai_server.script(
        ScriptedReply("Marta, the violin teacher", prompt_tokens=500, completion_tokens=5),
        ScriptedReply('{"label": "CORRECT"}', prompt_tokens=300, completion_tokens=6),
        ScriptedReply("a kayak", prompt_tokens=510, completion_tokens=2),
        ScriptedReply("The answer is about a boat.\nWRONG", prompt_tokens=310, completion_tokens=9),
    )
    config = llm_config(openai_server.base_url, tmp_path)
    judge = OpenAIJudge(config, model="judge-model")

    result = evaluate_conversation(
        conversation,
        tmp_path,
        config,
        HashEmbedder(),
        llm_factory=lambda: OpenAILLM(config),
        answer_questions=True,
        judge=judge,
        keep_details=True,
    )

    assert result.details is not None
    violin, lake = result.details
    assert (violin.prediction, violin.judge) == ("Marta, the violin teacher", True)
    assert (lake.prediction, lake.judge) == ("a kayak", False)
    assert violin.f1 == token_f1("Marta, the violin teacher", "Marta")
    assert lake.bleu1 == bleu1("a kayak", "a red kayak; sourdough")
    answers = result.answers
    assert answers is not None
    assert answers.by_category[4].judge == 1.0 and answers.by_category[1].judge == 0.0
    assert answers.overall.judge == 0.5 and answers.overall.judged == 2
    assert answers.overall.f1 == pytest.approx((violin.f1 + lake.f1) / 2)
    cost = result.llm
    assert cost is not None
    assert cost.ingest.calls == 0 and cost.calls_per_turn == 0.0
    assert cost.questions.model_dump() == {"calls": 2, "prompt_tokens": 1010, "completion_tokens": 7}
    assert cost.calls_per_question == 1.0 and cost.tokens_per_question == 508.5
    assert cost.judge.model_dump() == {"calls": 2, "prompt_tokens": 610, "completion_tokens": 15}
    assert result.llm_calls == 2, "the judge's calls are not the system's"

    sent = [request.body for request in openai_server.requests]
    assert [body["model"] for body in sent] == ["answer-model", "judge-model"] * 2
    answer_prompt = json.dumps(sent[0]["messages"])
    assert "Marta on Tuesdays" in answer_prompt and "Ana" in answer_prompt and "Ben" in answer_prompt
    assert sent[1]["temperature"] == 0.0 and sent[1]["response_format"]["type"] == "json_schema"
    assert (
        "Gold answer: Marta\nGenerated answer: Marta, the violin teacher" in sent[1]["messages"][1]["content"]
    )
    assert sent[1]["messages"][1]["content"].startswith(ACCURACY_PROMPT.split("{")[0])


def test_judge_labels_parse_leniently() -> None:
    assert parse_label('```json\n{"label": "CORRECT"}\n```') is True
    assert parse_label("<think>WRONG?</think> It names the same date. CORRECT") is True
    assert parse_label('{"label": "wrong"}') is False


def test_the_cli_answers_with_a_configured_llm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole command with an LLM: every answer "Marta", every judge label CORRECT, from a stub."""
    data = write_raw_sample(tmp_path / "locomo10.json")
    monkeypatch.setattr("memoryos.embedding.shared.shared_embedder", lambda config: HashEmbedder())
    with StubLLMServer("Marta", rules=[('"label"', '{"label": "CORRECT"}')]) as server:
        monkeypatch.setenv("MEMORYOS_OPENAI_API_KEY", "sk-stub")
        monkeypatch.setenv("MEMORYOS_OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("MEMORYOS_LLM_MODEL", "stub-model")
        code = main(["eval", "locomo", "--data", str(data), "--out", str(tmp_path / "out"), "--no-baselines"])
        served = server.requests_served

    assert code == 0
    results = json.loads((tmp_path / "out" / "locomo_results.json").read_text())
    assert results["llm"] == {
        "configured": True,
        "model": "stub-model",
        "base_url": results["llm"]["base_url"],
        "judge_model": "stub-model",
    }
    (ours,) = results["memoryos"]
    assert ours["answered"] == 2 and ours["answers"]["overall"]["judge"] == 1.0
    assert [record["prediction"] for record in ours["details"]] == ["Marta", "Marta"]
    assert ours["llm"]["judge"]["calls"] == 2
    assert served == ours["llm"]["ingest"]["calls"] + ours["llm"]["questions"]["calls"] + 2
    table = (tmp_path / "out" / "locomo_results.md").read_text()
    assert "LLM stub-model, judge stub-model." in table
    assert "| 4 single-hop | 1 | 1 | 1.000 | 1.000 | 1.000 |" in table


REFERENCE_PYTHON = os.environ.get("MEMORYOS_REFERENCE_PYTHON")


@pytest.mark.skipif(
    not REFERENCE_PYTHON, reason="set MEMORYOS_REFERENCE_PYTHON to a python with memoryos-pro"
)
def test_the_reference_runs_on_identical_pairs() -> None:
    """Thirteen pairs: the reference's short-term memory (10) overflows, so it files pages mid-term
    and its retrieval searches them (one keyword-extraction LLM call per query)."""
    conversation = hand_built()
    extra = [
        pair.model_copy(update={"index": 7 + i, "session": 4, "user_input": f"{pair.user_input} ({i})"})
        for i, pair in enumerate(conversation.pairs[:6])
    ]
    conversation = conversation.model_copy(update={"pairs": [*conversation.pairs, *extra]})

    (result,) = run_reference([conversation], Path(str(REFERENCE_PYTHON)))

    assert result.system == REFERENCE and result.skipped is None, result.skipped
    assert result.recall is not None and result.recall.question_count == 2
    assert result.add_ms is not None and result.add_ms.count == 13
    assert result.llm is not None and result.llm.ingest.calls > 0
    assert result.llm.questions.calls == 2
