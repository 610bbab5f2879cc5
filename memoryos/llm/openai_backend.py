"""`OpenAILLM`: the memory tasks on any OpenAI-compatible chat endpoint (OpenAI, vLLM, Ollama, ...).

Failures surface as `LLMError`, never as reply text: the reference returned "Error: ..." strings that were
then stored as the user profile. Transport errors, timeouts, 408/409/429 and 5xx are retried by the
`openai` client itself (`llm_max_retries`, exponential backoff from 0.5 s to 8 s with jitter, or the
server's `retry-after`); a reply that does not parse is asked for once more here. Every request carries
its task's `max_tokens` and `temperature`, and the JSON tasks their schema where the endpoint takes it
(`openai_client.CompletionCodec`). Only operation names and token counts are logged, at DEBUG; the API
key and memory text never are.

`async_view()` gives the same backend as coroutines over `openai.AsyncOpenAI`, for the scheduler's event
loop: same prompts, parsing, retries and usage counter (`memoryos/llm/openai_async.py`).
"""

import functools
import threading
from collections.abc import Sequence
from typing import TypeVar

from memoryos.config import MemoryConfig
from memoryos.llm import chat_tasks
from memoryos.llm.base import AnswerRequest, ExtractedKnowledge, OperationUsage, TopicSummary
from memoryos.llm.chat_tasks import ChatTask
from memoryos.llm.openai_async import AsyncOpenAILLM
from memoryos.llm.openai_client import CompletionCodec, ask_blocking, async_openai_client, openai_client
from memoryos.types import Page

__all__ = ["OpenAILLM", "openai_client"]

T = TypeVar("T")

_PURPOSE = "OpenAILLM (without a key the offline backend is used)"


class OpenAILLM:
    """`MemoryLLM` over the chat completions API; safe to call from several threads at once."""

    def __init__(self, config: MemoryConfig) -> None:
        self._client = openai_client(config, _PURPOSE)
        self._codec = CompletionCodec(config)
        self._async_client = functools.partial(async_openai_client, config, _PURPOSE)
        self._async_view: AsyncOpenAILLM | None = None
        self._view_lock = threading.Lock()

    @property
    def usage(self) -> dict[str, OperationUsage]:
        """Calls and tokens of the sync path and the async view together."""
        return self._codec.usage.snapshot()

    def async_view(self) -> AsyncOpenAILLM:
        """This backend as an `AsyncMemoryLLM`; always the same view, so one process pools one set of
        connections. Its `AsyncOpenAI` client is created on first use and bound to that event loop."""
        with self._view_lock:
            if self._async_view is None:
                self._async_view = AsyncOpenAILLM(self._codec, self._async_client)
            return self._async_view

    def is_continuation(self, previous: Page, current: Page) -> bool:
        return self._ask(chat_tasks.continuity_task(previous, current))

    def summarize_chain(self, pages: Sequence[Page]) -> str:
        return self._ask(chat_tasks.chain_summary_task(pages))

    def summarize_topic(self, pages: Sequence[Page]) -> TopicSummary:
        return self._ask(chat_tasks.topic_task(pages))

    def update_profile(self, current_profile: str, pages: Sequence[Page]) -> str:
        """The merged profile; an empty reply raises rather than erasing the profile."""
        return self._ask(chat_tasks.profile_task(current_profile, pages))

    def extract_knowledge(self, pages: Sequence[Page]) -> ExtractedKnowledge:
        return self._ask(chat_tasks.knowledge_task(pages))

    def answer(self, request: AnswerRequest) -> str:
        return self._ask(chat_tasks.answer_task(request))

    def _ask(self, task: ChatTask[T]) -> T:
        return ask_blocking(self._client, self._codec, task)
