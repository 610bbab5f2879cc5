"""An MCP SDK client held open in a blocking portal, so synchronous tests share one server per module.

The client's async context is entered and left in one task of the portal's event loop (the SDK's task
groups require it); each test calls through the portal.
"""

from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx2
from anyio.from_thread import BlockingPortal, start_blocking_portal
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, TextResourceContents

T = TypeVar("T")


@dataclass
class McpSession:
    portal: BlockingPortal
    client: Client
    data_dir: Path
    initialize_s: float
    """Seconds from starting the client (spawning the server, for stdio) to the handshake's answer."""

    def call(self, method: Callable[..., Awaitable[T]], *args: Any) -> T:
        return self.portal.call(method, *args)

    def tool(self, name: str, **arguments: Any) -> CallToolResult:
        return self.portal.call(self.client.call_tool, name, arguments)

    def resource(self, uri: str) -> str:
        """The text of a resource's first content."""
        content = self.portal.call(self.client.read_resource, uri).contents[0]
        assert isinstance(content, TextResourceContents), content
        return content.text


def http_session(api_url: str, data_dir: Path, stack: ExitStack, key: str | None = None) -> McpSession:
    """A client of the API's `/mcp` over streamable HTTP (with `key` as its Bearer key), open until
    `stack` closes."""
    portal = stack.enter_context(start_blocking_portal())
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    http = httpx2.AsyncClient(headers=headers, timeout=900)
    client = Client(streamable_http_client(f"{api_url}/mcp", http_client=http), mode="legacy")
    return McpSession(portal, stack.enter_context(portal.wrap_async_context_manager(client)), data_dir, 0.0)
