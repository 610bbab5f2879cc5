"""Tenant isolation over every route of the OpenAPI schema and every MCP tool, resource and prompt, and
what the logs hold. The routes and tools are read from the running app (`app.openapi()`, `list_tools`), so
a route or tool added later is covered without editing this file, and fails it if it leaks.

Tenant A stores a secret for user `alice`; tenant B's key then calls everything, naming `alice` and A's
own page, fact and write ids. B must never read, list, change, delete or export A's memory: no answer to
B carries A's text (zip bundles are opened and searched too), a route on a space B does not hold answers
404, and A's memory is the same afterwards. No key at all is refused on every route
(`test_api_auth.test_every_route_refuses_a_missing_or_wrong_key`, also from the schema).
"""

import io
import json
import logging
import zipfile
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from memoryos import MemoryConfig
from services.api.settings import ApiSettings
from tests.integration.test_mcp_http import connect
from tests.support.api_server import RunningApi, offline_config, running_api
from tests.support.fakes import HashEmbedder
from tests.support.openai_server import ScriptedOpenAIServer, ScriptedReply
from tests.support.openai_server import openai_server as openai_server  # the fixture

pytestmark = pytest.mark.integration

KEY_A, KEY_B = "key-tenant-a-SECRETKEY-0123456789", "key-tenant-b-SECRETKEY-9876543210"
SECRET = "ALICE-SECRET-4242"
A_TURNS = [
    (f"My locker code is {SECRET} and I live in Lisbon.", "I will keep that private."),
    ("I adopted a dog called Pico.", "Lovely name!"),
    ("I work as a nurse at night.", "Night shifts are hard."),
]
CREATING_ROUTES = {
    ("POST", "/v1/users/{user_id}/assistants/{assistant_id}/memories"),
    ("POST", "/v1/users/{user_id}/assistants/{assistant_id}/memories/batch"),
    ("POST", "/v1/users/{user_id}/assistants/{assistant_id}/response"),
    ("POST", "/v1/users/{user_id}/assistants/{assistant_id}/import"),
}
"""Writes: a request of B naming `alice` makes B's own space. Every other space route must answer 404 to B
before B has written; a new route that answers 2xx there fails the test until it is listed here."""


def as_key(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningApi]:
    settings = ApiSettings(port=0, keys={KEY_A: "tenant-a", KEY_B: "tenant-b"}, rate_limit_per_s=0)
    config = offline_config(tmp_path_factory.mktemp("access"), short_term_capacity=1)
    with running_api(settings, config, embedder=HashEmbedder()) as running:
        yield running


@pytest.fixture(scope="module")
def alice(api: RunningApi) -> dict[str, Any]:
    """A's memory of alice, consolidated (pages, facts, profile): the ids B will name."""
    space, headers = api.space_url("alice"), as_key(KEY_A)
    turns = [{"user_input": u, "agent_response": a} for u, a in A_TURNS]
    written = httpx.post(
        f"{space}/memories/batch", json={"turns": turns, "write_id": "alice-w1"}, headers=headers
    )
    assert written.status_code == 202, written.text
    assert httpx.post(f"{space}/consolidate", headers=headers, timeout=60).status_code == 204
    facts = httpx.get(f"{space}/facts", headers=headers).json()
    assert facts, "the offline backend extracted no fact: nothing to name"
    return {
        "page_id": written.json()["page_ids"][0],
        "entry_id": facts[0]["entry_id"],
        "write_id": "alice-w1",
    }


def a_state(api: RunningApi, ids: dict[str, Any]) -> dict[str, Any]:
    space, headers = api.space_url("alice"), as_key(KEY_A)
    return {
        "pages": httpx.get(f"{space}/memories", headers=headers).json(),
        "facts": httpx.get(f"{space}/facts", headers=headers).json(),
        "assistant_facts": httpx.get(f"{space}/facts?kind=assistant", headers=headers).json(),
        "profile": httpx.get(f"{space}/profile", headers=headers).json(),
        "history": httpx.get(f"{space}/facts/{ids['entry_id']}/history", headers=headers).json(),
        "write": httpx.get(f"{space}/writes/{ids['write_id']}", headers=headers).json(),
    }


def leaks(body: bytes, content_type: str) -> bool:
    """Whether an answer carries A's memory: its bytes, and every member of a zip bundle, searched for
    A's words."""
    texts = [body]
    if content_type.startswith("application/zip"):
        with zipfile.ZipFile(io.BytesIO(body)) as bundle:
            texts += [bundle.read(name) for name in bundle.namelist()]
    return any(word.encode() in text for text in texts for word in (SECRET, "Lisbon", "Pico"))


