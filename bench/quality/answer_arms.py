"""The answer bench's arms: which memory answers, with which prompt, and what each answer call cost.

Four arms separate what the memory holds from how the answer prompt asks for it:

| arm | memory | answer prompt |
| --- | --- | --- |
| `ours` | ours | ours, with the short-answer style hint |
| `ours_reference_prompt` | ours | the reference's, repaired, with the same hint |
| `reference_fixed` | the reference's | the reference's, repaired, with the same hint |
| `reference_published` | the reference's | the reference's as shipped (format line missing, hint ignored) |

`ours_reference_prompt` against `reference_fixed` is the memories under one prompt; `ours` against
`ours_reference_prompt` is the prompts over one memory; `reference_fixed` against `reference_published` is
what the repair alone changes. The repaired prompt is made by the reference runner from the reference's own
installed `prompts` module (`reference_runner.answer_prompts`), so its words are the release's; this module
renders our retrieved context into that prompt's layout, as the reference's `get_response` renders its own.

Every answer call is sent through the engine's own codec (`CompletionCodec`: the same bounds, the same
reply cleaning) and recorded with the tokens and finish reason the server reported.
"""

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from openai import OpenAI

from memoryos.errors import LLMError
from memoryos.llm.base import AnswerRequest
from memoryos.llm.chat_tasks import ChatTask
from memoryos.llm.openai_client import CompletionCodec, ask_blocking
from memoryos.llm.prompts import STYLE_WITH_HINT, ChatMessage
from memoryos.types import Page

SYSTEMS = ("memoryos", "reference")
"""The two systems: each answers its arms in its own parts, one per conversation."""

OURS = "ours"
OURS_REFERENCE_PROMPT = "ours_reference_prompt"
REFERENCE_FIXED = "reference_fixed"
REFERENCE_PUBLISHED = "reference_published"
ARMS: dict[str, str] = {
    OURS: "memoryos",
    OURS_REFERENCE_PROMPT: "memoryos",
    REFERENCE_FIXED: "reference",
    REFERENCE_PUBLISHED: "reference",
}
"""Each arm and the system (part) that answers it."""


def part_path(out: Path, system: str, sample_id: str) -> Path:
    """The folder of one system's part on one conversation: its log and its memory."""
    return out / system / sample_id


REFERENCE_RUNNER_ARMS: dict[str, str] = {"published": REFERENCE_PUBLISHED, "fixed": REFERENCE_FIXED}
"""The reference runner's arm names and ours."""

REFERENCE_FORMAT_LINE = "<your reply to the user, and nothing else>"
"""What the repaired reference prompt puts where its announced format is missing: a placeholder for the
reply alone, so the model has a format to follow and no line to repeat."""


def style_line(style_hint: str) -> str:
    """The style sentence our answer prompt gives for `style_hint`, word for word, for the reference's
    repaired prompt: both are asked for the same kind of answer."""
    return STYLE_WITH_HINT.format(style_hint=style_hint.strip().rstrip("."))


def fixed_prompt(style_hint: str) -> dict[str, str]:
    """The reference runner's `answer.fixed_prompt`: what its repair inserts."""
    return {"format_line": REFERENCE_FORMAT_LINE, "style_line": style_line(style_hint)}


def reference_layout_messages(request: AnswerRequest, templates: Mapping[str, str]) -> list[ChatMessage]:
    """Our retrieved context in the reference's answer prompt (`templates`: its system prompt and its
    repaired user prompt, from the runner), each part rendered the way its `get_response` renders its own:
    recent turns with their time, retrieved pages as historical memories with their chain overview, the
    profile and facts as user traits. Facts carry no recorded time here: ours are kept without one."""
    history = "\n".join(
        f"User: {page.user_input}\nAssistant: {page.agent_response} (Time: {page.timestamp})"
        for page in request.short_term
    )
    retrieval = "\n".join(
        f"【Historical Memory】\nUser: {page.user_input}\nAssistant: {page.agent_response}\n"
        f"Time: {page.timestamp}\nConversation chain overview: {page.meta_info or 'N/A'}"
        for page in request.retrieved
    )
    profile = request.user_profile.strip() or "No detailed profile available yet."
    knowledge = "".join(f"- {fact}\n" for fact in request.user_knowledge)
    background = f"【User Profile】\n{profile}\n" + (
        f"\n【Relevant User Knowledge Entries】\n{knowledge}" if knowledge else ""
    )
    assistant = "【Assistant Knowledge Base】\n" + (
        "".join(f"- {fact}\n" for fact in request.assistant_knowledge)
        or "- No relevant assistant knowledge found for this query.\n"
    )
    meta = "【Current Conversation Metadata】\n" + (
        json.dumps(request.user_meta_data, ensure_ascii=False, indent=2)
        if request.user_meta_data
        else "None provided for this turn."
    )
    system = templates["system"].format(
        relationship=request.relationship_with_user,
        assistant_knowledge_text=assistant,
        meta_data_text=meta,
    )
    user = templates["fixed"].format(
        history_text=history,
        retrieval_text=retrieval,
        background=background,
        relationship=request.relationship_with_user,
        query=request.query,
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def send_recorded(
    client: OpenAI, codec: CompletionCodec, task: ChatTask[str]
) -> tuple[str, list[dict[str, Any]]]:
    """The task's reply, sent as the engine sends it (`ask_blocking`: the codec's requests, re-ask and
    fallback), and for every response the server gave its tokens and why it stopped (`length`: cut at the
    cap or by the slot's context), in the shape the reference runner logs its calls. A failed exchange
    returns an empty reply: an arm that cannot answer scores 0 on that question rather than ending the
    part."""
    calls: list[dict[str, Any]] = []

    def record(response: object) -> None:
        usage = getattr(response, "usage", None)
        choices = getattr(response, "choices", None) or [None]
        calls.append(
            {
                "prompt_tokens": getattr(usage, "prompt_tokens", None),
                "completion_tokens": getattr(usage, "completion_tokens", None),
                "finish_reason": getattr(choices[0], "finish_reason", None),
            }
        )

    try:
        return ask_blocking(client, codec, task, on_response=record), calls
    except LLMError:
        return "", calls


def page_key(page: Page | Mapping[str, str]) -> list[str]:
    """A page shown to the model, as [user_input, agent_response]: both systems' pages are logged alike and
    mapped back to LoCoMo turns by their text when the report scores evidence recall."""
    if isinstance(page, Mapping):
        return [page.get("user_input", ""), page.get("agent_response", "")]
    return [page.user_input, page.agent_response]
