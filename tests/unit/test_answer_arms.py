"""The answer bench's arms: the reference's prompt repaired by its runner, and our memories rendered into it."""

from types import SimpleNamespace

import pytest

from bench.quality.answer_arms import (
    REFERENCE_FORMAT_LINE,
    fixed_prompt,
    reference_layout_messages,
    style_line,
)
from memoryos.eval.harness import ANSWER_STYLE_HINT
from memoryos.eval.reference_runner import FORMAT_ANNOUNCED, answer_prompts
from memoryos.llm.base import AnswerRequest
from memoryos.llm.prompts import answer_messages
from memoryos.types import Page

PUBLISHED_SHAPE = SimpleNamespace(
    GENERATE_SYSTEM_RESPONSE_SYSTEM_PROMPT="As {relationship}.\n{assistant_knowledge_text}\n{meta_data_text}\n",
    GENERATE_SYSTEM_RESPONSE_USER_PROMPT=(
        "{history_text}\n{retrieval_text}\n{background}\nAs {relationship}. The user just said: {query}\n"
        f"Please respond to the user's statement {FORMAT_ANNOUNCED}\n "
        "When answering questions, be sure to check the timestamp"
    ),
)
"""The reference 0.1.0 prompts' placeholders and dangling format line, in a few words."""


def _page(page_id: int, user: str, agent: str, meta: str = "") -> Page:
    return Page(
        page_id=page_id,
        user_input=user,
        agent_response=agent,
        timestamp="2023-05-07 10:00:00",
        meta_info=meta,
    )


def _request() -> AnswerRequest:
    return AnswerRequest(
        query="Where did Ana move?",
        short_term=[_page(3, "I'm packing", "Good luck")],
        retrieved=[_page(1, "I moved to Lisbon", "Nice!", meta="Ana's move")],
        user_profile="Likes the sea",
        user_knowledge=["Ana lives in Lisbon"],
        assistant_knowledge=[],
        style_hint=ANSWER_STYLE_HINT,
        user_meta_data={"user_name": "Ana", "assistant_name": "Ben"},
    )


def test_the_runner_repairs_the_format_line_and_adds_our_style_line_leaving_the_rest() -> None:
    prompts = answer_prompts(PUBLISHED_SHAPE, fixed_prompt(ANSWER_STYLE_HINT))

    assert prompts["published"] == PUBLISHED_SHAPE.GENERATE_SYSTEM_RESPONSE_USER_PROMPT
    fixed = prompts["fixed"]
    after = fixed.split(FORMAT_ANNOUNCED)[1].splitlines()
    assert after[1:4] == [
        REFERENCE_FORMAT_LINE,
        style_line(ANSWER_STYLE_HINT),
        "When answering questions, be sure to check the timestamp",
    ]
    # The style line is the very sentence our own prompt gives.
    ours = answer_messages(_request())[-1]["content"]
    assert style_line(ANSWER_STYLE_HINT) in ours


def test_a_release_whose_prompt_no_longer_announces_a_format_is_not_repaired_blindly() -> None:
    changed = SimpleNamespace(
        GENERATE_SYSTEM_RESPONSE_SYSTEM_PROMPT="x", GENERATE_SYSTEM_RESPONSE_USER_PROMPT="Answer: {query}"
    )
    with pytest.raises(RuntimeError, match="no longer announces"):
        answer_prompts(changed, fixed_prompt(ANSWER_STYLE_HINT))


def test_a_style_hint_with_braces_survives_the_template_format() -> None:
    prompts = answer_prompts(PUBLISHED_SHAPE, fixed_prompt("answer as {json}"))
    messages = reference_layout_messages(_request(), {"system": "s", "fixed": prompts["fixed"]})
    assert "answer as {json}" in messages[1]["content"]


def test_our_memories_fill_the_reference_layout_as_its_get_response_fills_it() -> None:
    templates = answer_prompts(PUBLISHED_SHAPE, fixed_prompt(ANSWER_STYLE_HINT))

    system, user = reference_layout_messages(_request(), templates)

    assert system["role"] == "system" and "As friend." in system["content"]
    assert "No relevant assistant knowledge found" in system["content"]
    assert '"user_name": "Ana"' in system["content"]
    text = user["content"]
    assert "User: I'm packing\nAssistant: Good luck (Time: 2023-05-07 10:00:00)" in text
    assert (
        "【Historical Memory】\nUser: I moved to Lisbon\nAssistant: Nice!\nTime: 2023-05-07 10:00:00\n"
        in text
    )
    assert "Conversation chain overview: Ana's move" in text
    assert "【User Profile】\nLikes the sea" in text and "- Ana lives in Lisbon" in text
    assert "The user just said: Where did Ana move?" in text
    assert text.endswith("check the timestamp") and REFERENCE_FORMAT_LINE in text
