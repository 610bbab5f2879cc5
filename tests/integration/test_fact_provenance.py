"""Every read that returns a fact says which pages it came from (issue 37): `Memoryos.retrieve`, a space
imported from a bundle, the HTTP API's retrieve and facts routes, and the MCP tools and resource (over
the API's streamable HTTP endpoint, with the SDK's client).

Facts come from MemoryOS's own prompts answered by the stub server's `MEMORY_TASK_RULES`: every page
files into one topic segment and every analysis extracts the same two facts, so each fact stands on
exactly the pages filed into mid-term memory (those with a segment)."""

import json
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from anyio.from_thread import start_blocking_portal
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from memoryos import MemoryConfig, Memoryos
from memoryos.eval.stub_llm_server import MEMORY_TASK_RULES, StubLLMServer
from memoryos.portability.bundles import export_space, import_space
from services.api.settings import ApiSettings
from tests.support.api_server import RunningApi, running_api
from tests.support.fakes import FakeClock, HashEmbedder
from tests.support.mcp_session import McpSession

pytestmark = pytest.mark.integration

TURNS = [
    ("My friend Sam and I went hiking.", "Sounds fun!"),
    ("Sam is moving to Porto next month.", "You will miss him."),
    ("We plan to visit him in June.", "Porto is lovely in June."),
    ("I bought the train tickets already.", "Great planning."),
    ("Sam says the weather there is mild.", "Pack light then."),
]
QUERY = "Does the user have a close friend?"
TENANT_KEY = {"Authorization": "Bearer key-acme"}


@pytest.fixture(scope="module")
def llm_server() -> Iterator[StubLLMServer]:
    with StubLLMServer(rules=MEMORY_TASK_RULES) as server:
        yield server


def config(data_dir: Path, llm_server: StubLLMServer) -> MemoryConfig:
    """A local LLM server by base URL, short-term memory of 2 (three of five turns file mid-term), every
    fact retrieved whatever its score."""
    return MemoryConfig(
        data_dir=data_dir,
        openai_api_key=None,
        openai_base_url=llm_server.base_url,
        llm_max_retries=0,
        faiss_use_gpu="never",
        short_term_capacity=2,
        knowledge_min_score=-1.0,
        llm_guards="off",  # the canned facts are not about these turns: the guards would refuse them
    )


def filed(pages: list[dict[str, Any]]) -> list[int]:
    """The pages analyzed into facts: those filed into a mid-term segment."""
    return sorted(page["page_id"] for page in pages if page["segment_id"] is not None)


def retrieved_sources(context: dict[str, Any]) -> dict[str, list[int]]:
    facts = context["retrieved_user_knowledge"] + context["retrieved_assistant_knowledge"]
    return {fact["knowledge"]: fact["source_page_ids"] for fact in facts}


def test_retrieve_returns_each_facts_source_pages_also_after_a_bundle_import(
    tmp_path: Path, llm_server: StubLLMServer
) -> None:
    cfg = config(tmp_path / "source", llm_server)
    memory = Memoryos.from_config("ana", cfg, embedder=HashEmbedder(), clock=FakeClock())
    for user_input, agent_response in TURNS:
        memory.add_memory(user_input, agent_response)
    memory.force_mid_term_analysis()
    pages = filed([page.model_dump() for page in memory.list_pages().pages])
    assert pages, "nothing was filed mid-term"
    expected = {"The user has a close friend.": pages, "The assistant listened to the user.": pages}
    assert retrieved_sources(memory.retrieve(QUERY).model_dump()) == expected
    memory.close()

    bundle = tmp_path / "ana.bundle"
    export_space(cfg, "ana", memory.assistant_id, bundle)
    target = config(tmp_path / "target", llm_server)
    import_space(target, "bea", "helper", bundle, embedder=HashEmbedder())
    imported = Memoryos.from_config(
        "bea", target, assistant_id="helper", embedder=HashEmbedder(), clock=FakeClock()
    )
    assert retrieved_sources(imported.retrieve(QUERY).model_dump()) == expected
    imported.close()


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory, llm_server: StubLLMServer) -> Iterator[RunningApi]:
    """The API, with one space (acme's "ana" / "bot") written and consolidated through it."""
    settings = ApiSettings(keys={"key-acme": "acme"}, port=0, preload_model=False)
    cfg = config(tmp_path_factory.mktemp("provenance-api"), llm_server)
    with (
        running_api(settings, cfg, embedder=HashEmbedder()) as running,
        httpx.Client(headers=TENANT_KEY, timeout=60) as http,
    ):
        space = running.space_url("ana", "bot")
        for user_input, agent_response in TURNS:
            written = http.post(
                f"{space}/memories", json={"user_input": user_input, "agent_response": agent_response}
            )
            assert written.status_code == 201, written.text
        assert http.post(f"{space}/consolidate").status_code == 204
        yield running


