"""Prompt templates for each `MemoryLLM` task, and the functions that render them into chat messages.

Every task is one system message (the role and the output contract) and one user message (the data).
Replies that feed memory ask for plain text or one JSON object and nothing else; the parser still copes
with fences, prose and `<think>` blocks around them. The answer prompt takes its length, tone and
language from the caller's `style_hint`, not from a fixed "30 words in English" as the reference did.

The answer prompt is ordered for provider prefix caches (vLLM automatic prefix caching, OpenAI prompt
caching), which reuse the longest identical token prefix across requests: its system message is the
stable part, what stays the same from one request of a user to the next (instructions, relationship,
profile), and its user message is the volatile part, what retrieval picks per query (facts, pages) and
what moves every turn (recent conversation, query). `AnswerPrompt` is that split; docs/evaluation.md
has the measurements behind it.
"""

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, TypedDict

from memoryos.llm.base import AnswerRequest
from memoryos.types import Page


class ChatMessage(TypedDict):
    role: Literal["system", "user"]
    content: str


MEMORY_SYSTEM = (
    "You process conversations between a user and an AI assistant for the assistant's long-term memory. "
    "Be factual: use only what the conversation says, never invent details. "
    "Reply with exactly the requested output and nothing else."
)

CONTINUITY_USER = """Previous turn:
{previous}

Current turn:
{current}

Does the current turn continue the conversation of the previous turn (the same subject or a direct \
follow-up, such as an answer, a reaction or a related question), rather than start a new subject?
Reply with one word: yes or no."""

CHAIN_SUMMARY_USER = """Conversation:
{conversation}

In one or two sentences, say what this conversation is about. Name the people, places, dates and \
decisions that matter. Write in the language of the conversation. Reply with the summary only."""

TOPIC_USER = """Conversation:
{conversation}

Name the single main topic of this conversation: if it touches several, choose the one most of it is \
about. Reply with one JSON object only, in the language of the conversation:
{{"summary": "<one sentence describing the topic>", "keywords": ["<up to 5 short keywords>"]}}"""

PROFILE_USER = """Current user profile:
{profile}

New conversation:
{conversation}

Update the user profile with what the new conversation reveals about the user: identity, people in \
their life, work, places, preferences, habits, goals, personality and communication style.
Rules:
- Keep every line of the current profile that the conversation does not contradict.
- Change a line only where the conversation contradicts or refines it; add a line for each new trait.
- Only what the user says or confirms about themselves counts, not the assistant's suggestions.
- One short line per trait, each starting with "- ".
Reply with the complete updated profile and nothing else."""

KNOWLEDGE_USER = """Conversation:
{conversation}

Extract the facts worth remembering from this conversation.
- user_facts: facts about the user: who they are, people in their life, events, plans, preferences.
- assistant_facts: what the assistant said about itself, did, recommended or promised.
Each fact is one short sentence that stands alone without the conversation: name its subject ("The \
user ...", "The assistant ..."), resolve pronouns, and turn relative dates ("yesterday", "next week") \
into dates using the turn's timestamp. Use an empty list when there is nothing.
Reply with one JSON object only:
{{"user_facts": ["..."], "assistant_facts": ["..."]}}"""

ANSWER_SYSTEM = """You are the user's {relationship}, an AI assistant with a long-term memory of your \
past conversations with them. Each message gives you the recent conversation, what you know about \
yourself and about the user, and memories from earlier conversations, then what the user now says.
- Use the memories when they are relevant, and check that a memory's timestamp fits the time the \
user is asking about.
- If the user asks about something past that neither the conversation nor the memories hold, say you \
do not remember it rather than guessing.

<USER PROFILE>
{profile}"""

ANSWER_USER = """{meta_data}<RECENT CONVERSATION>
{short_term}

<WHAT YOU KNOW ABOUT YOURSELF>
{assistant_knowledge}

<FACTS ABOUT THE USER>
{user_knowledge}

<MEMORIES FROM EARLIER CONVERSATIONS>
{retrieved}

<THE USER NOW SAYS>
{query}

Reply to the user as their {relationship}, continuing the conversation. {style}"""

ANSWER_META_DATA = "<CONVERSATION METADATA>\n{meta_data}\n\n"

DEFAULT_STYLE = "Reply naturally and concisely, in the language the user writes in."
STYLE_WITH_HINT = (
    "Style: {style_hint}. Reply in the language the user writes in unless the style says otherwise."
)

NOTHING = "(none)"


