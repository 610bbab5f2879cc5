"""What each memory task asks a chat model and how its reply is read, without any I/O.

The sync and async OpenAI paths differ only in how a completion is fetched (a call or an await), so
everything else lives here once: the prompt and parser of each task (`ChatTask`), the JSON schema of a
task that replies in JSON (sent as `response_format` where the endpoint takes it), and the rule for
unparseable replies (`ChatTask.exchange`), a generator that asks its driver for replies and returns the
parsed result, so neither driver repeats the rule.
"""

import logging
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from memoryos.errors import LLMError
from memoryos.llm import prompts
from memoryos.llm.base import AnswerRequest, ExtractedKnowledge, TopicSummary
from memoryos.llm.parsing import coerce_facts, coerce_keywords, parse_json_object, parse_yes_no
from memoryos.llm.reply_schema import schema_violations
from memoryos.llm.usage import Operation
from memoryos.types import Page

log = logging.getLogger(__name__)

T = TypeVar("T")

Exchange = Generator[int, str, T]
"""Yields the attempt (0, then 1 for the re-ask) each time it needs a reply, receives the reply's text,
returns the parsed result."""

JsonSchema = dict[str, Any]

TOPIC_SCHEMA: JsonSchema = {
    "type": "object",
    "properties": {"summary": {"type": "string"}, "keywords": {"type": "array", "items": {"type": "string"}}},
    "required": ["summary", "keywords"],
    "additionalProperties": False,
}
"""What `_topic` reads. Strict structured outputs need every property required and no others."""

KNOWLEDGE_SCHEMA: JsonSchema = {
    "type": "object",
    "properties": {
        "user_facts": {"type": "array", "items": {"type": "string"}},
        "assistant_facts": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["user_facts", "assistant_facts"],
    "additionalProperties": False,
}
"""What `_knowledge` reads."""


@dataclass(frozen=True)
class ChatTask(Generic[T]):
    """One memory task as a chat request: the usage name, the messages, and the reply's parser (which
    raises `LLMError` on a reply it cannot use)."""

    operation: Operation
    messages: list[prompts.ChatMessage]
    parse: Callable[[str], T]
    schema: JsonSchema | None = None
    """The reply's JSON schema, for endpoints with structured outputs; None: the reply is text."""
    whole: bool = False
    """The reply is stored as it is (a summary, the profile): one cut at its token cap is refused."""

    def exchange(self) -> Exchange[T]:
        """The task's conversation with its driver. An unparseable reply is asked for once more, since a
        second sample usually fixes a truncated or malformed one (the driver samples it at a higher
        temperature, or it would repeat the first); a failed call is not asked again here (the driver
        raises out of it), the client has already retried it."""
        reply = yield 0
        try:
            return self.parse(reply)
        except LLMError:
            log.warning("unparseable LLM reply, asking again", extra={"operation": self.operation})
        reply = yield 1
        try:
            return self.parse(reply)
        except LLMError as err:
            raise LLMError(f"LLM call {self.operation!r} failed after a retry: {err}") from err


def continuity_task(previous: Page, current: Page) -> ChatTask[bool]:
    return ChatTask("continuity", prompts.continuity_messages(previous, current), parse_yes_no)


def chain_summary_task(pages: Sequence[Page]) -> ChatTask[str]:
    return ChatTask("chain_summary", prompts.chain_summary_messages(pages), _non_empty, whole=True)


def topic_task(pages: Sequence[Page]) -> ChatTask[TopicSummary]:
    return ChatTask("topic", prompts.topic_messages(pages), _topic, schema=TOPIC_SCHEMA)


def profile_task(current_profile: str, pages: Sequence[Page]) -> ChatTask[str]:
    """The merged profile; an empty reply raises rather than erasing the profile."""
    return ChatTask("profile", prompts.profile_messages(current_profile, pages), _non_empty, whole=True)


def knowledge_task(pages: Sequence[Page]) -> ChatTask[ExtractedKnowledge]:
    return ChatTask("knowledge", prompts.knowledge_messages(pages), _knowledge, schema=KNOWLEDGE_SCHEMA)


def answer_task(request: AnswerRequest) -> ChatTask[str]:
    return ChatTask("answer", prompts.answer_messages(request), _non_empty)


def _non_empty(reply: str) -> str:
    if not reply:
        raise LLMError("the model returned an empty reply")
    return reply


def _topic(reply: str) -> TopicSummary:
    data = _schema_checked(reply, TOPIC_SCHEMA, "topic")
    summary = data.get("summary")
    if not isinstance(summary, str) or not summary.strip():
        raise LLMError("the topic reply has no summary")
    return TopicSummary(summary=summary.strip(), keywords=coerce_keywords(data.get("keywords")))


def _knowledge(reply: str) -> ExtractedKnowledge:
    data = _schema_checked(reply, KNOWLEDGE_SCHEMA, "knowledge")
    if "user_facts" not in data and "assistant_facts" not in data:
        raise LLMError("the knowledge reply has neither user_facts nor assistant_facts")
    return ExtractedKnowledge(
        user_facts=coerce_facts(data.get("user_facts")),
        assistant_facts=coerce_facts(data.get("assistant_facts")),
    )


def _schema_checked(reply: str, schema: JsonSchema, operation: Operation) -> dict[str, Any]:
    """The reply's JSON object, refused (`LLMError`, so it is asked for again) where it contradicts the
    task's schema: a server may accept `response_format` and ignore it (`reply_schema.py`)."""
    data = parse_json_object(reply)
    violations = schema_violations(data, schema)
    if violations:
        raise LLMError(f"the {operation} reply does not match its schema: {'; '.join(violations[:3])}")
    return data
