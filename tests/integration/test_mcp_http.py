"""MCP over streamable HTTP at the API's `/mcp` (uvicorn on a free port), driven by the SDK's client: the
API's Bearer keys decide the tenant, and no tool argument can reach another tenant's memory."""

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp_types import CallToolResult

from services.api.settings import ApiSettings
from tests.support.api_server import RunningApi, offline_config, running_api
from tests.support.mcp_session import McpSession, http_session

pytestmark = pytest.mark.integration

KEYS = {"key-acme": "acme", "key-globex": "globex"}


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningApi]:
    settings = ApiSettings(keys=KEYS, port=0, preload_model=False)
    with running_api(settings, offline_config(tmp_path_factory.mktemp("mcp-http"))) as running:
        yield running


def connect(api: RunningApi, key: str, stack: ExitStack) -> McpSession:
    return http_session(api.url, api.data_dir, stack, key)


@pytest.fixture(scope="module")
def tenants(api: RunningApi) -> Iterator[tuple[McpSession, McpSession]]:
    with ExitStack() as stack:
        yield connect(api, "key-acme", stack), connect(api, "key-globex", stack)


def ok(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


def test_requests_without_a_valid_key_are_refused_before_mcp(api: RunningApi) -> None:
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        response = httpx.post(f"{api.url}/mcp", json=initialize, headers=headers)
        assert response.status_code == 401 and response.headers["www-authenticate"] == "Bearer"


def test_tools_are_listed_over_http(tenants: tuple[McpSession, McpSession]) -> None:
    acme, _ = tenants
    names = {tool.name for tool in acme.call(acme.client.list_tools).tools}
    assert {"add_memory", "retrieve_memory", "get_user_profile", "forget_user"} <= names


def test_add_then_retrieve_over_http(tenants: tuple[McpSession, McpSession], api: RunningApi) -> None:
    acme, _ = tenants
    added = ok(
        acme.tool("add_memory", user_input="I sail on weekends.", agent_response="Fun!", user_id="maya")
    )
    found = ok(acme.tool("retrieve_memory", query="What do I do on weekends?", user_id="maya"))
    assert any(p["page_id"] == added["details"]["page_id"] for p in found["retrieved_pages"])
    assert (api.data_dir / "acme" / "maya").is_dir()


def test_two_tenants_are_isolated_whatever_the_call_names(
    tenants: tuple[McpSession, McpSession], api: RunningApi
) -> None:
    acme, globex = tenants
    ok(acme.tool("add_memory", user_input="My locker code is 1234.", agent_response="Ok.", user_id="sam"))
    seen = ok(globex.tool("retrieve_memory", query="What is my locker code?", user_id="sam"))
    assert seen["space_exists"] is False and seen["retrieved_pages"] == []
    assert globex.tool("forget_user", confirm=True, user_id="sam").is_error  # globex has no 'sam'
    assert ok(globex.tool("get_user_profile", user_id="sam"))["space_exists"] is False
    stats = globex.resource("memoryos://users/sam/stats")
    assert '"space_exists": false' in stats
    again = ok(acme.tool("retrieve_memory", query="What is my locker code?", user_id="sam"))
    assert any("1234" in p["user_input"] for p in again["retrieved_pages"])
    assert not (api.data_dir / "globex" / "sam").exists()
    assert {path.name for path in Path(api.data_dir).iterdir()} <= set(KEYS.values()) | {
        ".created-by-memoryos"
    }


def test_a_call_needs_a_user_over_http_and_errors_keep_the_server_up(
    tenants: tuple[McpSession, McpSession],
) -> None:
    acme, _ = tenants
    assert acme.tool("retrieve_memory", query="anything").is_error  # no default user over HTTP
    assert acme.tool("retrieve_memory", query="q", max_results=1000, user_id="maya").is_error
    assert ok(acme.tool("get_user_profile", user_id="maya"))["space_exists"] is True
