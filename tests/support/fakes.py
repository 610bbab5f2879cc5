"""Deterministic stand-ins for the model-backed parts, so engine tests run with no model and no network.

- `HashEmbedder`: hashed bag-of-words vectors, L2-normalized. Texts sharing words are close, texts sharing
  none are (nearly) orthogonal; the same text always gives the same vector, in every process.
- `FakeClock`: a clock that moves only when told, so heat and recency are exact.
- `ScriptedLLM`: the offline extractive LLM, told to raise `LLMError` for chosen operations; its async
  view can take a fixed time per call (`delay_s`).
"""

import asyncio
import contextlib
import functools
import hashlib
import re
import threading
from collections.abc import AsyncIterator, Sequence

import numpy as np

from memoryos.errors import LLMError
from memoryos.llm.base import AnswerRequest, ExtractedKnowledge, OperationUsage, TopicSummary
from memoryos.llm.offline.backend import OfflineLLM
from memoryos.types import Page

FAKE_MODEL_NAME = "fake-hash-embedder"
FAKE_DIM = 256
"""Wide enough that the few dozen distinct words of a test rarely collide in one bucket."""

T0 = 1_714_557_600.0
"""2024-05-01 10:00:00 UTC: the start of every fake clock."""

_WORD = re.compile(r"\w+")


@functools.lru_cache(maxsize=1 << 16)
def _word_place(salted_word: str, dim: int) -> tuple[int, float]:
    """A word's bucket and sign, from a stable hash; cached, as the ingest bench's worker hashed the same
    words of every page again (8% of its interpreter time, which "applying alone" should not count)."""
    digest = hashlib.blake2b(salted_word.encode(), digest_size=8).digest()
    return int.from_bytes(digest[:4], "little") % dim, 1.0 if digest[4] & 1 else -1.0


class HashEmbedder:
    """`Embedder` whose vector for a text is the normalized count of its hashed lowercase words.

    Each word lands in one of `dim` buckets with a sign, both from a stable hash (not Python's salted
    `hash`), so a child process embeds exactly as the test process does. A text with no word gets a fixed
    unit vector rather than zero, as real models never return zero.
    """

    def __init__(self, name: str = FAKE_MODEL_NAME, dim: int = FAKE_DIM, salt: str = "") -> None:
        """`salt` makes another model of the same dimension: every word hashes elsewhere."""
        self._name = name
        self._dim = dim
        self._salt = salt
        self.encoded_texts = 0

    @property
    def name(self) -> str:
        return self._name

    @property
    def dim(self) -> int:
        return self._dim

    def vector(self, text: str) -> np.ndarray:
        placed = [_word_place(self._salt + word, self._dim) for word in _WORD.findall(text.lower())]
        buckets, signs = zip(*placed, strict=True) if placed else ((), ())
        vector = np.bincount(buckets, weights=signs, minlength=self._dim).astype(np.float32)
        norm = float(np.linalg.norm(vector))
        if norm == 0:
            vector[0] = 1.0
            return vector
        return vector / norm

    def forget_texts(self, texts: Sequence[str] | None) -> None:
        """No cache to drop from."""

    def encode(self, texts: Sequence[str], *, is_query: bool = False) -> np.ndarray:
        self.encoded_texts += len(texts)
        if not texts:
            return np.zeros((0, self._dim), dtype=np.float32)
        return np.stack([self.vector(text) for text in texts]).astype(np.float32)


class BlockedEmbedder(HashEmbedder):
    """Page batches wait until `release` is set: the backlog grows as writes are acknowledged."""

    def __init__(self) -> None:
        super().__init__(name="blocked-hash-embedder")
        self.release = threading.Event()

    def encode(self, texts: Sequence[str], *, is_query: bool = False) -> np.ndarray:
        if not is_query:
            self.release.wait(60)
        return super().encode(texts, is_query=is_query)


class FakeClock:
    """Unix seconds that change only through `advance` and `set`."""

    def __init__(self, start: float = T0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float = 0.0, *, hours: float = 0.0) -> float:
        self.now += seconds + hours * 3600.0
        return self.now

    def set(self, now: float) -> None:
        self.now = now


