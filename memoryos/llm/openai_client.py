"""The configured OpenAI-compatible endpoint: its sync and async clients, and the reading of a completion.

Both clients take their key, base URL, per-request timeout and retries from `client_options`, so the sync
backend, its async view and the eval judge always talk to the endpoint the same way. `CompletionCodec` is
what a completion call means apart from the call itself (what is sent; how the response becomes reply
text and counted usage, or an `LLMError`), shared by the sync and async paths.
"""

import logging
from typing import Any, TypedDict, cast

from openai import AsyncOpenAI, OpenAI, OpenAIError
from openai.types.chat import ChatCompletion, ChatCompletionMessageParam

from memoryos.config import MemoryConfig
from memoryos.errors import LLMError
from memoryos.llm.chat_tasks import ChatTask
from memoryos.llm.parsing import strip_think
from memoryos.llm.usage import UsageCounter, estimate_tokens

log = logging.getLogger(__name__)

CALL_ERRORS = (OpenAIError, ValueError)
"""What a failed completion call raises: the client's errors once its retries are spent, and ValueError
for a 200 whose JSON body does not decode."""

_MAX_ERROR_CHARS = 300


class ClientOptions(TypedDict):
    api_key: str
    base_url: str | None
    timeout: float
    max_retries: int


def client_options(config: MemoryConfig, purpose: str) -> ClientOptions:
    """Key, base URL, per-request timeout and retries (with the client's backoff) for the configured
    endpoint; `purpose` names the caller in the error raised when no key is configured."""
    if config.openai_api_key is None or not config.openai_api_key.get_secret_value():
        raise LLMError(f"{purpose} needs openai_api_key")
    return ClientOptions(
        api_key=config.openai_api_key.get_secret_value(),
        base_url=config.openai_base_url,
        timeout=config.llm_timeout_s,
        max_retries=config.llm_max_retries,
    )


def openai_client(config: MemoryConfig, purpose: str) -> OpenAI:
    """The sync client for the configured endpoint; safe to share between threads."""
    return OpenAI(**client_options(config, purpose))


def async_openai_client(config: MemoryConfig, purpose: str) -> AsyncOpenAI:
    """The async client for the configured endpoint. Its pooled connections belong to the event loop that
    opened them: use it from one loop only (`AsyncOpenAILLM` enforces that)."""
    return AsyncOpenAI(**client_options(config, purpose))


class CompletionCodec:
    """The I/O-free halves of one chat completion for a task, counted in one `UsageCounter`.

    One codec serves a backend's sync path and its async view, so both count into the same usage.
    """

    def __init__(self, model: str) -> None:
        self.model = model
        self.usage = UsageCounter()

    def messages(self, task: ChatTask[Any]) -> list[ChatCompletionMessageParam]:
        return cast(list[ChatCompletionMessageParam], task.messages)

    def failure(self, task: ChatTask[Any], err: Exception) -> LLMError:
        """The `LLMError` for a call that raised one of `CALL_ERRORS`: type and message, cut short."""
        return LLMError(f"LLM call {task.operation!r} failed: {type(err).__name__}: {err}"[:_MAX_ERROR_CHARS])

    def reply_text(self, task: ChatTask[Any], response: object) -> str:
        """The reply text without reasoning blocks; the call is counted under the task's operation.

        Only the operation, model and token counts are logged (at DEBUG), never the text.
        """
        # A 200 that is not JSON (a proxy's HTML page) comes back as a str, and missing fields as None,
        # whatever the type hints say.
        if (
            not isinstance(response, ChatCompletion)
            or not response.choices
            or not response.choices[0].message
        ):
            raise LLMError(f"LLM call {task.operation!r} got a malformed response")
        content = response.choices[0].message.content or ""
        usage = response.usage
        if usage is not None and usage.prompt_tokens is not None and usage.completion_tokens is not None:
            prompt_tokens, completion_tokens = usage.prompt_tokens, usage.completion_tokens
        else:  # Some compatible servers send no usage, or an empty one.
            prompt_tokens = sum(estimate_tokens(message["content"]) for message in task.messages)
            completion_tokens = estimate_tokens(content)
        self.usage.record(task.operation, prompt_tokens, completion_tokens)
        log.debug(
            "LLM call done",
            extra={
                "operation": task.operation,
                "model": self.model,
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
            },
        )
        return strip_think(content)
