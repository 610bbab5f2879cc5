"""The answer-quality bench's parts against a real OpenAI-compatible server: ours answering with both its
arms, bounded, at temperature 0, each call's tokens and finish reason logged, and resumable without storing
a session twice; the reference (when an interpreter with `memoryos-pro` is named) answering through its
own `get_response` with its published and repaired prompts, resumable from its log once its ingest is
done, and started over when its ingest was stopped."""

import json
import os
from pathlib import Path

import pytest

from bench.quality.answer_arms import fixed_prompt
from bench.quality.answers import MAX_TOKENS_CAP, run_ours, run_reference, sample
from memoryos.config import MemoryConfig
from memoryos.eval.harness import ANSWER_STYLE_HINT
from memoryos.eval.locomo import LocomoConversation
from memoryos.eval.reference_runner import answer_prompts
from memoryos.facade.memoryos import Memoryos
from tests.support.fakes import HashEmbedder
from tests.support.openai_server import ScriptedOpenAIServer
from tests.support.openai_server import openai_server as openai_server  # the fixture
from tests.unit.test_answer_arms import PUBLISHED_SHAPE
from tests.unit.test_eval_harness import hand_built

pytestmark = pytest.mark.integration

REFERENCE_PYTHON = os.environ.get("MEMORYOS_REFERENCE_PYTHON")
needs_reference = pytest.mark.skipif(
    not REFERENCE_PYTHON, reason="set MEMORYOS_REFERENCE_PYTHON to a python with memoryos-pro"
)


def _reference_part(conversation: LocomoConversation, part: Path, server: ScriptedOpenAIServer) -> Path:
    """Run the reference's part; its log."""
    run_reference(conversation, part, server.base_url, "local", Path(str(REFERENCE_PYTHON)))
    return part / "log.jsonl"


def _reference_short_term(part: Path, conversation: LocomoConversation) -> int:
    """Pairs in the reference's short-term memory file."""
    short_term = part / "data" / "users" / conversation.sample_id / "short_term.json"
    return len(json.loads(short_term.read_text(encoding="utf-8")))


def _stopped_after(log: Path, lines: int) -> None:
    """The log as a stop after its first `lines` events (negative: all but the last) would have left it."""
    kept = log.read_text(encoding="utf-8").splitlines()[:lines]
    log.write_text("\n".join(kept) + "\n", encoding="utf-8")


def _events(log: Path, kind: str) -> list[dict[str, object]]:
    lines = log.read_text(encoding="utf-8").splitlines()
    return [event for event in map(json.loads, lines) if event["kind"] == kind]


def test_our_part_answers_with_both_prompts_at_temperature_zero_and_resumes_where_it_stopped(
    openai_server: ScriptedOpenAIServer, tmp_path: Path
) -> None:
    openai_server.respond_always("Marta")
    conversation = sample(hand_built(), sessions=3)
    log = tmp_path / "log.jsonl"
    templates = answer_prompts(PUBLISHED_SHAPE, fixed_prompt(ANSWER_STYLE_HINT))

    run_ours(conversation, tmp_path, openai_server.base_url, "local", templates, HashEmbedder())

    assert [event["session"] for event in _events(log, "session")] == [1, 2, 3]
    answers = _events(log, "answered")
    assert [(event["question"], event["arm"], event["prediction"]) for event in answers] == [
        (0, "ours", "Marta"),
        (0, "ours_reference_prompt", "Marta"),
        (1, "ours", "Marta"),
        (1, "ours_reference_prompt", "Marta"),
    ]
    assert all(
        event["calls"]
        == [
            {
                "prompt_tokens": event["calls"][0]["prompt_tokens"],
                "completion_tokens": 1,
                "finish_reason": "stop",
            }
        ]
        for event in answers
    )
    assert all(event["shown"] for event in answers)
    bodies = [request.body for request in openai_server.requests]
    assert len(bodies) == 4
    assert all(body["temperature"] == 0 and body["max_tokens"] <= MAX_TOKENS_CAP for body in bodies)
    # Ours first in our layout, then the same memories in the reference's.
    assert "The user just said" not in bodies[0]["messages"][-1]["content"]
    assert "The user just said: " + conversation.qa[0].question in bodies[1]["messages"][-1]["content"]

    # A stop after the first arm of the second question: the rerun asks its second arm only, and stores
    # nothing again.
    _stopped_after(log, -1)
    run_ours(conversation, tmp_path, openai_server.base_url, "local", templates, HashEmbedder())

    assert len(openai_server.requests) == 5
    assert "The user just said" in openai_server.requests[-1].body["messages"][-1]["content"]
    assert [event["arm"] for event in _events(log, "answered")][-1] == "ours_reference_prompt"
    config = MemoryConfig(data_dir=tmp_path / "data")
    with Memoryos.from_config(conversation.sample_id, config, embedder=HashEmbedder()) as memory:
        stats = memory.stats()
    assert stats.short_term_pages + stats.mid_term_pages == len(conversation.pairs)


