"""The real-model tier (issue 37): the engine's consolidation, the worker's consolidation (Redis mode) and
`get_response` (the engine's, the API's `/response` and MCP's `get_response` tool) against a real local
model, `bench/llm/local_model.sh` (Qwen2.5-Coder-1.5B-Instruct Q4_K_M on llama.cpp's `llama-server`),
through a recording proxy that keeps every exchange.

Asserted: structure and bounds, never wording or latency (a 1.5B model on one thread of a shared 2-core
machine runs at 2-15 tokens/s) — every request carries its task's `max_tokens` and temperature; every reply
ends with `finish_reason` "stop" or "length" within its cap; a reply asked for JSON with `response_format`
and ended by "stop" is valid JSON; every stored fact names source pages that exist; no more requests in
flight than the server has slots. The figures (calls, the largest completion per task against its cap,
guard refusals, wall time) are printed, for docs/evaluation.md ("Real-model tier").

Not run in CI (the server takes 15-23 min to build); skipped unless MEMORYOS_REAL_LLM_URL names a running
server (MEMORYOS_REAL_LLM_SLOTS: its `--parallel` slots, default 1)."""

import json
import os
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from memoryos import MemoryConfig, Memoryos
from memoryos.eval.locomo import load_conversations
from memoryos.eval.stub_llm_server import MEMORY_TASK_RULES
from memoryos.llm.openai_client import REASK_TEMPERATURE, call_bounds
from memoryos.llm.usage import Operation
from memoryos.planning.guards import REFUSALS, Rule
from services.api.settings import ApiSettings
from services.queue.settings import QueueSettings
from tests.support.api_server import RunningApi, running_api
from tests.support.fakes import HashEmbedder
from tests.support.locomo_data import SKIP_REASON, locomo_source
from tests.support.mcp_session import http_session
from tests.support.queue_worker import Running
from tests.support.recording_llm_proxy import Exchange, RecordingProxy
from tests.support.redis_server import running_redis

URL = os.environ.get("MEMORYOS_REAL_LLM_URL")
SLOTS = int(os.environ.get("MEMORYOS_REAL_LLM_SLOTS", "1"))
if not URL:
    pytest.skip(
        "no local model: run `bench/llm/local_model.sh serve 2 8088` and set "
        "MEMORYOS_REAL_LLM_URL=http://127.0.0.1:8088/v1 MEMORYOS_REAL_LLM_SLOTS=2",
        allow_module_level=True,
    )

pytestmark = [pytest.mark.integration, pytest.mark.real_llm, pytest.mark.locomo]

TURNS = 6
"""LoCoMo turns written per test: with short-term memory of 2, four are filed and analysed."""
MEMORY_CAP = 512
"""The profile and facts caps of this tier, below the engine's 2048: four turns need far less, and a reply
looping to 2048 tokens at the 2-5 tokens/s of a busy machine would hold a slot for ten minutes."""
QUESTION = "What did Caroline go to, and how did she feel about it?"
MEMORY_TASKS: tuple[Operation, ...] = ("continuity", "chain_summary", "topic", "profile", "knowledge")
TASK_MARKERS: dict[str, Operation] = {
    marker: task for (marker, _), task in zip(MEMORY_TASK_RULES, MEMORY_TASKS, strict=True)
}
FIGURES: list[dict[str, Any]] = []


def turns() -> list[tuple[str, str, str]]:
    source = locomo_source()
    if source is None:
        pytest.skip(SKIP_REASON)
    pairs = load_conversations(source, ["conv-26"])[0].pairs[:TURNS]
    return [(p.user_input, p.agent_response, p.timestamp) for p in pairs]


def real_config(data_dir: Path, base_url: str) -> MemoryConfig:
    return MemoryConfig(
        data_dir=data_dir,
        openai_api_key=None,
        openai_base_url=base_url,
        llm_model="local",
        llm_max_concurrency=SLOTS,  # as many calls in flight as the server has slots
        llm_timeout_s=900,  # a busy machine slows the model to ~2 tokens/s: never a latency assertion
        llm_max_retries=0,
        faiss_use_gpu="never",
        short_term_capacity=2,
        mid_term_heat_threshold=1000.0,  # analysed when forced, not on its own meanwhile
        llm_max_tokens_profile=MEMORY_CAP,
        llm_max_tokens_knowledge=MEMORY_CAP,
    )


def task_of(request: dict[str, Any]) -> Operation:
    text = json.dumps(request["messages"])
    return next((task for marker, task in TASK_MARKERS.items() if marker in text), "answer")


