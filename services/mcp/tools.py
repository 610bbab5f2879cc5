"""The reference's three tools — `add_memory`, `retrieve_memory`, `get_user_profile` — with its argument
names and result fields, plus `user_id` / `assistant_id` on every call so one server serves many users,
and `get_response`, the reference package's own answer path (`Memoryos.get_response`), for a client that
wants the server's LLM to answer from memory rather than its own.

Every argument the reference accepts is accepted. `max_results` bounds the pages and facts retrieved.
Retrieval does not depend on `relationship_with_user` and `style_hint` (they shape an answer, not what is
remembered): they are returned with the context for the client's answer, and the `memory_turn` prompt
puts them in its instructions.
"""

import time
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import Field

from memoryos.space.writes import plan_write
from memoryos.types import KnowledgeEntry, RetrievedContext
from memoryos.validation import format_unix_timestamp
from services.mcp.access import MemoryAccess
from services.mcp.errors import reported_as
from services.mcp.models import (
    KNOWLEDGE_FIELDS,
    NO_PROFILE,
    AddMemoryDetails,
    AddMemoryResult,
    GetResponseResult,
    KnowledgeItem,
    RetrieveMemoryResult,
    UserProfileResult,
)
from services.spaces.calls import LIST_FACTS, PROFILE, RESPOND, RETRIEVE

MAX_RESULTS = 100
"""Most pages (and facts) one retrieve_memory returns: a context window, not an export."""

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._@+-]*$"
"""The engine's id rule (`validate_id`), in the schema so a client sees it; the engine checks it again."""

UserIdArg = Annotated[
    str | None,
    Field(
        description="Whose memory (default: the server's --user, or the user the API key is bound to).",
        max_length=128,
        pattern=ID_PATTERN,
    ),
]
AssistantIdArg = Annotated[
    str | None,
    Field(
        description="Which assistant's memory of the user (default: default_assistant_profile).",
        max_length=128,
        pattern=ID_PATTERN,
    ),
]


def now_text() -> str:
    return format_unix_timestamp(time.time())


def knowledge_items(facts: list[KnowledgeEntry]) -> list[KnowledgeItem]:
    return [KnowledgeItem.model_validate(fact.model_dump(include=KNOWLEDGE_FIELDS)) for fact in facts]


def retrieve_result(
    context: RetrievedContext | None,
    query: str,
    user_id: str,
    assistant_id: str,
    relationship: str,
    style: str,
) -> RetrieveMemoryResult:
    """The reference's result over a `RetrievedContext`; None (no space yet) gives the empty result."""
    short = context.short_term_memory if context else []
    pages = context.retrieved_pages if context else []
    user_facts = context.retrieved_user_knowledge if context else []
    assistant_facts = context.retrieved_assistant_knowledge if context else []
    return RetrieveMemoryResult(
        query=query,
        timestamp=now_text(),
        user_id=user_id,
        assistant_id=assistant_id,
        space_exists=context is not None,
        user_profile=(context.user_profile if context else "") or NO_PROFILE,
        short_term_memory=short,
        short_term_count=len(short),
        retrieved_pages=pages,
        retrieved_user_knowledge=user_facts,
        retrieved_assistant_knowledge=assistant_facts,
        total_pages_found=len(pages),
        total_user_knowledge_found=len(user_facts),
        total_assistant_knowledge_found=len(assistant_facts),
        relationship_with_user=relationship,
        style_hint=style,
    )


