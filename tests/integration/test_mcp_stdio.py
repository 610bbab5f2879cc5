"""`memoryos mcp` over stdio, driven by the MCP SDK's own client: one server process for the module (real
MiniLM, offline LLM, a temporary data directory), as Claude Desktop, Cline or Cursor would spawn it."""

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from anyio.from_thread import start_blocking_portal
from mcp import Client, StdioServerParameters
from mcp_types import CallToolResult

from memoryos.embedding.random_weights import RANDOM_WEIGHTS_MARKER
from tests.support.mcp_session import McpSession

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
REFERENCE_TOOLS = {
    "add_memory": {"user_input", "agent_response", "timestamp", "meta_data"},
    "retrieve_memory": {"query", "relationship_with_user", "style_hint", "max_results"},
    "get_user_profile": {"include_knowledge", "include_assistant_knowledge"},
}


def server_env() -> dict[str, str]:
    """The embedded default whatever this environment says (offline LLM, bundled MiniLM), with the test
    run's model cache, and this checkout importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORYOS_")}
    if "MEMORYOS_MODEL_CACHE_DIR" in os.environ:
        env["MEMORYOS_MODEL_CACHE_DIR"] = os.environ["MEMORYOS_MODEL_CACHE_DIR"]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


@pytest.fixture(scope="module")
def mcp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpSession]:
    data_dir = tmp_path_factory.mktemp("mcp-stdio")
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "memoryos.cli.main", "--data-dir", str(data_dir), "mcp", "--user", "maya"],
        env=server_env(),
        cwd=str(REPO),
    )
    with start_blocking_portal() as portal:
        started = time.perf_counter()
        with portal.wrap_async_context_manager(Client(params, mode="legacy")) as client:
            yield McpSession(portal, client, data_dir, time.perf_counter() - started)


def ok(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


def error_text(result: CallToolResult) -> str:
    assert result.is_error
    return " ".join(getattr(block, "text", "") for block in result.content)


def test_initialize_is_answered_before_the_model_loads(tmp_path: Path) -> None:
    """A server whose embedding model cannot load at all still completes the handshake and lists its
    tools: nothing before `initialize` touches the model (the start-up time itself is measured by
    `python -m bench.serving.mcp`, docs/mcp.md). The first call that needs the model is a tool error, and the
    server keeps answering.

    The model is a directory marked as random weights, which the embedder refuses on first use, before it
    imports anything: a missing directory would be found missing only after PyTorch and
    sentence-transformers are imported (seconds), and would leave a server slower to exit."""
    model = tmp_path / "random-weights"
    model.mkdir()
    (model / RANDOM_WEIGHTS_MARKER).write_text("{}\n")
    env = {**server_env(), "MEMORYOS_EMBEDDING_MODEL_NAME": str(model)}
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "memoryos.cli.main", "--data-dir", str(tmp_path / "data"), "mcp", "--user", "maya"],
        env=env,
        cwd=str(REPO),
    )
    with (
        start_blocking_portal() as portal,
        portal.wrap_async_context_manager(Client(params, mode="legacy")) as client,
    ):
        session = McpSession(portal, client, tmp_path, 0.0)
        assert portal.call(lambda: client.server_info) is not None
        assert "add_memory" in {tool.name for tool in session.call(client.list_tools).tools}
        failed = session.tool("add_memory", user_input="I paint.", agent_response="Nice.")
        assert failed.is_error
        assert "retrieve_memory" in {tool.name for tool in session.call(client.list_tools).tools}


def test_tools_are_listed_with_the_reference_arguments_and_typed_schemas(mcp: McpSession) -> None:
    tools = {tool.name: tool for tool in mcp.call(mcp.client.list_tools).tools}
    assert set(tools) == set(REFERENCE_TOOLS) | {
        "delete_memory",
        "delete_fact",
        "fact_history",
        "forget_user",
        "get_response",
    }
    for name, arguments in REFERENCE_TOOLS.items():
        properties = tools[name].input_schema["properties"]
        assert arguments | {"user_id", "assistant_id"} <= set(properties), name
        assert tools[name].output_schema is not None, name
    add = tools["add_memory"].input_schema
    assert sorted(add["required"]) == ["agent_response", "user_input"]
    retrieve = tools["retrieve_memory"].input_schema["properties"]["max_results"]
    assert (retrieve["type"], retrieve["default"], retrieve["minimum"]) == ("integer", 10, 1)
    assert tools["forget_user"].input_schema["required"] == ["confirm"]
    result_fields = set(tools["retrieve_memory"].output_schema["properties"])  # type: ignore[index]
    assert {"short_term_memory", "short_term_count", "retrieved_pages", "total_pages_found"} <= result_fields


def test_add_then_retrieve_returns_the_exchange_with_its_id_time_and_meta(mcp: McpSession) -> None:
    added = ok(
        mcp.tool(
            "add_memory",
            user_input="My dog is called Pico.",
            agent_response="What a lovely name!",
            timestamp="2026-03-01 10:00:00",
            meta_data={"channel": "desktop"},
        )
    )
    assert (added["status"], added["timestamp"]) == ("success", "2026-03-01 10:00:00")
    assert added["details"]["user_id"] == "maya" and added["details"]["has_meta_data"] is True
    found = ok(mcp.tool("retrieve_memory", query="What is my dog called?", max_results=3))
    assert found["space_exists"] is True and found["user_id"] == "maya"
    page = next(p for p in found["retrieved_pages"] if p["page_id"] == added["details"]["page_id"])
    assert (page["user_input"], page["timestamp"], page["meta_data"]) == (
        "My dog is called Pico.",
        "2026-03-01 10:00:00",
        {"channel": "desktop"},
    )
    assert found["short_term_count"] == len(found["short_term_memory"]) >= 1
    assert found["total_pages_found"] == len(found["retrieved_pages"]) <= 3


def test_get_response_answers_from_memory_and_remembers_the_exchange(mcp: McpSession) -> None:
    ok(mcp.tool("add_memory", user_input="My sister lives in Lisbon.", agent_response="Lovely city!"))
    answered = ok(mcp.tool("get_response", query="Where does my sister live?", style_hint="brief"))
    assert (answered["status"], answered["user_id"]) == ("success", "maya")
    assert "Lisbon" in answered["response"]  # the offline LLM answers from the retrieved exchange
    found = ok(mcp.tool("retrieve_memory", query="Where does my sister live?", max_results=10))
    exchanges = [(p["user_input"], p["agent_response"]) for p in found["short_term_memory"]]
    assert ("Where does my sister live?", answered["response"]) in exchanges


def test_two_users_on_one_server_see_only_their_own_memory(mcp: McpSession) -> None:
    ok(
        mcp.tool(
            "add_memory", user_input="I grow tomatoes on my balcony.", agent_response="Nice.", user_id="ola"
        )
    )
    ola = ok(mcp.tool("retrieve_memory", query="What do I grow?", user_id="ola"))
    assert any("tomatoes" in p["user_input"] for p in ola["retrieved_pages"])
    other = ok(mcp.tool("retrieve_memory", query="What do I grow?", user_id="ines"))
    assert other["space_exists"] is False and other["retrieved_pages"] == other["short_term_memory"] == []
    maya = ok(mcp.tool("retrieve_memory", query="What do I grow on my balcony?"))
    assert not any("tomatoes" in p["user_input"] for p in maya["retrieved_pages"] + maya["short_term_memory"])
    assert not (mcp.data_dir / "default" / "ines").exists()  # a read creates nothing


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("add_memory", {"agent_response": "no user_input"}),
        ("add_memory", {"user_input": "", "agent_response": "empty"}),
        ("retrieve_memory", {"query": "q", "max_results": 0}),
        ("retrieve_memory", {"query": "q", "user_id": "../escape"}),
        ("get_user_profile", {"include_knowledge": "perhaps"}),
        ("delete_memory", {"page_id": "twelve"}),
    ],
)
def test_bad_arguments_are_rejected_as_tool_errors(
    mcp: McpSession, tool: str, arguments: dict[str, Any]
) -> None:
    text = error_text(mcp.tool(tool, **arguments))
    assert "validation error" in text and f"{tool}Arguments" in text  # the input schema's, before any work


def test_the_server_keeps_answering_after_tool_errors(mcp: McpSession) -> None:
    assert "no page with id 999" in error_text(mcp.tool("delete_memory", page_id=999))
    assert "confirm" in error_text(mcp.tool("forget_user", confirm=False))
    assert "no memory for user 'nobody'" in error_text(mcp.tool("fact_history", entry_id=1, user_id="nobody"))
    assert "whitespace" in error_text(mcp.tool("add_memory", user_input="   ", agent_response="x"))
    assert ok(mcp.tool("get_user_profile"))["user_id"] == "maya"


def test_stats_and_profile_resources_read_a_users_space(mcp: McpSession) -> None:
    ok(mcp.tool("add_memory", user_input="I work as a nurse.", agent_response="Noted.", user_id="rui"))
    stats = json.loads(mcp.resource("memoryos://users/rui/stats"))
    assert stats["space_exists"] is True and stats["short_term_pages"] == 1
    assert stats["embedding_model"] == "all-MiniLM-L6-v2"
    profile = json.loads(mcp.resource("memoryos://users/rui/assistants/default_assistant_profile/profile"))
    assert profile["user_id"] == "rui" and "user_knowledge" in profile
    assert json.loads(mcp.resource("memoryos://users/nobody/stats"))["space_exists"] is False
    templates = {t.uri_template for t in mcp.call(mcp.client.list_resource_templates).resource_templates}
    assert "memoryos://users/{user_id}/profile" in templates


def test_the_memory_turn_prompt_names_the_tools_and_carries_the_arguments(mcp: McpSession) -> None:
    prompt = mcp.call(
        mcp.client.get_prompt,
        "memory_turn",
        {"user_message": "Any plans for Sunday?", "relationship_with_user": "coach", "style_hint": "brief"},
    )
    text = prompt.messages[0].content.text  # type: ignore[union-attr]
    assert "Any plans for Sunday?" in text and "coach" in text and "brief" in text
    assert "retrieve_memory" in text and "add_memory" in text


def test_delete_and_forget_act_on_the_named_user_only(mcp: McpSession) -> None:
    page_id = ok(mcp.tool("add_memory", user_input="My PIN is 4711.", agent_response="Ok.", user_id="lea"))[
        "details"
    ]["page_id"]
    ok(mcp.tool("add_memory", user_input="I like jazz.", agent_response="Cool.", user_id="lea"))
    deleted = ok(mcp.tool("delete_memory", page_id=page_id, user_id="lea"))
    assert deleted["deleted"]["page_ids"] == [page_id]
    left = ok(mcp.tool("retrieve_memory", query="What is my PIN?", user_id="lea"))
    assert all("4711" not in p["user_input"] for p in left["retrieved_pages"] + left["short_term_memory"])
    assert "no page" in error_text(mcp.tool("delete_memory", page_id=page_id, user_id="lea"))
    ok(mcp.tool("forget_user", confirm=True, user_id="lea"))
    assert not (mcp.data_dir / "default" / "lea").exists()
    assert ok(mcp.tool("retrieve_memory", query="jazz", user_id="lea"))["space_exists"] is False
    assert ok(mcp.tool("retrieve_memory", query="dog"))["space_exists"] is True  # maya untouched


def test_a_second_server_on_the_same_data_directory_shares_the_memory(mcp: McpSession) -> None:
    """Two clients (say Claude Desktop and Cursor) each spawn `memoryos mcp` on one data directory."""
    ok(mcp.tool("add_memory", user_input="My sister is called Ana.", agent_response="Nice.", user_id="tom"))
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "memoryos.cli.main", "--data-dir", str(mcp.data_dir), "mcp", "--user", "tom"],
        env=server_env(),
        cwd=str(REPO),
    )
    with (
        start_blocking_portal() as portal,
        portal.wrap_async_context_manager(Client(params, mode="legacy")) as c,
    ):
        other = McpSession(portal, c, mcp.data_dir, 0.0)
        seen = ok(other.tool("retrieve_memory", query="What is my sister called?"))
        assert any("Ana" in p["user_input"] for p in seen["retrieved_pages"])
        ok(other.tool("add_memory", user_input="Ana lives in Porto.", agent_response="Lovely city."))
        refused = error_text(other.tool("forget_user", confirm=True))  # the first server has it open
        assert "memory space of user 'tom'" in refused and "is open in process" in refused
        assert str(mcp.data_dir) not in refused
        assert ok(other.tool("get_user_profile"))["space_exists"] is True
    back = ok(mcp.tool("retrieve_memory", query="Where does Ana live?", user_id="tom"))
    assert any("Porto" in p["user_input"] for p in back["retrieved_pages"] + back["short_term_memory"])


def test_stdout_carries_only_protocol_even_with_verbose_logging(tmp_path: Path) -> None:
    """The raw stream: every stdout line is a JSON-RPC message; log lines (INFO with --verbose, the model
    loading on the first call) go to stderr."""
    command = [
        sys.executable,
        "-m",
        "memoryos.cli.main",
        "--verbose",
        "--data-dir",
        str(tmp_path),
        "mcp",
        "--user",
        "kim",
    ]
    messages = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "0"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {
                "name": "add_memory",
                "arguments": {"user_input": "I paint.", "agent_response": "Nice."},
            },
        },
    ]
    with subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=server_env(),
        cwd=REPO,
    ) as server:
        assert server.stdin is not None and server.stdout is not None
        server.stdin.write((json.dumps(messages[0]) + "\n").encode())
        server.stdin.flush()
        first = json.loads(server.stdout.readline())
        server.stdin.write("".join(json.dumps(m) + "\n" for m in messages[1:]).encode())
        server.stdin.flush()
        reply = server.stdout.readline()  # the add: the model loads now, logging on stderr meanwhile
        server.stdin.close()  # EOF: the server closes its spaces and exits
        rest, stderr = reply + server.stdout.read(), server.stderr.read() if server.stderr else b""
        assert server.wait(60) == 0
    assert first["id"] == 1 and first["result"]["serverInfo"]["name"] == "memoryos"
    replies = [json.loads(line) for line in rest.decode().splitlines()]
    assert [reply.get("id") for reply in replies] == [2] and not replies[0]["result"]["isError"]
    assert b"memoryos" in stderr  # --verbose logged, and not on stdout
