"""`memoryos mcp --api-url URL --api-key KEY` over stdio, driven by the SDK's client: a thin client of a
running API (uvicorn on a free port). The MCP process opens no store of its own; the API's key decides
the tenant and the user binding."""

import json
import sys
from collections.abc import Iterator

import pytest
from anyio.from_thread import start_blocking_portal
from mcp import Client, StdioServerParameters

from services.api.settings import ApiSettings
from tests.integration.test_mcp_stdio import REPO, error_text, ok, server_env
from tests.support.api_server import RunningApi, offline_config, running_api
from tests.support.fakes import HashEmbedder
from tests.support.mcp_session import McpSession

pytestmark = pytest.mark.integration

KEY = "key-of-acme-0123456789"


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningApi]:
    settings = ApiSettings(port=0, keys={KEY: "acme"}, preload_model=False)
    data_dir = tmp_path_factory.mktemp("remote-api")
    with running_api(settings, offline_config(data_dir), embedder=HashEmbedder()) as running:
        yield running


@pytest.fixture(scope="module")
def mcp(api: RunningApi, tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpSession]:
    local_dir = tmp_path_factory.mktemp("mcp-local") / "never-created"
    args = ["-m", "memoryos.cli.main", "--data-dir", str(local_dir), "mcp", "--user", "maya"]
    params = StdioServerParameters(
        command=sys.executable,
        args=[*args, "--api-url", api.url, "--api-key", KEY],
        env=server_env(),
        cwd=str(REPO),
    )
    with (
        start_blocking_portal() as portal,
        portal.wrap_async_context_manager(Client(params, mode="legacy")) as client,
    ):
        yield McpSession(portal, client, local_dir, 0.0)


def test_tools_reach_the_api_under_its_key(mcp: McpSession, api: RunningApi) -> None:
    added = ok(mcp.tool("add_memory", user_input="My sister Ada lives in Porto.", agent_response="Nice!"))
    assert added["details"]["user_id"] == "maya" and isinstance(added["details"]["page_id"], int)
    found = ok(mcp.tool("retrieve_memory", query="Where does Ada live?"))
    pages = found["short_term_memory"] + found["retrieved_pages"]
    assert found["space_exists"] and any("Porto" in page["user_input"] for page in pages)
    assert (api.data_dir / "acme" / "maya").is_dir()  # stored by the API, in the key's tenant
    assert not mcp.data_dir.exists()  # the MCP process opened no store of its own
    stats = json.loads(mcp.resource("memoryos://users/maya/stats"))
    assert stats["space_exists"] and stats["short_term_pages"] >= 1


def test_an_unknown_user_reads_empty_and_errors_keep_the_server_up(mcp: McpSession) -> None:
    assert ok(mcp.tool("retrieve_memory", query="anything", user_id="nobody"))["space_exists"] is False
    assert ok(mcp.tool("get_user_profile", user_id="nobody"))["space_exists"] is False
    missing = mcp.tool("delete_memory", page_id=424242)
    assert "424242" in error_text(missing)  # the API's own message, as a tool error
    assert ok(mcp.tool("retrieve_memory", query="Ada"))["space_exists"]  # still answering
    forgotten = ok(mcp.tool("forget_user", confirm=True))
    assert forgotten["user_id"] == "maya"
    assert ok(mcp.tool("retrieve_memory", query="Ada"))["space_exists"] is False
