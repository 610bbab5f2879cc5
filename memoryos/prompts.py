"""Prompt templates for each `MemoryLLM` task, and the functions that render them into chat messages.

Every task is one system message (the role and the output contract) and one user message (the data).
Replies that feed memory ask for plain text or one JSON object and nothing else; the parser still copes
with fences, prose and `<think>` blocks around them. The answer prompt takes its length, tone and
language from the caller's `style_hint`, not from a fixed "30 words in English" as the reference did.
"""

import json
from collections.abc import Sequence
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
past conversations with them.
What you know about yourself:
{assistant_knowledge}{meta_data}"""

ANSWER_USER = """<RECENT CONVERSATION>
{short_term}

<MEMORIES FROM EARLIER CONVERSATIONS>
{retrieved}

<USER PROFILE>
{profile}

<FACTS ABOUT THE USER>
{user_knowledge}

<THE USER NOW SAYS>
{query}

Reply to the user as their {relationship}, continuing the conversation.
- Use the memories when they are relevant, and check that a memory's timestamp fits the time the \
user is asking about.
- If the user asks about something past that neither the conversation nor the memories hold, say you \
do not remember it rather than guessing.
- {style}"""

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


def answer_messages(request: AnswerRequest) -> list[ChatMessage]:
    """The generation prompt: who the assistant is in the system message, the memory context and the
    query in the user message."""
    meta_data = ""
    if request.user_meta_data:
        meta_data = "\nConversation metadata: " + json.dumps(
            request.user_meta_data, ensure_ascii=False, default=str
        )
    style_hint = request.style_hint.strip()
    system = ANSWER_SYSTEM.format(
        relationship=request.relationship_with_user,
        assistant_knowledge=_bullets(request.assistant_knowledge),
        meta_data=meta_data,
    )
    user = ANSWER_USER.format(
        short_term=render_conversation(request.short_term) or NOTHING,
        retrieved="\n\n".join(_render_memory(page) for page in request.retrieved) or NOTHING,
        profile=request.user_profile.strip() or NOTHING,
        user_knowledge=_bullets(request.user_knowledge),
        query=request.query,
        relationship=request.relationship_with_user,
        style=STYLE_WITH_HINT.format(style_hint=style_hint.rstrip(".")) if style_hint else DEFAULT_STYLE,
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


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


def _bullets(lines: Sequence[str]) -> str:
    return "\n".join(f"- {line}" for line in lines) or NOTHING


def _task(user: str) -> list[ChatMessage]:
    return [{"role": "system", "content": MEMORY_SYSTEM}, {"role": "user", "content": user}]