@pytest.fixture(scope="module")
def expected(api: RunningApi) -> dict[str, list[int]]:
    """Each fact's source pages as the page listing shows them."""
    listed = httpx.get(f"{api.space_url('ana', 'bot')}/memories", headers=TENANT_KEY, timeout=60)
    pages = filed(listed.json()["pages"])
    assert pages, "nothing was filed mid-term"
    return {"The user has a close friend.": pages, "The assistant listened to the user.": pages}


def test_the_api_retrieve_and_facts_routes_return_each_facts_source_pages(
    api: RunningApi, expected: dict[str, list[int]]
) -> None:
    space = api.space_url("ana", "bot")
    with httpx.Client(headers=TENANT_KEY, timeout=60) as http:
        found = http.post(f"{space}/retrieve", json={"query": QUERY})
        assert found.status_code == 200, found.text
        assert retrieved_sources(found.json()) == expected
        listed = [*http.get(f"{space}/facts", params={"kind": "user"}).json()]
        listed += http.get(f"{space}/facts", params={"kind": "assistant"}).json()
        assert {fact["knowledge"]: fact["source_page_ids"] for fact in listed} == expected
        for fact in listed:
            one = http.get(f"{space}/facts/{fact['entry_id']}").json()
            assert one["source_page_ids"] == expected[fact["knowledge"]]


@pytest.fixture(scope="module")
def mcp(api: RunningApi) -> Iterator[McpSession]:
    with ExitStack() as stack:
        portal = stack.enter_context(start_blocking_portal())
        http = httpx2.AsyncClient(headers=TENANT_KEY, timeout=60)
        client = Client(streamable_http_client(f"{api.url}/mcp", http_client=http), mode="legacy")
        yield McpSession(
            portal, stack.enter_context(portal.wrap_async_context_manager(client)), api.data_dir, 0.0
        )


def structured(session: McpSession, tool: str, **arguments: Any) -> dict[str, Any]:
    result = session.tool(tool, user_id="ana", assistant_id="bot", **arguments)
    assert not result.is_error and result.structured_content is not None, result.content
    return result.structured_content


def test_the_mcp_retrieve_tool_returns_each_facts_source_pages(
    mcp: McpSession, expected: dict[str, list[int]]
) -> None:
    assert retrieved_sources(structured(mcp, "retrieve_memory", query=QUERY)) == expected


def test_the_mcp_profile_tool_returns_each_facts_source_pages(
    mcp: McpSession, expected: dict[str, list[int]]
) -> None:
    profile = structured(mcp, "get_user_profile", include_knowledge=True, include_assistant_knowledge=True)
    facts = profile["user_knowledge"] + profile["assistant_knowledge"]
    assert {fact["knowledge"]: fact["source_page_ids"] for fact in facts} == expected


def test_the_mcp_profile_resource_returns_each_facts_source_pages(
    mcp: McpSession, expected: dict[str, list[int]]
) -> None:
    profile = json.loads(mcp.resource("memoryos://users/ana/assistants/bot/profile"))
    facts = profile["user_knowledge"] + profile["assistant_knowledge"]
    assert {fact["knowledge"]: fact["source_page_ids"] for fact in facts} == expected
