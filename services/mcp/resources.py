"""Resources: a space's statistics and its profile, as JSON, for clients that show or attach them.

URI templates, so one server serves many users: `memoryos://users/{user_id}/stats` and `.../profile` (the
default assistant), and `memoryos://users/{user_id}/assistants/{assistant_id}/stats` and `.../profile`.
The caller's tenant and user binding apply as for tools. A user with no memory yet reads as empty
(`space_exists: false`); nothing is created.
"""

import json
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError

from memoryos.space.pool import SpaceKey
from services.mcp.access import MemoryAccess
from services.mcp.errors import reported_as
from services.mcp.models import KNOWLEDGE_FIELDS, NO_PROFILE
from services.spaces.calls import LIST_FACTS, PROFILE, STATS

JSON = "application/json"


def _empty_stats(key: SpaceKey) -> dict[str, Any]:
    return {
        "user_id": key.user_id,
        "assistant_id": key.assistant_id,
        "short_term_pages": 0,
        "mid_term_pages": 0,
        "archived_pages": 0,
        "segments": [],
        "user_knowledge": 0,
        "assistant_knowledge": 0,
        "profile_versions": 0,
        "embedding_model": None,
        "embedding_dim": None,
    }


async def _profile_of(access: MemoryAccess, key: SpaceKey) -> dict[str, Any] | None:
    """The profile and every active fact of an existing space; None when there is none."""
    profile = await access.read(key, PROFILE)
    if profile is None:
        return None
    facts = {
        kind: [
            fact.model_dump(include=KNOWLEDGE_FIELDS)
            for fact in await access.change(key, LIST_FACTS, kind=kind)
        ]
        for kind in ("user", "assistant")
    }
    return {
        "user_profile": profile or NO_PROFILE,
        "user_knowledge": facts["user"],
        "assistant_knowledge": facts["assistant"],
    }


def register_resources(server: MCPServer, access: MemoryAccess) -> None:
    """Add the stats and profile resource templates to `server`."""

    async def stats(ctx: Context, user_id: str, assistant_id: str | None) -> str:
        with reported_as(ResourceError, "stats resource"):
            key = access.key(ctx, user_id, assistant_id)
            found = await access.read(key, STATS)
        figures = found.model_dump(mode="json", exclude={"llm_usage"}) if found else _empty_stats(key)
        return json.dumps({"space_exists": found is not None, **figures})

    async def profile(ctx: Context, user_id: str, assistant_id: str | None) -> str:
        with reported_as(ResourceError, "profile resource"):
            key = access.key(ctx, user_id, assistant_id)
            found = await _profile_of(access, key)
        empty = {"user_profile": NO_PROFILE, "user_knowledge": [], "assistant_knowledge": []}
        body = {"user_id": key.user_id, "assistant_id": key.assistant_id, "space_exists": found is not None}
        return json.dumps({**body, **(found or empty)})

    @server.resource("memoryos://users/{user_id}/stats", mime_type=JSON)
    async def user_stats(user_id: str, ctx: Context) -> str:
        """Tier counts, segments with their heat, fact counts and the embedding model of a user's memory."""
        return await stats(ctx, user_id, None)

    @server.resource("memoryos://users/{user_id}/profile", mime_type=JSON)
    async def user_profile(user_id: str, ctx: Context) -> str:
        """A user's profile and every fact about the user and the assistant, with entry ids."""
        return await profile(ctx, user_id, None)

    @server.resource("memoryos://users/{user_id}/assistants/{assistant_id}/stats", mime_type=JSON)
    async def assistant_stats(user_id: str, assistant_id: str, ctx: Context) -> str:
        """As users/{user_id}/stats, for one assistant's memory of the user."""
        return await stats(ctx, user_id, assistant_id)

    @server.resource("memoryos://users/{user_id}/assistants/{assistant_id}/profile", mime_type=JSON)
    async def assistant_profile(user_id: str, assistant_id: str, ctx: Context) -> str:
        """As users/{user_id}/profile, for one assistant's memory of the user."""
        return await profile(ctx, user_id, assistant_id)
