"""The data the engine stores and returns: pages, segments, facts, profile, retrieval results.

Pages keep the reference package's field names (`user_input`, `agent_response`, `timestamp`, `meta_info`)
so its users read our results unchanged. Vectors never live in these models: they travel in ops and
live in the store and indexes.
"""

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Tier = Literal["stm", "mtm", "archived"]
"""Where a page lives: short-term FIFO, a mid-term segment, or cold storage after its segment was evicted."""

KnowledgeKind = Literal["user", "assistant"]


def exchange_text(user_input: str, agent_response: str) -> str:
    """The text embedded for an exchange. This labelled form is what the reference embeds, and it
    retrieves better than a plain concatenation (docs/retrieval.md)."""
    return f"User: {user_input} Assistant: {agent_response}"


class Turn(BaseModel):
    """One (user, assistant) exchange as a caller hands it in, already validated."""

    model_config = ConfigDict(frozen=True)

    user_input: str
    agent_response: str
    timestamp: str
    meta_data: dict[str, Any] = Field(default_factory=dict)

    def text(self) -> str:
        return exchange_text(self.user_input, self.agent_response)


class Page(BaseModel):
    """A stored exchange. `page_id` grows with insertion order and is the page's vector id."""

    page_id: int
    user_input: str
    agent_response: str
    timestamp: str
    meta_info: str | None = Field(None, description="The dialogue chain's summary, shared by its pages.")
    meta_data: dict[str, Any] = Field(default_factory=dict)
    tier: Tier = "stm"
    segment_id: int | None = None
    chain_id: int | None = None
    analyzed: bool = False
    embedded: bool = Field(True, description="False while the page waits for its vector.")
    created_at: float | None = Field(None, description="Unix seconds when it was stored (None: before v3).")
    updated_at: float | None = Field(None, description="Unix seconds of its last edit, else when stored.")
    expires_at: float | None = Field(None, description="Unix seconds after which it is never returned.")
    op_id: str | None = Field(None, description="Provenance: the op (and so the write) that stored it.")

    def text(self) -> str:
        """What is embedded for the page."""
        return exchange_text(self.user_input, self.agent_response)


class Segment(BaseModel):
    """A mid-term topic segment: pages about one topic, with the counters its heat is computed from."""

    segment_id: int
    summary: str
    keywords: list[str]
    visit_count: int = 0
    interaction_count: int = Field(0, description="Pages filed since the segment was last analyzed.")
    last_visit_at: float = Field(description="Unix seconds of the last visit or page filed.")
    created_at: float
    page_count: int = 0
    archived: bool = False
    updated_at: float | None = Field(None, description="Unix seconds of the last page filed or rebuild.")


FactOrigin = Literal["consolidation", "user", "import"]
"""Who wrote a fact: extracted from pages by consolidation, edited by a user, or imported."""


class KnowledgeEntry(BaseModel):
    """A long-term fact about the user or about what the assistant said/knows, scoped to the space.

    `entry_id` is stable: an edit makes a new entry that `replaces` the old one (kept as history)."""

    entry_id: int
    kind: KnowledgeKind
    knowledge: str
    timestamp: str
    created_at: float | None = None
    updated_at: float | None = None
    expires_at: float | None = None
    origin: FactOrigin = "consolidation"
    source_page_ids: list[int] = Field(
        default_factory=list, description="Provenance: the pages it was extracted from."
    )
    active: bool = Field(True, description="False for a version an edit or a newer fact replaced.")
    replaced_by: int | None = None


class FactHistory(BaseModel):
    """How one fact changed: every version, oldest first, each with where it came from."""

    entry_id: int
    versions: list[KnowledgeEntry]


class DeleteResult(BaseModel):
    """What one delete removed: the items asked for and what depended on them alone."""

    page_ids: list[int] = Field(default_factory=list)
    fact_ids: list[int] = Field(
        default_factory=list, description="Facts removed: asked for, or whose only source pages went."
    )
    profile_rebuild: bool = Field(
        False, description="The profile drew on a removed page: the next consolidation rebuilds it."
    )


class PageList(BaseModel):
    """One page of a space's pages in id order, for listing memories with paging."""

    pages: list[Page]
    total: int
    offset: int
    limit: int


class RetrievedPage(BaseModel):
    """A page in a retrieval result, with the reference's fields plus where and why it was found."""

    user_input: str
    agent_response: str
    timestamp: str
    meta_info: str | None = None
    meta_data: dict[str, Any] = Field(default_factory=dict)
    page_id: int
    segment_id: int | None = None
    tier: Tier = "stm"
    score: float = 0.0


class RetrievedKnowledge(BaseModel):
    """A fact in a retrieval result; `knowledge` and `timestamp` are the reference's field names."""

    knowledge: str
    timestamp: str
    score: float = 0.0
    entry_id: int | None = Field(None, description="The fact's id, to edit, delete or see its history.")
    source_page_ids: list[int] = Field(
        default_factory=list, description="Provenance: the pages it was extracted from (as in list_facts)."
    )


class RetrievedContext(BaseModel):
    """Everything retrieval found for one query, ranked; the JSON form is what HTTP and MCP return."""

    query: str
    retrieved_at: str
    short_term_memory: list[RetrievedPage]
    retrieved_pages: list[RetrievedPage]
    retrieved_user_knowledge: list[RetrievedKnowledge]
    retrieved_assistant_knowledge: list[RetrievedKnowledge]
    user_profile: str
    user_profile_version: int | None = Field(None, description="The profile version shown (None: none yet).")
    pages_without_vectors: int = Field(
        0,
        description="Pages stored before this read that still had no vector when it answered (its wait for "
        "them was bounded): ranked by their words and date alone, and shown in short_term_memory when "
        "recent. 0: every page was searchable by meaning.",
    )


class WriteStatus(BaseModel):
    """An acknowledged write, found by its write id: the pages it stored and whether they are searchable."""

    write_id: str
    page_ids: list[int]
    searchable: bool = Field(description="Every page of the write has its vector (is in the index).")


class SegmentStats(BaseModel):
    """A mid-term segment as `stats` shows it. `heat` is the sum of the three `heat_*` parts (the
    weighted terms of `policy.heat_of`), given apart so a view can show why a segment is hot; the parts
    default to 0 so stats saved before they existed still validate."""

    segment_id: int
    summary: str
    page_count: int
    heat: float
    heat_visits: float = Field(0.0, description="α·visits: reads that returned its pages since its analysis.")
    heat_length: float = Field(0.0, description="β·interactions: pages filed since it was last analyzed.")
    heat_recency: float = Field(0.0, description="γ·exp(−hours since its last visit / τ).")


class MemoryStats(BaseModel):
    """Tier counts and LLM accounting, for `get_memory_stats()` and `memoryos stats`."""

    user_id: str
    assistant_id: str
    short_term_pages: int
    mid_term_pages: int
    archived_pages: int
    segments: list[SegmentStats]
    user_knowledge: int
    assistant_knowledge: int
    profile_versions: int
    embedding_model: str
    embedding_dim: int
    promotion_threshold: float | None = Field(
        None,
        description="Heat at which a segment with unanalyzed pages is promoted to the profile and facts "
        "(the space's `mid_term_heat_threshold`); None in stats from before it was reported.",
    )
    storage_bytes: int | None = Field(
        None,
        description="Bytes of the space's files on disk when the stats were taken (store, its WAL, index "
        "snapshots): what this user's memory costs. None in stats from before it was reported.",
    )
    llm_usage: dict[str, dict[str, int]] = Field(
        default_factory=dict, description="Per operation: calls, prompt_tokens, completion_tokens."
    )
