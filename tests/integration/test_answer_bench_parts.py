"""The answer-quality bench's parts against a real OpenAI-compatible server: ours bounded, at temperature
0, and resumable without storing a session twice; the reference (when an interpreter with `memoryos-pro`
is named) answering through its own `get_response`, resumable from its log."""

import json
import os
from pathlib import Path

import pytest

from bench.quality.answers import MAX_TOKENS_CAP, run_ours, run_reference, sample
from memoryos.config import MemoryConfig
from memoryos.facade.memoryos import Memoryos
from tests.support.fakes import HashEmbedder
from tests.support.openai_server import ScriptedOpenAIServer
from tests.support.openai_server import openai_server as openai_server  # the fixture
from tests.unit.test_eval_harness import hand_built

pytestmark = pytest.mark.integration

REFERENCE_PYTHON = os.environ.get("MEMORYOS_REFERENCE_PYTHON")


def _events(log: Path, kind: str) -> list[dict[str, object]]:
    lines = log.read_text(encoding="utf-8").splitlines()
    return [event for event in map(json.loads, lines) if event["kind"] == kind]


def test_our_part_answers_at_temperature_zero_and_resumes_where_it_stopped(
    openai_server: ScriptedOpenAIServer, tmp_path: Path
) -> None:
    openai_server.respond_always("Marta")
    conversation = sample(hand_built(), sessions=3)
    log = tmp_path / "log.jsonl"

    run_ours(conversation, tmp_path, openai_server.base_url, "local", HashEmbedder())

    assert [event["session"] for event in _events(log, "session")] == [1, 2, 3]
    answers = _events(log, "answered")
    assert [(event["question"], event["prediction"]) for event in answers] == [(0, "Marta"), (1, "Marta")]
    bodies = [request.body for request in openai_server.requests]
    assert len(bodies) == 2
    assert all(body["temperature"] == 0 and body["max_tokens"] <= MAX_TOKENS_CAP for body in bodies)

    # A stop after the first answer: the rerun asks the second question only, and stores nothing again.
    lines = log.read_text(encoding="utf-8").splitlines()
    log.write_text("\n".join(lines[:-1]) + "\n", encoding="utf-8")
    run_ours(conversation, tmp_path, openai_server.base_url, "local", HashEmbedder())

    assert len(openai_server.requests) == 3
    assert [event["question"] for event in _events(log, "answered")] == [0, 1]
    config = MemoryConfig(data_dir=tmp_path / "data")
    with Memoryos.from_config(conversation.sample_id, config, embedder=HashEmbedder()) as memory:
        stats = memory.stats()
    assert stats.short_term_pages + stats.mid_term_pages == len(conversation.pairs)


@pytest.mark.skipif(
    not REFERENCE_PYTHON, reason="set MEMORYOS_REFERENCE_PYTHON to a python with memoryos-pro"
)
def test_the_reference_answers_through_its_get_response_and_resumes(
    openai_server: ScriptedOpenAIServer, tmp_path: Path
) -> None:
    openai_server.respond_always("Marta")
    conversation = sample(hand_built(), sessions=3)
    log = tmp_path / "log.jsonl"

    run_reference(conversation, tmp_path, openai_server.base_url, "local", Path(str(REFERENCE_PYTHON)))

    assert [event["pair"] for event in _events(log, "added")] == list(range(len(conversation.pairs)))
    answers = _events(log, "answered")
    assert [event["result"] for event in answers] == [{"prediction": "Marta", "error": None}] * 2
    assert all(body["temperature"] == 0 for body in (r.body for r in openai_server.requests))
    asked = len(openai_server.requests)

    # Nothing was stored back: its short-term memory holds the conversation's pairs only.
    short_term = tmp_path / "data" / "users" / conversation.sample_id / "short_term.json"
    assert len(json.loads(short_term.read_text(encoding="utf-8"))) == len(conversation.pairs)

    lines = log.read_text(encoding="utf-8").splitlines()
    log.write_text("\n".join(lines[:-1]) + "\n", encoding="utf-8")
    run_reference(conversation, tmp_path, openai_server.base_url, "local", Path(str(REFERENCE_PYTHON)))

    assert len(_events(log, "added")) == len(conversation.pairs)
    assert [event["question"] for event in _events(log, "answered")] == [0, 1]
    assert len(openai_server.requests) > asked


@pytest.mark.skipif(
    not REFERENCE_PYTHON, reason="set MEMORYOS_REFERENCE_PYTHON to a python with memoryos-pro"
)
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

    run_reference(conversation, tmp_path, openai_server.base_url, "local", Path(str(REFERENCE_PYTHON)))

    added = _events(tmp_path / "log.jsonl", "added")
    assert len(added) == len(conversation.pairs) == 13
    assert any("AttributeError" in str(event["error"]) for event in added)
    assert len(_events(tmp_path / "log.jsonl", "answered")) == 2
