"""Traces end to end, received for real: each process under test exports with the SDK's own OTLP/HTTP
exporter to `tests/support/otlp_receiver.py`, which decodes the protobuf with the official messages.

Tracing is process-wide in OpenTelemetry (one provider, set once), so every process that traces here is
a child process configured by the standard variables, as a deployment is: `memoryos serve` itself (its
entry point turns tracing on), and a short script for the LLM calls. The tests process never installs a
provider (tests/unit/test_tracing_rules.py checks what tracing off leaves behind).
"""

import hashlib
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from bench.serving.api import serve_command
from tests.support.mcp_session import http_session
from tests.support.openai_server import ScriptedOpenAIServer, ScriptedReply
from tests.support.openai_server import openai_server as openai_server  # the fixture
from tests.support.otlp_receiver import OtlpReceiver, ReceivedSpan
from tests.support.redis_server import free_port, running_redis

pytestmark = pytest.mark.integration

SECRET = "lemon orchard behind the mill"
"""Memory text the tests write and ask for: it must appear in no span's attribute."""
USER = "alice@example.com"
"""A user id that is an e-mail address: spans carry its pseudonym, never itself."""
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
SERVER_SPAN, CLIENT_SPAN, CONSUMER_SPAN = 2, 3, 5


def pseudonym(value: str) -> str:
    """The default (unkeyed) pseudonym, computed apart from the code under test."""
    return hashlib.sha256(value.encode()).hexdigest()[:16]


