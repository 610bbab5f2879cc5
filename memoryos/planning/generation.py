"""Answer assembly: what the LLM sees when it answers from memory (`Memoryos.get_response`, the harness).

The prompt templates themselves are in `memoryos/llm/prompts.py`; this builds their input from a `RetrievedContext`.
"""

from collections.abc import Mapping
from typing import Any

from memoryos.llm.base import AnswerRequest
from memoryos.types import Page, RetrievedContext, RetrievedPage


def _page(page: RetrievedPage) -> Page:
    return Page.model_validate(page.model_dump(exclude={"score"}))


def answer_request(
    context: RetrievedContext,
    relationship_with_user: str = "friend",
    style_hint: str = "",
    meta_data: Mapping[str, Any] | None = None,
) -> AnswerRequest:
    """What the LLM sees to answer from memory: short-term pages, retrieved pages not already among them,
    profile and facts."""
    short_term_ids = {p.page_id for p in context.short_term_memory}
    return AnswerRequest(
        query=context.query,
        short_term=[_page(p) for p in context.short_term_memory],
        retrieved=[_page(p) for p in context.retrieved_pages if p.page_id not in short_term_ids],
        user_profile=context.user_profile,
        user_knowledge=[k.knowledge for k in context.retrieved_user_knowledge],
        assistant_knowledge=[k.knowledge for k in context.retrieved_assistant_knowledge],
        relationship_with_user=relationship_with_user,
        style_hint=style_hint,
        user_meta_data=dict(meta_data) if meta_data else None,
    )