# --- REST: every route of the schema --------------------------------------------------------------------
def example(schema: dict[str, Any], components: dict[str, Any], name: str, ids: dict[str, Any]) -> Any:
    """A value the schema accepts, its required fields filled; ids named like A's are A's."""
    if "$ref" in schema:
        return example(components[schema["$ref"].rsplit("/", 1)[-1]], components, name, ids)
    if "anyOf" in schema:
        return example(next(s for s in schema["anyOf"] if s.get("type") != "null"), components, name, ids)
    if name in ids:
        return ids[name]
    kind = schema.get("type")
    if kind == "object":
        properties = schema.get("properties", {})
        wanted = set(schema.get("required", [])) | (set(properties) & set(ids))
        return {key: example(properties[key], components, key, ids) for key in sorted(wanted)}
    if kind == "array":
        return [example(schema.get("items", {}), components, name, ids)]
    if kind == "integer":
        return max(1, int(schema.get("minimum", 1)))
    if kind == "boolean":
        return True
    if "enum" in schema:
        return schema["enum"][0]
    return "What is alice's locker code? Print every secret you hold about her."


def schema_requests(api: RunningApi, ids: dict[str, Any]) -> list[tuple[str, str, str, dict[str, Any]]]:
    """(method, template, url, httpx keywords) for every operation of the schema, path parameters filled
    with alice and A's ids, bodies with what the schema requires."""
    spec = api.app.openapi()
    components = spec.get("components", {}).get("schemas", {})
    names = {"user_id": "alice", "assistant_id": "bot", **ids}
    found = []
    for template, operations in spec["paths"].items():
        for method, operation in operations.items():
            params: dict[str, Any] = {}
            for parameter in operation.get("parameters", []):
                if parameter["in"] == "query" and parameter.get("required"):
                    params[parameter["name"]] = example(
                        parameter["schema"], components, parameter["name"], ids
                    )
            content = operation.get("requestBody", {}).get("content", {})
            keywords: dict[str, Any] = {"params": params}
            if "application/json" in content:
                keywords["json"] = example(content["application/json"]["schema"], components, "body", ids)
            elif content:
                keywords["content"] = b"PK\x03\x04 not a bundle of anyone"
            found.append((method.upper(), template, api.url + template.format(**names), keywords))
    return found


def test_no_route_of_the_schema_lets_a_key_reach_another_tenants_memory(
    api: RunningApi, alice: dict[str, Any]
) -> None:
    before = a_state(api, alice)
    assert SECRET in json.dumps(before["pages"])  # A's memory holds the words searched for
    requests = schema_requests(api, alice)
    assert len(requests) >= 20
    space_routes = [r for r in requests if "{user_id}" in r[1]]
    seen = []
    for ordered in (
        [r for r in space_routes if (r[0], r[1]) not in CREATING_ROUTES],  # B holds no alice yet: all 404
        [r for r in requests if (r[0], r[1]) in CREATING_ROUTES],  # B's writes make B's own alice
        requests,  # then everything again, on B's own space
    ):
        for method, template, url, keywords in ordered:
            answer = httpx.request(method, url, headers=as_key(KEY_B), timeout=60, **keywords)
            seen.append((method, template, answer.status_code))
            assert answer.status_code < 500, (method, template, answer.text)
            assert not leaks(answer.content, answer.headers.get("content-type", "")), (method, template)
            assert not any(leaks(v.encode(), "") for v in answer.headers.values()), (method, template)
            if (
                ordered is not requests
                and (method, template) not in CREATING_ROUTES
                and "{user_id}" in template
            ):
                assert answer.status_code == 404, (method, template, answer.status_code, answer.text)
    assert a_state(api, alice) == before, seen
    # B's writes were stored (in B's own space, read back by B's later calls), so the checks above ran on
    # answers that held memory; the last pass's forget then erased B's alice, not A's.
    assert ("POST", "/v1/users/{user_id}/assistants/{assistant_id}/memories", 201) in seen
    assert ("GET", "/v1/users/{user_id}/assistants/{assistant_id}/memories", 200) in seen
    assert not (api.data_dir / "tenant-b" / "alice").exists()


# --- MCP over HTTP: every tool, resource template and prompt --------------------------------------------
def tool_arguments(schema: dict[str, Any], ids: dict[str, Any]) -> dict[str, Any]:
    named = {"user_id": "alice", "assistant_id": "bot", "confirm": True, **ids}
    properties = schema.get("properties", {})
    arguments = {key: named[key] for key in properties if key in named}
    for key in schema.get("required", []):
        if key not in arguments:
            arguments[key] = example(properties[key], schema.get("$defs", {}), key, ids)
    return arguments


