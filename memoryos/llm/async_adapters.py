"""Any `MemoryLLM` as an `AsyncMemoryLLM`, and the bound on LLM calls shared by every space of a process.

The scheduler runs the consolidation of all open spaces as coroutines on one event loop, so:

- `as_async(llm)` gives the backend's own async view when it has one (`OpenAILLM.async_view`), else
  `InlineAsyncLLM`, which runs the sync methods inline: right for `OfflineLLM` and test fakes, whose calls
  are microseconds of CPU. A sync backend that blocks (network, a local model) must not go inline: it
  would stall every space's coroutines; give it an `async_view` instead.
- `LimitedLLM` wraps that view: at most `max_concurrency` calls in flight across every caller
  (`llm_max_concurrency`; `CallSlots` shares one bound between the wrappers of several backends), an
  overall deadline per call, and one error type, `LLMError`, for whatever a backend raises, so planners
  need handle nothing else.
"""

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Protocol, TypeVar, cast, overload, runtime_checkable

from memoryos.config import MemoryConfig
from memoryos.errors import LLMError
from memoryos.llm.base import (
    AnswerRequest,
    AsyncMemoryLLM,
    ExtractedKnowledge,
    MemoryLLM,
    OperationUsage,
    TopicSummary,
)
from memoryos.types import Page

T = TypeVar("T")

MAX_BACKOFF_S = 8.0
"""The `openai` client's longest sleep between two retries it chose itself (it honours a server's
`retry-after` up to two minutes, which a deadline from `call_deadline_s` does not wait for)."""

_MAX_ERROR_CHARS = 300


@runtime_checkable
class HasAsyncView(Protocol):
    """A sync backend that also offers its tasks as coroutines (its own client, pooled connections)."""

    def async_view(self) -> AsyncMemoryLLM: ...


def as_async(llm: MemoryLLM) -> AsyncMemoryLLM:
    """The backend's own async view when it has one, else its sync methods run inline."""
    if isinstance(llm, HasAsyncView):
        return llm.async_view()
    return InlineAsyncLLM(llm)


def call_deadline_s(config: MemoryConfig) -> float:
    """A `LimitedLLM` timeout that only a hung call reaches: every attempt the client makes timing out
    (`llm_timeout_s` each, `llm_max_retries` + 1 attempts) plus its longest backoff between them."""
    return config.llm_timeout_s * (config.llm_max_retries + 1) + MAX_BACKOFF_S * config.llm_max_retries


class InlineAsyncLLM:
    """`AsyncMemoryLLM` running a sync backend's methods inline on the event loop, for backends whose calls
    are quick CPU work (`OfflineLLM`, test fakes). Results, errors and usage are the backend's own."""

    def __init__(self, llm: MemoryLLM) -> None:
        self.llm = llm

    @property
    def usage(self) -> dict[str, OperationUsage]:
        return self.llm.usage

    async def is_continuation(self, previous: Page, current: Page) -> bool:
        return self.llm.is_continuation(previous, current)

    async def summarize_chain(self, pages: Sequence[Page]) -> str:
        return self.llm.summarize_chain(pages)

    async def summarize_topic(self, pages: Sequence[Page]) -> TopicSummary:
        return self.llm.summarize_topic(pages)

    async def update_profile(self, current_profile: str, pages: Sequence[Page]) -> str:
        return self.llm.update_profile(current_profile, pages)

    async def extract_knowledge(self, pages: Sequence[Page]) -> ExtractedKnowledge:
        return self.llm.extract_knowledge(pages)

    async def answer(self, request: AnswerRequest) -> str:
        return self.llm.answer(request)


