"""`configure_tracing`: a process's traces, exported over OTLP/HTTP (protobuf) when, and only when, the
standard OpenTelemetry variables ask for it.

On when `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set, unless
`OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`. Then the SDK's `TracerProvider` (its sampler from
`OTEL_TRACES_SAMPLER` / `OTEL_TRACES_SAMPLER_ARG`, parent-based by default, so a sampling decision made
upstream holds here), a `BatchSpanProcessor` (`OTEL_BSP_*`) and the OTLP/HTTP exporter (its endpoint,
headers, timeout, compression and certificates from `OTEL_EXPORTER_OTLP_*`), the resource from
`OTEL_SERVICE_NAME` / `OTEL_RESOURCE_ATTRIBUTES` (the caller's service name otherwise), the httpx
instrumentations (the LLM and embedding endpoints' clients), and trace ids on log lines (`logs.py`).

Off, nothing is installed: the OpenTelemetry API's no-op tracer answers every span (no exporter thread,
no export, a few hundred nanoseconds per span started), and the API instruments no route. Spans are
exported from a background thread in batches, so a request never waits for the collector; a collector
that is down costs dropped spans (logged by the SDK), never a failed write.
"""

import logging
import os
import threading
from collections.abc import Mapping

from opentelemetry.trace import Span

from memoryos.tracing.attributes import redact_url_attributes, use_settings
from memoryos.tracing.logs import install_log_correlation
from memoryos.tracing.settings import TracingSettings

log = logging.getLogger(__name__)

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
PROTOCOL_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
EXPORTED_PROTOCOL = "http/protobuf"
"""The one OTLP protocol shipped (the images carry the HTTP exporter, not gRPC's)."""

LARGEST_BATCH = 256
"""The most writes one batch applies (the worker's run) or texts the embedding engine encodes together."""
MIN_LINK_LIMIT = LARGEST_BATCH + 1
"""Links a span may hold at least: a batch span links every write it applied (the SDK keeps 128 by
default, `OTEL_SPAN_LINK_COUNT_LIMIT`, and drops the rest silently), plus one to spare."""

_lock = threading.Lock()
_configured = False


def tracing_requested(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the standard variables ask this process to export traces."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return any(env.get(name, "").strip() for name in ENDPOINT_VARIABLES)


def tracing_enabled() -> bool:
    """Whether `configure_tracing` installed the SDK in this process (the API instruments FastAPI then)."""
    return _configured


def check_protocol(environ: Mapping[str, str]) -> None:
    """`ValueError` naming the variable when it asks for an OTLP protocol other than HTTP with protobuf."""
    for name in PROTOCOL_VARIABLES:
        value = environ.get(name, "").strip()
        if value:
            if value != EXPORTED_PROTOCOL:
                raise ValueError(
                    f"{name}={value!r}: MemoryOS exports traces over OTLP/HTTP with protobuf only; "
                    f"set it to {EXPORTED_PROTOCOL!r} (the collector's port 4318) or unset it"
                )
            return  # the traces' own variable wins over the general one


def configure_tracing(service_name: str, environ: Mapping[str, str] | None = None) -> bool:
    """Install the SDK, the exporter and the log correlation when the variables ask for it, once per
    process; returns whether tracing is on. Call it at process start, after logging is configured (the
    API's `memoryos serve`, each worker process, `memoryos mcp`, an rq job's process). `service_name`
    is the resource's `service.name` unless `OTEL_SERVICE_NAME` names one. A bad variable raises
    `ValueError` naming it, before anything is installed."""
    global _configured
    env = os.environ if environ is None else environ
    with _lock:
        if _configured:
            return True
        if not tracing_requested(env):
            return False
        check_protocol(env)
        settings = TracingSettings()
        _install_provider(service_name)
        use_settings(settings)
        install_log_correlation()
        _instrument_http_clients()
        _configured = True
    log.info(
        "tracing on: spans exported over OTLP/HTTP",
        extra={"service": service_name, "raw_ids": settings.raw_ids, "memory_text": settings.memory_text},
    )
    return True


def _install_provider(service_name: str) -> None:
    """The SDK's provider as the global one. Imported here: a process that never traces never loads the
    SDK (nor needs it installed)."""
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, OTELResourceDetector, Resource
    from opentelemetry.sdk.trace import SpanLimits, TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    # The variables' service name and attributes win over the default given here.
    resource = Resource.create({SERVICE_NAME: service_name}).merge(OTELResourceDetector().detect())
    configured_links = SpanLimits().max_links  # OTEL_SPAN_LINK_COUNT_LIMIT, or the SDK's 128
    links = SpanLimits.UNSET if configured_links is None else max(configured_links, MIN_LINK_LIMIT)
    provider = TracerProvider(resource=resource, span_limits=SpanLimits(max_links=links))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)


def _instrument_http_clients() -> None:
    """Client spans (and `traceparent` on the request) for httpx and httpx2: the OpenAI client under the
    LLM spans, the OpenAI-compatible embeddings client, `services.client`; their URLs redacted
    (`redact_url_attributes`: a retrieve's query is memory text, a path names the user)."""
    from opentelemetry.instrumentation.httpx import HTTPX2ClientInstrumentor, HTTPXClientInstrumentor

    def redact(span: Span, _request: object) -> None:
        redact_url_attributes(span)

    async def redact_async(span: Span, _request: object) -> None:
        redact_url_attributes(span)

    for instrumentor in (HTTPXClientInstrumentor(), HTTPX2ClientInstrumentor()):
        instrumentor.instrument(request_hook=redact, async_request_hook=redact_async)


def flush_spans(timeout_s: float = 5.0) -> bool:
    """Export the spans ended so far, waiting up to `timeout_s`: for a process about to leave without its
    exit hooks (an rq work-horse ends in `os._exit`). True when nothing was left or tracing is off."""
    if not _configured:
        return True
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    force_flush = getattr(provider, "force_flush", None)
    return True if force_flush is None else bool(force_flush(int(timeout_s * 1000)))