@needs_reference
def test_the_reference_answers_through_its_get_response_with_both_prompts_and_resumes(
    openai_server: ScriptedOpenAIServer, tmp_path: Path
) -> None:
    openai_server.respond_always("Marta")
    conversation = sample(hand_built(), sessions=3)
    log = tmp_path / "log.jsonl"

    _reference_part(conversation, tmp_path, openai_server)

    assert [event["pair"] for event in _events(log, "added")] == list(range(len(conversation.pairs)))
    answers = _events(log, "answered")
    assert [(event["question"], event["arm"]) for event in answers] == [
        (0, "published"),
        (0, "fixed"),
        (1, "published"),
        (1, "fixed"),
    ]
    assert all(event["result"]["prediction"] == "Marta" for event in answers)
    assert all(event["result"]["short_term"] for event in answers)
    assert all(event["calls"][-1]["finish_reason"] == "stop" for event in answers)
    answer_prompts_sent = [
        r.body["messages"][-1]["content"]
        for r in openai_server.requests
        if "The user just said" in str(r.body)
    ]
    assert sum("<your reply to the user" in prompt for prompt in answer_prompts_sent) == 2
    assert all(body["temperature"] == 0 for body in (r.body for r in openai_server.requests))
    asked = len(openai_server.requests)

    # Nothing was stored back: its short-term memory holds the conversation's pairs only.
    assert _reference_short_term(tmp_path, conversation) == len(conversation.pairs)

    _stopped_after(log, -1)
    _reference_part(conversation, tmp_path, openai_server)

    assert len(_events(log, "added")) == len(conversation.pairs)
    assert [(event["question"], event["arm"]) for event in _events(log, "answered")][-1] == (1, "fixed")
    assert len(openai_server.requests) > asked


@needs_reference
def test_a_reference_part_stopped_while_ingesting_starts_over_and_adds_each_pair_once(
    openai_server: ScriptedOpenAIServer, tmp_path: Path
) -> None:
    openai_server.respond_always("Marta")
    conversation = sample(hand_built(), sessions=3)
    log = tmp_path / "log.jsonl"
    _reference_part(conversation, tmp_path, openai_server)
    # Stopped after two pairs: the log holds them, the data folder whatever the third left half-written.
    _stopped_after(log, 2)

    _reference_part(conversation, tmp_path, openai_server)

    assert [event["pair"] for event in _events(log, "added")] == list(range(len(conversation.pairs)))
    assert _reference_short_term(tmp_path, conversation) == len(conversation.pairs)


@needs_reference
def test_a_reference_call_that_raises_is_logged_and_its_part_goes_on(
    openai_server: ScriptedOpenAIServer, tmp_path: Path
) -> None:
    """A topic reply that is a JSON string makes the reference's updater raise `AttributeError` once its
    short-term memory (10 pairs) overflows; it ended a real run at pair 31 of conv-26."""
    openai_server.respond_always('"Marta"')
    conversation = sample(hand_built(), sessions=3)
    extra = [
        pair.model_copy(update={"index": 7 + i, "user_input": f"{pair.user_input} ({i})"})
        for i, pair in enumerate(conversation.pairs[:6])
    ]
    conversation = conversation.model_copy(update={"pairs": [*conversation.pairs, *extra]})

    _reference_part(conversation, tmp_path, openai_server)

    added = _events(tmp_path / "log.jsonl", "added")
    assert len(added) == len(conversation.pairs) == 13
    assert any("AttributeError" in str(event["error"]) for event in added)
    assert len(_events(tmp_path / "log.jsonl", "answered")) == 4  # 2 questions, 2 prompts
