"""`RemoteSpaces`: the MCP server as a thin client of a running API (`memoryos mcp --api-url URL`).

The stdio process then opens no store and loads no model: each tool's owner call becomes the REST call
that serves it (`services/client.py`), under the API key given, so the API's tenant, user binding, limits
and mode (embedded or Redis) apply to the agent exactly as to any other client. The tenant of a space key
is ignored here: the server takes it from the key.
"""

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar, cast

from memoryos import MemoryConfig
from memoryos.errors import SpaceNotFoundError
from memoryos.portability.bundles import ImportReport
from memoryos.space.ops import AddTurns
from memoryos.space.pool import SpaceKey
from services.client import ApiError, AsyncMemoryClient
from services.mcp.errors import RemoteRefusal
from services.spaces import calls
from services.spaces.calls import OwnerCall
from services.spaces.protocol import (
    BackpressureError,
    DeadLetter,
    NotInThisModeError,
    SpaceFigures,
    WritePlan,
)

T = TypeVar("T")

Send = Callable[[AsyncMemoryClient, SpaceKey, dict[str, Any]], Awaitable[Any]]

REMOTE_CALLS: dict[str, Send] = {
    calls.RETRIEVE.method: lambda api, key, args: api.retrieve(
        key.user_id,
        args["query"],
        assistant_id=key.assistant_id,
        top_k=args.get("top_k"),
        knowledge_top_k=args.get("knowledge_top_k"),
        max_vector_wait_s=args.get("max_vector_wait_s"),
    ),
    calls.STATS.method: lambda api, key, _: api.stats(key.user_id, assistant_id=key.assistant_id),
    calls.PROFILE.method: lambda api, key, _: api.profile(key.user_id, assistant_id=key.assistant_id),
    calls.LIST_FACTS.method: lambda api, key, args: api.facts(
        key.user_id, args["kind"], assistant_id=key.assistant_id
    ),
    calls.DELETE_PAGE.method: lambda api, key, args: api.delete_page(
        key.user_id, args["page_id"], assistant_id=key.assistant_id
    ),
    calls.DELETE_FACT.method: lambda api, key, args: api.delete_fact(
        key.user_id, args["entry_id"], assistant_id=key.assistant_id
    ),
    calls.FACT_HISTORY.method: lambda api, key, args: api.fact_history(
        key.user_id, args["entry_id"], assistant_id=key.assistant_id
    ),
}
"""The owner calls the MCP tools and resources make, as REST calls."""


def _local_error(error: ApiError, key: SpaceKey) -> Exception:
    """The engine's error for what the server answered, so tools report it as they do embedded: a
    missing space reads as empty, backpressure says to retry; any other answer is passed on with its
    message."""
    if error.code == "space_not_found":
        return SpaceNotFoundError(Path("api") / key.tenant / key.user_id / key.assistant_id)
    if error.status in (429, 503):
        return BackpressureError(error.message, error.retry_after_s or 1)
    return RemoteRefusal(error.message)


class RemoteSpaces:
    """`Spaces` over a running API."""

    def __init__(self, config: MemoryConfig, api: AsyncMemoryClient) -> None:
        self.config = config
        self.api = api

    async def call(self, key: SpaceKey, call: OwnerCall[T], /, **args: Any) -> T:
        send = REMOTE_CALLS.get(call.method)
        if send is None:
            raise NotInThisModeError(f"{call.method} is not sent to a remote API")
        try:
            return cast(T, await send(self.api, key, args))
        except ApiError as error:
            raise _local_error(error, key) from None

    async def write(self, key: SpaceKey, plan: WritePlan) -> tuple[AddTurns, list[int]]:
        """The planned turns (checked here, timestamps fixed) as one batch under the op's write id. Planned
        on the event loop: this process serves one MCP client, not a request rate."""
        op = plan()
        turns = [turn.model_dump() for turn in op.turns]
        try:
            batch = await self.api.add_batch(
                key.user_id, turns, assistant_id=key.assistant_id, write_id=op.write_id, ttl_s=op.ttl_s
            )
            return op, batch.page_ids
        except ApiError as error:
            raise _local_error(error, key) from None

    async def forget(self, key: SpaceKey) -> bool:
        try:
            return await self.api.forget(key.user_id, assistant_id=key.assistant_id)
        except ApiError as error:
            raise _local_error(error, key) from None

    async def acknowledged_unstored(self, key: SpaceKey, write_ids: list[str]) -> set[str]:
        return set()  # the MCP tools never wait for write ids; the API decides its own reads' waits

    async def dead_letters(self, tenant: str, user_id: str | None, limit: int) -> list[DeadLetter]:
        return []  # the API lists them itself (GET /v1/dead-letters)

    async def export_bundle(self, key: SpaceKey, out: Path) -> None:
        raise NotInThisModeError("export and import go to the API itself (GET .../export, POST .../import)")

    async def import_bundle(self, key: SpaceKey, bundle: Path) -> ImportReport:
        raise NotInThisModeError("export and import go to the API itself (GET .../export, POST .../import)")

    async def ready(self) -> bool:
        return True

    def figures(self) -> SpaceFigures:
        return SpaceFigures(queue_depth=0, write_lag_s=0.0, open_spaces=0, batcher=None)

    async def maintain(self) -> None:
        return None

    def preload(self) -> None:
        return None

    def close(self) -> None:
        return None
