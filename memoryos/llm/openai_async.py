"""`AsyncOpenAILLM`: `OpenAILLM`'s async view, the memory tasks as coroutines over `openai.AsyncOpenAI`.

The scheduler consolidates every open space on one event loop, so many LLM calls are in flight at once
without a thread each. The view shares its backend's prompts, reply parsing, re-ask rule and usage
counter (`chat_tasks`, `CompletionCodec`); only the await differs. Retries with backoff on transport
errors, 408/409/429 and 5xx come from the async client itself, configured like the sync one.

The client is created on first use and is bound to that event loop: the openai client's HTTP layer
(httpx2 under openai 3.x) pools connections whose transports belong to the loop that opened them, and
reusing the client from a second loop fails ("Event loop is closed", seen with openai 3.54). So a call
from any other loop raises `LLMError`; `aclose()` on the bound loop releases the client, after which the
view binds to the next loop that uses it. The scheduler's one loop per process never meets either case.
"""

import asyncio
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

from openai import AsyncOpenAI

from memoryos.errors import LLMError
from memoryos.llm import chat_tasks
from memoryos.llm.base import AnswerRequest, ExtractedKnowledge, OperationUsage, TopicSummary
from memoryos.llm.call_spans import completion_span, record_completion
from memoryos.llm.chat_tasks import ChatTask
from memoryos.llm.openai_client import CALL_ERRORS, CompletionCodec
from memoryos.types import Page

T = TypeVar("T")


class AsyncOpenAILLM:
    """`AsyncMemoryLLM` over the chat completions API, for one event loop; made by `OpenAILLM.async_view`."""

    def __init__(self, codec: CompletionCodec, client_factory: Callable[[], AsyncOpenAI]) -> None:
        self._codec = codec
        self._client_factory = client_factory
        self._client: AsyncOpenAI | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    @property
    def usage(self) -> dict[str, OperationUsage]:
        """The backend's counter: sync and async calls together."""
        return self._codec.usage.snapshot()

    async def is_continuation(self, previous: Page, current: Page) -> bool:
        return await self._ask(chat_tasks.continuity_task(previous, current))

    async def summarize_chain(self, pages: Sequence[Page]) -> str:
        return await self._ask(chat_tasks.chain_summary_task(pages))

    async def summarize_topic(self, pages: Sequence[Page]) -> TopicSummary:
        return await self._ask(chat_tasks.topic_task(pages))

    async def update_profile(self, current_profile: str, pages: Sequence[Page]) -> str:
        """The merged profile; an empty reply raises rather than erasing the profile."""
        return await self._ask(chat_tasks.profile_task(current_profile, pages))

    async def extract_knowledge(self, pages: Sequence[Page]) -> ExtractedKnowledge:
        return await self._ask(chat_tasks.knowledge_task(pages))

    async def answer(self, request: AnswerRequest) -> str:
        return await self._ask(chat_tasks.answer_task(request))

    async def aclose(self) -> None:
        """Close the client's connections; call it on the loop the view is bound to (a no-op when no call
        was made). The view can then be used again, from any loop."""
        if self._client is None:
            return
        client = self._bound_client()
        with self._lock:
            self._client, self._loop = None, None
        await client.close()

    async def _ask(self, task: ChatTask[T]) -> T:
        """Awaits each request the codec's exchange yields (re-ask and fallback), each in its own span."""
        client = self._bound_client()
        exchange = self._codec.exchange(task)
        try:
            request = next(exchange)
            while True:
                with completion_span(self._codec.endpoint, task.operation, request) as span:
                    try:
                        outcome: object = await client.chat.completions.create(**request)
                    except CALL_ERRORS as err:
                        outcome = err
                    record_completion(span, outcome)
                request = exchange.send(outcome)
        except StopIteration as done:
            return done.value

    def _bound_client(self) -> AsyncOpenAI:
        """The client, created on the running loop's first call; `LLMError` on any other loop."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._client is None:
                self._client, self._loop = self._client_factory(), loop
            elif loop is not self._loop:
                raise LLMError(
                    "the async OpenAI view is bound to the event loop it was first used on (its pooled "
                    "connections belong to that loop); aclose() it there first, or use another OpenAILLM"
                )
            return self._client