def register_memory_tools(server: MCPServer, access: MemoryAccess) -> None:
    """Add the three reference tools and `get_response` to `server`."""

    @server.tool(
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False)
    )
    async def add_memory(
        ctx: Context,
        user_input: Annotated[str, Field(min_length=1, description="What the user said.")],
        agent_response: Annotated[str, Field(min_length=1, description="What the assistant answered.")],
        timestamp: Annotated[
            str | None, Field(description="When (ISO 8601 or YYYY-MM-DD HH:MM:SS; default now, UTC).")
        ] = None,
        meta_data: Annotated[
            dict[str, Any] | None, Field(description="Any JSON object, stored and returned with the page.")
        ] = None,
        user_id: UserIdArg = None,
        assistant_id: AssistantIdArg = None,
        write_id: Annotated[
            str | None,
            Field(
                description="Idempotency key (1-64 of A-Z a-z 0-9 _ -): a retry with the same id stores nothing "
                "twice.",
                pattern=r"^[A-Za-z0-9_-]{1,64}$",
            ),
        ] = None,
        ttl_s: Annotated[
            float | None, Field(gt=0, description="Forget this exchange after so many seconds.")
        ] = None,
    ) -> AddMemoryResult:
        """Remember one exchange between the user and the assistant. Call it after every turn worth
        remembering; the first call for a user creates their memory."""
        with reported_as(ToolError, "add_memory"):
            key = access.key(ctx, user_id, assistant_id)
            turn = {"user_input": user_input, "agent_response": agent_response}
            op, page_ids = await access.write(
                key,
                lambda: plan_write(
                    [{**turn, "timestamp": timestamp, "meta_data": meta_data}],
                    max_text_chars=access.spaces.config.max_text_chars,
                    at=time.time(),
                    write_id=write_id,
                    ttl_s=ttl_s,
                    field_prefix="",
                ),
            )  # checked before the space is opened: a refused write creates nothing
        return AddMemoryResult(
            timestamp=op.turns[0].timestamp,
            details=AddMemoryDetails(
                page_id=page_ids[0] if page_ids else None,
                write_id=op.write_id,
                user_id=key.user_id,
                assistant_id=key.assistant_id,
                user_input_length=len(user_input),
                agent_response_length=len(agent_response),
                has_meta_data=meta_data is not None,
            ),
        )

    @server.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
    async def retrieve_memory(
        ctx: Context,
        query: Annotated[str, Field(min_length=1, description="What to recall: usually the user's message.")],
        relationship_with_user: Annotated[
            str, Field(description="How the assistant relates to the user; returned for the answer.")
        ] = "friend",
        style_hint: Annotated[str, Field(description="Style of the answer; returned for the answer.")] = "",
        max_results: Annotated[
            int, Field(ge=1, le=MAX_RESULTS, description="Most retrieved pages (and facts) returned.")
        ] = 10,
        user_id: UserIdArg = None,
        assistant_id: AssistantIdArg = None,
    ) -> RetrieveMemoryResult:
        """Recall what is relevant to a query before answering: the latest exchanges, older relevant
        exchanges with their topic summaries, facts about the user and the assistant, and the user's
        profile. A user with no memory yet gets an empty result (space_exists false), not an error."""
        with reported_as(ToolError, "retrieve_memory"):
            key = access.key(ctx, user_id, assistant_id)
            facts = min(max_results, access.spaces.config.knowledge_top_k)
            context = await access.read(
                key,
                RETRIEVE,
                query=query,
                top_k=max_results,
                knowledge_top_k=facts,
                max_vector_wait_s=access.read_vector_wait_s,
            )
        return retrieve_result(
            context, query, key.user_id, key.assistant_id, relationship_with_user, style_hint
        )

    @server.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
    async def get_user_profile(
        ctx: Context,
        include_knowledge: Annotated[bool, Field(description="Also list the facts about the user.")] = True,
        include_assistant_knowledge: Annotated[
            bool, Field(description="Also list the assistant's facts.")
        ] = False,
        user_id: UserIdArg = None,
        assistant_id: AssistantIdArg = None,
    ) -> UserProfileResult:
        """The user's profile (personality, preferences, interests built from past conversations), and
        optionally the long-term facts about the user and the assistant, each with its entry_id."""
        with reported_as(ToolError, "get_user_profile"):
            key = access.key(ctx, user_id, assistant_id)
            profile = await access.read(key, PROFILE)
            exists = profile is not None
            user_facts = (
                knowledge_items(await access.change(key, LIST_FACTS, kind="user") if exists else [])
                if include_knowledge
                else None
            )
            assistant_facts = (
                knowledge_items(await access.change(key, LIST_FACTS, kind="assistant") if exists else [])
                if include_assistant_knowledge
                else None
            )
        return UserProfileResult(
            timestamp=now_text(),
            user_id=key.user_id,
            assistant_id=key.assistant_id,
            space_exists=exists,
            user_profile=profile or NO_PROFILE,
            user_knowledge=user_facts,
            user_knowledge_count=None if user_facts is None else len(user_facts),
            assistant_knowledge=assistant_facts,
            assistant_knowledge_count=None if assistant_facts is None else len(assistant_facts),
        )

    @server.tool(
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=True
        )
    )
    async def get_response(
        ctx: Context,
        query: Annotated[str, Field(min_length=1, description="The user's message to answer.")],
        relationship_with_user: Annotated[
            str, Field(description="How the assistant relates to the user, for the answer's tone.")
        ] = "friend",
        style_hint: Annotated[str, Field(description="Style of the answer.")] = "",
        user_id: UserIdArg = None,
        assistant_id: AssistantIdArg = None,
    ) -> GetResponseResult:
        """Answer the user's message with the server's LLM from what is remembered about them (recent
        exchanges, relevant older ones, facts, profile), then remember the exchange. Most clients answer
        with their own model from retrieve_memory; this is for those that want the server to answer."""
        with reported_as(ToolError, "get_response"):
            key = access.key(ctx, user_id, assistant_id)
            answer = await access.change(
                key,
                RESPOND,
                query=query,
                relationship_with_user=relationship_with_user,
                style_hint=style_hint,
            )
        return GetResponseResult(
            query=query,
            response=answer,
            timestamp=now_text(),
            user_id=key.user_id,
            assistant_id=key.assistant_id,
        )