def tracing_env(receiver: OtlpReceiver, **extra: str) -> dict[str, str]:
    """The process's environment with tracing pointed at `receiver`, batches sent every 50 ms, and no
    LLM endpoint or tracing setting inherited from the machine."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("OTEL_", "MEMORYOS_", "OPENAI_"))
    }
    return {
        **env,
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "50",
        **extra,
    }


def values(span: ReceivedSpan) -> Iterator[str]:
    for value in span.attributes.values():
        yield from (str(item) for item in value) if isinstance(value, list) else [str(value)]


def assert_no_memory_text(spans: list[ReceivedSpan]) -> None:
    for span in spans:
        for value in values(span):
            assert "lemon orchard" not in value, (span.name, value)
            assert USER not in value, (span.name, value)


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as running:
        yield running


@pytest.fixture(scope="module")
def served_api(receiver: OtlpReceiver, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`memoryos serve` (embedded, offline LLM) in a child process, tracing to `receiver`."""
    data_dir = tmp_path_factory.mktemp("traced-api")
    port = free_port()
    env = tracing_env(receiver, MEMORYOS_API_PRELOAD_MODEL="false")
    log = data_dir / "serve.log"  # a file, not a pipe nobody drains while the tests run
    server = subprocess.Popen(
        serve_command(data_dir, port), env=env, stdout=subprocess.DEVNULL, stderr=log.open("wb")
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert server.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "memoryos serve did not become ready"
            time.sleep(0.1)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_api_requests_and_mcp_tool_calls_are_server_spans_without_memory_text(
    served_api: str, receiver: OtlpReceiver
) -> None:
    space = f"{served_api}/v1/users/{USER}/assistants/bot"
    caller = {"traceparent": f"00-{TRACE_ID}-00f067aa0ba902b7-01"}
    written = httpx.post(
        f"{space}/memories", json={"user_input": f"My {SECRET}.", "agent_response": "Noted."}, headers=caller
    )
    assert written.status_code == 201, written.text
    # A query string holding memory text: the instrumentation records the URL, the hook redacts it.
    httpx.get(f"{space}/memories", params={"note": SECRET})
    with ExitStack() as stack:
        mcp = http_session(served_api, Path(), stack)
        added = mcp.tool("add_memory", user_id=USER, user_input=f"Also the {SECRET}.", agent_response="Ok.")
        assert not added.is_error, added.content

    def arrived(spans: list[ReceivedSpan]) -> bool:
        names = {span.name for span in spans}
        return {
            "POST /v1/users/{user_id}/assistants/{assistant_id}/memories",
            "tools/call add_memory",
        } <= names

    spans = receiver.wait_for(arrived)
    (write,) = [s for s in spans if s.name == "POST /v1/users/{user_id}/assistants/{assistant_id}/memories"]
    assert write.kind == SERVER_SPAN and write.service_name == "memoryos-api"
    assert write.trace_id == TRACE_ID and write.parent_span_id == "00f067aa0ba902b7"  # the caller's trace
    assert write.attributes["http.status_code"] == 201
    assert write.attributes["memoryos.user.id"] == pseudonym(USER)
    assert (
        write.attributes["http.target"]
        == f"/v1/users/{pseudonym(USER)}/assistants/{pseudonym('bot')}/memories"
    )
    (tool,) = [s for s in spans if s.name == "tools/call add_memory"]
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
    assert tool.attributes["gen_ai.memory.store.id"] == pseudonym(f"default/{USER}/default_assistant_profile")
    assert tool.attributes["memoryos.tenant.id"] == pseudonym("default")
    assert not [s for s in spans if "/healthz" in s.name or "/readyz" in s.name]  # probes make no span
    assert receiver.refused == []
    assert_no_memory_text(spans)


LLM_SCRIPT = textwrap.dedent(
    """
    import logging, sys
    from memoryos import MemoryConfig
    from memoryos.llm.openai_backend import OpenAILLM
    from memoryos.tracing import configure_tracing, current_carrier, links_to, tracer
    from memoryos.types import Page

    logging.basicConfig(level=logging.WARNING, format="%(message)s", stream=sys.stderr)
    assert configure_tracing("memoryos-llm-test")
    llm = OpenAILLM(MemoryConfig(openai_base_url=sys.argv[1], openai_api_key=None, llm_model="tiny-model"))
    with tracer().start_as_current_span("consolidation pass"):
        llm.summarize_chain([Page(page_id=1, user_input="My lemon orchard behind the mill.", agent_response="Nice.", timestamp="2026-01-01 10:00:00")])
        logging.warning("pass done")
    carriers = []
    for _ in range(256):
        with tracer().start_as_current_span("write"):
            carriers.append(current_carrier())
    with tracer().start_as_current_span("batch", links=links_to(carriers)):
        pass
    """
)


@pytest.mark.parametrize("memory_text", [False, True], ids=["default", "memory-text-allowed"])
def test_an_llm_call_is_a_chat_span_with_token_counts_and_text_only_when_allowed(
    receiver: OtlpReceiver, openai_server: ScriptedOpenAIServer, tmp_path: Path, memory_text: bool
) -> None:
    script = tmp_path / "llm_calls.py"
    script.write_text(LLM_SCRIPT)
    env = tracing_env(receiver, OTEL_SERVICE_NAME=f"llm-{memory_text}")
    if memory_text:
        env["MEMORYOS_TRACE_MEMORY_TEXT"] = "true"
    openai_server.respond_always(
        ScriptedReply("A chat about the orchard.", prompt_tokens=123, completion_tokens=7)
    )
    done = subprocess.run(
        [sys.executable, str(script), openai_server.base_url],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 0, done.stderr
    service = f"llm-{memory_text}"

    def mine(spans: list[ReceivedSpan]) -> list[ReceivedSpan]:
        return [span for span in spans if span.service_name == service]

    spans = mine(receiver.wait_for(lambda spans: any(s.name == "batch" for s in mine(spans))))
    (chat,) = [s for s in spans if s.name == "chat tiny-model"]
    (pass_span,) = [s for s in spans if s.name == "consolidation pass"]
    assert chat.kind == CLIENT_SPAN and chat.parent_span_id == pass_span.span_id
    assert chat.attributes["gen_ai.operation.name"] == "chat"
    assert chat.attributes["gen_ai.request.model"] == "tiny-model"
    assert chat.attributes["gen_ai.usage.input_tokens"] == 123
    assert chat.attributes["gen_ai.usage.output_tokens"] == 7
    assert chat.attributes["memoryos.llm.task"] == "chain_summary"
    http_spans = [s for s in spans if s.parent_span_id == chat.span_id]  # the httpx2 instrumentation's
    assert len(http_spans) == 1 and http_spans[0].kind == CLIENT_SPAN
    (batch,) = [s for s in spans if s.name == "batch"]
    writes = {(s.trace_id, s.span_id) for s in spans if s.name == "write"}
    assert len(batch.links) == 256 and set(batch.links) == writes  # above the SDK's default 128
    assert f"pass done trace_id={pass_span.trace_id} span_id={pass_span.span_id}" in done.stderr
    if memory_text:
        assert "lemon orchard" in chat.attributes["gen_ai.input.messages"]
        assert "orchard" in chat.attributes["gen_ai.output.messages"]
    else:
        assert "gen_ai.input.messages" not in chat.attributes
        assert_no_memory_text(spans)


JOB_SCRIPT = textwrap.dedent(
    """
    import sys
    import redis
    from rq import SimpleWorker
    from memoryos.space.pool import SpaceKey
    from memoryos.tracing import configure_tracing, tracer
    from services.jobs.tasks import QUEUE_NAME, enqueue_space_job, sweep_space
    from services.queue.settings import QueueSettings

    assert configure_tracing("memoryos-api")  # the queuing side: an API request
    settings = QueueSettings()
    client = redis.Redis.from_url(settings.redis_url)
    with tracer().start_as_current_span("request"):
        key = SpaceKey("default", "alice@example.com", "bot")
        enqueue_space_job(client, settings, key, "sweep", sweep_space, timeout_s=5, retries=0)
    SimpleWorker([QUEUE_NAME], connection=client).work(burst=True)
    """
)


def test_an_rq_job_runs_in_a_consumer_span_in_the_trace_that_queued_it(
    receiver: OtlpReceiver, tmp_path: Path
) -> None:
    with running_redis(tmp_path / "redis") as redis_server:
        env = tracing_env(
            receiver,
            OTEL_SERVICE_NAME="rq-test",
            MEMORYOS_REDIS_URL=redis_server.url,
            MEMORYOS_REDIS_NAMESPACE="traced",
        )
        script = tmp_path / "job.py"
        script.write_text(JOB_SCRIPT)
        root = Path(__file__).resolve().parents[2]
        done = subprocess.run(
            [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120, cwd=root
        )
    assert done.returncode == 0, done.stderr

    def mine(spans: list[ReceivedSpan]) -> list[ReceivedSpan]:
        return [span for span in spans if span.service_name == "rq-test"]

    spans = mine(receiver.wait_for(lambda spans: any(s.name == "process sweep_space" for s in mine(spans))))
    (request,) = [s for s in spans if s.name == "request"]
    (job,) = [s for s in spans if s.name == "process sweep_space"]
    assert job.kind == CONSUMER_SPAN
    assert (job.trace_id, job.parent_span_id) == (request.trace_id, request.span_id)
    assert job.attributes["messaging.system"] == "rq"
    assert job.attributes["messaging.destination.name"] == "memoryos-maintenance"
    assert job.attributes["memoryos.job.kind"] == "sweep"
    assert job.attributes["memoryos.user.id"] == pseudonym(USER)
    assert_no_memory_text(spans)
