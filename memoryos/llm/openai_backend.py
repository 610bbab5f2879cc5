"""`OpenAILLM`: the memory tasks on any OpenAI-compatible chat endpoint (OpenAI, vLLM, Ollama, ...).

Failures surface as `LLMError`, never as reply text: the reference returned "Error: ..." strings that were
then stored as the user profile. Transport errors, timeouts, 408/409/429 and 5xx are retried by the
`openai` client itself (`llm_max_retries`, exponential backoff from 0.5 s to 8 s with jitter, or the
server's `retry-after`); a reply that does not parse is asked for once more here. Only operation names
and token counts are logged, at DEBUG; the API key and memory text never are.
"""

import logging
from collections.abc import Callable, Sequence
from typing import TypeVar, cast

from openai import OpenAI, OpenAIError
from openai.types.chat import ChatCompletion, ChatCompletionMessageParam

from memoryos import prompts
from memoryos.config import MemoryConfig
from memoryos.errors import LLMError
from memoryos.llm.base import AnswerRequest, ExtractedKnowledge, OperationUsage, TopicSummary
from memoryos.llm.parsing import coerce_facts, coerce_keywords, parse_json_object, parse_yes_no, strip_think
from memoryos.llm.usage import Operation, UsageCounter, estimate_tokens
from memoryos.types import Page

log = logging.getLogger(__name__)

T = TypeVar("T")

_MAX_ERROR_CHARS = 300


def openai_client(config: MemoryConfig, purpose: str) -> OpenAI:
    """The client for the configured endpoint: key, base URL, timeout and retries, in one place."""
    if config.openai_api_key is None or not config.openai_api_key.get_secret_value():
        raise LLMError(f"{purpose} needs openai_api_key")
    return OpenAI(
        api_key=config.openai_api_key.get_secret_value(),
        base_url=config.openai_base_url,
        timeout=config.llm_timeout_s,
        max_retries=config.llm_max_retries,
    )


class OpenAILLM:
    """`MemoryLLM` over the chat completions API; safe to call from several threads at once."""

    def __init__(self, config: MemoryConfig) -> None:
        self._client = openai_client(config, "OpenAILLM (without a key the offline backend is used)")
        self._model = config.llm_model
        self._usage = UsageCounter()

    @property
    def usage(self) -> dict[str, OperationUsage]:
        return self._usage.snapshot()

    def is_continuation(self, previous: Page, current: Page) -> bool:
        return self._ask("continuity", prompts.continuity_messages(previous, current), parse_yes_no)

    def summarize_chain(self, pages: Sequence[Page]) -> str:
        return self._ask("chain_summary", prompts.chain_summary_messages(pages), _non_empty)

    def summarize_topic(self, pages: Sequence[Page]) -> TopicSummary:
        return self._ask("topic", prompts.topic_messages(pages), _topic)

    def update_profile(self, current_profile: str, pages: Sequence[Page]) -> str:
        """The merged profile; an empty reply raises rather than erasing the profile."""
        return self._ask("profile", prompts.profile_messages(current_profile, pages), _non_empty)

    def extract_knowledge(self, pages: Sequence[Page]) -> ExtractedKnowledge:
        return self._ask("knowledge", prompts.knowledge_messages(pages), _knowledge)

    def answer(self, request: AnswerRequest) -> str:
        return self._ask("answer", prompts.answer_messages(request), _non_empty)

    def _ask(self, operation: Operation, messages: list[prompts.ChatMessage], parse: Callable[[str], T]) -> T:
        """One task: a completion, parsed. An unparseable reply is asked for once more, since a second
        sample usually fixes a truncated or malformed one; a failed call is not, the client retried it."""
        reply = self._complete(operation, messages)
        try:
            return parse(reply)
        except LLMError:
            log.warning("unparseable LLM reply, asking again", extra={"operation": operation})
        reply = self._complete(operation, messages)
        try:
            return parse(reply)
        except LLMError as err:
            raise LLMError(f"LLM call {operation!r} failed after a retry: {err}") from err

    def _complete(self, operation: Operation, messages: list[prompts.ChatMessage]) -> str:
        """The reply text without reasoning blocks; the call is counted under `operation`."""
        try:
            response = self._client.chat.completions.create(
                model=self._model, messages=cast(list[ChatCompletionMessageParam], messages)
            )
        except (OpenAIError, ValueError) as err:  # ValueError: a 200 whose JSON body does not decode
            raise LLMError(f"LLM call {operation!r} failed: {_describe(err)}") from err
        # A 200 that is not JSON (a proxy's HTML page) comes back as a str, and missing fields as None,
        # whatever the type hints say.
        if (
            not isinstance(response, ChatCompletion)
            or not response.choices
            or not response.choices[0].message
        ):
            raise LLMError(f"LLM call {operation!r} got a malformed response")
        content = response.choices[0].message.content or ""
        usage = response.usage
        if usage is not None and usage.prompt_tokens is not None and usage.completion_tokens is not None:
            prompt_tokens, completion_tokens = usage.prompt_tokens, usage.completion_tokens
        else:  # Some compatible servers send no usage, or an empty one.
            prompt_tokens = sum(estimate_tokens(message["content"]) for message in messages)
            completion_tokens = estimate_tokens(content)
        self._usage.record(operation, prompt_tokens, completion_tokens)
        log.debug(
            "LLM call done",
            extra={
                "operation": operation,
                "model": self._model,
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
            },
        )
        return strip_think(content)


def _describe(err: Exception) -> str:
    return f"{type(err).__name__}: {err}"[:_MAX_ERROR_CHARS]


def _non_empty(reply: str) -> str:
    if not reply:
        raise LLMError("the model returned an empty reply")
    return reply


def _topic(reply: str) -> TopicSummary:
    data = parse_json_object(reply)
    summary = data.get("summary")
    if not isinstance(summary, str) or not summary.strip():
        raise LLMError("the topic reply has no summary")
    return TopicSummary(summary=summary.strip(), keywords=coerce_keywords(data.get("keywords")))


def _knowledge(reply: str) -> ExtractedKnowledge:
    data = parse_json_object(reply)
    if "user_facts" not in data and "assistant_facts" not in data:
        raise LLMError("the knowledge reply has neither user_facts nor assistant_facts")
    return ExtractedKnowledge(
        user_facts=coerce_facts(data.get("user_facts")),
        assistant_facts=coerce_facts(data.get("assistant_facts")),
    )