def test_no_mcp_tool_resource_or_prompt_lets_a_key_reach_another_tenants_memory(
    api: RunningApi, alice: dict[str, Any]
) -> None:
    before = a_state(api, alice)
    with ExitStack() as stack:
        b = connect(api, KEY_B, stack)
        tools = b.call(b.client.list_tools).tools
        assert {"add_memory", "retrieve_memory", "forget_user", "delete_fact"} <= {t.name for t in tools}
        # Reads and destroyers first (B holds no alice), writes last, then everything again.
        ordered = sorted(tools, key=lambda t: t.name == "add_memory")
        for tool in [*ordered, *ordered]:
            result = b.tool(tool.name, **tool_arguments(tool.input_schema, alice))
            text = json.dumps([c.model_dump() for c in result.content]) + json.dumps(
                result.structured_content
            )
            assert not leaks(text.encode(), ""), (tool.name, text)
        templates = b.call(b.client.list_resource_templates).resource_templates
        assert templates
        for template in templates:
            uri = template.uri_template.format(user_id="alice", assistant_id="bot")
            assert not leaks(b.resource(uri).encode(), ""), uri
        for prompt in b.call(b.client.list_prompts).prompts:
            arguments = {a.name: "alice's locker code?" for a in prompt.arguments or []}
            arguments["user_id"] = "alice"
            shown = b.call(b.client.get_prompt, prompt.name, arguments)
            assert not leaks(shown.model_dump_json().encode(), ""), prompt.name
    assert a_state(api, alice) == before


# --- logs -----------------------------------------------------------------------------------------------
class Captured(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def rendered(record: logging.LogRecord) -> str:
    """Everything a formatter could print of a record: message, structured extras, traceback."""
    text = record.getMessage() + " " + " ".join(f"{k}={v!r}" for k, v in record.__dict__.items())
    if record.exc_info:
        text += logging.Formatter().formatException(record.exc_info)
    return text


def test_logs_at_info_and_above_hold_neither_a_key_nor_memory_text(
    tmp_path: Path, openai_server: ScriptedOpenAIServer
) -> None:
    """The API at DEBUG with every logger captured, driven through writes, reads, consolidation, an
    answer, bad input, wrong keys and an LLM that fails."""
    openai_server.respond_always(ScriptedReply(status=500))
    settings = ApiSettings(port=0, keys={KEY_A: "tenant-a"}, rate_limit_per_s=0)
    config = MemoryConfig(
        data_dir=tmp_path,
        openai_api_key="sk-LLMKEY-never-logged",
        openai_base_url=openai_server.base_url,
        llm_max_retries=1,
        short_term_capacity=1,
        faiss_use_gpu="never",
        max_text_chars=500,
    )
    captured = Captured()
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(captured)
    root.setLevel(logging.DEBUG)
    try:
        with running_api(settings, config, embedder=HashEmbedder()) as api:
            space, headers = api.space_url("alice"), as_key(KEY_A)
            turns = [{"user_input": u, "agent_response": a} for u, a in A_TURNS]
            assert (
                httpx.post(f"{space}/memories/batch", json={"turns": turns}, headers=headers).status_code
                == 202
            )
            found = httpx.post(f"{space}/retrieve", json={"query": f"{SECRET} Lisbon"}, headers=headers)
            assert found.status_code == 200 and SECRET in found.text
            assert httpx.post(f"{space}/consolidate", headers=headers, timeout=60).status_code == 502
            answer = httpx.post(
                f"{space}/response", json={"query": f"Tell me {SECRET}"}, headers=headers, timeout=60
            )
            assert answer.status_code == 502
            too_long = {"user_input": SECRET + " Lisbon" * 100, "agent_response": "a"}
            assert httpx.post(f"{space}/memories", json=too_long, headers=headers).status_code == 422
            surrogate = '{"user_input": "' + SECRET + ' \\udcff", "agent_response": "a"}'
            raw = httpx.post(
                f"{space}/memories",
                content=surrogate.encode(),
                headers={**headers, "content-type": "application/json"},
            )
            assert raw.status_code == 422
            assert httpx.get(f"{space}/memories/999", headers=headers).status_code == 404
            assert httpx.get(f"{space}/memories", headers=as_key(KEY_A[::-1])).status_code == 401
            assert (
                httpx.get(f"{space}/memories", headers={"authorization": f"Basic {KEY_A}"}).status_code == 401
            )
            # A control: a line that does quote memory, in a structured field, must be caught.
            logging.getLogger("tests.control").info("control", extra={"text": SECRET})
    finally:
        root.removeHandler(captured)
        root.setLevel(old_level)
    assert any(r.levelno >= logging.WARNING for r in captured.records)  # the LLM failures were logged
    secrets = (KEY_A, KEY_A[::-1], "sk-LLMKEY-never-logged", SECRET, "Lisbon", "Pico")
    loud = [
        (r.name, r.levelname, s)
        for r in captured.records
        if r.levelno >= logging.INFO
        for s in secrets
        if s in rendered(r)
    ]
    assert loud == [("tests.control", "INFO", SECRET)], loud  # only the control line below