def continuity_messages(previous: Page, current: Page) -> list[ChatMessage]:
    return _task(CONTINUITY_USER.format(previous=render_turn(previous), current=render_turn(current)))


def chain_summary_messages(pages: Sequence[Page]) -> list[ChatMessage]:
    return _task(CHAIN_SUMMARY_USER.format(conversation=render_conversation(pages)))


def topic_messages(pages: Sequence[Page]) -> list[ChatMessage]:
    return _task(TOPIC_USER.format(conversation=render_conversation(pages)))


def profile_messages(current_profile: str, pages: Sequence[Page]) -> list[ChatMessage]:
    profile = current_profile.strip() or "(empty: nothing is known about the user yet)"
    return _task(PROFILE_USER.format(profile=profile, conversation=render_conversation(pages)))


def knowledge_messages(pages: Sequence[Page]) -> list[ChatMessage]:
    return _task(KNOWLEDGE_USER.format(conversation=render_conversation(pages)))


@dataclass(frozen=True)
class AnswerPrompt:
    """The answer prompt as its two parts: `stable`, the same for every request of a user until the
    profile changes, and `volatile`, what one request brings. Both the messages sent and the harness's
    prefix measurements come from here, so they cannot drift apart."""

    stable: str
    volatile: str

    def messages(self) -> list[ChatMessage]:
        """The stable part is the whole system message, so a cache's prefix runs through it into the
        user message's first differing character."""
        return [{"role": "system", "content": self.stable}, {"role": "user", "content": self.volatile}]


def answer_prompt(request: AnswerRequest) -> AnswerPrompt:
    """The generation prompt, stable part first. Facts are volatile: retrieval picks them per query
    (`knowledge_top_k` of up to `long_term_knowledge_capacity`), and on LoCoMo the picked set changed
    between almost every two consecutive questions, so before the recent conversation they only cut the
    shared prefix shorter (docs/evaluation.md)."""
    stable = ANSWER_SYSTEM.format(
        relationship=request.relationship_with_user, profile=request.user_profile.strip() or NOTHING
    )
    volatile = ANSWER_USER.format(
        meta_data=_render_meta_data(request.user_meta_data),
        short_term=render_conversation(request.short_term) or NOTHING,
        assistant_knowledge=_bullets(request.assistant_knowledge),
        user_knowledge=_bullets(request.user_knowledge),
        retrieved="\n\n".join(_render_memory(page) for page in request.retrieved) or NOTHING,
        query=request.query,
        relationship=request.relationship_with_user,
        style=_style(request.style_hint),
    )
    return AnswerPrompt(stable=stable, volatile=volatile)


def answer_messages(request: AnswerRequest) -> list[ChatMessage]:
    """The messages the OpenAI backend sends for `MemoryLLM.answer`."""
    return answer_prompt(request).messages()


def render_turn(page: Page) -> str:
    """One exchange with its timestamp; an empty side is left out rather than shown as a blank line."""
    lines = [f"[{page.timestamp}]"]
    if page.user_input.strip():
        lines.append(f"User: {page.user_input.strip()}")
    if page.agent_response.strip():
        lines.append(f"Assistant: {page.agent_response.strip()}")
    return "\n".join(lines)


def render_conversation(pages: Sequence[Page]) -> str:
    return "\n\n".join(render_turn(page) for page in pages)


def _render_memory(page: Page) -> str:
    """A retrieved page with its dialogue chain's summary, which places the exchange in its context."""
    turn = render_turn(page)
    return f"{turn}\n(Conversation summary: {page.meta_info.strip()})" if page.meta_info else turn


def _render_meta_data(meta_data: dict[str, object] | None) -> str:
    """The caller's metadata, keys sorted: the same mapping renders the same text, whatever its order.
    Only the top level is sorted; `sort_keys` would raise on nested keys of mixed types."""
    if not meta_data:
        return ""
    rendered = json.dumps(dict(sorted(meta_data.items())), ensure_ascii=False, default=str)
    return ANSWER_META_DATA.format(meta_data=rendered)


def _style(style_hint: str) -> str:
    hint = style_hint.strip().rstrip(".")
    return STYLE_WITH_HINT.format(style_hint=hint) if hint else DEFAULT_STYLE


def _bullets(lines: Sequence[str]) -> str:
    return "\n".join(f"- {line}" for line in lines) or NOTHING


def _task(user: str) -> list[ChatMessage]:
    return [{"role": "system", "content": MEMORY_SYSTEM}, {"role": "user", "content": user}]
