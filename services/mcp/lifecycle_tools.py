"""Acting on what is remembered: delete an exchange or a fact, see how a fact changed, forget a user.

Each works on an existing space only (a missing one is a tool error naming the user, and nothing is
created) and says what it removed, so an agent can tell the user. Deletes are the engine's: the text, the
vector and the facts only that page supported leave every file (docs/lifecycle.md).
"""

from typing import Annotated

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import Field

from services.mcp.access import MemoryAccess
from services.mcp.errors import reported_as
from services.mcp.models import DeletedResult, FactHistoryResult, ForgetResult
from services.mcp.tools import AssistantIdArg, UserIdArg
from services.spaces.calls import DELETE_FACT, DELETE_PAGE, FACT_HISTORY, STATS

ItemId = Annotated[int, Field(ge=1)]


def register_lifecycle_tools(server: MCPServer, access: MemoryAccess) -> None:
    """Add `delete_memory`, `delete_fact`, `fact_history` and `forget_user` to `server`."""
    destructive = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True)

    @server.tool(annotations=destructive)
    async def delete_memory(
        ctx: Context,
        page_id: Annotated[ItemId, Field(description="The exchange's page_id (from retrieve_memory).")],
        user_id: UserIdArg = None,
        assistant_id: AssistantIdArg = None,
    ) -> DeletedResult:
        """Delete one remembered exchange, and the facts that only it supported."""
        with reported_as(ToolError, "delete_memory"):
            key = access.key(ctx, user_id, assistant_id)
            deleted = await access.change(key, DELETE_PAGE, page_id=page_id)
        return DeletedResult(user_id=key.user_id, assistant_id=key.assistant_id, deleted=deleted)

    @server.tool(annotations=destructive)
    async def delete_fact(
        ctx: Context,
        entry_id: Annotated[
            ItemId, Field(description="The fact's entry_id (from retrieve_memory or get_user_profile).")
        ],
        user_id: UserIdArg = None,
        assistant_id: AssistantIdArg = None,
    ) -> DeletedResult:
        """Delete one long-term fact about the user or the assistant."""
        with reported_as(ToolError, "delete_fact"):
            key = access.key(ctx, user_id, assistant_id)
            deleted = await access.change(key, DELETE_FACT, entry_id=entry_id)
        return DeletedResult(user_id=key.user_id, assistant_id=key.assistant_id, deleted=deleted)

    @server.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
    async def fact_history(
        ctx: Context,
        entry_id: Annotated[ItemId, Field(description="The fact's entry_id.")],
        user_id: UserIdArg = None,
        assistant_id: AssistantIdArg = None,
    ) -> FactHistoryResult:
        """Every version of a fact, oldest first, each with the exchanges (page ids) it came from."""
        with reported_as(ToolError, "fact_history"):
            key = access.key(ctx, user_id, assistant_id)
            history = await access.change(key, FACT_HISTORY, entry_id=entry_id)
        return FactHistoryResult(
            user_id=key.user_id,
            assistant_id=key.assistant_id,
            entry_id=history.entry_id,
            versions=history.versions,
        )

    @server.tool(annotations=destructive)
    async def forget_user(
        ctx: Context,
        confirm: Annotated[
            bool, Field(description="Must be true: everything remembered about the user goes.")
        ],
        user_id: UserIdArg = None,
        assistant_id: AssistantIdArg = None,
    ) -> ForgetResult:
        """Erase everything remembered about the user (with this assistant), files included. Only when the
        user asks for it; it cannot be undone."""
        with reported_as(ToolError, "forget_user"):
            if not confirm:
                raise ToolError("confirm: must be true to erase everything remembered about the user")
            key = access.key(ctx, user_id, assistant_id)
            await access.change(key, STATS)  # a missing space is an error naming the user, as for deletes
            erased = await access.spaces.forget(key)
        done = "erased" if erased else "queued the erase of (not done yet: retried until it is)"
        return ForgetResult(
            user_id=key.user_id,
            assistant_id=key.assistant_id,
            message=f"{done} all memory of user {key.user_id!r} with assistant {key.assistant_id!r}",
        )
