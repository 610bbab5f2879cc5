"""The `MemoryLLM` protocol: the language tasks memory consolidation and generation need.

The protocol is task-level, not chat-level, so the offline backend can do each task extractively with no
model at all, and the whole pipeline runs without an API key.

`AsyncMemoryLLM` is the same tasks as coroutines, for the per-process scheduler that consolidates every
open space on one event loop and pools their LLM calls (`memoryos/llm/async_adapters.py` turns any
`MemoryLLM` into one). The sync protocol stays: the facade answers synchronously, and so do the eval
harness and judge.
"""

from collections.abc import Sequence
from typing import Protocol

from pydantic import BaseModel, Field

from memoryos.types import Page


class TopicSummary(BaseModel):
    """What a run of pages is about: one summary sentence and a few keywords."""

    summary: str
    keywords: list[str] = Field(default_factory=list)


class ExtractedKnowledge(BaseModel):
    """Facts found in pages: about the user, and about the assistant (what it said, did, or holds)."""

    user_facts: list[str] = Field(default_factory=list)
    assistant_facts: list[str] = Field(default_factory=list)


class AnswerRequest(BaseModel):
    """Everything generation puts in front of the model for one answer."""

    query: str
    short_term: list[Page]
    retrieved: list[Page]
    user_profile: str
    user_knowledge: list[str]
    assistant_knowledge: list[str]
    relationship_with_user: str = "friend"
    style_hint: str = ""
    user_meta_data: dict[str, object] | None = None


class OperationUsage(BaseModel):
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


class MemoryLLM(Protocol):
    """Language tasks of the memory pipeline. Implementations count calls and tokens per operation
    (`usage`), and raise `LLMError` on failure rather than returning an error text that could be stored.
    """

    @property
    def usage(self) -> dict[str, OperationUsage]: ...

    def is_continuation(self, previous: Page, current: Page) -> bool:
        """Does `current` continue the conversation of `previous` (same dialogue chain)?"""
        ...

    def summarize_chain(self, pages: Sequence[Page]) -> str:
        """One or two sentences on what the chain of pages is about."""
        ...

    def summarize_topic(self, pages: Sequence[Page]) -> TopicSummary:
        """The single main topic of the pages (one topic: a page belongs to exactly one segment)."""
        ...

    def update_profile(self, current_profile: str, pages: Sequence[Page]) -> str:
        """The profile merged with what the pages reveal; the current profile is kept where pages are silent."""
        ...

    def extract_knowledge(self, pages: Sequence[Page]) -> ExtractedKnowledge:
        """Concise standalone facts about the user and about the assistant."""
        ...

    def answer(self, request: AnswerRequest) -> str:
        """The assistant's reply to `request.query` given the memory context."""
        ...


class AsyncMemoryLLM(Protocol):
    """`MemoryLLM`'s tasks as coroutines: same names, arguments, results, usage names and `LLMError` rule.

    Implementations are used from one event loop; many calls may be in flight on it at once.
    """

    @property
    def usage(self) -> dict[str, OperationUsage]: ...

    async def is_continuation(self, previous: Page, current: Page) -> bool: ...

    async def summarize_chain(self, pages: Sequence[Page]) -> str: ...

    async def summarize_topic(self, pages: Sequence[Page]) -> TopicSummary: ...

    async def update_profile(self, current_profile: str, pages: Sequence[Page]) -> str: ...

    async def extract_knowledge(self, pages: Sequence[Page]) -> ExtractedKnowledge: ...

    async def answer(self, request: AnswerRequest) -> str: ...