class CallSlots:
    """A bound on LLM calls in flight, shared by every `LimitedLLM` given it: one per process, whatever
    the backends, so `llm_max_concurrency` bounds them all together.

    For one event loop: the semaphore is made on the loop of the first call, and made anew on another loop
    only once no call is in flight or waiting (counters are plain ints, touched on that loop only).
    """

    def __init__(self, max_concurrency: int) -> None:
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be at least 1, not {max_concurrency}")
        self.max_concurrency = max_concurrency
        self.in_flight = 0
        """Calls admitted and not finished."""
        self.waiting = 0
        """Calls waiting for a slot."""
        self.max_in_flight_seen = 0
        """The most calls ever in flight at once."""
        self._semaphore: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @contextlib.asynccontextmanager
    async def held(self) -> AsyncIterator[None]:
        """A slot for the body's duration, after waiting for one as long as it takes."""
        semaphore = self._semaphore_for_running_loop()
        self.waiting += 1
        try:
            await semaphore.acquire()
        finally:
            self.waiting -= 1
        self.in_flight += 1
        self.max_in_flight_seen = max(self.max_in_flight_seen, self.in_flight)
        try:
            yield
        finally:
            self.in_flight -= 1
            semaphore.release()

    def _semaphore_for_running_loop(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        if self._semaphore is None or loop is not self._loop:
            if self.in_flight or self.waiting:
                raise LLMError("the LLM call slots are in use on another event loop")
            self._semaphore, self._loop = asyncio.Semaphore(self.max_concurrency), loop
        return self._semaphore


class LimitedLLM:
    """`AsyncMemoryLLM` admitting at most `max_concurrency` calls into `inner` at once, whoever calls;
    several `LimitedLLM`s (one per backend) share one bound when built on the same `slots`.

    Callers beyond the bound wait their turn (`slots.waiting`) without a deadline: the queue is the point
    of a bound. Once admitted, a call has `timeout_s` to finish — a safety net above the client's own
    per-request timeout and retries (`call_deadline_s`), for a call that hangs anyway — and a call past it
    is cancelled and raises `LLMError`. Any other exception of the backend (a bug, a network library's
    error) is raised as `LLMError` with the original as its cause; cancellation of the caller propagates
    untouched.
    """

    @overload
    def __init__(self, inner: AsyncMemoryLLM, max_concurrency: int, timeout_s: float) -> None: ...

    @overload
    def __init__(self, inner: AsyncMemoryLLM, *, slots: CallSlots, timeout_s: float) -> None: ...

    def __init__(
        self,
        inner: AsyncMemoryLLM,
        max_concurrency: int | None = None,
        timeout_s: float | None = None,
        *,
        slots: CallSlots | None = None,
    ) -> None:
        if (max_concurrency is None) == (slots is None):
            raise ValueError("give LimitedLLM either max_concurrency or shared slots")
        if timeout_s is None or timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, not {timeout_s}")
        self.inner = inner
        self.slots = slots if slots is not None else CallSlots(cast(int, max_concurrency))
        self.timeout_s = timeout_s

    @staticmethod
    def shared_slots(max_concurrency: int) -> CallSlots:
        """A bound to give several `LimitedLLM`s (`slots=`), so their calls count together."""
        return CallSlots(max_concurrency)

    @property
    def in_flight(self) -> int:
        """Calls in flight now under this bound (every `LimitedLLM` sharing its slots)."""
        return self.slots.in_flight

    @property
    def max_in_flight_seen(self) -> int:
        """The most calls ever in flight at once under this bound."""
        return self.slots.max_in_flight_seen

    @property
    def usage(self) -> dict[str, OperationUsage]:
        return self.inner.usage

    async def is_continuation(self, previous: Page, current: Page) -> bool:
        return await self._call("is_continuation", lambda: self.inner.is_continuation(previous, current))

    async def summarize_chain(self, pages: Sequence[Page]) -> str:
        return await self._call("summarize_chain", lambda: self.inner.summarize_chain(pages))

    async def summarize_topic(self, pages: Sequence[Page]) -> TopicSummary:
        return await self._call("summarize_topic", lambda: self.inner.summarize_topic(pages))

    async def update_profile(self, current_profile: str, pages: Sequence[Page]) -> str:
        return await self._call("update_profile", lambda: self.inner.update_profile(current_profile, pages))

    async def extract_knowledge(self, pages: Sequence[Page]) -> ExtractedKnowledge:
        return await self._call("extract_knowledge", lambda: self.inner.extract_knowledge(pages))

    async def answer(self, request: AnswerRequest) -> str:
        return await self._call("answer", lambda: self.inner.answer(request))

    async def _call(self, task: str, start: Callable[[], Awaitable[T]]) -> T:
        """`start()` under the bound and the deadline. It makes the inner coroutine only once a slot is
        held, so a caller cancelled while waiting leaves no coroutine never awaited."""
        async with self.slots.held():
            deadline = asyncio.timeout(self.timeout_s)
            try:
                async with deadline:
                    return await start()
            except LLMError:
                raise
            except Exception as err:
                if deadline.expired():
                    raise LLMError(f"LLM call {task!r} timed out after {self.timeout_s:g} s") from err
                message = f"LLM call {task!r} failed unexpectedly: {type(err).__name__}: {err}"
                raise LLMError(message[:_MAX_ERROR_CHARS]) from err
