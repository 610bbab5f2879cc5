"""Ops: the only way a memory space changes.

An op is plain data. Planners (consolidation, the facade, a service worker) do the slow work — LLM calls,
embeddings — and hand the results to `MemorySpace.apply(op)`, which is deterministic and does no I/O
beyond the store. That split lets a worker batch model work across many spaces and keeps every policy
decision testable with hand-made vectors.
"""

from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from memoryos.types import KnowledgeKind, Turn

Vectors = Annotated[np.ndarray, Field(description="float32, shape (n, dim), rows L2-normalized")]


class Op(BaseModel):
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)


class AddTurns(Op):
    """Append exchanges to short-term memory, one vector per turn.

    Without vectors the pages are stored pending: durable and listed in STM at once, embedded later by
    `EmbedPages`. That is how `add_memory` acknowledges a write before the model has seen it.
    """

    kind: Literal["add_turns"] = "add_turns"
    turns: list[Turn]
    vectors: Vectors | None = None


class EmbedPages(Op):
    """Attach vectors to pending pages, which makes them searchable."""

    kind: Literal["embed_pages"] = "embed_pages"
    page_ids: list[int]
    vectors: Vectors


class LinkChain(Op):
    """Attach a page leaving STM to the dialogue chain of the previously moved page, or start a new one.

    `chain_summary` becomes the `meta_info` of every page of the chain.
    """

    kind: Literal["link_chain"] = "link_chain"
    page_id: int
    continues_previous: bool
    chain_summary: str


class FileTopic(Op):
    """Move pages from STM into the segment whose topic matches, or into a new segment.

    `apply` decides merge-or-new from the current segments (cosine + keyword Jaccard against
    `mid_term_similarity_threshold`), then archives the coldest segments over capacity.
    """

    kind: Literal["file_topic"] = "file_topic"
    page_ids: list[int]
    summary: str
    keywords: list[str]
    vector: Vectors = Field(description="shape (dim,): the topic summary's embedding")
    at: float = Field(description="Unix seconds: when the pages were filed (recency of the segment)")


class RecordVisits(Op):
    """Count a retrieval hit on segments; kept apart from retrieval so reads never write."""

    kind: Literal["record_visits"] = "record_visits"
    segment_ids: list[int]
    at: float


class UpdateProfile(Op):
    """Store a new version of the user profile; older versions stay as history."""

    kind: Literal["update_profile"] = "update_profile"
    text: str
    source_segment_id: int | None = None


class AddKnowledge(Op):
    """Add facts; a fact within `knowledge_dedup_similarity` of a stored one replaces it (old kept in history)."""

    kind: Literal["add_knowledge"] = "add_knowledge"
    knowledge_kind: KnowledgeKind
    texts: list[str]
    vectors: Vectors
    timestamp: str


class MarkAnalyzed(Op):
    """A segment's new pages were promoted to long-term memory: reset its heat counters."""

    kind: Literal["mark_analyzed"] = "mark_analyzed"
    segment_id: int
    page_ids: list[int]


AnyOp = (
    AddTurns | EmbedPages | LinkChain | FileTopic | RecordVisits | UpdateProfile | AddKnowledge | MarkAnalyzed
)
