"""The tools' structured results: the reference MemoryOS server's fields, kept so its users' prompts keep
working, plus the ids every item needs to be acted on (`page_id`, `entry_id`) and `space_exists`.

The SDK derives each tool's output schema from these models and sends the result both as structured
content and as its JSON text, for clients that read only text.
"""

from typing import Literal

from pydantic import BaseModel, Field

from memoryos.types import DeleteResult, KnowledgeEntry, RetrievedKnowledge, RetrievedPage

NO_PROFILE = "No detailed user profile"
"""The reference's `user_profile` text when none has been built yet: prompts written for it test for it."""


KNOWLEDGE_FIELDS: set[str] = {"knowledge", "timestamp", "entry_id", "source_page_ids"}
"""The reference's `{knowledge, timestamp}` record of a fact, plus its id and where it came from."""


class KnowledgeItem(BaseModel):
    """A long-term fact about the user or the assistant."""

    knowledge: str
    timestamp: str
    entry_id: int = Field(description="The fact's id: for delete_fact and fact_history.")
    source_page_ids: list[int] = Field(
        default_factory=list, description="The exchanges (page ids) it was extracted from."
    )


class AddMemoryDetails(BaseModel):
    page_id: int | None = Field(
        description="The stored exchange's id, for delete_memory; null when the server queues writes "
        "(`--redis-url`): retrieve_memory shows it once applied."
    )
    write_id: str = Field(description="Send the same write_id again to retry without storing twice.")
    user_id: str
    assistant_id: str
    user_input_length: int
    agent_response_length: int
    has_meta_data: bool


class AddMemoryResult(BaseModel):
    status: Literal["success"] = "success"
    message: str = "Memory has been successfully added to MemoryOS"
    timestamp: str = Field(description="The exchange's time as stored (UTC, YYYY-MM-DD HH:MM:SS).")
    details: AddMemoryDetails


class RetrieveMemoryResult(BaseModel):
    status: Literal["success"] = "success"
    query: str
    timestamp: str = Field(description="When the retrieval ran (UTC).")
    user_id: str
    assistant_id: str
    space_exists: bool = Field(description="False: nothing is remembered for this user yet.")
    user_profile: str
    short_term_memory: list[RetrievedPage] = Field(description="The latest exchanges, oldest first.")
    short_term_count: int
    retrieved_pages: list[RetrievedPage] = Field(
        description="Older exchanges relevant to the query, best first; meta_info is their chain summary."
    )
    retrieved_user_knowledge: list[RetrievedKnowledge]
    retrieved_assistant_knowledge: list[RetrievedKnowledge]
    total_pages_found: int
    total_user_knowledge_found: int
    total_assistant_knowledge_found: int
    relationship_with_user: str = Field(description="As given: how to address the user in the answer.")
    style_hint: str = Field(description="As given: the answer's style.")


class GetResponseResult(BaseModel):
    status: Literal["success"] = "success"
    query: str
    response: str = Field(description="The server's LLM's answer, from the user's memory.")
    timestamp: str = Field(description="When the answer was made (UTC).")
    user_id: str
    assistant_id: str


class UserProfileResult(BaseModel):
    status: Literal["success"] = "success"
    timestamp: str
    user_id: str
    assistant_id: str
    space_exists: bool
    user_profile: str
    user_knowledge: list[KnowledgeItem] | None = Field(None, description="None unless include_knowledge.")
    user_knowledge_count: int | None = None
    assistant_knowledge: list[KnowledgeItem] | None = Field(
        None, description="None unless include_assistant_knowledge."
    )
    assistant_knowledge_count: int | None = None


class DeletedResult(BaseModel):
    """What a delete removed: the item and what depended on it alone (facts only it supported)."""

    status: Literal["success"] = "success"
    user_id: str
    assistant_id: str
    deleted: DeleteResult


class FactHistoryResult(BaseModel):
    status: Literal["success"] = "success"
    user_id: str
    assistant_id: str
    entry_id: int
    versions: list[KnowledgeEntry] = Field(description="Every version, oldest first, with its source pages.")


class ForgetResult(BaseModel):
    status: Literal["success"] = "success"
    user_id: str
    assistant_id: str
    message: str
