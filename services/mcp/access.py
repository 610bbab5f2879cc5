"""`MemoryAccess`: what every tool and resource needs — the caller's space, and calls on it that never
create a space by reading.

The spaces are the API's `Spaces` (`services/spaces/protocol.py`): over HTTP the very instance the REST routes
use (embedded, or the Redis queue and its workers), over stdio an embedded one of the MCP process's own.
Tools name the call to run (`services/spaces/calls.py`), so they work the same in every mode. `caller_of`
says who is calling from the request's context — fixed over stdio, from the API key over HTTP.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from mcp.server.mcpserver import Context
from opentelemetry import trace

from memoryos.errors import SpaceNotFoundError
from memoryos.space.ops import AddTurns
from memoryos.space.pool import SpaceKey
from memoryos.tracing import space_attributes
from services.mcp.scope import Caller, Defaults, space_key
from services.spaces.calls import OwnerCall
from services.spaces.protocol import Spaces, WritePlan

T = TypeVar("T")

CallerOf = Callable[[Context], Caller]
"""Who is calling, from a request's context."""


@dataclass(frozen=True)
class MemoryAccess:
    spaces: Spaces
    caller_of: CallerOf
    defaults: Defaults
    read_vector_wait_s: float | None = None
    """How long a retrieve waits for vectors (None: until embedded); over HTTP, the API's setting."""

    def key(self, ctx: Context, user_id: str | None, assistant_id: str | None) -> SpaceKey:
        """The space the call reaches; its ids go on the call's span (the MCP SDK's `tools/call <tool>`
        server span), pseudonymised unless allowed."""
        key = space_key(self.caller_of(ctx), self.defaults, user_id, assistant_id)
        span = trace.get_current_span()
        if span.is_recording():
            span.set_attributes(space_attributes(key.tenant, key.user_id, key.assistant_id))
        return key

    async def read(self, key: SpaceKey, call: OwnerCall[T], /, **args: Any) -> T | None:
        """`call` on an existing space; None when there is none (nothing is created)."""
        try:
            return await self.spaces.call(key, call, **args)
        except SpaceNotFoundError:
            return None

    async def change(self, key: SpaceKey, call: OwnerCall[T], /, **args: Any) -> T:
        """`call` on an existing space (edits, deletes); `SpaceNotFoundError` when there is none."""
        return await self.spaces.call(key, call, **args)

    async def write(self, key: SpaceKey, plan: WritePlan) -> tuple[AddTurns, list[int]]:
        """A write, creating the space on first use (`BackpressureError` over the bound)."""
        return await self.spaces.write(key, plan)
