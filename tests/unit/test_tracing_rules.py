"""The tracing foundation in this process: off unless the standard variables ask (and then nothing is
installed), the trace context's field round trip, pseudonymised ids and redacted URLs.

This process never installs a global provider; spans here come from a local SDK provider's tracer, so
the global state every other test sees stays tracing-off. Received-over-OTLP proof is in
tests/integration/test_tracing_export.py.
"""

import threading
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from pydantic import SecretStr

from memoryos import MemoryConfig
from memoryos.llm.openai_backend import OpenAILLM
from memoryos.tracing import configure_tracing, context_of, current_carrier, links_to, tracing_enabled
from memoryos.tracing.attributes import path_ids, pseudonym, redacted_url, use_settings
from memoryos.tracing.settings import TracingSettings
from memoryos.tracing.setup import check_protocol, tracing_requested
from memoryos.tracing.spans import NO_SPAN, operation_span, queue_wait_s
from memoryos.types import Page
from services.worker.consumer import ShardConsumer
from services.worker.tracing import UNTRACED, page_ids_of
from tests.support.openai_server import ScriptedOpenAIServer
from tests.support.openai_server import openai_server as openai_server  # the fixture

ENDPOINT = "http://127.0.0.1:4318"


@pytest.fixture
def settings() -> Iterator[None]:
    """Restores the default rules after a test that changes them."""
    yield
    use_settings(TracingSettings.model_construct(raw_ids=False, id_hash_key=None, memory_text=False))


def exporter_threads() -> list[str]:
    return [thread.name for thread in threading.enumerate() if thread.name.startswith("OtelBatch")]


def test_tracing_off_installs_nothing_and_an_llm_call_starts_no_exporter(
    openai_server: ScriptedOpenAIServer,
) -> None:
    assert configure_tracing("test", environ={}) is False
    assert not tracing_enabled()
    openai_server.respond_always("A summary.")
    llm = OpenAILLM(MemoryConfig(openai_base_url=openai_server.base_url, openai_api_key=None))
    page = Page(page_id=1, user_input="hello", agent_response="hi", timestamp="2026-01-01 10:00:00")
    assert llm.summarize_chain([page]) == "A summary."
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    assert exporter_threads() == []
    assert current_carrier() is None  # no span in progress: the stream entry gets no field


@pytest.mark.parametrize(
    ("environ", "requested"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{ENDPOINT}/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_SDK_DISABLED": "true"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_SERVICE_NAME": "api"}, False),
    ],
)
def test_only_an_otlp_endpoint_turns_tracing_on(environ: dict[str, str], requested: bool) -> None:
    assert tracing_requested(environ) is requested


def test_a_protocol_other_than_http_protobuf_is_refused_naming_the_variable() -> None:
    with pytest.raises(ValueError, match="OTEL_EXPORTER_OTLP_PROTOCOL='grpc'"):
        check_protocol({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
    with pytest.raises(ValueError, match="OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"):
        configure_tracing(
            "test",
            environ={
                "OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT,
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json",
            },
        )
    check_protocol(
        {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
    )
    assert not tracing_enabled() and exporter_threads() == []


def test_the_carrier_round_trips_the_span_and_its_sampling_decision() -> None:
    sampled = TracerProvider().get_tracer("test")
    with sampled.start_as_current_span("enqueue") as span:
        carrier = current_carrier()
    assert carrier is not None and len(carrier) < 128
    received = trace.get_current_span(context_of(carrier)).get_span_context()
    assert (received.trace_id, received.span_id) == (
        span.get_span_context().trace_id,
        span.get_span_context().span_id,
    )
    assert received.is_remote and received.trace_flags.sampled
    assert [link.context.span_id for link in links_to([carrier, None, "{"])] == [
        span.get_span_context().span_id
    ]

    unsampled = TracerProvider(sampler=ALWAYS_OFF).get_tracer("test")
    with unsampled.start_as_current_span("enqueue"):
        carrier = current_carrier()
    assert carrier is not None  # carried, so the worker knows not to sample either
    assert not trace.get_current_span(context_of(carrier)).get_span_context().trace_flags.sampled


@pytest.mark.parametrize(
    "carrier",
    [None, "", b"", "{", "[]", '{"traceparent": 5}', '{"traceparent": "00-zz-yy-01"}', "x" * 2000],
)
def test_a_malformed_carrier_is_no_context_and_no_error(carrier: str | bytes | None) -> None:
    assert context_of(carrier) is None


def test_ids_are_pseudonymised_unless_allowed(settings: None) -> None:
    hashed = pseudonym("alice@example.com")
    assert len(hashed) == 16 and "alice" not in hashed and hashed == pseudonym("alice@example.com")
    use_settings(TracingSettings(id_hash_key=SecretStr("deployment-key")))
    keyed = pseudonym("alice@example.com")
    assert keyed != hashed and len(keyed) == 16
    use_settings(TracingSettings(raw_ids=True))
    assert pseudonym("alice@example.com") == "alice@example.com"


def test_urls_lose_their_query_and_their_ids_unless_allowed(settings: None) -> None:
    url = "http://api:8765/v1/users/alice@example.com/assistants/bot/memories?query=my+lemon+orchard"
    redacted = redacted_url(url)
    assert (
        redacted
        == f"http://api:8765/v1/users/{pseudonym('alice@example.com')}/assistants/{pseudonym('bot')}/memories"
    )
    assert set(path_ids("/v1/users/alice@example.com/assistants/bot/memories").values()) == {
        pseudonym("alice@example.com"),
        pseudonym("bot"),
    }
    use_settings(TracingSettings(raw_ids=True, memory_text=True))
    assert redacted_url(url) == url


def test_a_writes_queue_wait_is_read_from_its_stream_entry_id() -> None:
    assert queue_wait_s(b"1700000000250-3", now_s=1700000001.0) == pytest.approx(0.75)
    assert queue_wait_s("1700000002000-0", now_s=1700000001.0) == 0.0  # Redis's clock a little ahead
    assert queue_wait_s(b"not-an-id", now_s=1.0) == 0.0


def test_tracing_off_a_memory_operation_and_a_run_of_writes_cost_one_shared_object() -> None:
    assert not tracing_enabled()
    assert operation_span("create_memory", "create_memory", ("t", "u", "a")) is NO_SPAN
    consumer = ShardConsumer.__new__(ShardConsumer)  # `_spans` reads nothing of the consumer when off
    assert consumer._spans(0, []) is UNTRACED


def test_each_writes_page_ids_are_read_from_what_its_run_returned() -> None:
    assert page_ids_of([[1, 2], [3]], 2) == [[1, 2], [3]]
    assert page_ids_of([{"created": [4]}], 1) == [[4]]
    assert page_ids_of([{"forgotten": True}], 1) is None
    assert page_ids_of([[1]], 2) is None
