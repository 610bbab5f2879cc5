"""Who a call may reach: a caller bound to one user reaches that user only, whatever `user_id` a tool call
or a resource URI names; the tenant is the caller's. In process (the SDK's client on the server object),
with a hashing embedder: this is about scoping, not retrieval quality."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from anyio.from_thread import start_blocking_portal
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult

from memoryos import MemoryConfig
from services.api.settings import ApiSettings
from services.mcp.access import MemoryAccess
from services.mcp.scope import Caller, Defaults
from services.mcp.server import build_server
from services.spaces.embedded import EmbeddedSpaces
from tests.support.fakes import HashEmbedder
from tests.support.mcp_session import McpSession

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def bound(tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpSession]:
    """A server whose every caller is tenant 'clinic', bound to user 'maya' (as an API key bound to her)."""
    data_dir = tmp_path_factory.mktemp("mcp-scope")
    config = MemoryConfig(data_dir=data_dir, openai_api_key=None, openai_base_url=None)
    spaces = EmbeddedSpaces(config, ApiSettings(preload_model=False), embedder=HashEmbedder())
    access = MemoryAccess(spaces, lambda _ctx: Caller("clinic", "maya"), Defaults(user_id="ola"))
    server = build_server(access)
    with (
        start_blocking_portal() as portal,
        portal.wrap_async_context_manager(Client(server, mode="legacy")) as client,
    ):
        yield McpSession(portal, client, data_dir, 0.0)
    spaces.close()


def ok(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


def test_calls_without_a_user_reach_the_bound_user_not_the_servers_default(bound: McpSession) -> None:
    added = ok(bound.tool("add_memory", user_input="I take insulin at 8.", agent_response="Noted."))
    assert added["details"]["user_id"] == "maya"
    assert (Path(bound.data_dir) / "clinic" / "maya").is_dir()
    assert not (Path(bound.data_dir) / "default").exists()


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("add_memory", {"user_input": "x", "agent_response": "y", "user_id": "ola"}),
        ("retrieve_memory", {"query": "insulin", "user_id": "ola"}),
        ("get_user_profile", {"user_id": "ola"}),
        ("delete_memory", {"page_id": 1, "user_id": "ola"}),
        ("forget_user", {"confirm": True, "user_id": "ola"}),
    ],
)
def test_a_call_naming_another_user_is_refused(
    bound: McpSession, tool: str, arguments: dict[str, Any]
) -> None:
    result = bound.tool(tool, **arguments)
    assert result.is_error
    assert "may reach user 'maya' only" in getattr(result.content[0], "text", "")
    assert not (Path(bound.data_dir) / "clinic" / "ola").exists()


def test_a_resource_of_another_user_is_refused(bound: McpSession) -> None:
    with pytest.raises(MCPError, match="may reach user 'maya' only"):
        bound.resource("memoryos://users/ola/stats")
    assert '"user_id": "maya"' in bound.resource("memoryos://users/maya/stats")