def check_exchanges(exchanges: list[Exchange], config: MemoryConfig) -> dict[str, Any]:
    """Every exchange within its task's bounds; the figures of the run."""
    bounds = call_bounds(config)
    largest: dict[Operation, int] = {}
    calls: dict[Operation, int] = {}
    for exchange in exchanges:
        task = task_of(exchange.request)
        cap = bounds[task].max_tokens
        assert exchange.status == 200, exchange.response
        assert exchange.request["max_tokens"] == cap, task
        assert exchange.request["temperature"] in (bounds[task].temperature, REASK_TEMPERATURE), task
        choice = exchange.response["choices"][0]
        completion = exchange.response["usage"]["completion_tokens"]
        assert choice["finish_reason"] in ("stop", "length"), task
        assert completion <= cap, (task, completion, cap)
        if "response_format" in exchange.request and choice["finish_reason"] == "stop":
            assert isinstance(json.loads(choice["message"]["content"]), dict), task
        largest[task] = max(largest.get(task, 0), completion)
        calls[task] = calls.get(task, 0) + 1
    return {
        "calls": calls,
        "largest_completion_vs_cap": {t: f"{largest[t]}/{bounds[t].max_tokens}" for t in largest},
        "cut_at_cap": sum(e.response["choices"][0]["finish_reason"] == "length" for e in exchanges),
    }


def check_facts(facts: list[dict[str, Any]], page_ids: set[int]) -> None:
    for fact in facts:
        assert fact["source_page_ids"], fact["entry_id"]
        assert set(fact["source_page_ids"]) <= page_ids, fact["entry_id"]


@pytest.fixture
def proxy() -> Iterator[RecordingProxy]:
    assert URL is not None
    with RecordingProxy(URL) as running:
        yield running


@pytest.fixture(scope="module", autouse=True)
def report() -> Iterator[None]:
    yield
    for figures in FIGURES:
        print(json.dumps(figures))


def record(
    name: str, proxy: RecordingProxy, config: MemoryConfig, started: float, before: dict[Rule, int]
) -> None:
    figures = check_exchanges(proxy.exchanges, config)
    after = REFUSALS.snapshot()
    refused = {rule: n - before.get(rule, 0) for rule, n in after.items() if n - before.get(rule, 0)}
    assert proxy.max_in_flight <= SLOTS
    FIGURES.append(
        {
            "test": name,
            **figures,
            "max_in_flight": proxy.max_in_flight,
            "slots": SLOTS,
            "guard_refusals": refused,
            "wall_s": round(time.monotonic() - started),
        }
    )


def test_the_engines_consolidation_and_answer_stay_within_bounds(
    tmp_path: Path, proxy: RecordingProxy
) -> None:
    started, before = time.monotonic(), REFUSALS.snapshot()
    config = real_config(tmp_path, proxy.base_url)
    memory = Memoryos.from_config("caroline", config, embedder=HashEmbedder())
    for user_input, agent_response, timestamp in turns():
        memory.add_memory(user_input, agent_response, timestamp=timestamp)
    memory.force_mid_term_analysis()
    page_ids = {page.page_id for page in memory.list_pages().pages}
    facts = [f.model_dump() for kind in ("user", "assistant") for f in memory.space.knowledge(kind)]
    check_facts(facts, page_ids)
    assert memory.get_response(QUESTION).strip()
    memory.close()
    record("engine", proxy, config, started, before)


@pytest.fixture
def worker_api(tmp_path: Path, proxy: RecordingProxy) -> Iterator[tuple[RunningApi, MemoryConfig]]:
    """The API in Redis mode in front of a worker whose spaces call the model through the proxy."""
    config = real_config(tmp_path / "data", proxy.base_url)
    with running_redis(tmp_path / "redis") as redis:
        queue = QueueSettings(
            redis_url=redis.url, redis_namespace="real-llm", shard_count=1, read_timeout_s=900
        )
        worker = Running(queue, config, "w-real-llm", embedder=HashEmbedder(), llm=None)
        try:
            with running_api(ApiSettings(port=0), config, queue=queue) as running:
                yield running, config
        finally:
            worker.stop()


def test_the_workers_consolidation_and_response_stay_within_bounds(
    worker_api: tuple[RunningApi, MemoryConfig], proxy: RecordingProxy
) -> None:
    started, before = time.monotonic(), REFUSALS.snapshot()
    running, config = worker_api
    space = running.space_url("caroline")
    with httpx.Client(timeout=900) as http:
        for user_input, agent_response, timestamp in turns():
            turn = {"user_input": user_input, "agent_response": agent_response, "timestamp": timestamp}
            assert http.post(f"{space}/memories", json=turn).status_code == 201
        forced = http.post(f"{space}/consolidate")
        assert forced.status_code == 204, forced.text
        page_ids = {page["page_id"] for page in http.get(f"{space}/memories").json()["pages"]}
        facts = http.get(f"{space}/facts").json() + http.get(f"{space}/facts?kind=assistant").json()
        check_facts(facts, page_ids)
        answered = http.post(f"{space}/response", json={"query": QUESTION})
        assert answered.status_code == 200 and answered.json()["response"].strip(), answered.text
    with ExitStack() as stack:  # the same answer path as an MCP client reaches it
        mcp = http_session(running.url, running.data_dir, stack)
        result = mcp.tool("get_response", query=QUESTION, user_id="caroline")
        assert not result.is_error and result.structured_content is not None, result.content
        assert result.structured_content["response"].strip()
    record("worker (Redis mode) + API /response + MCP get_response", proxy, config, started, before)