class ScriptedLLM:
    """`MemoryLLM` doing the offline backend's work, except that operations named in `fail_on` raise
    `LLMError`, as a real backend does once its retries are spent; so does analysing a page containing
    `poison`. `calls` counts attempts per operation (failed ones included). Operation names are the usage
    names: continuity, chain_summary, topic, profile, knowledge, answer.

    `async_view()` (what `as_async` picks) is the same backend as coroutines, each call taking `delay_s`
    first (`asyncio.sleep`: an LLM of that latency without a server) and counted in `in_flight` and
    `max_in_flight` while it runs. The sync methods never sleep.
    """

    def __init__(
        self, fail_on: set[str] | None = None, poison: str | None = None, delay_s: float = 0.0
    ) -> None:
        self.inner = OfflineLLM()
        self.fail_on: set[str] = set(fail_on or ())
        self.poison = poison
        """Analysis (profile, knowledge) of pages whose user_input contains this text always fails."""
        self.delay_s = delay_s
        self.calls: dict[str, int] = {}
        self.in_flight = 0
        """Async calls running now (their delay included)."""
        self.max_in_flight = 0
        """The most async calls ever running at once."""

    def _attempt(self, operation: str, pages: Sequence[Page] = ()) -> None:
        self.calls[operation] = self.calls.get(operation, 0) + 1
        if operation in self.fail_on:
            raise LLMError(f"scripted failure of {operation}")
        if self.poison is not None and any(self.poison in page.user_input for page in pages):
            raise LLMError(f"scripted failure of {operation} on a poisoned page")

    @property
    def usage(self) -> dict[str, OperationUsage]:
        return self.inner.usage

    def async_view(self) -> "DelayedAsyncLLM":
        return DelayedAsyncLLM(self)

    def is_continuation(self, previous: Page, current: Page) -> bool:
        self._attempt("continuity")
        return self.inner.is_continuation(previous, current)

    def summarize_chain(self, pages: Sequence[Page]) -> str:
        self._attempt("chain_summary")
        return self.inner.summarize_chain(pages)

    def summarize_topic(self, pages: Sequence[Page]) -> TopicSummary:
        self._attempt("topic")
        return self.inner.summarize_topic(pages)

    def update_profile(self, current_profile: str, pages: Sequence[Page]) -> str:
        self._attempt("profile", pages)
        return self.inner.update_profile(current_profile, pages)

    def extract_knowledge(self, pages: Sequence[Page]) -> ExtractedKnowledge:
        self._attempt("knowledge", pages)
        return self.inner.extract_knowledge(pages)

    def answer(self, request: AnswerRequest) -> str:
        self._attempt("answer")
        return self.inner.answer(request)


class DelayedAsyncLLM:
    """`ScriptedLLM.async_view()`: each call sleeps the backend's `delay_s` (when non-zero), then runs its
    sync method inline, so failures, `calls` and usage are the sync backend's."""

    def __init__(self, llm: ScriptedLLM) -> None:
        self.llm = llm

    @property
    def usage(self) -> dict[str, OperationUsage]:
        return self.llm.usage

    async def is_continuation(self, previous: Page, current: Page) -> bool:
        async with self._call():
            return self.llm.is_continuation(previous, current)

    async def summarize_chain(self, pages: Sequence[Page]) -> str:
        async with self._call():
            return self.llm.summarize_chain(pages)

    async def summarize_topic(self, pages: Sequence[Page]) -> TopicSummary:
        async with self._call():
            return self.llm.summarize_topic(pages)

    async def update_profile(self, current_profile: str, pages: Sequence[Page]) -> str:
        async with self._call():
            return self.llm.update_profile(current_profile, pages)

    async def extract_knowledge(self, pages: Sequence[Page]) -> ExtractedKnowledge:
        async with self._call():
            return self.llm.extract_knowledge(pages)

    async def answer(self, request: AnswerRequest) -> str:
        async with self._call():
            return self.llm.answer(request)

    @contextlib.asynccontextmanager
    async def _call(self) -> AsyncIterator[None]:
        """Counted in flight from the start of the delay to the end of the work."""
        self.llm.in_flight += 1
        self.llm.max_in_flight = max(self.llm.max_in_flight, self.llm.in_flight)
        try:
            if self.llm.delay_s:
                await asyncio.sleep(self.llm.delay_s)
            yield
        finally:
            self.llm.in_flight -= 1


def unit(dim: int, *weights: tuple[int, float]) -> np.ndarray:
    """A hand-made unit vector of `dim` from (axis, weight) pairs: `unit(8, (0, 1), (1, 1))` is 45° between
    axes 0 and 1."""
    vector = np.zeros(dim, dtype=np.float32)
    for axis, weight in weights:
        vector[axis] += weight
    return (vector / np.linalg.norm(vector)).astype(np.float32)


def axis(dim: int, index: int) -> np.ndarray:
    """The unit vector along one axis."""
    return unit(dim, (index, 1.0))
